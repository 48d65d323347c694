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

use crate::options::Resolved;
use crate::protocol::{
    Assign, BackwardDone, Grad, Handover, Joining, Output, Params, PrepareSend, Request, Sync,
    Synced, WorkerStats,
};
use crate::server::{Token, TokenId};
use crate::submodel::{self, stage_input_shapes, stage_output_shapes, tensor_error, Rows};
use candle_core::Tensor;
use concord_engine::collective::{Group, LocalModel, RingAllreduce};
use concord_engine::memory::MemEvent;
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Each dependency of a token, its holder and its rows.
type DepRows = Vec<(TokenId, WorkerId, u64)>;
/// A gradient with respect to a token's input, and the dependencies its rows belong to.
type InputGrad = Option<(Rows, DepRows)>;
/// Parameter gradients of one sub-model (real models).
type Grads = Option<Vec<Vec<f32>>>;
/// What a token's forward math gives: its output, the stage inputs it kept, and for the last
/// level the loss sum, the parameter gradients and the input gradient.
type ForwardOut = (Option<Rows>, Vec<Tensor>, Option<f64>, Grads, Option<Rows>);

/// What a token's forward pass kept for its backward pass.
struct Saved {
    level: usize,
    /// Each dependency, its holder and its rows (empty at level 0).
    deps: DepRows,
    /// Every stage's input (real models).
    inputs: Vec<Tensor>,
    rows: u64,
}

/// Work on the trainer.
enum Task {
    Forward(Token, Vec<(TokenId, WorkerId)>),
    Backward(TokenId, Rows),
}

/// What the trainer finishes at `ready_at`.
struct InFlight {
    ready_at: f64,
    done: Done,
}

enum Done {
    /// A forward pass (with loss and backward for the last level).
    Forward {
        token: Token,
        saved: Option<Saved>,
        output: Option<Rows>,
        loss_sum: Option<f64>,
        grads: Grads,
        grad_in: InputGrad,
    },
    /// A backward pass.
    Backward {
        token: TokenId,
        level: usize,
        grads: Grads,
        grad_in: InputGrad,
    },
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
    /// Per sub-model gradient sums of this iteration (real models).
    grads: Vec<Option<Vec<Vec<f32>>>>,
    rings: BTreeMap<usize, RingAllreduce>,
    reduced: BTreeMap<usize, Option<Payload>>,
    pending_syncs: Vec<Sync>,
    early_hops: Vec<Envelope>,
    stale: BTreeSet<usize>,
    loss: f64,
    rows_done: u64,
    compute_s: f64,
    stats: WorkerStats,
    in_flight: Option<InFlight>,
    /// When the trainer is free of a late start's delay.
    trainer_free_at: f64,
}

impl FelaWorker {
    /// Worker `id` of `job`.
    pub fn new(job: Arc<Job>, id: WorkerId, opts: Resolved) -> Result<FelaWorker> {
        let levels = opts.submodels.len();
        Ok(FelaWorker {
            id,
            replica: job.replica(RoleId::Worker(id))?,
            model: LocalModel::new(&job),
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
            loss: f64::NAN,
            rows_done: 0,
            compute_s: 0.0,
            stats: WorkerStats::default(),
            in_flight: None,
            trainer_free_at: 0.0,
        })
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
        ctx.send(
            RoleId::Worker(to),
            Message::strategy_with(body, vec![payload])?,
        );
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
        if let Some((a, _)) = msg.clone().into_strategy::<Assign>()? {
            self.on_assign(a);
        } else if let Some(p) = msg.decode::<PrepareSend>()? {
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
                    rows: rows.rows()?,
                };
                let per_row = self.opts.submodels.output_bytes(level);
                self.send_rows(ctx, p.to, &body, &rows, per_row)?;
            }
        } else if let Some((o, payloads)) = msg.clone().into_strategy::<Output>()? {
            let level = self.assigned.as_ref().map_or(1, |(t, _)| t.level);
            let shape = self.input_shape(level).map(<[usize]>::to_vec);
            let device = self
                .net()
                .map(|n| n.device().clone())
                .unwrap_or(candle_core::Device::Cpu);
            let payload = payloads
                .into_iter()
                .next()
                .unwrap_or(Payload::Virtual { elems: 0 });
            let rows = Rows::from_payload(payload, o.rows, shape.as_deref(), &device)?;
            self.fetched.insert(o.token, rows);
        } else if let Some((g, payloads)) = msg.clone().into_strategy::<Grad>()? {
            let level = self.saved.get(&g.token).map(|s| s.level).ok_or_else(|| {
                EngineError::protocol(
                    ctx.id(),
                    format!("a gradient for token {} it did not run", g.token),
                )
            })?;
            let shape = self
                .output_shapes
                .as_ref()
                .map(|s| s[self.opts.submodels.stages(level).end - 1].clone());
            let device = self
                .net()
                .map(|n| n.device().clone())
                .unwrap_or(candle_core::Device::Cpu);
            let payload = payloads
                .into_iter()
                .next()
                .unwrap_or(Payload::Virtual { elems: 0 });
            let rows = Rows::from_payload(payload, g.rows, shape.as_deref(), &device)?;
            self.backward.push_back((g.token, rows));
        } else if let Some(s) = msg.decode::<Sync>()? {
            if let Some(l) = s.loss {
                self.loss = l;
            }
            self.pending_syncs.push(s);
            self.start_syncs(ctx)?;
        } else if let Some(h) = msg.decode::<Handover>()? {
            let payload = match self.model.params() {
                Some(_) => Payload::Real(self.model.export(self.opts.submodels.params(h.level))),
                None => Payload::Virtual {
                    elems: self.opts.submodels.param_bytes(h.level) / 4,
                },
            };
            for to in h.to {
                let msg =
                    Message::strategy_with(&Params { level: h.level }, vec![payload.clone()])?;
                ctx.send(RoleId::Worker(to), msg);
            }
        } else if let Some(j) = msg.decode::<Joining>()? {
            self.stale.insert(j.level);
        } else if let Some((p, payloads)) = msg.clone().into_strategy::<Params>()? {
            self.take_params(ctx, p.level, payloads)?;
            self.start_syncs(ctx)?;
        } else {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("unexpected message from {from}: {msg:?}"),
            ));
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

    /// Sub-model `level`'s parameters and optimizer state from a member of the CTD subset this
    /// worker joins.
    fn take_params(
        &mut self,
        ctx: &RoleContext,
        level: usize,
        payloads: Vec<Payload>,
    ) -> Result<()> {
        let range = self.opts.submodels.params(level);
        if let Some(Payload::Real(packed)) = payloads.first() {
            if !self.model.import(range, packed, ctx.now()) {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "sub-model {} handed over with {} values, not its size",
                        level + 1,
                        packed.len()
                    ),
                ));
            }
            if let (Some(r), Some(p)) = (&self.replica, self.model.params()) {
                r.set_params(p)?;
            }
        }
        self.stale.remove(&level);
        Ok(())
    }

    /// Starts the ring of every sub-model the token server released whose parameters this
    /// worker has.
    fn start_syncs(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let ready: Vec<Sync> = {
            let (ready, wait): (Vec<Sync>, Vec<Sync>) = std::mem::take(&mut self.pending_syncs)
                .into_iter()
                .partition(|s| !self.stale.contains(&s.level) || !s.members.contains(&self.id));
            self.pending_syncs = wait;
            ready
        };
        for s in ready {
            if !s.members.contains(&self.id) {
                self.reduced.insert(s.level, None);
                continue;
            }
            let range = self.opts.submodels.params(s.level);
            let buf = match self.grads[s.level].take() {
                Some(g) => Payload::Real(g.into_iter().flatten().collect()),
                None => match self.model.params() {
                    Some(p) => Payload::Real(vec![0.0; p[range].iter().map(Vec::len).sum()]),
                    None => Payload::Virtual {
                        elems: self.opts.submodels.param_bytes(s.level) / 4,
                    },
                },
            };
            let group = Group::new(s.members.iter().map(|&w| RoleId::Worker(w)).collect())?;
            let op = s.iter * 64 + s.level as u64;
            let ring = RingAllreduce::start(ctx, &group, op, buf, &[])?;
            self.rings.insert(s.level, ring);
            let hops = std::mem::take(&mut self.early_hops);
            for env in hops {
                if let Some(r) = self.rings.get_mut(&s.level).filter(|r| r.wants(&env)) {
                    r.on_message(ctx, env)?;
                } else {
                    self.early_hops.push(env);
                }
            }
            self.finish_rings();
        }
        Ok(())
    }

    fn finish_rings(&mut self) {
        let done: Vec<usize> = self
            .rings
            .iter()
            .filter(|(_, r)| r.is_done())
            .map(|(l, _)| *l)
            .collect();
        for l in done {
            if let Some(r) = self.rings.remove(&l) {
                self.stats.sync_bytes += r.bytes_sent();
                self.reduced.insert(l, Some(r.into_result()));
            }
        }
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

    /// Starts `work` on the trainer, telling the memory policy about the activations it keeps
    /// (a forward pass) or frees (a backward pass; the last level's token does both at once).
    async fn start(&mut self, ctx: &mut RoleContext, work: Task) -> Result<()> {
        let t0 = ctx.now();
        let (level, rows, forward, backward) = match &work {
            Task::Forward(token, _) => {
                let last = token.level + 1 == self.levels();
                (token.level, token.batch(), true, last)
            }
            Task::Backward(token, _) => match self.saved.get(token) {
                Some(s) => (s.level, s.rows, false, true),
                None => (0, 0, false, false),
            },
        };
        let stages = self.opts.submodels.stages(level);
        if forward {
            for stage in stages.clone() {
                let bytes = self.job.stage_activation_bytes[stage] * rows;
                ctx.memory_event(MemEvent::Forward { stage, bytes }).await?;
            }
        }
        if backward {
            for stage in stages.rev() {
                let bytes = self.job.stage_activation_bytes[stage] * rows;
                ctx.memory_event(MemEvent::Backward { stage, bytes }).await?;
            }
        }
        let (done, ready_at) = match work {
            Task::Forward(token, holders) => self.forward(ctx, token, holders)?,
            Task::Backward(token, grad) => self.backward_pass(ctx, token, grad)?,
        };
        self.compute_s += ready_at - t0;
        self.in_flight = Some(InFlight { ready_at, done });
        Ok(())
    }

    fn forward(
        &mut self,
        ctx: &mut RoleContext,
        token: Token,
        holders: Vec<(TokenId, WorkerId)>,
    ) -> Result<(Done, f64)> {
        let level = token.level;
        let last = level + 1 == self.levels();
        let rows = token.batch();
        let mut deps = Vec::new();
        let mut parts = Vec::new();
        for (d, h) in &holders {
            let r = if *h == self.id {
                self.outputs.remove(d)
            } else {
                self.fetched.remove(d)
            };
            let r = r.ok_or_else(|| {
                EngineError::protocol(ctx.id(), format!("input {d} of token {} missing", token.id))
            })?;
            if *h != self.id {
                self.stats.remote_fetch_bytes +=
                    r.rows()? * self.opts.submodels.output_bytes(level - 1);
            }
            deps.push((*d, *h, r.rows()?));
            parts.push(r);
        }
        let x = (level > 0).then(|| Rows::concat(&parts)).transpose()?;
        let share = if last { 1.0 } else { StepPart::FORWARD };
        let work = self.opts.submodels.work(level, rows, share);
        let math = self.forward_math(&token, x)?;
        let (out, ready_at) = ctx.compute_deferred("token", work, math);
        let (output, inputs, loss_sum, grads, grad_in) = out?;
        let grad_in = grad_in.map(|g| (g, deps.clone()));
        let saved = (!last).then(|| Saved {
            level,
            deps,
            inputs,
            rows,
        });
        Ok((
            Done::Forward {
                token,
                saved,
                output,
                loss_sum,
                grads,
                grad_in,
            },
            ready_at,
        ))
    }

    /// The forward math of a token as a closure for the charge: its output and the stage inputs
    /// (and for the last level the loss sum, parameter gradients and input gradient).
    fn forward_math<'a>(
        &'a self,
        token: &Token,
        x: Option<Rows>,
    ) -> Result<impl FnOnce() -> Result<ForwardOut> + 'a> {
        let level = token.level;
        let last = level + 1 == self.levels();
        let rows = token.batch();
        let stages = self.opts.submodels.stages(level);
        let total = self.opts.total_batch as f64;
        // The samples of a level-0 token (and the labels of a last-level one).
        let (features, labels) = match &self.job.data {
            Some(data) if self.net().is_some() => {
                let base = self.iter as u128 * self.opts.total_batch as u128;
                let mut idx = Vec::with_capacity(rows as usize);
                for &(off, n) in &token.spans {
                    idx.extend(self.job.stream.range(base + off as u128, n as usize));
                }
                let (f, l) = data.train.gather(&idx);
                (Some(f), Some(l))
            }
            _ => (None, None),
        };
        let net = self.net();
        Ok(move || {
            let Some(net) = net else {
                let out = (!last).then_some(Rows::Virtual { rows });
                let gin = (last && level > 0).then_some(Rows::Virtual { rows });
                return Ok((out, Vec::new(), None, None, gin));
            };
            let input = match x {
                Some(Rows::Real(t)) => t,
                _ => net
                    .input(features.unwrap_or_default(), rows as usize)
                    .map_err(|e| tensor_error("token input", e))?,
            };
            let (y, inputs) = submodel::forward(net, stages.clone(), &input)?;
            if !last {
                return Ok((Some(Rows::Real(y)), inputs, None, None, None));
            }
            let labels = labels.unwrap_or_default();
            let (loss, g) = net
                .loss_grad(&y, &labels)
                .map_err(|e| tensor_error("loss", e))?;
            let g =
                (g * (rows as f64 / total)).map_err(|e| tensor_error("scale loss gradient", e))?;
            let (grads, gx) = submodel::backward(net, stages, &inputs, &g)?;
            let gin = (level > 0).then_some(Rows::Real(gx));
            Ok((None, Vec::new(), Some(loss * rows as f64), Some(grads), gin))
        })
    }

    fn backward_pass(
        &mut self,
        ctx: &mut RoleContext,
        token: TokenId,
        grad: Rows,
    ) -> Result<(Done, f64)> {
        let saved = self.saved.remove(&token).ok_or_else(|| {
            EngineError::protocol(ctx.id(), format!("no activations kept for token {token}"))
        })?;
        let work = self
            .opts
            .submodels
            .work(saved.level, saved.rows, StepPart::BACKWARD);
        let stages = self.opts.submodels.stages(saved.level);
        let net = self.net();
        let inputs = saved.inputs;
        let level = saved.level;
        let math = move || -> Result<(Grads, Option<Rows>)> {
            match (net, grad) {
                (Some(net), Rows::Real(g)) => {
                    let (grads, gx) = submodel::backward(net, stages, &inputs, &g)?;
                    Ok((Some(grads), (level > 0).then_some(Rows::Real(gx))))
                }
                (_, g) => Ok((
                    None,
                    (level > 0).then_some(Rows::Virtual { rows: g.rows()? }),
                )),
            }
        };
        let (out, ready_at) = ctx.compute_deferred("backward", work, math);
        let (grads, gin) = out?;
        let grad_in = gin.map(|g| (g, saved.deps));
        Ok((
            Done::Backward {
                token,
                level,
                grads,
                grad_in,
            },
            ready_at,
        ))
    }

    fn accumulate(&mut self, level: usize, grads: Option<Vec<Vec<f32>>>) {
        let Some(g) = grads else { return };
        match &mut self.grads[level] {
            Some(acc) => {
                for (a, x) in acc.iter_mut().zip(&g) {
                    for (p, q) in a.iter_mut().zip(x) {
                        *p += *q;
                    }
                }
            }
            slot => *slot = Some(g),
        }
    }

    /// Sends each dependency's slice of an input gradient to its holder.
    fn send_grads(
        &mut self,
        ctx: &RoleContext,
        level: usize,
        grad: Rows,
        deps: DepRows,
    ) -> Result<()> {
        let mut at = 0;
        for (d, h, rows) in deps {
            let slice = grad.slice(at, rows)?;
            at += rows;
            if h == self.id {
                self.backward.push_back((d, slice));
            } else {
                let body = Grad {
                    iter: self.iter,
                    token: d,
                    rows,
                };
                let per_row = self.opts.submodels.output_bytes(level - 1);
                self.send_rows(ctx, h, &body, &slice, per_row)?;
            }
        }
        Ok(())
    }

    /// Books what the trainer finished.
    fn finish(&mut self, ctx: &mut RoleContext, done: Done) -> Result<()> {
        match done {
            Done::Forward {
                token,
                saved,
                output,
                loss_sum,
                grads,
                grad_in,
            } => {
                self.rows_done += token.batch();
                if let Some(o) = output {
                    self.outputs.insert(token.id, o);
                }
                if let Some(s) = saved {
                    self.saved.insert(token.id, s);
                }
                self.accumulate(token.level, grads);
                if let Some((g, deps)) = grad_in {
                    self.send_grads(ctx, token.level, g, deps)?;
                }
                let req = Request {
                    iter: self.iter,
                    completed: Some(token.id),
                    loss_sum,
                };
                ctx.send(RoleId::Coordinator, Message::strategy(&req)?);
            }
            Done::Backward {
                token,
                level,
                grads,
                grad_in,
            } => {
                self.accumulate(level, grads);
                if let Some((g, deps)) = grad_in {
                    self.send_grads(ctx, level, g, deps)?;
                }
                let msg = BackwardDone {
                    iter: self.iter,
                    token,
                };
                ctx.send(RoleId::Coordinator, Message::strategy(&msg)?);
            }
        }
        Ok(())
    }

    /// Applies the iteration's update once every sub-model is summed.
    fn apply(&mut self, ctx: &RoleContext) -> Result<()> {
        let mut reduced = std::mem::take(&mut self.reduced);
        if let Some(params) = self.model.params() {
            let mut grads: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.len()]).collect();
            for level in 0..self.levels() {
                if let Some(Some(Payload::Real(flat))) = reduced.remove(&level) {
                    let mut at = 0;
                    for g in &mut grads[self.opts.submodels.params(level)] {
                        let n = g.len();
                        g.copy_from_slice(&flat[at..at + n]);
                        at += n;
                    }
                }
            }
            self.model.apply(&grads, 1.0, ctx.now());
            if let (Some(r), Some(p)) = (&self.replica, self.model.params()) {
                r.set_params(p)?;
            }
        } else {
            self.model.bump(ctx.now());
        }
        Ok(())
    }
}

#[async_trait]
impl Worker for FelaWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        hold_optimizer_state(ctx, &job).await?;
        if let (Some(r), Some(p)) = (&self.replica, self.model.params()) {
            r.set_params(p)?;
        }
        let mut records = Vec::new();
        for iter in job.clocks() {
            self.iter = iter;
            ctx.set_iter(iter);
            let start = ctx.now();
            (self.rows_done, self.compute_s, self.loss) = (0, 0.0, f64::NAN);
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
            let tally = ClockTally {
                samples: self.rows_done,
                compute_s: self.compute_s,
                wait_s: 0.0,
                comm_s: 0.0,
                loss: self.loss,
                version_read: iter as i64,
                bytes_sent: 0,
            };
            records.push(close_clock(ctx, &job, iter, start, tally));
        }
        ctx.send(RoleId::Coordinator, Message::strategy(&self.stats)?);
        ctx.send(RoleId::Coordinator, Message::WorkerDone);
        Ok(WorkerReport {
            iterations: records,
            model: (self.id == 0).then(|| self.model.report(&job.layout)),
            state: None,
        })
    }
}
