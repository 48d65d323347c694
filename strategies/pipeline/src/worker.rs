//! A pipeline stage's worker: runs its schedule's operations in order, on the weight version
//! each minibatch's pass needs, sends activations forward and gradients back, averages
//! gradients with its stage's other replicas, and closes the job's iterations as the
//! minibatches in them finish here.

use crate::layout::{Layout, Position};
use crate::options::Kind;
use crate::protocol::{Act, Grad, StageStats};
use crate::schedule::{self, Op};
use crate::versions::{Versions, Weights};
use crate::weights::StageWeights;
use candle_core::Tensor;
use concord_engine::collective::{Allreduce, Gradient, Group};
use concord_engine::memory::{MemEvent, TensorClass};
use concord_engine::model::{Replica, StagedModel};
use concord_engine::prelude::*;
use concord_engine::submodel::math::{
    accumulate, backward, forward, host_flat, labels_of, loss_seed, samples, scale, Grads,
};
use concord_engine::submodel::{
    activations, rows_from, stage_input_shapes, stage_output_shapes, Held, Rows,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// What a stage worker keeps beside its stage's parameters, for a checkpoint.
#[derive(Serialize, Deserialize)]
struct StageState {
    /// Updates its stage has applied: the latest weight version's id.
    updates: u64,
}

/// What a minibatch's forward pass left for its backward pass.
struct Kept {
    /// Every layer's input (real models).
    inputs: Vec<Tensor>,
    /// The loss gradient (output stage).
    seed: Option<Rows>,
    /// The minibatch's loss (output stage, real models).
    loss: Option<f64>,
}

/// What the worker has counted since it last closed an iteration.
#[derive(Default)]
struct Open {
    start_s: f64,
    busy_s: f64,
    comm_s: f64,
    bytes: u64,
}

/// The samples an output stage finished in one iteration, and their losses.
#[derive(Default)]
struct Trained {
    samples: u64,
    loss_sum: f64,
    losses: u64,
}

/// One worker of a pipeline: a replica of one stage, or idle.
pub struct StageWorker {
    job: Arc<Job>,
    layout: Arc<Layout>,
    at: Option<Position>,
    /// The minibatches of this run: the whole run's, or the stretch's between two checkpoints.
    run: Range<u64>,
    replica: Option<Replica>,
    /// The stage's parameters and optimizer state, kept in the replica's tensors on its device
    /// (on the host only for a model without tensors of its own).
    held: Held,
    /// The stage's weight versions, the stashed ones as copies on the replica's device.
    weights: StageWeights,
    /// Weight copies the memory policy has been told of.
    copies_told: usize,
    /// Per-sample input shape of every layer of a real model, then its output's.
    shapes: Option<Vec<Vec<usize>>>,
    /// Per-sample output shape of every layer of a real model.
    outputs: Option<Vec<Vec<usize>>>,
    kept: BTreeMap<u64, Kept>,
    /// Gradients waiting for the next sync or flush, and how many minibatches they sum.
    pending: Grads,
    allreduce: Option<Allreduce>,
    /// `(start, end, forward?)` of every operation that computed.
    spans: Vec<(f64, f64, bool)>,
    boundary_bytes: u64,
    sync_bytes: u64,
    open: Open,
    /// Per iteration, what the output stage finished in it (a GPipe flush closes several).
    trained: BTreeMap<u64, Trained>,
    /// The next job iteration to close.
    next_clock: u64,
    records: Vec<IterRecord>,
}

impl StageWorker {
    /// Worker `id` of `job` in `layout`; a worker of a run resumed from a checkpoint continues
    /// from its stage's parameters, optimizer state and update count there, with no minibatch
    /// in flight (the checkpoint is cut where the pipeline has drained).
    pub fn new(job: Arc<Job>, id: WorkerId, layout: Arc<Layout>) -> Result<StageWorker> {
        let at = layout.position(id);
        let range = at.map_or(0..0, |p| layout.submodels.params(p.stage));
        let mut held = Held::new(&job, range)?.snapshot_by_iterations();
        let run = layout.minibatches(job.clocks());
        let updates = match (at, job.resumed(RoleId::Worker(id))) {
            (Some(at), Some(cp)) => restore(&job, id, &layout, at, &cp, &mut held)?,
            _ => 0,
        };
        // The replica holds the stage's layers alone: the rest of the model takes none of its
        // device's memory.
        let replica = match at {
            Some(at) => job.part_replica(RoleId::Worker(id), layout.submodels.stages(at.stage))?,
            None => None,
        };
        // The stage's parameters move into the replica, where its passes read them and its
        // updates run; the latest version lives there, stashed ones as device copies beside it.
        let vars = match &replica {
            Some(r) if held.keep_on(r)? => r.param_vars(),
            _ => None,
        };
        let versions = Versions::resumed(layout.weights, None, updates, run.start);
        Ok(StageWorker {
            run,
            replica,
            weights: StageWeights::new(versions, vars),
            shapes: stage_input_shapes(&job.model),
            outputs: stage_output_shapes(&job.model),
            held,
            kept: BTreeMap::new(),
            pending: None,
            copies_told: 0,
            allreduce: None,
            spans: Vec::new(),
            boundary_bytes: 0,
            sync_bytes: 0,
            open: Open::default(),
            trained: BTreeMap::new(),
            next_clock: job.clocks().start,
            records: Vec::new(),
            at,
            job,
            layout,
        })
    }

    fn net(&self) -> Option<&StagedModel> {
        self.replica.as_ref().and_then(Replica::model)
    }

    fn layers(&self, at: Position) -> Range<usize> {
        self.layout.submodels.stages(at.stage)
    }

    async fn run_op(&mut self, ctx: &mut RoleContext, at: Position, op: Op) -> Result<()> {
        match op {
            Op::Forward(b) => self.forward(ctx, at, b).await,
            Op::Backward(b) => self.backward(ctx, at, b).await,
            // A replicated stage's round is `r_s` consecutive minibatches; a GPipe round,
            // `depth` for each input replica.
            Op::Sync(round) => {
                let width = self.layout.replicas(at.stage) as u64;
                self.finish_round(ctx, round, width).await
            }
            Op::Flush(round) => {
                let width = self.layout.round_width();
                self.finish_round(ctx, round, width).await
            }
        }
    }

    /// Round `round` of `width` consecutive minibatches is done here: its gradients are
    /// averaged (over the replicas) and applied, and the iterations it completes are closed.
    async fn finish_round(&mut self, ctx: &mut RoleContext, round: u64, width: u64) -> Result<()> {
        let minibatches = schedule::round_minibatches(round, width, &self.run);
        let end = minibatches.end;
        self.average_and_apply(ctx, round, minibatches).await?;
        self.close_until(ctx, end)?;
        Ok(())
    }

    async fn forward(&mut self, ctx: &mut RoleContext, at: Position, b: u64) -> Result<()> {
        let job = self.job.clone();
        let layout = self.layout.clone();
        let s = at.stage;
        let (first, last) = (s == 0, s + 1 == layout.len());
        let g = layout.minibatch;
        let layers = self.layers(at);
        let (x, watermark) = if first {
            let (x, _) = samples(&job, self.net(), g, b, 0, g)?;
            let mark = (layout.weights == Weights::VerticalSync)
                .then(|| self.weights.versions().watermark());
            (x, mark)
        } else {
            let from = layout.route(s - 1, b);
            let t0 = ctx.now();
            let env = ctx
                .recv_matching(|e| e.is_keyed::<Act>(RoleId::Worker(from), b))
                .await?;
            self.open.comm_s += ctx.now() - t0;
            let (a, payloads) = env.msg.into_strategy::<Act>()?.ok_or_else(|| {
                EngineError::protocol(ctx.id(), "expected a minibatch's activations")
            })?;
            let shape = self.shapes.as_ref().map(|sh| sh[layers.start].as_slice());
            (rows_from(payloads, a.rows, shape, self.net())?, a.watermark)
        };
        self.weights.forward(b, watermark)?;
        self.hold_versions(ctx).await?;
        let labels = if last {
            labels_of(&job, g, b, 0, g)
        } else {
            None
        };
        let work = layout.submodels.work(s, g, StepPart::FORWARD);
        let net = self.replica.as_ref().and_then(Replica::model);
        let t0 = ctx.now();
        let out = ctx
            .compute("forward", work, || -> Result<_> {
                let (y, inputs) = forward(net, layers.clone(), &x)?;
                let seeded = last
                    .then(|| loss_seed(net, &y, labels.as_deref(), 1.0))
                    .transpose()?;
                Ok((y, inputs, seeded))
            })
            .await;
        self.spans.push((t0, ctx.now(), true));
        self.open.busy_s += ctx.now() - t0;
        let (y, inputs, seeded) = out?;
        self.hold_activations(ctx, at, true).await?;
        if !last {
            let body = Act {
                minibatch: b,
                stage: s as u32 + 1,
                rows: g,
                watermark,
            };
            let payload = y.to_payload(layout.submodels.output_bytes(s))?;
            let msg = Message::strategy_with(&body, vec![payload])?;
            self.boundary_bytes += msg.wire_bytes();
            self.open.bytes += msg.wire_bytes();
            ctx.send(RoleId::Worker(layout.route(s + 1, b)), msg);
        }
        let (loss, seed) = match seeded {
            Some((loss, seed)) => (loss, Some(seed)),
            None => (None, None),
        };
        if let Some(l) = loss {
            check_loss(ctx, &job, layout.clock_of(b), l)?;
        }
        self.kept.insert(b, Kept { inputs, seed, loss });
        Ok(())
    }

    async fn backward(&mut self, ctx: &mut RoleContext, at: Position, b: u64) -> Result<()> {
        let layout = self.layout.clone();
        let s = at.stage;
        let g_rows = layout.minibatch;
        let layers = self.layers(at);
        let kept = self.kept.remove(&b).ok_or_else(|| {
            EngineError::protocol(
                ctx.id(),
                format!("backward pass of minibatch {b} before its forward pass"),
            )
        })?;
        let grad = match kept.seed {
            Some(seed) => seed,
            None => {
                let from = layout.route(s + 1, b);
                let t0 = ctx.now();
                let env = ctx
                    .recv_matching(|e| e.is_keyed::<Grad>(RoleId::Worker(from), b))
                    .await?;
                self.open.comm_s += ctx.now() - t0;
                let (gm, payloads) = env.msg.into_strategy::<Grad>()?.ok_or_else(|| {
                    EngineError::protocol(ctx.id(), "expected a minibatch's gradient")
                })?;
                let shape = self
                    .outputs
                    .as_ref()
                    .map(|sh| sh[layers.end - 1].as_slice());
                rows_from(payloads, gm.rows, shape, self.net())?
            }
        };
        self.weights.backward(b)?;
        // Loading a stashed version keeps the latest aside for the pass: one copy more.
        self.hold_versions(ctx).await?;
        // GPipe recomputes the stage's forward pass before its backward pass.
        let share = match layout.kind {
            Kind::GPipe => StepPart::BACKWARD + StepPart::FORWARD,
            _ => StepPart::BACKWARD,
        };
        let work = layout.submodels.work(s, g_rows, share);
        let net = self.replica.as_ref().and_then(Replica::model);
        let t0 = ctx.now();
        let out = ctx
            .compute("backward", work, || {
                backward(net, layers.clone(), &kept.inputs, &grad)
            })
            .await;
        self.spans.push((t0, ctx.now(), false));
        self.open.busy_s += ctx.now() - t0;
        let (g_params, g_input) = out?;
        self.hold_activations(ctx, at, false).await?;
        if s > 0 {
            let body = Grad {
                minibatch: b,
                stage: s as u32 - 1,
                rows: g_rows,
            };
            let payload = g_input.to_payload(layout.submodels.output_bytes(s - 1))?;
            let msg = Message::strategy_with(&body, vec![payload])?;
            self.boundary_bytes += msg.wire_bytes();
            self.open.bytes += msg.wire_bytes();
            ctx.send(RoleId::Worker(layout.route(s - 1, b)), msg);
        }
        self.weights.release(b);
        if s + 1 == layout.len() {
            let t = self.trained.entry(layout.clock_of(b)).or_default();
            t.samples += g_rows;
            if let Some(l) = kept.loss {
                t.loss_sum += l;
                t.losses += 1;
            }
        }
        accumulate(&mut self.pending, g_params)?;
        if layout.kind != Kind::GPipe && layout.replicas(s) == 1 {
            // An unreplicated stage applies each minibatch's gradient as soon as it has it.
            let grads = self.pending.take();
            self.apply(ctx, grads, b + 1)?;
            self.close_until(ctx, b + 1)?;
        }
        Ok(())
    }

    /// Averages the pending gradients of `minibatches` over the stage's replicas, then applies
    /// them. Only a replicated stage's gradients leave its device, for the ring to sum.
    async fn average_and_apply(
        &mut self,
        ctx: &mut RoleContext,
        round: u64,
        minibatches: Range<u64>,
    ) -> Result<()> {
        let scale_by = 1.0 / (minibatches.end - minibatches.start).max(1) as f32;
        let mut grads = self.pending.take();
        let Some(ar) = self.allreduce.as_mut() else {
            if let Some(g) = grads.as_mut() {
                scale(g, scale_by)?;
            }
            return self.apply(ctx, grads, minibatches.end);
        };
        if let (true, Some(g)) = (ar.sums_on_device(), &grads) {
            // NCCL sums the stage's gradients where its backward pass left them.
            let t0 = ctx.now();
            let (mut summed, sent) = ar.sum_tensors(ctx, round, g).await?;
            self.count_sync(ctx, t0, sent);
            scale(&mut summed, scale_by)?;
            return self.apply(ctx, Some(summed), minibatches.end);
        }
        let mut buf = match &grads {
            Some(g) => Payload::Real(host_flat(g)?),
            None if self.replica.is_some() => Payload::Real(vec![0.0; self.held.elems() as usize]),
            None => Payload::Virtual {
                elems: self.held.elems(),
            },
        };
        let t0 = ctx.now();
        let sent = ar.sum(ctx, round, &mut buf, &[]).await?;
        self.count_sync(ctx, t0, sent);
        let mut summed = buf.values().map(|flat| self.held.unflatten(flat));
        for t in summed.iter_mut().flatten() {
            for x in t.iter_mut() {
                *x *= scale_by;
            }
        }
        self.apply(ctx, summed, minibatches.end)
    }

    /// Counts a gradient sum over the stage's replicas that began at `t0`, this member sending
    /// `sent` bytes: its time as communication, its bytes, and its span in the trace.
    fn count_sync(&mut self, ctx: &mut RoleContext, t0: f64, sent: u64) {
        self.open.comm_s += ctx.now() - t0;
        self.sync_bytes += sent;
        self.open.bytes += sent;
        ctx.trace_span("allreduce", "comm", t0, ctx.now());
    }

    /// One optimizer step of the stage, making a new latest version that took in minibatches
    /// `0..watermark`.
    fn apply<G: Gradient>(
        &mut self,
        ctx: &RoleContext,
        grads: Option<Vec<G>>,
        watermark: u64,
    ) -> Result<()> {
        self.weights.before_update()?;
        self.held.apply(grads, ctx.now())?;
        self.weights.updated(watermark);
        Ok(())
    }

    /// Closes the job's iterations whose minibatches this worker has all finished, given that
    /// every minibatch before `done` is finished here.
    fn close_until(&mut self, ctx: &RoleContext, done: u64) -> Result<()> {
        let per = self.layout.replicas(self.layout.len() - 1) as u64;
        let end = self.job.clocks().end;
        while self.next_clock < end && (self.next_clock + 1) * per <= done {
            self.close(ctx)?;
        }
        Ok(())
    }

    /// Closes the next iteration with what was counted since the last.
    fn close(&mut self, ctx: &RoleContext) -> Result<()> {
        let open = std::mem::take(&mut self.open);
        let clock = self.next_clock;
        let trained = self.trained.remove(&clock).unwrap_or_default();
        let tally = ClockTally {
            samples: trained.samples,
            compute_s: open.busy_s,
            wait_s: 0.0,
            comm_s: open.comm_s,
            loss: if trained.losses > 0 {
                trained.loss_sum / trained.losses as f64
            } else {
                f64::NAN
            },
            version_read: self.weights.versions().latest() as i64,
            bytes_sent: open.bytes,
        };
        let record = close_clock(ctx, &self.job, clock, open.start_s, tally);
        self.records.push(record);
        // A snapshot reads the replica's parameters: the latest version, not a stashed one.
        self.weights.restore_latest()?;
        self.held.iteration_done(clock + 1, ctx.now())?;
        self.next_clock += 1;
        self.open.start_s = ctx.now();
        Ok(())
    }

    /// Tells the memory policy about a minibatch's activations: kept from the forward to the
    /// backward pass (PipeDream, model parallelism), or only the stage input kept and the rest
    /// live during the recomputing backward pass (GPipe).
    async fn hold_activations(
        &mut self,
        ctx: &mut RoleContext,
        at: Position,
        forward: bool,
    ) -> Result<()> {
        let job = self.job.clone();
        let layers = self.layers(at);
        let rows = self.layout.minibatch;
        if self.layout.kind != Kind::GPipe {
            return activations(ctx, &job, layers, rows, forward).await;
        }
        let input = crate::layout::stage_input_bytes(&job, layers.start) * rows;
        if forward {
            let what = "a minibatch's stage input (recomputed from in the backward pass)";
            ctx.memory_event(MemEvent::Allocate {
                class: TensorClass::Activations,
                bytes: input,
                what: what.into(),
            })
            .await
        } else {
            activations(ctx, &job, layers.clone(), rows, true).await?;
            activations(ctx, &job, layers, rows, false).await?;
            ctx.memory_event(MemEvent::Release {
                class: TensorClass::Activations,
                bytes: input,
            })
            .await
        }
    }

    /// Tells the memory policy about the weight copies beside the parameters (stashed versions,
    /// and the latest while a stashed one is loaded) when their count changes.
    async fn hold_versions(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let now = self.weights.copies_held();
        let bytes = self.held.elems() * 4;
        let held = &mut self.copies_told;
        while *held < now {
            ctx.memory_event(MemEvent::Allocate {
                class: TensorClass::Params,
                bytes,
                what: "a weight version's copy".into(),
            })
            .await?;
            *held += 1;
        }
        while *held > now {
            ctx.memory_event(MemEvent::Release {
                class: TensorClass::Params,
                bytes,
            })
            .await?;
            *held -= 1;
        }
        Ok(())
    }

    /// The share of the steady state spent computing: from the end of the first backward pass
    /// to the start of the last forward pass.
    fn steady_utilisation(&self) -> Option<f64> {
        let from = self.spans.iter().find(|s| !s.2)?.1;
        let to = self.spans.iter().rev().find(|s| s.2)?.0;
        if to <= from {
            return None;
        }
        let busy: f64 = self
            .spans
            .iter()
            .map(|&(a, b, _)| (b.min(to) - a.max(from)).max(0.0))
            .sum();
        Some(busy / (to - from))
    }
}

/// Restores the stage of worker `id` (at `at`) from its checkpoint `cp` and returns the stage's
/// update count. The replicas of a stage hold the same values after every round, so the stage's
/// first replica's checkpoint holds its part of the model and every replica restores from it.
fn restore(
    job: &Job,
    id: WorkerId,
    layout: &Layout,
    at: Position,
    cp: &RoleCheckpoint,
    held: &mut Held,
) -> Result<u64> {
    let bad = |reason: String| EngineError::protocol(RoleId::Worker(id), reason);
    let state: StageState = cp.decode_state(RoleId::Worker(id), "pipeline stage state")?;
    let first = RoleId::Worker(layout.worker(at.stage, 0));
    let part = job.resumed(first).and_then(|c| c.model).ok_or_else(|| {
        bad(format!(
            "the checkpoint holds no parameters of stage {} ({first}'s)",
            at.stage
        ))
    })?;
    held.restore(&job.layout, &part, state.updates)?;
    Ok(state.updates)
}

#[async_trait]
impl Worker for StageWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let Some(at) = self.at else {
            // An idle worker: the plan leaves it out.
            return Ok(WorkerReport {
                iterations: Vec::new(),
                model: None,
                state: None,
            });
        };
        let job = self.job.clone();
        let layout = self.layout.clone();
        self.held.reserve(ctx, &job).await?;
        if layout.replicas(at.stage) > 1 {
            let group = Group::new(layout.stage_workers(at.stage))?;
            self.allreduce = Some(Allreduce::join(ctx, &job, group).await?);
        }
        self.open.start_s = ctx.now();
        for op in layout.ops(at, &self.run) {
            self.run_op(ctx, at, op).await?;
            self.hold_versions(ctx).await?;
        }
        while self.next_clock < job.clocks().end {
            self.close(ctx)?;
        }
        let span_s = match (self.spans.first(), self.spans.last()) {
            (Some(a), Some(b)) => b.1 - a.0,
            _ => 0.0,
        };
        let stats = StageStats {
            stage: at.stage as u32,
            busy_s: self.spans.iter().map(|s| s.1 - s.0).sum(),
            span_s,
            steady_utilisation: self.steady_utilisation(),
            max_versions: self.weights.versions().max_alive() as u32,
            boundary_bytes: self.boundary_bytes,
            sync_bytes: self.sync_bytes,
        };
        ctx.send(RoleId::Coordinator, Message::strategy(&stats)?);
        // Every replica of a stage holds the same values: the first one reports them.
        self.weights.restore_latest()?;
        let model = if at.replica == 0 {
            Some(self.held.report(&job.layout)?)
        } else {
            None
        };
        Ok(WorkerReport {
            iterations: std::mem::take(&mut self.records),
            model,
            state: Some(RoleState::encode(&StageState {
                updates: self.weights.versions().latest(),
            })?),
        })
    }
}
