//! The allreduce data-parallel worker.

use concord_engine::collective::{Allreduce, Fusion, Group, LocalModel};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use std::sync::Arc;

/// A worker that trains its own replica and sums gradients with its peers by ring allreduce.
pub struct AllreduceWorker {
    id: WorkerId,
    job: Arc<Job>,
    replica: Option<Replica>,
    model: LocalModel,
    fusion: Fusion,
    group: Group,
}

impl AllreduceWorker {
    /// Worker `id` of `job`, fusing gradients into buckets of `bucket_elems` elements.
    pub fn new(job: Arc<Job>, id: WorkerId, bucket_elems: usize) -> Result<AllreduceWorker> {
        let sizes = job.layout.params().iter().map(|p| p.elems()).collect();
        let mut model = LocalModel::new(&job);
        if let Some(cp) = job.resumed(RoleId::Worker(id)) {
            restore(&job, id, &cp, &mut model)?;
        }
        let replica = job.replica(RoleId::Worker(id))?;
        // The replica's own tensors hold the parameters from here on, on its device (a GPU
        // under `backend = "cuda"`): steps read them in place and updates run there.
        if let Some(r) = &replica {
            model.keep_on(r)?;
        }
        Ok(AllreduceWorker {
            id,
            replica,
            model,
            fusion: Fusion::new(sizes, 1, bucket_elems),
            group: Group::workers(job.config.workers)?,
            job,
        })
    }
}

/// What an allreduce worker keeps beside its replica, for a checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
struct AllreduceState {
    /// Updates its replica has applied.
    updates: u64,
}

/// Restores worker `id`'s replica from its checkpoint `cp`. Replicas are identical after every
/// clock (each applies the same reduced sum), so only worker 0's checkpoint holds the model and
/// every worker restores it from there.
fn restore(job: &Job, id: WorkerId, cp: &RoleCheckpoint, model: &mut LocalModel) -> Result<()> {
    let bad = |reason: &str| EngineError::protocol(RoleId::Worker(id), reason.to_string());
    let state: AllreduceState = cp
        .state
        .as_ref()
        .ok_or_else(|| bad("its checkpoint holds no allreduce state"))?
        .decode()?;
    let held = job
        .resumed(RoleId::Worker(0))
        .and_then(|c| c.model)
        .ok_or_else(|| bad("the checkpoint holds no replica (worker 0's)"))?;
    model.restore(&job.layout, &held, state.updates)
}

#[async_trait]
impl Worker for AllreduceWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        hold_optimizer_state(ctx, &job).await?;
        let mut allreduce = Allreduce::join(ctx, &job, self.group.clone()).await?;
        let (n, b) = (job.config.workers as u64, job.config.batch);
        let flops_per_sample = job.model.training_flops_per_sample();
        let param_elems = (self.fusion.len() - 1) as u64;
        let apply_flops = job.config.optimizer.flops_per_elem() * param_elems as f64;
        let clocks = job.clocks();
        let mut records = Vec::with_capacity((clocks.end - clocks.start) as usize);
        for clock in clocks {
            ctx.set_iter(clock);
            let start = ctx.now();
            let work = Work::training_step(flops_per_sample, b as f64);
            let at = StepAt {
                clock,
                stream_offset: clock * n * b + self.id as u64 * b,
                batch: b,
            };
            // Host values only for a model whose replica keeps no tensors of its own (MF).
            let params = match self.model.params() {
                Some(values) => ParamSource::Host(values),
                None => ParamSource::Resident,
            };
            let ((loss, grads), _) = train_step(
                ctx,
                &job,
                self.replica.as_ref(),
                params,
                at,
                work,
                Charge::Whole,
            )
            .await?;
            let mut buf = match grads {
                Some(g) => self.fusion.fuse(&g, &[1.0]),
                None => self.fusion.fuse_virtual(),
            };
            // Fusing copies every gradient into the one buffer the ring reduces.
            ctx.charge_modeled(ctx.device().tensor_copy_seconds(buf.bytes()))
                .await;
            let compute_end = ctx.now();
            let bytes_sent = allreduce
                .sum(ctx, clock, &mut buf, self.fusion.buckets())
                .await?;
            let reduced = ctx.now();
            ctx.trace_span("allreduce", "comm", compute_end, reduced);
            self.model
                .apply_reduced(&self.fusion, buf, self.group.size(), reduced)?;
            let t = reduced;
            ctx.charge_modeled(ctx.device().work_seconds(apply_flops))
                .await;
            ctx.trace_span("apply", "compute", t, ctx.now());
            let tally = ClockTally {
                samples: b,
                compute_s: compute_end - start,
                wait_s: 0.0,
                comm_s: reduced - compute_end,
                loss,
                version_read: clock as i64 - 1,
                bytes_sent,
            };
            records.push(close_clock(ctx, &job, clock, start, tally));
        }
        Ok(WorkerReport {
            iterations: records,
            model: (ctx.id() == RoleId::Worker(0))
                .then(|| self.model.report(&job.layout))
                .transpose()?,
            state: Some(RoleState::encode(&AllreduceState {
                updates: self.model.updates(),
            })?),
        })
    }
}
