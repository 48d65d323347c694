//! The allreduce data-parallel worker.

use candle_core::Tensor;
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
    /// Whether the replica's own tensors hold the parameters (on its device), so a step's
    /// gradients can stay there for a collective that sums on the device.
    resident: bool,
}

/// A step's gradients fused into the one buffer the allreduce sums.
enum Fused {
    /// Host values, for the message ring (or virtual, in throughput mode).
    Host(Payload),
    /// A flat tensor on the replica's device, for a collective that sums there (NCCL).
    Device(Tensor),
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
        let resident = match &replica {
            Some(r) => model.keep_on(r)?,
            None => false,
        };
        Ok(AllreduceWorker {
            id,
            replica,
            model,
            fusion: Fusion::new(sizes, 1, bucket_elems),
            group: Group::workers(job.config.workers)?,
            resident,
            job,
        })
    }

    /// One training step, its gradients fused for the allreduce: on the device when `on_device`
    /// (the sum runs there), else as host values (virtual in throughput mode).
    async fn step(
        &self,
        ctx: &mut RoleContext,
        job: &Job,
        params: ParamSource<'_>,
        at: StepAt,
        work: Work,
        on_device: bool,
    ) -> Result<(f64, Fused)> {
        let replica = self.replica.as_ref();
        let charge = Charge::Whole;
        if on_device {
            let ((loss, grads), _) =
                train_step_on_device(ctx, job, replica, params, at, work, charge).await?;
            if let Some(g) = grads {
                return Ok((loss, Fused::Device(self.fusion.fuse_tensors(&g, &[1.0])?)));
            }
            return Ok((loss, Fused::Host(self.fusion.fuse_virtual())));
        }
        let ((loss, grads), _) = train_step(ctx, job, replica, params, at, work, charge).await?;
        let buf = match grads {
            Some(g) => self.fusion.fuse(&g, &[1.0]),
            None => self.fusion.fuse_virtual(),
        };
        Ok((loss, Fused::Host(buf)))
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
    let state: AllreduceState = cp.decode_state(RoleId::Worker(id), "allreduce state")?;
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
        // Gradients stay on the replica's device where the collective sums there (NCCL) and the
        // parameters are there too: nothing of the step then crosses to the host.
        let on_device = allreduce.sums_on_device() && self.resident;
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
            let (loss, fused) = self.step(ctx, &job, params, at, work, on_device).await?;
            // Fusing copies every gradient into the one buffer the allreduce sums.
            ctx.charge_modeled(ctx.device().tensor_copy_seconds(self.fusion.bytes()))
                .await;
            let compute_end = ctx.now();
            let buckets = self.fusion.buckets();
            let (bytes_sent, reduced) = match fused {
                Fused::Host(mut buf) => {
                    let sent = allreduce.sum(ctx, clock, &mut buf, buckets).await?;
                    let reduced = ctx.now();
                    self.model
                        .apply_reduced(&self.fusion, buf, self.group.size(), reduced)?;
                    (sent, reduced)
                }
                Fused::Device(buf) => {
                    let (sum, sent) = allreduce.sum_tensor(ctx, clock, &buf, buckets).await?;
                    let reduced = ctx.now();
                    let size = self.group.size();
                    self.model
                        .apply_reduced_tensor(&self.fusion, &sum, size, reduced)?;
                    (sent, reduced)
                }
            };
            ctx.trace_span("allreduce", "comm", compute_end, reduced);
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
