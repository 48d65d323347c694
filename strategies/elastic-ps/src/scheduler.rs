//! The PSLD scheduler (the extended PS-Lite scheduler, §1.13): collects telemetry, runs the
//! load-distribution policy, launches and retires servers, and drives reassignment epochs.
//!
//! One epoch at a time (§1.10): pick the switch step `k` ahead of every worker
//! (`completed + ⌈RTT/T_iter⌉ + 1`), send `REASSIGN_CMD{k}` to the workers and — overlapped mode —
//! `MIGRATE_PLAN{k}` to the servers, which move blocks as soon as they reach version `k`. Workers
//! finish iteration `k`, block and send `REASSIGN_REQ`; after-barrier mode sends the plans only
//! now. Once every worker has asked and every affected server reports `MIGRATE_DONE`, the
//! scheduler broadcasts `RESUME` with the new map. Membership changes arriving meanwhile wait for
//! the open epoch to close.

use crate::options::{MigrationMode, Resolved};
use crate::policy::PolicyState;
use crate::policy::{LoadPolicy, Proposal};
use crate::protocol::{
    self, tag, Launch, Leave, Membership, MigrateDone, MigratePlan, PerfReport, Progress,
    ReassignCmd, ReassignReq, Resume, ShutdownOk,
};
use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Modeled FLOPs of Algorithm 3 per (block, candidate server): a cost evaluation.
const ALGO_FLOPS_PER_BLOCK_SERVER: f64 = 50.0;

/// A membership change waiting for the scheduler.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Change {
    Add(ServerId),
    Remove(ServerId),
}

/// The epoch in progress.
struct OpenEpoch {
    epoch: u64,
    owners: Vec<ServerId>,
    switch_after: Clock,
    plans: BTreeMap<ServerId, MigratePlan>,
    plans_sent: bool,
    asked: BTreeSet<WorkerId>,
    first_ask: Option<f64>,
    done: BTreeSet<ServerId>,
    change: Option<Change>,
}

/// What the scheduler measured, for the run summary.
#[derive(Default, Serialize, Deserialize)]
struct Tally {
    epochs: u64,
    blocks_moved: u64,
    bytes_migrated: u64,
    suspensions: Vec<f64>,
    superior_sizes: Vec<usize>,
    scale_outs: u64,
    removals: u64,
}

/// What the scheduler carries across a checkpoint (a cut holds no epoch open): the placement,
/// the servers in the job and on their way in or out, the policy's history, the progress it
/// estimates the iteration time from, and its tally.
#[derive(Default, Serialize, Deserialize)]
struct SchedulerState {
    /// Server of each block.
    owners: Vec<ServerId>,
    active: BTreeSet<ServerId>,
    next_standby: ServerId,
    launching: Option<ServerId>,
    /// Servers told to leave that have not yet announced it.
    leaving: BTreeSet<ServerId>,
    /// Membership changes an epoch could not take before this stretch of the job ended: the
    /// next stretch (after a checkpoint) takes them first.
    deferred: Vec<Change>,
    /// Periods of samples seen since the last server joined (no scale-out before one).
    since_join: u64,
    /// Throughput (s/iteration) before the last scale-out, and periods since it.
    scale_check: Option<(f64, u64)>,
    scale_out_blocked: bool,
    reports: BTreeMap<u64, Vec<PerfReport>>,
    completed: Option<Clock>,
    completed_at: f64,
    iteration_s: f64,
    rtt_s: f64,
    epoch: u64,
    queued: VecDeque<Change>,
    adds: VecDeque<u64>,
    removals: VecDeque<(u64, ServerId)>,
    tally: Tally,
}

/// A checkpoint of the scheduler: its own state and its policy's.
#[derive(Serialize, Deserialize)]
struct Saved {
    policy: PolicyState,
    scheduler: SchedulerState,
}

/// The PSLD scheduler role.
pub struct Scheduler {
    job: Arc<Job>,
    opts: Resolved,
    policy: LoadPolicy,
    block_bytes: Vec<u64>,
    /// What a checkpoint carries.
    st: SchedulerState,
    open: Option<OpenEpoch>,
    workers_done: u32,
}

impl Scheduler {
    /// The scheduler of `job`.
    pub fn new(job: Arc<Job>, opts: Resolved) -> Scheduler {
        let blocks = job.layout.blocks();
        let owners: Vec<ServerId> = blocks.iter().map(|b| job.layout.owner(b.id)).collect();
        let block_bytes: Vec<u64> = blocks.iter().map(|b| b.bytes()).collect();
        let policy = LoadPolicy::new(&opts, block_bytes.clone(), job.config.seed);
        let st = SchedulerState {
            owners,
            active: (0..opts.initial_servers).collect(),
            next_standby: opts.initial_servers,
            adds: opts.add_server_at.iter().copied().collect(),
            removals: opts
                .remove_servers
                .iter()
                .map(|r| (r.at_iteration, r.server))
                .collect(),
            since_join: u64::MAX,
            ..SchedulerState::default()
        };
        Scheduler {
            job,
            opts,
            policy,
            block_bytes,
            st,
            open: None,
            workers_done: 0,
        }
    }

    /// The scheduler of `job`, continuing from its checkpoint when the job resumes from one.
    pub fn for_job(job: Arc<Job>, opts: Resolved) -> Result<Scheduler> {
        let saved = job.resumed(RoleId::Coordinator);
        let mut scheduler = Scheduler::new(job, opts);
        if let Some(cp) = saved {
            let saved: Saved = cp.decode_state(RoleId::Coordinator, "PSLD scheduler state")?;
            scheduler.policy.restore(saved.policy);
            scheduler.st = saved.scheduler;
        }
        Ok(scheduler)
    }

    /// What to carry across a checkpoint; `None` with an epoch open (a cut holds none: epochs
    /// end before the stretch they start in does).
    fn saved(&mut self) -> Option<Saved> {
        if self.open.is_some() {
            return None;
        }
        Some(Saved {
            policy: self.policy.state(),
            scheduler: std::mem::take(&mut self.st),
        })
    }

    /// At the start of a stretch after a checkpoint: what the last one left under way goes on.
    /// A server told to leave is told again (its announcement may have missed the last stretch),
    /// and membership changes no epoch could take are taken now. (A server starting up registers
    /// when it is up, in whichever stretch that is.)
    async fn continue_cut(&mut self, ctx: &mut RoleContext) -> Result<()> {
        for &server in &self.st.leaving {
            ctx.send(
                RoleId::Server(server),
                protocol::encode(tag::LEAVE, &Leave)?,
            );
        }
        for change in std::mem::take(&mut self.st.deferred) {
            self.on_change(ctx, change).await?;
        }
        Ok(())
    }

    fn workers(&self) -> u32 {
        self.job.config.workers
    }

    fn servers(&self) -> Vec<ServerId> {
        self.st.active.iter().copied().collect()
    }

    fn on_progress(&mut self, ctx: &RoleContext, p: Progress) {
        let now = ctx.now();
        self.st.rtt_s = self.st.rtt_s.max(2.0 * (now - p.sent_at));
        if self.st.completed.is_none_or(|c| p.completed > c) {
            if let Some(c) = self.st.completed {
                let dt = (now - self.st.completed_at) / (p.completed - c) as f64;
                self.st.iteration_s = if self.st.iteration_s > 0.0 {
                    0.8 * self.st.iteration_s + 0.2 * dt
                } else {
                    dt
                };
            }
            self.st.completed = Some(p.completed);
            self.st.completed_at = now;
        }
    }

    /// Scheduled launches and departures due at the current progress.
    fn schedule(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let Some(done) = self.st.completed else {
            return Ok(());
        };
        while self.st.adds.front().is_some_and(|&at| done + 1 >= at) {
            self.st.adds.pop_front();
            self.launch(ctx)?;
        }
        while self
            .st
            .removals
            .front()
            .is_some_and(|&(at, _)| done + 1 >= at)
        {
            if let Some((_, server)) = self.st.removals.pop_front() {
                self.st.leaving.insert(server);
                ctx.send(
                    RoleId::Server(server),
                    protocol::encode(tag::LEAVE, &Leave)?,
                );
            }
        }
        Ok(())
    }

    /// Starts one standby server; it registers with `ADD_SERVER` once up.
    fn launch(&mut self, ctx: &mut RoleContext) -> Result<bool> {
        if self.st.next_standby >= self.opts.max_servers {
            return Ok(false);
        }
        let id = self.st.next_standby;
        self.st.next_standby += 1;
        self.st.launching = Some(id);
        let msg = protocol::encode(
            tag::LAUNCH,
            &Launch {
                start_s: self.opts.server_start_s,
            },
        )?;
        ctx.send(RoleId::Server(id), msg);
        Ok(true)
    }

    async fn on_report(&mut self, ctx: &mut RoleContext, r: PerfReport) -> Result<()> {
        let period = r.period;
        let list = self.st.reports.entry(period).or_default();
        list.push(r);
        if list.len() < self.workers() as usize {
            return Ok(());
        }
        let reports = self.st.reports.remove(&period).unwrap_or_default();
        let iteration_s = reports.iter().map(|r| r.iteration_s).fold(0.0, f64::max);
        let samples: Vec<_> = reports.into_iter().map(|r| r.samples).collect();
        self.st.since_join = self.st.since_join.saturating_add(1);
        // Did the last scale-out pay off (§1.9: stop scaling out if not ≥ 2% faster)?
        if let Some((before, periods)) = self.st.scale_check {
            if periods + 1 >= 2 && self.st.launching.is_none() && self.st.since_join >= 2 {
                if iteration_s > 0.98 * before {
                    self.st.scale_out_blocked = true;
                }
                self.st.scale_check = None;
            } else {
                self.st.scale_check = Some((before, periods + 1));
            }
        }
        let force = self.opts.force_reassign_every > 0
            && (period + 1).is_multiple_of(self.opts.force_reassign_every);
        let servers = self.servers();
        let proposal = self
            .policy
            .on_period(&samples, &self.st.owners, &servers, force);
        if self.open.is_some() {
            return Ok(());
        }
        if let Some(p) = proposal {
            // A4: go on with the small superior set now, and also ask for one more server;
            // its arrival triggers another assignment.
            if p.scale_out
                && self.opts.scale_out
                && !self.st.scale_out_blocked
                && self.st.launching.is_none()
                && self.st.since_join >= 1
                && self.launch(ctx)?
            {
                self.st.tally.scale_outs += 1;
                self.st.scale_check = Some((iteration_s, 0));
            }
            self.begin(ctx, p, None).await?;
        }
        Ok(())
    }

    /// Opens an epoch moving to `proposal` (with a joining or leaving server).
    async fn begin(
        &mut self,
        ctx: &mut RoleContext,
        proposal: Proposal,
        change: Option<Change>,
    ) -> Result<()> {
        // Algorithm 3 runs on the scheduler while training goes on.
        let flops = ALGO_FLOPS_PER_BLOCK_SERVER
            * self.block_bytes.len() as f64
            * self.st.active.len().max(1) as f64;
        ctx.compute("psld.assign", Work::fixed(flops), || ()).await;
        self.st.tally.superior_sizes.push(proposal.superior.len());
        let Some(completed) = self.st.completed else {
            return Ok(());
        };
        // Where every worker is now, and a step far enough ahead for the command to arrive.
        let ahead = if self.st.iteration_s > 0.0 {
            ((ctx.now() - self.st.completed_at) / self.st.iteration_s).floor() as u64
        } else {
            0
        };
        let margin = if self.st.iteration_s > 0.0 {
            (self.st.rtt_s / self.st.iteration_s).ceil() as u64
        } else {
            1
        };
        let switch_after = completed + ahead + margin + 1;
        let end = self.job.clocks().end;
        if switch_after + 1 >= end {
            // Too close to the end of the run to be worth a switch; at the end of a stretch
            // before a checkpoint (a cut holds no epoch open), the next stretch takes a
            // membership change first.
            if let (Some(change), true) = (change, end < self.job.config.iterations) {
                self.st.deferred.push(change);
            }
            return Ok(());
        }
        let mut plans: BTreeMap<ServerId, MigratePlan> = BTreeMap::new();
        let mut moved = 0u64;
        let mut bytes = 0u64;
        self.st.epoch += 1;
        let epoch = self.st.epoch;
        for (b, (&old, &new)) in self.st.owners.iter().zip(&proposal.owners).enumerate() {
            if old == new {
                continue;
            }
            let block = b as BlockId;
            let plan_for = || MigratePlan {
                epoch,
                at_version: switch_after as i64,
                out: Vec::new(),
                inc: Vec::new(),
            };
            plans
                .entry(old)
                .or_insert_with(plan_for)
                .out
                .push((block, new));
            plans
                .entry(new)
                .or_insert_with(plan_for)
                .inc
                .push((block, old));
            moved += 1;
            bytes += self.block_bytes[b];
        }
        if moved == 0 && change.is_none() {
            self.st.epoch -= 1;
            return Ok(());
        }
        self.st.tally.epochs += 1;
        self.st.tally.blocks_moved += moved;
        self.st.tally.bytes_migrated += bytes;
        let cmd = ReassignCmd {
            epoch,
            switch_after,
        };
        for w in 0..self.workers() {
            ctx.send(
                RoleId::Worker(w),
                protocol::encode(tag::REASSIGN_CMD, &cmd)?,
            );
        }
        let mut open = OpenEpoch {
            epoch,
            owners: proposal.owners,
            switch_after,
            plans,
            plans_sent: false,
            asked: BTreeSet::new(),
            first_ask: None,
            done: BTreeSet::new(),
            change,
        };
        if self.opts.migration == MigrationMode::Overlapped {
            Self::send_plans(ctx, &mut open)?;
        }
        self.open = Some(open);
        Ok(())
    }

    fn send_plans(ctx: &mut RoleContext, open: &mut OpenEpoch) -> Result<()> {
        for (&s, plan) in &open.plans {
            ctx.send(
                RoleId::Server(s),
                protocol::encode(tag::MIGRATE_PLAN, plan)?,
            );
        }
        open.plans_sent = true;
        Ok(())
    }

    async fn on_ask(&mut self, ctx: &mut RoleContext, w: WorkerId, req: ReassignReq) -> Result<()> {
        let Some(open) = &mut self.open else {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("worker {w} asked for epoch {} but none is open", req.epoch),
            ));
        };
        if req.epoch != open.epoch || req.completed != open.switch_after {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "worker {w} blocked after iteration {} in epoch {}, expected {} in epoch {}",
                    req.completed, req.epoch, open.switch_after, open.epoch
                ),
            ));
        }
        open.asked.insert(w);
        open.first_ask.get_or_insert(ctx.now());
        if open.asked.len() as u32 == self.job.config.workers && !open.plans_sent {
            Self::send_plans(ctx, open)?;
        }
        self.maybe_resume(ctx).await
    }

    async fn maybe_resume(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let ready = self.open.as_ref().is_some_and(|o| {
            o.asked.len() as u32 == self.job.config.workers
                && o.plans.keys().all(|s| o.done.contains(s))
        });
        if !ready {
            return Ok(());
        }
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let resume = Resume {
            epoch: open.epoch,
            owners: open.owners.clone(),
        };
        for w in 0..self.workers() {
            ctx.send(RoleId::Worker(w), protocol::encode(tag::RESUME, &resume)?);
        }
        self.st.owners = open.owners;
        self.st
            .tally
            .suspensions
            .push(ctx.now() - open.first_ask.unwrap_or(ctx.now()));
        if let Some(Change::Remove(server)) = open.change {
            self.st.active.remove(&server);
            self.st.tally.removals += 1;
            ctx.send(
                RoleId::Server(server),
                protocol::encode(tag::SHUTDOWN_OK, &ShutdownOk)?,
            );
        }
        if let Some(change) = self.st.queued.pop_front() {
            self.on_change(ctx, change).await?;
        }
        Ok(())
    }

    async fn on_change(&mut self, ctx: &mut RoleContext, change: Change) -> Result<()> {
        if self.open.is_some() {
            self.st.queued.push_back(change);
            return Ok(());
        }
        let mut servers = self.st.active.clone();
        match change {
            Change::Add(s) => {
                servers.insert(s);
                self.st.active.insert(s);
                if self.st.launching == Some(s) {
                    self.st.launching = None;
                }
                self.st.since_join = 0;
            }
            Change::Remove(s) => {
                if !servers.remove(&s) {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("server {s} announced its departure but is not in the job"),
                    ));
                }
                if servers.is_empty() {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("server {s} is the last parameter server; it cannot leave"),
                    ));
                }
            }
        }
        let servers: Vec<ServerId> = servers.into_iter().collect();
        let proposal = self.policy.assign(&servers);
        self.begin(ctx, proposal, Some(change)).await
    }

    fn figures(&self) -> Vec<(String, f64)> {
        let t = &self.st.tally;
        let mean = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let susp_max = t.suspensions.iter().copied().fold(0.0, f64::max);
        let model_bytes: u64 = self.block_bytes.iter().sum();
        // Emulated checkpoint-and-restart (Fig. 20b): save the model, relaunch, reload it.
        let restart =
            2.0 * model_bytes as f64 / self.opts.checkpoint_bytes_per_s + self.opts.restart_cost_s;
        let sup: Vec<f64> = t.superior_sizes.iter().map(|&s| s as f64).collect();
        let mut load = vec![0u64; self.opts.max_servers as usize];
        for (b, &s) in self.st.owners.iter().enumerate() {
            if let Some(l) = load.get_mut(s as usize) {
                *l += self.block_bytes[b];
            }
        }
        let mut f = vec![
            ("elastic-ps.epochs".to_string(), t.epochs as f64),
            ("elastic-ps.blocks_moved".to_string(), t.blocks_moved as f64),
            (
                "elastic-ps.migrated_mb".to_string(),
                t.bytes_migrated as f64 / 1e6,
            ),
            ("elastic-ps.checkpoint_restart_s".to_string(), restart),
            ("elastic-ps.scale_outs".to_string(), t.scale_outs as f64),
            ("elastic-ps.removals".to_string(), t.removals as f64),
            (
                "elastic-ps.servers_final".to_string(),
                self.st.active.len() as f64,
            ),
            (
                "elastic-ps.servers_used_final".to_string(),
                load.iter().filter(|&&l| l > 0).count() as f64,
            ),
        ];
        // Undefined without a reassignment (or a report): left out rather than read as 0, so
        // that a claim about them fails instead of passing on nothing.
        if !t.suspensions.is_empty() {
            f.push((
                "elastic-ps.suspension_s_mean".to_string(),
                mean(&t.suspensions),
            ));
            f.push(("elastic-ps.suspension_s_max".to_string(), susp_max));
            if restart > 0.0 {
                f.push((
                    "elastic-ps.suspension_vs_restart".to_string(),
                    susp_max / restart,
                ));
            }
        }
        if !sup.is_empty() {
            f.push(("elastic-ps.superior_mean".to_string(), mean(&sup)));
        }
        for (s, l) in load.iter().enumerate() {
            if *l > 0 || (s as u32) < self.opts.initial_servers {
                f.push((format!("elastic-ps.load_mb_s{s}"), *l as f64 / 1e6));
            }
        }
        f
    }
}

#[async_trait]
impl Coordinator for Scheduler {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        if self.job.clocks().start > 0 {
            self.continue_cut(ctx).await?;
        }
        loop {
            let env = ctx.recv().await?;
            let from = env.from;
            match env.msg {
                Message::Shutdown => break,
                Message::WorkerDone => self.workers_done += 1,
                Message::Custom(CustomMessage { tag: t, body, .. }) => {
                    let id = ctx.id();
                    match (t.as_str(), from) {
                        (tag::PROGRESS, RoleId::Worker(_)) => {
                            let p: Progress = protocol::decode(id, &t, &body)?;
                            self.on_progress(ctx, p);
                            self.schedule(ctx)?;
                        }
                        (tag::PERF_REPORT, RoleId::Worker(_)) => {
                            let r: PerfReport = protocol::decode(id, &t, &body)?;
                            self.on_report(ctx, r).await?;
                        }
                        (tag::REASSIGN_REQ, RoleId::Worker(w)) => {
                            let r: ReassignReq = protocol::decode(id, &t, &body)?;
                            self.on_ask(ctx, w, r).await?;
                        }
                        (tag::MIGRATE_DONE, RoleId::Server(s)) => {
                            let d: MigrateDone = protocol::decode(id, &t, &body)?;
                            match &mut self.open {
                                Some(o) if o.epoch == d.epoch => {
                                    o.done.insert(s);
                                }
                                _ => {
                                    return Err(EngineError::protocol(
                                        id,
                                        format!(
                                            "server {s} finished epoch {}, which is not open",
                                            d.epoch
                                        ),
                                    ))
                                }
                            }
                            self.maybe_resume(ctx).await?;
                        }
                        (tag::ADD_SERVER, RoleId::Server(_)) => {
                            let m: Membership = protocol::decode(id, &t, &body)?;
                            self.on_change(ctx, Change::Add(m.server)).await?;
                        }
                        (tag::DEL_SERVER, RoleId::Server(_)) => {
                            let m: Membership = protocol::decode(id, &t, &body)?;
                            self.st.leaving.remove(&m.server);
                            self.on_change(ctx, Change::Remove(m.server)).await?;
                        }
                        (other, _) => {
                            return Err(EngineError::protocol(
                                id,
                                format!("unexpected `{other}` message from {from}"),
                            ))
                        }
                    }
                }
                other => {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("unexpected message from {from}: {other:?}"),
                    ))
                }
            }
        }
        let figures = self.figures();
        let state = self.saved().map(|st| RoleState::encode(&st)).transpose()?;
        Ok(CoordinatorReport {
            state,
            reports: Vec::new(),
            figures,
        })
    }
}
