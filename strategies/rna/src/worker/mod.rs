//! The RNA worker: a compute "thread" that never blocks on communication and a communication
//! "thread" that answers probes and takes part in every round's ring allreduce, as one event loop.

use crate::buffer::{Entry, GradBuffer};
use crate::hier::{is_sync_op, sync_op, tree, PUSH_WITH_BASE};
use crate::options::{GroupSource, Merge, Resolved};
use crate::protocol::{self, Activate, Groups, Profile, Round, RoundDone, WorkerStats};
use concord_engine::collective::{digest, is_hop, Fusion, Group, LocalModel, RingAllreduce};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// A gradient being computed: ready at `ready_at`.
struct InFlight {
    ready_at: f64,
    started_at: f64,
    entry: Entry,
}

/// The round in progress.
struct ActiveRound {
    round: u64,
    initiator: u32,
    ring: RingAllreduce,
    started_at: f64,
    samples: u64,
    loss: f64,
    oldest: i64,
}

/// A round whose ring is done and applied, waiting for its model averaging (RNA-H) before it is
/// recorded.
struct Finished {
    round: u64,
    initiator: u32,
    started_at: f64,
    samples: u64,
    loss: f64,
    oldest: i64,
    weight: f64,
    bytes_sent: u64,
}

/// One RNA worker (also eager-SGD's, with one probe per round; RNA-H's with `hierarchy`).
pub struct RnaWorker {
    id: WorkerId,
    job: Arc<Job>,
    opts: Resolved,
    replica: Option<Replica>,
    model: LocalModel,
    fusion: Fusion,
    group: Group,
    buffer: GradBuffer,
    computing: Option<InFlight>,
    local_steps: u64,
    /// Version the last started gradient was computed on (wait-for-all computes one per version).
    last_version: Option<u64>,
    pending_probe: Option<u64>,
    pending_activations: VecDeque<Activate>,
    early: Vec<Envelope>,
    active: Option<ActiveRound>,
    records: Vec<IterRecord>,
    round_start: f64,
    compute_since_round: f64,
    stats: WorkerStats,
    step_time_total: f64,
    /// Seconds of optimizer update to charge before the next event.
    apply_debt: f64,
    /// The worker's group id (0 in flat mode).
    group_id: u32,
    /// Whether the final groups are in place and rounds end with a model averaging (RNA-H; with
    /// profiled groups only after the flat warm-up).
    averaging: bool,
    /// This worker's group (id, members) formed by the controller, applied once no round is in
    /// progress; probes of the new group's rounds may arrive before that.
    pending_groups: Option<(u32, Group)>,
    /// Local steps finished and their compute seconds, for the profile (RNA-H).
    profiled_steps: u64,
    profiled_s: f64,
    /// Element count of each parameter tensor (unflattening averaged models).
    sizes: Vec<usize>,
    /// A round waiting for its model averaging (RNA-H).
    sync_pending: Option<Finished>,
    /// Averaging hops that arrived outside an averaging.
    sync_early: Vec<Envelope>,
    /// Bytes sent by this worker for averagings since the last record.
    sync_bytes: u64,
    /// The group's model when its groups took over, until its first averaging: the base of its
    /// first change under `merge = "delta"`.
    group_base: Option<Vec<f32>>,
}

impl RnaWorker {
    /// Worker `id` of `job` under `opts`.
    pub fn new(job: Arc<Job>, id: WorkerId, opts: Resolved) -> Result<RnaWorker> {
        let sizes: Vec<usize> = job.layout.params().iter().map(|p| p.elems()).collect();
        let mut group = Group::workers(job.config.workers)?;
        let mut group_id = 0;
        let mut averaging = false;
        if let Some(GroupSource::Explicit(groups)) = opts.hierarchy.as_ref().map(|h| &h.groups) {
            (group_id, group) = own_group(groups, id)?;
            averaging = true;
        }
        let mut worker = RnaWorker {
            id,
            replica: Replica::new(&job.model)?,
            model: LocalModel::new(&job),
            fusion: Fusion::new(sizes.clone(), 1, opts.bucket_elems),
            group,
            opts,
            job,
            buffer: GradBuffer::default(),
            computing: None,
            local_steps: 0,
            last_version: None,
            pending_probe: None,
            pending_activations: VecDeque::new(),
            early: Vec::new(),
            active: None,
            records: Vec::new(),
            round_start: 0.0,
            compute_since_round: 0.0,
            stats: WorkerStats::default(),
            step_time_total: 0.0,
            apply_debt: 0.0,
            group_id,
            averaging,
            pending_groups: None,
            profiled_steps: 0,
            profiled_s: 0.0,
            sizes,
            sync_pending: None,
            sync_early: Vec::new(),
            sync_bytes: 0,
            group_base: None,
        };
        if worker.averaging {
            worker.group_base = worker.delta_base();
        }
        Ok(worker)
    }

    /// P of the learning-rate rule γ_k = (Σw / P) · lr. Flat RNA: every worker. RNA-H merging by
    /// average: the group's size — averaging N groups' models counts each group's step 1/N, so a
    /// full group round takes the job's whole rate. Merging by delta: every worker — each
    /// group's change enters the global model whole, so a gradient must move it by lr / P, the
    /// thesis's per-worker γ (γ_k = Σw · γ).
    fn lr_workers(&self) -> usize {
        match &self.opts.hierarchy {
            Some(h) if h.merge == Merge::Delta => self.job.config.workers as usize,
            _ => self.group.size(),
        }
    }

    /// Whether this worker's model is the one the run evaluates: worker 0's in flat RNA (every
    /// replica is the same); under RNA-H that of group 0's first member — with profiled groups
    /// the fastest group (they come fastest first, members ascending), whose model is the most
    /// trained; with given groups the first listed. Worker 0 may be in a slow group (the
    /// thesis's testbed puts its K80s first).
    fn reports_model(&self) -> bool {
        self.group_id == 0 && self.group.member(0) == RoleId::Worker(self.id)
    }

    /// The model the groups start from, kept for the first push under `merge = "delta"`.
    fn delta_base(&self) -> Option<Vec<f32>> {
        let delta = self
            .opts
            .hierarchy
            .as_ref()
            .is_some_and(|h| h.merge == Merge::Delta);
        if !delta {
            return None;
        }
        self.model
            .params()
            .map(|p| p.iter().flatten().copied().collect())
    }

    /// Starts the next local step on a snapshot of the latest parameters, if allowed.
    async fn maybe_start_compute(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let version = self.model.updates();
        if self.computing.is_some()
            || (self.opts.wait_for_all && self.last_version == Some(version))
        {
            return Ok(());
        }
        let job = self.job.clone();
        let (n, b) = (job.config.workers as u64, job.config.batch);
        let step = self.local_steps;
        ctx.set_iter(step);
        let work = Work {
            flops_per_sample: job.model.training_flops_per_sample(),
            batch: b as f64,
        };
        let started_at = ctx.now();
        let at = StepAt {
            clock: step,
            // Local step j of worker i reads stream slice j·N + i: with one step per round this
            // is exactly the allreduce baseline's sampling.
            stream_offset: (step * n + self.id as u64) * b,
            batch: b,
        };
        let params = self.model.params().unwrap_or_default();
        let ((loss, grads), ready_at) = train_step(
            ctx,
            &job,
            self.replica.as_ref(),
            params,
            at,
            work,
            Charge::Deferred,
        )
        .await?;
        self.local_steps += 1;
        self.last_version = Some(version);
        self.computing = Some(InFlight {
            ready_at,
            started_at,
            entry: Entry {
                grads,
                version,
                samples: b,
                loss: if loss.is_finite() { loss } else { 0.0 },
            },
        });
        Ok(())
    }

    /// The in-flight gradient is ready: write it (WriteOp) and answer a waiting probe.
    fn finish_compute(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if let Some(done) = self.computing.take() {
            let took = done.ready_at - done.started_at;
            self.compute_since_round += took;
            self.step_time_total += took;
            self.buffer.write(done.entry);
            self.profile(ctx, took)?;
            self.answer_probe(ctx)?;
        }
        Ok(())
    }

    /// RNA-H with profiled groups: reports the mean step time after the profiling warm-up.
    fn profile(&mut self, ctx: &mut RoleContext, took: f64) -> Result<()> {
        let Some(GroupSource::Profiled { profile_steps, .. }) =
            self.opts.hierarchy.as_ref().map(|h| &h.groups)
        else {
            return Ok(());
        };
        if self.profiled_steps >= *profile_steps {
            return Ok(());
        }
        self.profiled_steps += 1;
        self.profiled_s += took;
        if self.profiled_steps == *profile_steps {
            let body = Profile {
                mean_step_s: self.profiled_s / self.profiled_steps as f64,
            };
            ctx.send(
                RoleId::Coordinator,
                Message::custom(protocol::PROFILE, &body)?,
            );
        }
        Ok(())
    }

    fn answer_probe(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if let Some(k) = self.pending_probe {
            if self.buffer.ready(k, self.opts.eta) {
                self.pending_probe = None;
                // A probe of the new groups' first round can come while the last warm-up round
                // is still running: answer it for the new group.
                let group = self.pending_groups.as_ref().map_or(self.group_id, |g| g.0);
                let body = Round { group, round: k };
                ctx.send(
                    RoleId::Coordinator,
                    Message::custom(protocol::PROBE_REPLY, &body)?,
                );
            }
        }
        Ok(())
    }

    /// External activation: contribute (possibly null) and join the ring of round `a.round`.
    fn start_round(&mut self, ctx: &mut RoleContext, a: Activate) -> Result<()> {
        let k = a.round.round;
        if k != self.model.updates() {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "activated for round {k} at version {}",
                    self.model.updates()
                ),
            ));
        }
        if self.pending_probe.is_some_and(|p| p <= k) {
            self.pending_probe = None;
        }
        let c = self.buffer.take(k, self.opts.eta, self.opts.accumulate);
        self.stats.dropped += c.dropped;
        for &s in &c.staleness {
            let s = s as usize;
            if self.stats.staleness.len() <= s {
                self.stats.staleness.resize(s + 1, 0);
            }
            self.stats.staleness[s] += 1;
        }
        let oldest = c.staleness.iter().max().map_or(-1, |s| (k - s) as i64);
        let buf = match (&c.grads, self.model.params()) {
            (Some(g), _) => self.fusion.fuse(g, &[c.weight]),
            // A null contribution: zeros of the same shape (and w = 0).
            (None, Some(params)) => {
                let zeros: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.len()]).collect();
                self.fusion.fuse(&zeros, &[0.0])
            }
            (None, None) => self.fusion.fuse_virtual(),
        };
        let ring = RingAllreduce::start(ctx, &self.group, k, buf, self.fusion.buckets())?;
        self.active = Some(ActiveRound {
            round: k,
            initiator: a.initiator,
            ring,
            started_at: ctx.now(),
            samples: c.samples,
            loss: c.loss,
            oldest,
        });
        // Hops the left neighbour sent before this worker was activated.
        let early = std::mem::take(&mut self.early);
        for env in early {
            self.on_collective(ctx, env)?;
        }
        self.complete_round_if_done(ctx)
    }

    fn on_collective(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        if matches!(&env.msg, Message::Collective { op, .. } if is_sync_op(*op)) {
            self.sync_early.push(env);
            return Ok(());
        }
        match self.active.as_mut() {
            Some(a) if a.ring.wants(&env) => a.ring.on_message(ctx, env),
            _ => {
                self.early.push(env);
                Ok(())
            }
        }
    }

    fn complete_round_if_done(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if !self.active.as_ref().is_some_and(|a| a.ring.is_done()) {
            return Ok(());
        }
        let Some(a) = self.active.take() else {
            return Ok(());
        };
        let now = ctx.now();
        let bytes_sent = a.ring.bytes_sent();
        ctx.trace_span("allreduce", "comm", a.started_at, now);
        let sum = a.ring.into_result();
        let weight = self
            .model
            .apply_reduced(&self.fusion, &sum, self.lr_workers(), now);
        let apply_s = ctx.device().work_seconds(
            self.job.config.optimizer.flops_per_elem() * (self.fusion.len() - 1) as f64,
        );
        self.apply_debt += apply_s;
        let done = Finished {
            round: a.round,
            initiator: a.initiator,
            started_at: a.started_at,
            samples: a.samples,
            loss: a.loss,
            oldest: a.oldest,
            weight,
            bytes_sent,
        };
        match &self.opts.hierarchy {
            Some(h) if self.averaging && (a.round + 1).is_multiple_of(h.sync_period) => {
                self.sync_pending = Some(done);
                Ok(())
            }
            _ => self.finish_round(ctx, done),
        }
    }

    /// Records a round (after its averaging, in RNA-H) and reports it to the controller.
    fn finish_round(&mut self, ctx: &mut RoleContext, a: Finished) -> Result<()> {
        let now = ctx.now();
        if let Some(p) = self.model.params() {
            self.stats.digests.push(digest(p));
        }
        if a.initiator == self.id {
            let body = RoundDone {
                round: Round {
                    group: self.group_id,
                    round: a.round,
                },
                weight: a.weight,
            };
            ctx.send(
                RoleId::Coordinator,
                Message::custom(protocol::ROUND_DONE, &body)?,
            );
        }
        self.records.push(IterRecord {
            clock: a.round,
            start_s: self.round_start,
            end_s: now,
            wall_s: ctx.wall_now(),
            samples: a.samples,
            compute_s: self.compute_since_round,
            wait_s: 0.0,
            comm_s: now - a.started_at,
            loss: a.loss,
            version_read: a.oldest,
            bytes_sent: a.bytes_sent + std::mem::take(&mut self.sync_bytes),
        });
        self.job.observe(self.id, a.round + 1);
        self.round_start = now;
        self.compute_since_round = 0.0;
        Ok(())
    }

    /// RNA-H model averaging after round `a.round`: the initiator pushes the group's parameters
    /// to server 0 and pulls the mean of the groups' latest models, then broadcasts it to the
    /// group along a binomial tree; every member overwrites its parameters (optimizer state kept).
    /// The group's variables are locked meanwhile: no round starts until it is done.
    async fn sync(&mut self, ctx: &mut RoleContext, a: &Finished) -> Result<()> {
        let op = sync_op(self.group_id, a.round);
        let t0 = ctx.now();
        let p = self.group.size();
        let rank = self
            .group
            .rank_of(RoleId::Worker(self.id))
            .ok_or_else(|| EngineError::protocol(ctx.id(), "averages with a group it is not in"))?;
        let root = self
            .group
            .rank_of(RoleId::Worker(a.initiator))
            .ok_or_else(|| {
                EngineError::protocol(
                    ctx.id(),
                    format!("initiator {} is not in the group", a.initiator),
                )
            })?;
        let (parent, children) = tree(rank, root, p);
        let msg_of = |data: Payload| Message::Collective {
            op,
            part: 0,
            step: 0,
            data,
        };
        let from = match parent {
            None => {
                let elems = self.sizes.iter().sum::<usize>() as u64;
                let (mine, part) = match (self.model.params(), self.group_base.as_ref()) {
                    // The group's first push under `delta`: its parameters, then its base.
                    (Some(params), Some(base)) => {
                        let mut v: Vec<f32> = params.iter().flatten().copied().collect();
                        v.extend_from_slice(base);
                        (Payload::Real(v), PUSH_WITH_BASE)
                    }
                    (Some(params), None) => {
                        (Payload::Real(params.iter().flatten().copied().collect()), 0)
                    }
                    (None, _) => (Payload::Virtual { elems }, 0),
                };
                let m = Message::Collective {
                    op,
                    part,
                    step: 0,
                    data: mine,
                };
                self.sync_bytes += m.wire_bytes();
                ctx.send(RoleId::Server(0), m);
                RoleId::Server(0)
            }
            Some(q) => self.group.member(q),
        };
        let env = match self
            .sync_early
            .iter()
            .position(|e| is_hop(e, from, op, 0, 0))
        {
            Some(i) => self.sync_early.remove(i),
            None => ctx.recv_matching(|e| is_hop(e, from, op, 0, 0)).await?,
        };
        let Message::Collective { data, .. } = env.msg else {
            return Err(EngineError::protocol(
                ctx.id(),
                "averaging hop without data",
            ));
        };
        for c in children {
            let m = msg_of(data.clone());
            self.sync_bytes += m.wire_bytes();
            ctx.send(self.group.member(c), m);
        }
        if let (Payload::Real(flat), Some(_)) = (&data, self.model.params()) {
            if flat.len() != self.sizes.iter().sum::<usize>() {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("averaged model of {} elements", flat.len()),
                ));
            }
            let mut rest = flat.as_slice();
            let mut values = Vec::with_capacity(self.sizes.len());
            for &n in &self.sizes {
                let (head, tail) = rest.split_at(n);
                values.push(head.to_vec());
                rest = tail;
            }
            self.model.set_params(values, ctx.now());
        }
        self.group_base = None;
        ctx.trace_span("ps-average", "comm", t0, ctx.now());
        Ok(())
    }

    fn on_message(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        if matches!(env.msg, Message::Collective { .. }) {
            self.on_collective(ctx, env)?;
            return self.complete_round_if_done(ctx);
        }
        if let Some(r) = env.msg.decode_custom::<Round>(protocol::PROBE)? {
            self.pending_probe = Some(r.round);
            return self.answer_probe(ctx);
        }
        if let Some(a) = env.msg.decode_custom::<Activate>(protocol::ACTIVATE)? {
            self.pending_activations.push_back(a);
            return Ok(());
        }
        if let Some(g) = env.msg.decode_custom::<Groups>(protocol::GROUPS)? {
            self.pending_groups = Some(own_group(&g.groups, self.id)?);
            return Ok(());
        }
        Err(EngineError::protocol(
            ctx.id(),
            format!("unexpected message from {}: {:?}", env.from, env.msg),
        ))
    }
}

#[async_trait]
impl Worker for RnaWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        hold_optimizer_state(ctx, &job).await?;
        let rounds = self.job.config.iterations;
        while (self.records.len() as u64) < rounds {
            if self.apply_debt > 0.0 {
                let (t, debt) = (ctx.now(), std::mem::take(&mut self.apply_debt));
                ctx.sleep(debt).await;
                ctx.trace_span("apply", "compute", t, ctx.now());
            }
            if let Some(done) = self.sync_pending.take() {
                self.sync(ctx, &done).await?;
                self.finish_round(ctx, done)?;
                continue;
            }
            if self.active.is_none() {
                // The controller sends the groups before any activation of a group round.
                if let Some(g) = self.pending_groups.take() {
                    (self.group_id, self.group) = g;
                    self.averaging = true;
                    self.group_base = self.delta_base();
                }
                if let Some(a) = self.pending_activations.pop_front() {
                    self.start_round(ctx, a)?;
                    continue;
                }
            }
            self.maybe_start_compute(ctx).await?;
            let deadline = self
                .computing
                .as_ref()
                .map_or(f64::INFINITY, |c| c.ready_at);
            match ctx.recv_until(deadline).await? {
                Some(env) => self.on_message(ctx, env)?,
                None => self.finish_compute(ctx)?,
            }
        }
        self.stats.mean_step_s = if self.local_steps > 0 {
            self.step_time_total / self.local_steps as f64
        } else {
            0.0
        };
        self.stats.group = self.group_id;
        self.stats.worker = self.id;
        self.stats.evaluated = self.reports_model();
        ctx.send(
            RoleId::Coordinator,
            Message::custom(protocol::WORKER_STATS, &self.stats)?,
        );
        Ok(WorkerReport {
            iterations: std::mem::take(&mut self.records),
            model: self
                .reports_model()
                .then(|| self.model.report(&self.job.layout)),
        })
    }
}

/// The group holding worker `id`: its index and its members as a collective group.
fn own_group(groups: &[Vec<u32>], id: WorkerId) -> Result<(u32, Group)> {
    let (gid, members) = groups
        .iter()
        .enumerate()
        .find(|(_, g)| g.contains(&id))
        .ok_or_else(|| {
            EngineError::protocol(RoleId::Worker(id), "is in none of the RNA-H groups")
        })?;
    let group = Group::new(members.iter().map(|&w| RoleId::Worker(w)).collect())?;
    Ok((gid as u32, group))
}
