//! The MP baseline's worker: one pipeline stage, GPipe-style under BSP.
//!
//! Worker `i` holds pipeline stage `i` (a contiguous run of the model's stages, balanced in
//! compute; [`super::options::MpPlan`]). Each iteration the global batch goes through in small
//! fixed micro-batches: every micro-batch forward through the whole pipeline, then every
//! micro-batch backward in reverse order, then each worker updates its stage; no recomputation,
//! no staleness, no gradient sync (each stage has one replica). A micro-batch's loss gradient is
//! scaled by its rows / X, so the summed gradients are those of one SGD step over the global
//! batch, as in BSP data parallelism.
//!
//! This is the baseline with the worst work conservation: a stage idles until the first
//! micro-batch reaches it and after the last leaves it (the bubble), and small micro-batches
//! run far from the device's saturation (the device model's half-saturation batch charges it).
//! Compute is charged with [`RoleContext::compute`]: a stage has nothing else to do while it
//! computes, and messages meanwhile wait in its mailbox.

use super::options::MpPlan;
use super::protocol::{Act, Busy, Grad};
use candle_core::Tensor;
use concord_engine::model::{Replica, StagedModel};
use concord_engine::prelude::*;
use concord_engine::submodel::math::{
    accumulate, backward, forward, labels_of, loss_seed, samples, Grads,
};
use concord_engine::submodel::Held;
use concord_engine::submodel::{
    activations, rows_from, stage_input_shapes, stage_output_shapes, Rows,
};
use std::sync::Arc;

/// What a micro-batch's forward pass kept for its backward pass.
struct Kept {
    inputs: Vec<Tensor>,
    rows: u64,
    /// The loss gradient (last stage only).
    seed: Option<Rows>,
}

/// What one iteration of a stage counted.
struct Tally {
    busy_s: f64,
    loss: Option<f64>,
    bytes: u64,
}

/// One pipeline stage.
pub struct PipelineWorker {
    id: WorkerId,
    job: Arc<Job>,
    plan: Arc<MpPlan>,
    replica: Option<Replica>,
    held: Held,
    /// Per-sample input shape of every stage of a real model, then its output's.
    shapes: Option<Vec<Vec<usize>>>,
    /// Per-sample output shape of every stage of a real model.
    outputs: Option<Vec<Vec<usize>>>,
}

impl PipelineWorker {
    /// Worker `id` of `job`: pipeline stage `id` of `plan`.
    pub fn new(job: Arc<Job>, id: WorkerId, plan: Arc<MpPlan>) -> Result<PipelineWorker> {
        let mut held = Held::new(&job, plan.submodels.params(id as usize))?;
        super::resume_held(&job, id, id, &mut held)?;
        Ok(PipelineWorker {
            id,
            replica: job.part_replica(RoleId::Worker(id), plan.submodels.stages(id as usize))?,
            shapes: stage_input_shapes(&job.model),
            outputs: stage_output_shapes(&job.model),
            held,
            job,
            plan,
        })
    }

    /// One iteration: every micro-batch forward, every micro-batch backward, the update.
    async fn iteration(&mut self, ctx: &mut RoleContext, iter: u64) -> Result<Tally> {
        let plan = self.plan.clone();
        let job = self.job.clone();
        let net: Option<&StagedModel> = self.replica.as_ref().and_then(Replica::model);
        let s = self.id as usize;
        let (first, last) = (s == 0, s + 1 == plan.submodels.len());
        let stages = plan.submodels.stages(s);
        let total = plan.total_batch;
        let mut tally = Tally {
            busy_s: 0.0,
            loss: None,
            bytes: 0,
        };
        let mut kept: Vec<Kept> = Vec::with_capacity(plan.micro_batches.len());
        let mut loss_sum = 0.0;
        for (k, &(offset, rows)) in plan.micro_batches.iter().enumerate() {
            let k = k as u32;
            let (x, labels) = if first {
                samples(&job, net, total, iter, offset, rows)?
            } else {
                let from = RoleId::Worker(self.id - 1);
                let env = ctx
                    .recv_matching(|e| e.is_keyed::<Act>(from, (iter, k)))
                    .await?;
                let (a, payloads) = env.msg.into_strategy::<Act>()?.ok_or_else(|| {
                    EngineError::protocol(ctx.id(), "expected a micro-batch's activations")
                })?;
                let shape = self.shapes.as_ref().map(|sh| sh[stages.start].as_slice());
                let x = rows_from(payloads, a.rows, shape, net)?;
                let labels = last
                    .then(|| labels_of(&job, total, iter, offset, rows))
                    .flatten();
                (x, labels)
            };
            let work = plan.submodels.work(s, rows, StepPart::FORWARD);
            let scale = rows as f64 / total as f64;
            let t0 = ctx.now();
            let out = ctx
                .compute("forward", work, || -> Result<_> {
                    let (y, inputs) = forward(net, stages.clone(), &x)?;
                    let seeded = last
                        .then(|| loss_seed(net, &y, labels.as_deref(), scale))
                        .transpose()?;
                    Ok((y, inputs, seeded))
                })
                .await;
            tally.busy_s += ctx.now() - t0;
            let (y, inputs, seeded) = out?;
            activations(ctx, &job, stages.clone(), rows, true).await?;
            let seed = match seeded {
                Some((loss, seed)) => {
                    if let Some(l) = loss {
                        check_loss(ctx, &job, iter, l)?;
                    }
                    loss_sum += loss.unwrap_or(f64::NAN) * rows as f64;
                    Some(seed)
                }
                None => None,
            };
            if !last {
                let body = Act {
                    iter,
                    micro: k,
                    rows,
                };
                let payload = y.to_payload(plan.submodels.output_bytes(s))?;
                let msg = Message::strategy_with(&body, vec![payload])?;
                tally.bytes += msg.wire_bytes();
                ctx.send(RoleId::Worker(self.id + 1), msg);
            }
            kept.push(Kept { inputs, rows, seed });
        }
        if last && net.is_some() {
            tally.loss = Some(loss_sum / total as f64);
        }
        let mut grads: Grads = None;
        for k in (0..kept.len()).rev() {
            let Some(kept) = kept.pop() else { break };
            let k = k as u32;
            let g = match kept.seed {
                Some(seed) => seed,
                None => {
                    let from = RoleId::Worker(self.id + 1);
                    let env = ctx
                        .recv_matching(|e| e.is_keyed::<Grad>(from, (iter, k)))
                        .await?;
                    let (g, payloads) = env.msg.into_strategy::<Grad>()?.ok_or_else(|| {
                        EngineError::protocol(ctx.id(), "expected a micro-batch's gradient")
                    })?;
                    tally.loss = tally.loss.or(g.loss);
                    let shape = self
                        .outputs
                        .as_ref()
                        .map(|sh| sh[stages.end - 1].as_slice());
                    rows_from(payloads, g.rows, shape, net)?
                }
            };
            let work = plan.submodels.work(s, kept.rows, StepPart::BACKWARD);
            let t0 = ctx.now();
            let out = ctx
                .compute("backward", work, || {
                    backward(net, stages.clone(), &kept.inputs, &g)
                })
                .await;
            tally.busy_s += ctx.now() - t0;
            let (g_params, g_input) = out?;
            activations(ctx, &job, stages.clone(), kept.rows, false).await?;
            accumulate(&mut grads, g_params)?;
            if !first {
                let body = Grad {
                    iter,
                    micro: k,
                    rows: kept.rows,
                    loss: tally.loss,
                };
                let payload = g_input.to_payload(plan.submodels.output_bytes(s - 1))?;
                let msg = Message::strategy_with(&body, vec![payload])?;
                tally.bytes += msg.wire_bytes();
                ctx.send(RoleId::Worker(self.id - 1), msg);
            }
        }
        self.held.apply(grads, ctx.now())?;
        Ok(tally)
    }
}

#[async_trait]
impl Worker for PipelineWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        self.held.reserve(ctx, &job).await?;
        // The held part stays in the replica's tensors: passes read it there, updates run there.
        if let Some(replica) = &self.replica {
            self.held.keep_on(replica)?;
        }
        let last = self.id as usize + 1 == self.plan.submodels.len();
        let mut records = Vec::new();
        let mut busy = Busy {
            busy_s: 0.0,
            span_s: 0.0,
        };
        for iter in job.clocks() {
            ctx.set_iter(iter);
            let start = ctx.now();
            let t = self.iteration(ctx, iter).await?;
            busy.busy_s += t.busy_s;
            busy.span_s += ctx.now() - start;
            // The last stage completes the samples; every stage knows the loss. A stage's idle
            // time (the pipeline's bubble, waiting for the flush) is its wait.
            let tally = ClockTally {
                samples: if last { self.plan.total_batch } else { 0 },
                compute_s: t.busy_s,
                wait_s: (ctx.now() - start - t.busy_s).max(0.0),
                comm_s: 0.0,
                loss: t.loss.unwrap_or(f64::NAN),
                version_read: iter as i64,
                bytes_sent: t.bytes,
            };
            records.push(close_clock(ctx, &job, iter, start, tally));
        }
        ctx.send(RoleId::Coordinator, Message::strategy(&busy)?);
        Ok(WorkerReport {
            iterations: records,
            model: Some(self.held.report(&job.layout)?),
            state: None,
        })
    }
}
