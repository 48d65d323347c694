//! The allreduce data-parallel worker.

use concord_engine::collective::{allreduce_sum, Fusion, Group, LocalModel};
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
        Ok(AllreduceWorker {
            id,
            replica: Replica::new(&job.model)?,
            model: LocalModel::new(&job),
            fusion: Fusion::new(sizes, 1, bucket_elems),
            group: Group::workers(job.config.workers)?,
            job,
        })
    }
}

#[async_trait]
impl Worker for AllreduceWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        hold_optimizer_state(ctx, &job).await?;
        let (n, b) = (job.config.workers as u64, job.config.batch);
        let flops_per_sample = job.model.training_flops_per_sample();
        let param_elems = (self.fusion.len() - 1) as u64;
        let apply_flops = job.config.optimizer.flops_per_elem() * param_elems as f64;
        let mut records = Vec::with_capacity(job.config.iterations as usize);
        for clock in 0..job.config.iterations {
            ctx.set_iter(clock);
            let start = ctx.now();
            let work = Work {
                flops_per_sample,
                batch: b as f64,
            };
            let at = StepAt {
                clock,
                stream_offset: clock * n * b + self.id as u64 * b,
                batch: b,
            };
            let params = self.model.params().unwrap_or_default();
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
            let compute_end = ctx.now();
            let bytes_sent =
                allreduce_sum(ctx, &self.group, clock, &mut buf, self.fusion.buckets()).await?;
            let reduced = ctx.now();
            ctx.trace_span("allreduce", "comm", compute_end, reduced);
            self.model
                .apply_reduced(&self.fusion, &buf, self.group.size(), reduced);
            let t = ctx.now();
            ctx.sleep(ctx.device().work_seconds(apply_flops)).await;
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
            model: (ctx.id() == RoleId::Worker(0)).then(|| self.model.report(&job.layout)),
        })
    }
}
