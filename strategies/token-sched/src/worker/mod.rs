//! The Fela worker (§III-C): a trainer that runs whatever token it is given, a coordinator that
//! sends and receives the outputs tokens depend on, and the parameter chunks it keeps.
//!
//! One event loop: the trainer's compute runs on the role's clock without blocking the
//! communication side ([`RoleContext::compute_deferred`]), which meanwhile answers the token
//! server's send requests, stores arriving outputs and gradients, and runs sub-model
//! synchronizations (ring allreduce over the sub-model's members) as soon as the token server
//! says a sub-model's backward passes are all done — so the sync of one sub-model overlaps the
//! backward passes of the others.
//!
//! Backward passes are not scheduled as tokens (the paper leaves them out; spec A1.10): a token's
//! backward runs on the worker that ran its forward, which holds its activations. A last-level
//! token runs forward, loss and backward in one go and sends each dependency's slice of its
//! input gradient to that dependency's holder, and so on down. The trainer runs pending backward
//! passes before new tokens. The loss of a token is its rows' share of the iteration's mean loss,
//! so the summed gradients are exactly those of one SGD step over the X samples.

mod sync;
mod trainer;

use crate::options::Resolved;
use crate::protocol::{
    Assign, Grad, Handover, Joining, Output, Params, PrepareSend, Request, Sync, Synced,
    WorkerStats,
};
use crate::server::{Token, TokenId};
use concord_engine::collective::{LocalModel, RingAllreduce};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use concord_engine::submodel::math::Grads;
use concord_engine::submodel::{rows_from, stage_input_shapes, stage_output_shapes, Rows};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use trainer::{InFlight, Saved, Task};

/// What a Fela worker carries across a checkpoint: its own replica (under CTD the sub-model a
/// worker does not train keeps its older values), with optimizer state and update count, the
/// sub-models whose values it is still waiting for, and when its trainer is free of a late start.
#[derive(serde::Serialize, serde::Deserialize)]
struct FelaWorkerState {
    model: ModelState,
    updates: u64,
    stale: BTreeSet<usize>,
    early_params: BTreeSet<usize>,
    trainer_free_at: f64,
}

/// One Fela worker.
pub struct FelaWorker {
    id: WorkerId,
    job: Arc<Job>,
    opts: Resolved,
    replica: Option<Replica>,
    model: LocalModel,
    shapes: Option<Vec<Vec<usize>>>,
    /// Per-sample shape of each stage's output (what a gradient of it is shaped like).
    output_shapes: Option<Vec<Vec<usize>>>,
    iter: u64,
    assigned: Option<(Token, Vec<(TokenId, WorkerId)>)>,
    /// Outputs this worker produced and still holds.
    outputs: BTreeMap<TokenId, Rows>,
    /// Outputs fetched from other workers.
    fetched: BTreeMap<TokenId, Rows>,
    saved: BTreeMap<TokenId, Saved>,
    backward: VecDeque<(TokenId, Rows)>,
    /// Per sub-model gradient sums of this iteration (real models), where the passes left
    /// them until the sub-model's ring reads them.
    grads: Vec<Grads>,
    rings: BTreeMap<usize, RingAllreduce>,
    reduced: BTreeMap<usize, Option<Payload>>,
    pending_syncs: Vec<Sync>,
    early_hops: Vec<Envelope>,
    stale: BTreeSet<usize>,
    /// Sub-models whose values arrived before the notice that this worker joins their subset.
    early_params: BTreeSet<usize>,
    loss: f64,
    rows_done: u64,
    compute_s: f64,
    /// Bytes this worker sent in the iteration: rows, handed-over sub-models, ring hops.
    bytes_sent: u64,
    stats: WorkerStats,
    in_flight: Option<InFlight>,
    /// When the trainer is free of a late start's delay.
    trainer_free_at: f64,
}

impl FelaWorker {
    /// Worker `id` of `job` (continuing from its checkpoint when the job resumes).
    pub fn new(job: Arc<Job>, id: WorkerId, opts: Resolved) -> Result<FelaWorker> {
        let levels = opts.submodels.len();
        let replica = job.replica(RoleId::Worker(id))?;
        let mut model = LocalModel::new(&job);
        let state = match job.resumed(RoleId::Worker(id)) {
            Some(cp) => {
                let state: FelaWorkerState =
                    cp.decode_state(RoleId::Worker(id), "Fela worker state")?;
                model.restore(&job.layout, &state.model, state.updates)?;
                Some(state)
            }
            None => None,
        };
        // The parameters stay in the replica's tensors, on its device: the passes read them in
        // place and the iteration's update runs there.
        if let Some(replica) = &replica {
            model.keep_on(replica)?;
        }
        let mut worker = FelaWorker {
            id,
            replica,
            model,
            shapes: stage_input_shapes(&job.model),
            output_shapes: stage_output_shapes(&job.model),
            job,
            opts,
            iter: 0,
            assigned: None,
            outputs: BTreeMap::new(),
            fetched: BTreeMap::new(),
            saved: BTreeMap::new(),
            backward: VecDeque::new(),
            grads: vec![None; levels],
            rings: BTreeMap::new(),
            reduced: BTreeMap::new(),
            pending_syncs: Vec::new(),
            early_hops: Vec::new(),
            stale: BTreeSet::new(),
            early_params: BTreeSet::new(),
            loss: f64::NAN,
            rows_done: 0,
            compute_s: 0.0,
            bytes_sent: 0,
            stats: WorkerStats::default(),
            in_flight: None,
            trainer_free_at: 0.0,
        };
        if let Some(s) = state {
            worker.stale = s.stale;
            worker.early_params = s.early_params;
            worker.trainer_free_at = s.trainer_free_at;
        }
        Ok(worker)
    }

    fn levels(&self) -> usize {
        self.opts.submodels.len()
    }

    fn net(&self) -> Option<&concord_engine::model::StagedModel> {
        self.replica.as_ref().and_then(Replica::model)
    }

    /// The per-sample shape of sub-model `level`'s input.
    fn input_shape(&self, level: usize) -> Option<&[usize]> {
        let first = self.opts.submodels.stages(level).start;
        self.shapes.as_ref().map(|s| s[first].as_slice())
    }

    fn send_rows<T: StrategyMessage>(
        &mut self,
        ctx: &RoleContext,
        to: WorkerId,
        body: &T,
        rows: &Rows,
        bytes_per_row: u64,
    ) -> Result<()> {
        let payload = rows.to_payload(bytes_per_row)?;
        let msg = Message::strategy_with(body, vec![payload])?;
        self.bytes_sent += msg.wire_bytes();
        ctx.send(RoleId::Worker(to), msg);
        Ok(())
    }

    /// Handles one message from a peer or the token server.
    fn on_message(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        if matches!(env.msg, Message::Collective { .. }) {
            let level = self
                .rings
                .iter()
                .find(|(_, r)| r.wants(&env))
                .map(|(l, _)| *l);
            match level {
                Some(l) => {
                    if let Some(r) = self.rings.get_mut(&l) {
                        r.on_message(ctx, env)?;
                    }
                    self.finish_rings();
                }
                None => self.early_hops.push(env),
            }
            return Ok(());
        }
        let from = env.from;
        let msg = env.msg;
        let tag = match &msg {
            Message::Custom(m) => m.tag.clone(),
            _ => String::new(),
        };
        let me = ctx.id();
        match tag.as_str() {
            Assign::TAG => {
                let (a, _) = typed::<Assign>(me, msg)?;
                self.on_assign(a);
            }
            PrepareSend::TAG => {
                let p = typed::<PrepareSend>(me, msg)?.0;
                self.send_outputs(ctx, p)?;
            }
            Output::TAG => {
                let (o, payloads) = typed::<Output>(me, msg)?;
                let shape = self.input_shape(o.level + 1).map(<[usize]>::to_vec);
                let rows = rows_from(payloads, o.rows, shape.as_deref(), self.net())?;
                self.fetched.insert(o.token, rows);
            }
            Grad::TAG => {
                let (g, payloads) = typed::<Grad>(me, msg)?;
                let level = self.saved.get(&g.token).map(|s| s.level).ok_or_else(|| {
                    EngineError::protocol(
                        ctx.id(),
                        format!("a gradient for token {} it did not run", g.token),
                    )
                })?;
                let last_stage = self.opts.submodels.stages(level).end - 1;
                let shape = self.output_shapes.as_ref().map(|s| s[last_stage].clone());
                let rows = rows_from(payloads, g.rows, shape.as_deref(), self.net())?;
                self.backward.push_back((g.token, rows));
            }
            Sync::TAG => {
                let s = typed::<Sync>(me, msg)?.0;
                if let Some(l) = s.loss {
                    self.loss = l;
                }
                self.pending_syncs.push(s);
                self.start_syncs(ctx)?;
            }
            Handover::TAG => {
                let h = typed::<Handover>(me, msg)?.0;
                self.hand_over(ctx, h)?;
            }
            Joining::TAG => {
                // The values may have come first (messages from two senders race).
                let j = typed::<Joining>(me, msg)?.0;
                if !self.early_params.remove(&j.level) {
                    self.stale.insert(j.level);
                }
            }
            Params::TAG => {
                let (p, payloads) = typed::<Params>(me, msg)?;
                self.take_params(ctx, p.level, payloads)?;
                self.start_syncs(ctx)?;
            }
            _ => {
                return Err(EngineError::protocol(
                    me,
                    format!("unexpected message from {from}: {msg:?}"),
                ))
            }
        }
        Ok(())
    }

    /// Sends the outputs the token server asked for to the worker that needs them.
    fn send_outputs(&mut self, ctx: &RoleContext, p: PrepareSend) -> Result<()> {
        for t in p.tokens {
            let rows = self.outputs.remove(&t).ok_or_else(|| {
                EngineError::protocol(
                    ctx.id(),
                    format!("asked for the output of token {t}, which it does not hold"),
                )
            })?;
            let level = self.saved.get(&t).map_or(0, |s| s.level);
            let body = Output {
                iter: p.iter,
                token: t,
                level,
                rows: rows.rows()?,
            };
            let per_row = self.opts.submodels.output_bytes(level);
            self.send_rows(ctx, p.to, &body, &rows, per_row)?;
        }
        Ok(())
    }

    /// Gives sub-model `h.level`'s values and optimizer state to the workers joining its CTD
    /// subset.
    fn hand_over(&mut self, ctx: &RoleContext, h: Handover) -> Result<()> {
        let payload = if self.model.is_real() {
            Payload::Real(self.model.export(self.opts.submodels.params(h.level))?)
        } else {
            Payload::Virtual {
                elems: self.opts.submodels.param_bytes(h.level) / 4,
            }
        };
        for to in h.to {
            let msg = Message::strategy_with(&Params { level: h.level }, vec![payload.clone()])?;
            self.bytes_sent += msg.wire_bytes();
            ctx.send(RoleId::Worker(to), msg);
        }
        Ok(())
    }

    fn on_assign(&mut self, a: Assign) {
        for &(_, holder) in &a.holders {
            if holder == self.id {
                self.stats.local_fetches += 1;
            } else {
                self.stats.remote_fetches += 1;
            }
        }
        self.assigned = Some((a.token, a.holders));
    }

    /// The next work for the trainer: a pending backward pass first, then the assigned token
    /// once its inputs are here (never work on a sub-model whose parameters are still coming).
    fn next_work(&mut self) -> Option<Task> {
        let pos = self.backward.iter().position(|(t, _)| {
            self.saved
                .get(t)
                .is_some_and(|s| !self.stale.contains(&s.level))
        });
        if let Some(p) = pos {
            let (t, g) = self.backward.remove(p)?;
            return Some(Task::Backward(t, g));
        }
        let (token, holders) = self.assigned.as_ref()?;
        if self.stale.contains(&token.level) {
            return None;
        }
        let have = holders.iter().all(|(d, h)| {
            if *h == self.id {
                self.outputs.contains_key(d)
            } else {
                self.fetched.contains_key(d)
            }
        });
        if !have {
            return None;
        }
        let (token, holders) = self.assigned.take()?;
        Some(Task::Forward(token, holders))
    }
}

/// A strategy message whose tag was matched, with its tensors.
fn typed<T: StrategyMessage>(me: RoleId, msg: Message) -> Result<(T, Vec<Payload>)> {
    msg.into_strategy::<T>()?.ok_or_else(|| {
        EngineError::protocol(me, format!("a message tagged {} that is not one", T::TAG))
    })
}

#[async_trait]
impl Worker for FelaWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        hold_optimizer_state(ctx, &job).await?;
        let mut records = Vec::new();
        for iter in job.clocks() {
            self.iter = iter;
            ctx.set_iter(iter);
            let start = ctx.now();
            (self.rows_done, self.compute_s, self.loss) = (0, 0.0, f64::NAN);
            self.bytes_sent = 0;
            // A late start delays the trainer's first request; the worker's communication
            // (outputs, gradients, syncs) goes on meanwhile. The trainer may still be asleep
            // from a start delay longer than the last iteration.
            if self.opts.late_start {
                let delay = ctx.iteration_start_delay();
                self.compute_s += delay;
                self.trainer_free_at = self.trainer_free_at.max(start) + delay;
            }
            let mut first_request_at = Some(self.trainer_free_at.max(start));
            while self.reduced.len() < self.levels() {
                if first_request_at.is_some_and(|t| t <= ctx.now()) {
                    first_request_at = None;
                    let req = Request {
                        iter,
                        completed: None,
                        loss_sum: None,
                    };
                    ctx.send(RoleId::Coordinator, Message::strategy(&req)?);
                }
                if self.in_flight.is_none() {
                    if let Some(work) = self.next_work() {
                        self.start(ctx, work).await?;
                    }
                }
                let deadline = self
                    .in_flight
                    .as_ref()
                    .map_or(f64::INFINITY, |f| f.ready_at)
                    .min(first_request_at.unwrap_or(f64::INFINITY));
                match ctx.recv_until(deadline).await? {
                    Some(env) => self.on_message(ctx, env)?,
                    // The deadline passed: whatever was due by then is done (the clock's reading
                    // may fall a tick short of it).
                    None => {
                        if first_request_at.is_some_and(|t| t <= deadline) {
                            first_request_at = Some(f64::NEG_INFINITY);
                        }
                        let ready = self
                            .in_flight
                            .as_ref()
                            .is_some_and(|f| f.ready_at <= deadline);
                        if ready {
                            if let Some(f) = self.in_flight.take() {
                                self.finish(ctx, f.done)?;
                            }
                        }
                    }
                }
            }
            self.apply(ctx)?;
            self.outputs.clear();
            self.fetched.clear();
            ctx.send(RoleId::Coordinator, Message::strategy(&Synced { iter })?);
            // The trainer's idle time: waiting for a token, a token's inputs, or the
            // sub-models' synchronisation. Its transfers overlap the trainer, so none of the
            // clock is counted as communication on its own.
            let idle = (ctx.now() - start - self.compute_s).max(0.0);
            let tally = ClockTally {
                samples: self.rows_done,
                compute_s: self.compute_s,
                wait_s: idle,
                comm_s: 0.0,
                loss: self.loss,
                version_read: iter as i64,
                bytes_sent: self.bytes_sent,
            };
            records.push(close_clock(ctx, &job, iter, start, tally));
        }
        ctx.send(RoleId::Coordinator, Message::strategy(&self.stats)?);
        ctx.send(RoleId::Coordinator, Message::WorkerDone);
        let model = self.model.report(&job.layout)?;
        let state = RoleState::encode(&FelaWorkerState {
            model: model.values_only(),
            updates: self.model.updates(),
            stale: self.stale.clone(),
            early_params: self.early_params.clone(),
            trainer_free_at: self.trainer_free_at,
        })?;
        Ok(WorkerReport {
            iterations: records,
            model: (self.id == 0).then_some(model),
            state: Some(state),
        })
    }
}
