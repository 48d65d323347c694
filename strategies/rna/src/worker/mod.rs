//! The RNA worker: a compute "thread" that never blocks on communication and a communication
//! "thread" that answers probes and takes part in every round's ring allreduce, as one event loop.
//!
//! Split by concern, one module each:
//!
//! - `compute`: the compute side, local steps on the latest parameters, timed without waiting
//!   for any round (and their profile, for RNA-H's groups);
//! - `round`: the communication side, probe replies, the round's contribution and ring
//!   allreduce, and its record;
//! - `averaging`: RNA-H's model averaging through the parameter server after a group round.
//!
//! This module holds the worker's state, its message dispatch and the event loop that drives
//! both sides.

mod averaging;
mod compute;
mod round;

use crate::buffer::GradBuffer;
use crate::options::{GroupSource, Merge, Resolved};
use crate::protocol::{self, Activate, Groups, Round, WorkerStats};
use compute::InFlight;
use concord_engine::collective::{Fusion, Group, LocalModel};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use round::{ActiveRound, Finished};
use std::collections::VecDeque;
use std::sync::Arc;

/// What a flat RNA worker carries from one round to the next beside its replica, for a
/// checkpoint: the gradients waiting in its buffer, the step its compute side is running (it
/// never waits for a round, so a cut finds one in flight), its step counter (the sample stream's
/// position) and the times and charges its next record starts from.
#[derive(serde::Serialize, serde::Deserialize)]
struct RnaWorkerState {
    updates: u64,
    buffer: GradBuffer,
    computing: Option<InFlight>,
    local_steps: u64,
    last_version: Option<u64>,
    round_start: f64,
    compute_since_round: f64,
    step_time_total: f64,
    apply_debt: f64,
    /// RNA-H: where the worker's group stands (absent in flat RNA).
    #[serde(default)]
    hier: Option<HierWorkerState>,
}

/// What an RNA-H worker carries across a checkpoint beside flat RNA's state: its group, its
/// profile so far, the base of its group's next change, and, for the first member of a group
/// whose model the run does not report, that group's model (groups train models of their own,
/// and the members of one hold the same).
#[derive(serde::Serialize, serde::Deserialize)]
struct HierWorkerState {
    group_id: u32,
    members: Vec<u32>,
    averaging: bool,
    pending_groups: Option<(u32, Vec<u32>)>,
    profiled_steps: u64,
    profiled_s: f64,
    group_base: Option<Vec<f32>>,
    sync_bytes: u64,
    group_model: Option<ModelState>,
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
            replica: job.replica(RoleId::Worker(id))?,
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
        let resumed = worker.job.resumed(RoleId::Worker(id));
        if let Some(cp) = &resumed {
            worker.restore(cp)?;
        }
        // The parameters stay in the replica's tensors, on its device, between steps.
        if let Some(replica) = &worker.replica {
            worker.model.keep_on(replica)?;
        }
        if worker.averaging && resumed.is_none() {
            worker.group_base = worker.delta_base()?;
        }
        Ok(worker)
    }

    /// Continues from checkpoint `cp`: this worker's own state, its group (RNA-H), and the
    /// replica of its group's first member (the members of a group hold the same after every
    /// round; flat RNA's group is every worker, its first member worker 0).
    fn restore(&mut self, cp: &RoleCheckpoint) -> Result<()> {
        let state: RnaWorkerState = cp.decode_state(RoleId::Worker(self.id), "RNA worker state")?;
        if let Some(h) = &state.hier {
            self.group_id = h.group_id;
            self.group = group_of(&h.members)?;
            self.averaging = h.averaging;
            self.pending_groups = match &h.pending_groups {
                Some((gid, members)) => Some((*gid, group_of(members)?)),
                None => None,
            };
            self.profiled_steps = h.profiled_steps;
            self.profiled_s = h.profiled_s;
            self.group_base = h.group_base.clone();
            self.sync_bytes = h.sync_bytes;
        }
        let held = self.group_model_at_checkpoint()?;
        self.model.restore(&self.job.layout, &held, state.updates)?;
        self.buffer = state.buffer;
        self.computing = state.computing;
        self.local_steps = state.local_steps;
        self.last_version = state.last_version;
        self.round_start = state.round_start;
        self.compute_since_round = state.compute_since_round;
        self.step_time_total = state.step_time_total;
        self.apply_debt = state.apply_debt;
        Ok(())
    }

    /// The model this worker's group held at the checkpoint: its first member's, which that
    /// member reported as the run's model or kept in its state.
    fn group_model_at_checkpoint(&self) -> Result<ModelState> {
        let RoleId::Worker(first) = self.group.member(0) else {
            return Err(EngineError::protocol(
                RoleId::Worker(self.id),
                "a group member that is not a worker",
            ));
        };
        let missing = || {
            EngineError::protocol(
                RoleId::Worker(self.id),
                format!("the checkpoint holds no replica of its group (worker {first}'s)"),
            )
        };
        let cp = self
            .job
            .resumed(RoleId::Worker(first))
            .ok_or_else(missing)?;
        if let Some(model) = cp.model {
            return Ok(model);
        }
        let state: RnaWorkerState = cp.decode_state(RoleId::Worker(first), "RNA worker state")?;
        state.hier.and_then(|h| h.group_model).ok_or_else(missing)
    }

    /// This worker's state after its last round, for a checkpoint.
    fn state(&mut self) -> Result<RnaWorkerState> {
        let hier = match self.opts.hierarchy {
            None => None,
            Some(_) => Some(self.hier_state()?),
        };
        Ok(RnaWorkerState {
            updates: self.model.updates(),
            buffer: std::mem::take(&mut self.buffer),
            computing: self.computing.take(),
            local_steps: self.local_steps,
            last_version: self.last_version,
            round_start: self.round_start,
            compute_since_round: self.compute_since_round,
            step_time_total: self.step_time_total,
            apply_debt: self.apply_debt,
            hier,
        })
    }

    /// RNA-H's part of this worker's state: the group's model only where this worker is its
    /// group's first member and the run does not report it.
    fn hier_state(&mut self) -> Result<HierWorkerState> {
        let keeps_model = self.group.member(0) == RoleId::Worker(self.id) && !self.reports_model();
        let group_model = if keeps_model {
            Some(self.model.report(&self.job.layout)?.values_only())
        } else {
            None
        };
        Ok(HierWorkerState {
            group_id: self.group_id,
            members: worker_ids(&self.group),
            averaging: self.averaging,
            pending_groups: self
                .pending_groups
                .as_ref()
                .map(|(gid, g)| (*gid, worker_ids(g))),
            profiled_steps: self.profiled_steps,
            profiled_s: self.profiled_s,
            group_base: self.group_base.clone(),
            sync_bytes: self.sync_bytes,
            group_model,
        })
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
    fn delta_base(&mut self) -> Result<Option<Vec<f32>>> {
        let delta = self
            .opts
            .hierarchy
            .as_ref()
            .is_some_and(|h| h.merge == Merge::Delta);
        if !delta {
            return Ok(None);
        }
        let values = self.model.values()?;
        Ok(values.map(|p| p.into_iter().flatten().collect()))
    }

    /// Dispatches one message: a collective hop, a probe, an activation or the new groups.
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
        let clocks = self.job.clocks();
        let rounds = clocks.end - clocks.start;
        while (self.records.len() as u64) < rounds {
            if self.apply_debt > 0.0 {
                let (t, debt) = (ctx.now(), std::mem::take(&mut self.apply_debt));
                ctx.charge_modeled(debt).await;
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
                    self.group_base = self.delta_base()?;
                }
                if let Some(a) = self.pending_activations.pop_front() {
                    // Joining the ring fuses the contribution into its buffer: a copy first.
                    let fuse = ctx
                        .device()
                        .tensor_copy_seconds(self.fusion.len() as u64 * 4);
                    ctx.charge_modeled(fuse).await;
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
        let state = RoleState::encode(&self.state()?)?;
        Ok(WorkerReport {
            state: Some(state),
            iterations: std::mem::take(&mut self.records),
            model: self
                .reports_model()
                .then(|| self.model.report(&self.job.layout))
                .transpose()?,
        })
    }
}

/// Workers `members` as a collective group.
fn group_of(members: &[u32]) -> Result<Group> {
    Group::new(members.iter().map(|&w| RoleId::Worker(w)).collect())
}

/// The worker ids of `group`'s members, in rank order.
fn worker_ids(group: &Group) -> Vec<u32> {
    group
        .members()
        .iter()
        .filter_map(|m| match m {
            RoleId::Worker(w) => Some(*w),
            _ => None,
        })
        .collect()
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
    Ok((gid as u32, group_of(members)?))
}
