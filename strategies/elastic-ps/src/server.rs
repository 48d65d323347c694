//! The elastic parameter server: a sharded, stateful key-value store whose set of blocks changes
//! at reassignments (§1.10, §6.4).
//!
//! Synchronous per block, as MXNet's PS: a block's clock-`c` update is applied once every
//! worker's push of that block for `c` has arrived — the sample-weighted mean in worker order,
//! exactly the engine's aggregation — and the new value is sent back to every worker (a push is
//! also the pull). A block in an epoch's migration plan leaves, with its optimizer state, as soon
//! as it reaches the agreed version, right after that version's pull responses.

use crate::protocol::{
    self, tag, Membership, Migrate, MigrateAck, MigrateDone, MigratePlan, PushAck,
};
use concord_engine::optim::{OptState, OptimizerConfig};
use concord_engine::prelude::*;
use concord_engine::ps::{Snapshot, TimedSnapshot, TimedSnapshots};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One block held by this server.
struct HeldBlock {
    value: Payload,
    opt: OptState,
    /// Last clock applied (−1: initial values).
    version: i64,
    /// Contributions per clock, by worker: (samples, gradient).
    pending: BTreeMap<Clock, BTreeMap<WorkerId, (u64, Payload)>>,
}

/// A block arriving from another server.
struct Moved {
    /// When the previous holder sent it (its records cover the times before).
    sent_at: f64,
    epoch: u64,
    block: BlockId,
    version: i64,
    value: Payload,
    opt: OptState,
}

/// This server's part of an epoch's migration.
struct Plan {
    epoch: u64,
    at_version: i64,
    /// Blocks still to send, with their destination.
    to_send: BTreeMap<BlockId, ServerId>,
    /// Sent, not yet acknowledged.
    unacked: BTreeSet<BlockId>,
    /// Expected, not yet installed.
    to_receive: BTreeSet<BlockId>,
}

/// What a server carries across a checkpoint beside its blocks' values and optimizer state (its
/// reported model): the clock each block last applied, and the highest.
#[derive(serde::Serialize, serde::Deserialize)]
struct ServerState {
    versions: BTreeMap<BlockId, i64>,
    max_version: i64,
    starting: Option<f64>,
}

/// The elastic parameter server role.
pub struct ElasticServer {
    id: ServerId,
    optimizer: OptimizerConfig,
    workers: u32,
    snapshot_every: u64,
    blocks: BTreeMap<BlockId, HeldBlock>,
    plan: Option<Plan>,
    /// Blocks of a later epoch that arrived before this server's plan did.
    early: BTreeMap<u64, BTreeSet<BlockId>>,
    snapshots: BTreeMap<u64, Snapshot>,
    /// Run-time snapshots (`eval_every_s`) of each held block; blocks move, so per block.
    timed: BTreeMap<BlockId, TimedSnapshots<BlockPayload>>,
    /// Run-time snapshots of blocks that left this server.
    timed_departed: Vec<TimedSnapshot>,
    eval_every_s: Option<f64>,
    max_version: i64,
    /// A launched server starting up: the run time at which it is up and registers.
    starting: Option<f64>,
}

impl ElasticServer {
    /// Server `id` of `job`: with the blocks it held at the checkpoint when the job resumes from
    /// one (blocks move, so they are whatever the placement had given it), else as [`Self::new`].
    pub fn for_job(job: &Arc<Job>, id: ServerId) -> Result<ElasticServer> {
        let role = RoleId::Server(id);
        let Some(cp) = job.resumed(role) else {
            return Ok(ElasticServer::new(job, id));
        };
        let state: ServerState = cp.decode_state(role, "PSLD server state")?;
        let model = cp.model.unwrap_or_default();
        let layout = job.layout.blocks();
        let mut blocks = BTreeMap::new();
        for bp in model.blocks {
            let expected = layout.get(bp.block as usize).map(|b| b.len as u64);
            if expected != Some(bp.data.elems()) {
                return Err(EngineError::protocol(
                    role,
                    format!("its checkpoint holds block {} of another size", bp.block),
                ));
            }
            let held = HeldBlock {
                value: bp.data,
                opt: model.opt_state.get(&bp.block).cloned().unwrap_or_default(),
                version: state.versions.get(&bp.block).copied().unwrap_or(-1),
                pending: BTreeMap::new(),
            };
            blocks.insert(bp.block, held);
        }
        let mut server = ElasticServer::holding(job, id, blocks);
        server.max_version = state.max_version;
        server.starting = state.starting;
        Ok(server)
    }

    /// Server `id` of `job`; it starts with the blocks the initial assignment gives it (none for a
    /// standby server).
    pub fn new(job: &Arc<Job>, id: ServerId) -> ElasticServer {
        let optimizer = &job.config.optimizer;
        let blocks: BTreeMap<BlockId, HeldBlock> = job
            .layout
            .slice_for(id, job.init.as_deref())
            .into_iter()
            .map(|bp| {
                let opt = match &bp.data {
                    Payload::Real(v) => optimizer.init_state(v.len()),
                    Payload::Virtual { .. } => OptState::default(),
                };
                let held = HeldBlock {
                    value: bp.data,
                    opt,
                    version: -1,
                    pending: BTreeMap::new(),
                };
                (bp.block, held)
            })
            .collect();
        ElasticServer::holding(job, id, blocks)
    }

    /// Server `id` of `job` holding `blocks`, with nothing else under way.
    fn holding(job: &Job, id: ServerId, blocks: BTreeMap<BlockId, HeldBlock>) -> ElasticServer {
        let eval_every_s = job.config.eval_every_s;
        ElasticServer {
            id,
            optimizer: job.config.optimizer.clone(),
            workers: job.config.workers,
            snapshot_every: job.config.eval_every.max(1),
            timed: blocks
                .keys()
                .map(|&b| (b, TimedSnapshots::new(eval_every_s)))
                .collect(),
            timed_departed: Vec::new(),
            eval_every_s,
            blocks,
            plan: None,
            early: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            max_version: -1,
            starting: None,
        }
    }

    async fn on_push(
        &mut self,
        ctx: &mut RoleContext,
        worker: WorkerId,
        clock: Clock,
        samples: u64,
        grads: Vec<BlockPayload>,
    ) -> Result<()> {
        for bp in grads {
            let elems = bp.data.elems();
            let Some(held) = self.blocks.get_mut(&bp.block) else {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "worker {worker} pushed block {} for clock {clock}, which this server does not hold",
                        bp.block
                    ),
                ));
            };
            if clock as i64 <= held.version {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "worker {worker} pushed block {} for clock {clock}, already applied (version {})",
                        bp.block, held.version
                    ),
                ));
            }
            let parts = held.pending.entry(clock).or_default();
            if parts.insert(worker, (samples, bp.data)).is_some() {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "worker {worker} pushed block {} for clock {clock} twice",
                        bp.block
                    ),
                ));
            }
            // One request: receive and accumulate (a multiply-add per element), then answer it.
            ctx.serve("aggregate", 2.0 * elems as f64).await;
            let ack = PushAck {
                clock,
                block: bp.block,
                processed_at: ctx.now(),
            };
            ctx.send(
                RoleId::Worker(worker),
                protocol::encode(tag::PUSH_ACK, &ack)?,
            );
            self.apply_ready(ctx, bp.block).await?;
        }
        Ok(())
    }

    /// Applies every complete clock of `block` in order, answers the pulls, and migrates the
    /// block if the plan says so.
    async fn apply_ready(&mut self, ctx: &mut RoleContext, block: BlockId) -> Result<()> {
        loop {
            let Some(held) = self.blocks.get_mut(&block) else {
                return Ok(());
            };
            let next = (held.version + 1) as Clock;
            if held
                .pending
                .get(&next)
                .is_none_or(|p| (p.len() as u32) < self.workers)
            {
                return Ok(());
            }
            let began = ctx.now();
            let parts = held.pending.remove(&next).unwrap_or_default();
            let total: u64 = parts.values().map(|(s, _)| *s).sum::<u64>().max(1);
            let mut sum = held.value.zeros_like();
            for (samples, g) in parts.values() {
                sum.axpy(*samples as f32 / total as f32, g);
            }
            if let Some(t) = self.timed.get_mut(&block) {
                let value = &held.value;
                t.before_change(ctx.now(), || BlockPayload {
                    block,
                    data: value.clone(),
                });
            }
            if let (Payload::Real(p), Payload::Real(g)) = (&mut held.value, &sum) {
                self.optimizer.step(p, g, &mut held.opt);
            }
            let elems = held.value.elems();
            let flops = self.optimizer.flops_per_elem() * elems as f64;
            ctx.serve_since("apply", flops, began).await;
            let Some(held) = self.blocks.get_mut(&block) else {
                return Ok(());
            };
            held.version = next as i64;
            self.max_version = self.max_version.max(held.version);
            let value = held.value.clone();
            let iterations = next + 1;
            if iterations.is_multiple_of(self.snapshot_every) {
                let snap = self.snapshots.entry(iterations).or_insert(Snapshot {
                    iterations,
                    time_s: ctx.now(),
                    blocks: Vec::new(),
                });
                snap.time_s = snap.time_s.max(ctx.now());
                snap.blocks.push(BlockPayload {
                    block,
                    data: value.clone(),
                });
            }
            for w in parts.keys() {
                ctx.send(
                    RoleId::Worker(*w),
                    Message::Params {
                        version: next as i64,
                        served_at: ctx.now(),
                        blocks: vec![BlockPayload {
                            block,
                            data: value.clone(),
                        }],
                    },
                );
            }
            self.migrate_ready(ctx)?;
        }
    }

    /// Sends every planned block that has reached the plan's version.
    fn migrate_ready(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let Some(plan) = &mut self.plan else {
            return Ok(());
        };
        let ready: Vec<(BlockId, ServerId)> = plan
            .to_send
            .iter()
            .filter(|(b, _)| {
                self.blocks
                    .get(b)
                    .is_some_and(|h| h.version >= plan.at_version)
            })
            .map(|(&b, &d)| (b, d))
            .collect();
        for (block, dst) in ready {
            plan.to_send.remove(&block);
            let Some(held) = self.blocks.remove(&block) else {
                continue;
            };
            if held.version != plan.at_version || !held.pending.is_empty() {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "block {block} is at version {} with pushes pending, past the epoch {} step {}",
                        held.version, plan.epoch, plan.at_version
                    ),
                ));
            }
            plan.unacked.insert(block);
            if let Some(mut t) = self.timed.remove(&block) {
                // The receiver records from now on: cover every due time before the hand-off.
                t.before_change(ctx.now(), || BlockPayload {
                    block,
                    data: held.value.clone(),
                });
                self.timed_departed.extend(t.report_block());
            }
            let step = held.opt.step;
            let moved = Migrate {
                epoch: plan.epoch,
                block,
                version: held.version,
                step,
            };
            ctx.send(RoleId::Server(dst), moved.message(held.value, held.opt)?);
        }
        self.maybe_done(ctx)
    }

    fn maybe_done(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let finished = self.plan.as_ref().is_some_and(|p| {
            p.to_send.is_empty() && p.unacked.is_empty() && p.to_receive.is_empty()
        });
        if finished {
            if let Some(p) = self.plan.take() {
                let msg = protocol::encode(tag::MIGRATE_DONE, &MigrateDone { epoch: p.epoch })?;
                ctx.send(RoleId::Coordinator, msg);
            }
        }
        Ok(())
    }

    fn on_plan(&mut self, ctx: &mut RoleContext, plan: MigratePlan) -> Result<()> {
        if let Some(old) = &self.plan {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "migration plan of epoch {} while epoch {} is still open",
                    plan.epoch, old.epoch
                ),
            ));
        }
        for (b, _) in &plan.out {
            if !self.blocks.contains_key(b) {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "epoch {} moves block {b} out of a server that does not hold it",
                        plan.epoch
                    ),
                ));
            }
        }
        let early = self.early.remove(&plan.epoch).unwrap_or_default();
        self.plan = Some(Plan {
            epoch: plan.epoch,
            at_version: plan.at_version,
            to_send: plan.out.into_iter().collect(),
            unacked: BTreeSet::new(),
            to_receive: plan
                .inc
                .into_iter()
                .map(|(b, _)| b)
                .filter(|b| !early.contains(b))
                .collect(),
        });
        self.migrate_ready(ctx)
    }

    fn on_migrate(&mut self, ctx: &mut RoleContext, from: RoleId, moved: Moved) -> Result<()> {
        let Moved {
            sent_at,
            epoch,
            block,
            version,
            value,
            opt,
        } = moved;
        if self.blocks.contains_key(&block) {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("block {block} migrated here from {from} but is already held"),
            ));
        }
        self.timed.insert(
            block,
            TimedSnapshots::starting_at(self.eval_every_s, sent_at),
        );
        self.blocks.insert(
            block,
            HeldBlock {
                value,
                opt,
                version,
                pending: BTreeMap::new(),
            },
        );
        match &mut self.plan {
            Some(p) if p.epoch == epoch => {
                p.to_receive.remove(&block);
            }
            _ => {
                self.early.entry(epoch).or_default().insert(block);
            }
        }
        let ack = protocol::encode(tag::MIGRATE_ACK, &MigrateAck { epoch, block })?;
        ctx.send(from, ack);
        self.maybe_done(ctx)
    }

    fn on_ack(&mut self, ctx: &mut RoleContext, ack: MigrateAck) -> Result<()> {
        let expected = match &mut self.plan {
            Some(p) if p.epoch == ack.epoch => p.unacked.remove(&ack.block),
            _ => false,
        };
        if !expected {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "unexpected acknowledgement of block {} (epoch {})",
                    ack.block, ack.epoch
                ),
            ));
        }
        self.maybe_done(ctx)
    }

    fn report(&mut self) -> Result<ServerReport> {
        let model = ModelState {
            blocks: self
                .blocks
                .iter()
                .map(|(&block, h)| BlockPayload {
                    block,
                    data: h.value.clone(),
                })
                .collect(),
            opt_state: self
                .blocks
                .iter()
                .map(|(&b, h)| (b, h.opt.clone()))
                .collect(),
            snapshots: std::mem::take(&mut self.snapshots).into_values().collect(),
            timed: self.eval_every_s.map(|_| {
                let mut all = std::mem::take(&mut self.timed_departed);
                for t in self.timed.values() {
                    all.extend(t.report_block());
                }
                all
            }),
        };
        // A checkpoint is a consistent cut: every clock pushed is applied, no block is moving.
        let settled = self.plan.is_none() && self.blocks.values().all(|h| h.pending.is_empty());
        let state = ServerState {
            versions: self.blocks.iter().map(|(&b, h)| (b, h.version)).collect(),
            max_version: self.max_version,
            starting: self.starting,
        };
        Ok(ServerReport {
            state: settled.then(|| RoleState::encode(&state)).transpose()?,
            model,
            reads: Vec::new(),
            version: self.max_version,
        })
    }
}

#[async_trait]
impl ServerHandler for ElasticServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let from = env.from;
        if env.msg.has_tag(Migrate::TAG) {
            let (m, value, opt) = Migrate::unpack(ctx.id(), env.msg)?;
            let moved = Moved {
                sent_at: env.sent_at,
                epoch: m.epoch,
                block: m.block,
                version: m.version,
                value,
                opt,
            };
            return self.on_migrate(ctx, from, moved);
        }
        match env.msg {
            Message::Push {
                clock,
                samples,
                grads,
                ..
            } => {
                let RoleId::Worker(w) = from else {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("push from {from}, not a worker"),
                    ));
                };
                self.on_push(ctx, w, clock, samples, grads).await?;
            }
            Message::Custom(CustomMessage { tag: t, body, .. }) => match t.as_str() {
                tag::MIGRATE_PLAN => {
                    let plan: MigratePlan = protocol::decode(ctx.id(), &t, &body)?;
                    self.on_plan(ctx, plan)?;
                }
                tag::MIGRATE_ACK => {
                    let ack: MigrateAck = protocol::decode(ctx.id(), &t, &body)?;
                    self.on_ack(ctx, ack)?;
                }
                tag::LAUNCH => {
                    // A launched server starts up, then registers (ADD_SERVER, in `wake`).
                    let start =
                        crate::protocol::decode::<crate::protocol::Launch>(ctx.id(), &t, &body)?;
                    self.starting = Some(ctx.now() + start.start_s);
                }
                tag::LEAVE => {
                    let msg = protocol::encode(tag::DEL_SERVER, &Membership { server: self.id })?;
                    ctx.send(RoleId::Coordinator, msg);
                }
                tag::SHUTDOWN_OK => {
                    if !self.blocks.is_empty() {
                        return Err(EngineError::protocol(
                            ctx.id(),
                            format!(
                                "told to shut down while holding {} blocks",
                                self.blocks.len()
                            ),
                        ));
                    }
                }
                other => {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("unexpected `{other}` message from {from}"),
                    ))
                }
            },
            other => {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("unexpected message from {from}: {other:?}"),
                ))
            }
        }
        Ok(())
    }

    fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
        self.report()
    }

    /// A launched server starting up is up then (nothing is sent to it meanwhile: it holds no
    /// blocks), and a checkpoint's cut does not wait for it.
    fn wake_at(&self) -> Option<f64> {
        self.starting
    }

    /// Up: registers with the scheduler.
    async fn wake(&mut self, ctx: &mut RoleContext) -> Result<()> {
        self.starting = None;
        let msg = protocol::encode(tag::ADD_SERVER, &Membership { server: self.id })?;
        ctx.send(RoleId::Coordinator, msg);
        Ok(())
    }
}

#[async_trait]
impl Server for ElasticServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}
