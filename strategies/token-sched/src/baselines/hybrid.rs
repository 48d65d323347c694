//! The HP baseline's workers (Stanza-like hybrid parallelism): N−1 conv workers and one FC
//! worker.
//!
//! The stages before the FC block are data-parallel over the conv workers: each runs them on
//! its share of the global batch X (X/(N−1) rows, the first X mod (N−1) workers one more), sends
//! the output activations to the FC worker, waits for their gradient, runs its backward pass and
//! sums the conv gradients with the other conv workers (the job's allreduce). The FC block
//! lives only on the FC worker (the last one), which runs it forward and backward on the whole
//! batch once every share has arrived and returns each conv worker its slice of the activation
//! gradient. The FC worker's loss is the batch's mean, so the gradients are those of one SGD
//! step over X, as in BSP data parallelism.
//!
//! The FC worker receives and sends activations for all X samples each iteration, so HP's
//! traffic grows with X and that worker becomes the bottleneck at large batches.

use super::options::HpPlan;
use super::protocol::{Act, Busy, Grad};
use concord_engine::collective::{Allreduce, Group};
use concord_engine::model::{Replica, StagedModel};
use concord_engine::prelude::*;
use concord_engine::submodel::math::{
    backward, forward, host_flat, labels_of, loss_seed, samples, Grads,
};
use concord_engine::submodel::Held;
use concord_engine::submodel::{
    activations, rows_from, stage_input_shapes, stage_output_shapes, Rows,
};
use std::sync::Arc;

/// The conv part is sub-model 0, the FC block sub-model 1.
const CONV: usize = 0;
const FC: usize = 1;

/// What one iteration of a worker counted.
struct Tally {
    samples: u64,
    busy_s: f64,
    comm_s: f64,
    loss: Option<f64>,
    bytes: u64,
}

impl Tally {
    /// Counts a gradient sum over the conv workers that began at `t0`, this worker sending
    /// `sent` bytes: its time as communication, its bytes, and its span in the trace.
    fn count_sum(&mut self, ctx: &mut RoleContext, t0: f64, sent: u64) {
        self.bytes += sent;
        self.comm_s += ctx.now() - t0;
        ctx.trace_span("allreduce", "comm", t0, ctx.now());
    }
}

/// A conv worker or the FC worker.
pub struct HybridWorker {
    id: WorkerId,
    job: Arc<Job>,
    plan: Arc<HpPlan>,
    replica: Option<Replica>,
    held: Held,
    shapes: Option<Vec<Vec<usize>>>,
    /// Per-sample output shape of every stage of a real model.
    outputs: Option<Vec<Vec<usize>>>,
}

impl HybridWorker {
    /// Worker `id` of `job`: the FC worker if it is the last, else a conv worker.
    pub fn new(job: Arc<Job>, id: WorkerId, plan: Arc<HpPlan>) -> Result<HybridWorker> {
        let part = if id == plan.fc_worker() { FC } else { CONV };
        let mut held = Held::new(&job, plan.submodels.params(part))?;
        // The conv workers' parts are the same: worker 0 reports it.
        let holder = if part == FC { id } else { 0 };
        super::resume_held(&job, id, holder, &mut held)?;
        Ok(HybridWorker {
            id,
            replica: job.part_replica(RoleId::Worker(id), plan.submodels.stages(part))?,
            shapes: stage_input_shapes(&job.model),
            outputs: stage_output_shapes(&job.model),
            held,
            job,
            plan,
        })
    }

    fn is_fc(&self) -> bool {
        self.id == self.plan.fc_worker()
    }

    /// The per-sample shape at stage `stage` (real models).
    fn shape(&self, stage: usize) -> Option<&[usize]> {
        self.shapes.as_ref().map(|s| s[stage].as_slice())
    }

    /// A conv worker's iteration: forward on its share, activations to the FC worker, backward
    /// from their gradient, the conv gradients summed over the conv workers, the update.
    async fn conv_iteration(
        &mut self,
        ctx: &mut RoleContext,
        iter: u64,
        allreduce: Option<&mut Allreduce>,
    ) -> Result<Tally> {
        let plan = self.plan.clone();
        let job = self.job.clone();
        let net: Option<&StagedModel> = self.replica.as_ref().and_then(Replica::model);
        let stages = plan.submodels.stages(CONV);
        let (offset, rows) = plan.shares[self.id as usize];
        let mut tally = Tally {
            samples: rows,
            busy_s: 0.0,
            comm_s: 0.0,
            loss: None,
            bytes: 0,
        };
        let (x, _) = samples(&job, net, plan.total_batch, iter, offset, rows)?;
        let work = plan.submodels.work(CONV, rows, StepPart::FORWARD);
        let t0 = ctx.now();
        let out = ctx
            .compute("forward", work, || forward(net, stages.clone(), &x))
            .await;
        tally.busy_s += ctx.now() - t0;
        let (y, inputs) = out?;
        activations(ctx, &job, stages.clone(), rows, true).await?;
        let payload = y.to_payload(plan.submodels.output_bytes(CONV))?;
        let msg = Message::strategy_with(
            &Act {
                iter,
                micro: 0,
                rows,
            },
            vec![payload],
        )?;
        tally.bytes += msg.wire_bytes();
        let fc = RoleId::Worker(plan.fc_worker());
        ctx.send(fc, msg);
        let env = ctx
            .recv_matching(|e| e.is_keyed::<Grad>(fc, (iter, 0)))
            .await?;
        let (g, payloads) = env.msg.into_strategy::<Grad>()?.ok_or_else(|| {
            EngineError::protocol(ctx.id(), "expected the gradient of its activations")
        })?;
        tally.loss = g.loss;
        let shape = self.outputs.as_ref().map(|s| s[stages.end - 1].as_slice());
        let g = rows_from(payloads, g.rows, shape, net)?;
        let work = plan.submodels.work(CONV, rows, StepPart::BACKWARD);
        let t0 = ctx.now();
        let out = ctx
            .compute("backward", work, || {
                backward(net, stages.clone(), &inputs, &g)
            })
            .await;
        tally.busy_s += ctx.now() - t0;
        let (grads, _) = out?;
        activations(ctx, &job, stages.clone(), rows, false).await?;
        // A conv worker's gradients leave its device only for the ring to sum; alone, it
        // applies them where they are.
        let Some(ar) = allreduce else {
            self.held.apply(grads, ctx.now())?;
            return Ok(tally);
        };
        if let (true, Some(g)) = (ar.sums_on_device(), &grads) {
            // NCCL sums them where the backward pass left them.
            let t0 = ctx.now();
            let (summed, sent) = ar.sum_tensors(ctx, iter, g).await?;
            tally.count_sum(ctx, t0, sent);
            self.held.apply(Some(summed), ctx.now())?;
            return Ok(tally);
        }
        let mut buf = match &grads {
            Some(g) => Payload::Real(host_flat(g)?),
            None => Payload::Virtual {
                elems: self.held.elems(),
            },
        };
        let t0 = ctx.now();
        let sent = ar.sum(ctx, iter, &mut buf, &[]).await?;
        tally.count_sum(ctx, t0, sent);
        let summed = match (grads, buf.values()) {
            (Some(_), Some(flat)) => Some(self.held.unflatten(flat)),
            _ => None,
        };
        self.held.apply(summed, ctx.now())?;
        Ok(tally)
    }

    /// The FC worker's iteration: every conv worker's activations, the FC block forward and
    /// backward on the whole batch, each conv worker's gradient slice back, the update.
    async fn fc_iteration(&mut self, ctx: &mut RoleContext, iter: u64) -> Result<Tally> {
        let plan = self.plan.clone();
        let job = self.job.clone();
        let net: Option<&StagedModel> = self.replica.as_ref().and_then(Replica::model);
        let stages = plan.submodels.stages(FC);
        let total = plan.total_batch;
        let mut tally = Tally {
            samples: 0,
            busy_s: 0.0,
            comm_s: 0.0,
            loss: None,
            bytes: 0,
        };
        let mut parts = Vec::with_capacity(plan.shares.len());
        for w in 0..plan.shares.len() as WorkerId {
            let from = RoleId::Worker(w);
            let env = ctx
                .recv_matching(|e| e.is_keyed::<Act>(from, (iter, 0)))
                .await?;
            let (a, payloads) = env.msg.into_strategy::<Act>()?.ok_or_else(|| {
                EngineError::protocol(ctx.id(), "expected a conv worker's activations")
            })?;
            parts.push(rows_from(payloads, a.rows, self.shape(plan.fc_from), net)?);
        }
        let x = Rows::concat(&parts)?;
        let labels = labels_of(&job, total, iter, 0, total);
        let work = plan.submodels.work(FC, total, 1.0);
        let t0 = ctx.now();
        let out = ctx
            .compute("fc step", work, || -> Result<_> {
                let (y, inputs) = forward(net, stages.clone(), &x)?;
                let (loss, seed) = loss_seed(net, &y, labels.as_deref(), 1.0)?;
                let (grads, gx) = backward(net, stages.clone(), &inputs, &seed)?;
                Ok((loss, grads, gx))
            })
            .await;
        tally.busy_s += ctx.now() - t0;
        let (loss, grads, gx): (Option<f64>, Grads, Rows) = out?;
        if let Some(l) = loss {
            check_loss(ctx, &job, iter, l)?;
        }
        activations(ctx, &job, stages.clone(), total, true).await?;
        activations(ctx, &job, stages.clone(), total, false).await?;
        tally.loss = loss;
        for (w, &(offset, rows)) in plan.shares.iter().enumerate() {
            let body = Grad {
                iter,
                micro: 0,
                rows,
                loss,
            };
            let payload = gx
                .slice(offset, rows)?
                .to_payload(plan.submodels.output_bytes(CONV))?;
            let msg = Message::strategy_with(&body, vec![payload])?;
            tally.bytes += msg.wire_bytes();
            ctx.send(RoleId::Worker(w as WorkerId), msg);
        }
        self.held.apply(grads, ctx.now())?;
        Ok(tally)
    }
}

#[async_trait]
impl Worker for HybridWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        self.held.reserve(ctx, &job).await?;
        // The held part stays in the replica's tensors: passes read it there, updates run there.
        if let Some(replica) = &self.replica {
            self.held.keep_on(replica)?;
        }
        let conv = self.plan.shares.len() as WorkerId;
        // The conv workers sum their gradients among themselves (none to sum with alone).
        let mut allreduce = if !self.is_fc() && conv > 1 {
            let group = Group::new((0..conv).map(RoleId::Worker).collect())?;
            Some(Allreduce::join(ctx, &job, group).await?)
        } else {
            None
        };
        let mut records = Vec::new();
        let mut busy = Busy {
            busy_s: 0.0,
            span_s: 0.0,
        };
        for iter in job.clocks() {
            ctx.set_iter(iter);
            let start = ctx.now();
            let t = if self.is_fc() {
                self.fc_iteration(ctx, iter).await?
            } else {
                self.conv_iteration(ctx, iter, allreduce.as_mut()).await?
            };
            busy.busy_s += t.busy_s;
            busy.span_s += ctx.now() - start;
            let tally = ClockTally {
                samples: t.samples,
                compute_s: t.busy_s,
                // The rest of the clock: waiting for the other side's activations or gradients.
                wait_s: (ctx.now() - start - t.busy_s - t.comm_s).max(0.0),
                comm_s: t.comm_s,
                loss: t.loss.unwrap_or(f64::NAN),
                version_read: iter as i64,
                bytes_sent: t.bytes,
            };
            records.push(close_clock(ctx, &job, iter, start, tally));
        }
        ctx.send(RoleId::Coordinator, Message::strategy(&busy)?);
        // Worker 0 reports the conv part (the conv workers' replicas are identical), the FC
        // worker the FC block.
        let reports = self.id == 0 || self.is_fc();
        Ok(WorkerReport {
            iterations: records,
            model: reports.then(|| self.held.report(&job.layout)).transpose()?,
            state: None,
        })
    }
}
