//! FlexRR's parameter-server shard (thesis §3.2.2, spec §4.1.6): LazyTable-style additive
//! updates under SSP.
//!
//! Workers send deltas ([`Update`]) tagged with the clock of the work they come from and
//! that work's owner; a helper sends deltas for its helpee's clock and asks for an acknowledgement
//! (the flush before `help-completed`). The version is the last clock every owner has completed:
//! version `v` holds every update of clocks `≤ v`. Under SSP (slack > 0) deltas are added as they
//! arrive, so values may also hold some newer updates, as in LazyTable; with slack 0 a clock's
//! deltas are added together once it is complete, in a canonical order (owner, sender, arrival),
//! so BSP values are exactly the clock's and bit-reproducible. Reads wait until the version the
//! consistency rule asks for. An update for a clock already complete is an error: it would be an
//! update missing from the version that claims to include it.

use crate::protocol::{Update, UpdateAck};
use concord_engine::prelude::*;
use concord_engine::ps::{ReadGate, Snapshot, TimedSnapshots};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Deltas of one clock, keyed canonically, and the owners that completed it.
#[derive(Default)]
struct ClockDeltas {
    parts: BTreeMap<(WorkerId, WorkerId, u64), Vec<BlockPayload>>,
    done: BTreeSet<WorkerId>,
}

/// What a shard keeps beside its blocks, for a checkpoint. At a checkpoint every clock before it
/// is complete, so no deltas wait.
#[derive(serde::Serialize, serde::Deserialize)]
struct FlexServerState {
    version: i64,
    arrivals: u64,
}

/// One shard of FlexRR's parameter server.
pub struct FlexServer {
    id: ServerId,
    workers: u32,
    /// Add deltas on arrival (SSP) rather than per complete clock (BSP).
    eager: bool,
    snapshot_every: u64,
    timed: TimedSnapshots<Vec<BlockPayload>>,
    values: BTreeMap<BlockId, Payload>,
    version: i64,
    arrivals: u64,
    pending: BTreeMap<Clock, ClockDeltas>,
    reads: ReadGate,
    report: ServerReport,
}

impl FlexServer {
    /// Shard `id` of `job`, holding its blocks at their initial values (or, when the job resumes,
    /// at its checkpoint's); `eager` adds deltas as they arrive (SSP) instead of per complete
    /// clock.
    pub fn new(job: &Arc<Job>, id: ServerId, eager: bool) -> Result<FlexServer> {
        let mut server = FlexServer::fresh(job, id, eager);
        if let Some(cp) = job.resumed(RoleId::Server(id)) {
            server.restore(&cp)?;
        }
        Ok(server)
    }

    fn fresh(job: &Arc<Job>, id: ServerId, eager: bool) -> FlexServer {
        let values = job
            .layout
            .slice_for(id, job.init.as_deref())
            .into_iter()
            .map(|bp| (bp.block, bp.data))
            .collect();
        FlexServer {
            id,
            workers: job.config.workers,
            eager,
            snapshot_every: job.config.eval_every.max(1),
            timed: TimedSnapshots::new(job.config.eval_every_s),
            values,
            version: -1,
            arrivals: 0,
            pending: BTreeMap::new(),
            reads: ReadGate::recording(job.record_reads),
            report: ServerReport::default(),
        }
    }

    /// Continues from checkpoint `cp`: its blocks' values, version and arrival count.
    fn restore(&mut self, cp: &RoleCheckpoint) -> Result<()> {
        let role = RoleId::Server(self.id);
        let state: FlexServerState = cp.decode_state(role, "FlexRR server state")?;
        let model = cp.checked_blocks(role, self.values.len(), |b| {
            self.values.get(&b).map(Payload::elems)
        })?;
        for bp in &model.blocks {
            self.values.insert(bp.block, bp.data.clone());
        }
        self.version = state.version;
        self.arrivals = state.arrivals;
        Ok(())
    }

    /// This shard's index.
    pub fn id(&self) -> ServerId {
        self.id
    }

    fn blocks(&self) -> Vec<BlockPayload> {
        payloads(&self.values)
    }

    fn elems(&self) -> u64 {
        self.values.values().map(Payload::elems).sum()
    }

    fn add(&mut self, now: f64, deltas: &[BlockPayload]) {
        let values = &self.values;
        self.timed.before_change(now, || payloads(values));
        for bp in deltas {
            if let Some(v) = self.values.get_mut(&bp.block) {
                v.axpy(1.0, &bp.data);
            }
        }
    }

    /// Completes every clock all owners have completed, in order (adding its deltas unless they
    /// were added on arrival).
    async fn apply_complete_clocks(&mut self, ctx: &mut RoleContext) {
        loop {
            let next = (self.version + 1) as Clock;
            let complete = self
                .pending
                .get(&next)
                .is_some_and(|d| d.done.len() as u32 >= self.workers);
            let Some(deltas) = complete.then(|| self.pending.remove(&next)).flatten() else {
                return;
            };
            if !self.eager {
                let began = ctx.now();
                for part in deltas.parts.values() {
                    self.add(ctx.now(), part);
                }
                ctx.serve_since("apply", self.elems() as f64, began).await;
            }
            self.version = next as i64;
            let iterations = next + 1;
            if iterations.is_multiple_of(self.snapshot_every) {
                self.report.model.snapshots.push(Snapshot {
                    iterations,
                    time_s: ctx.now(),
                    blocks: self.blocks(),
                });
            }
            let blocks = || payloads(&self.values);
            self.reads.release(ctx, self.version, blocks);
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn on_update(
        &mut self,
        ctx: &mut RoleContext,
        from: WorkerId,
        clock: Clock,
        owner: WorkerId,
        completes: bool,
        ack: bool,
        deltas: Vec<BlockPayload>,
    ) -> Result<()> {
        let me = ctx.id();
        if (clock as i64) <= self.version {
            return Err(EngineError::protocol(
                me,
                format!("worker {from} sent an update for worker {owner}'s clock {clock}, already applied (version {}): it would be lost", self.version),
            ));
        }
        if owner >= self.workers || (completes && owner != from) {
            return Err(EngineError::protocol(
                me,
                format!("worker {from} cannot complete or update for worker {owner}"),
            ));
        }
        if let Some(bad) = deltas.iter().find(|d| !self.values.contains_key(&d.block)) {
            return Err(EngineError::protocol(
                me,
                format!(
                    "worker {from} updated block {}, which this server does not hold",
                    bad.block
                ),
            ));
        }
        let elems: u64 = deltas.iter().map(|d| d.data.elems()).sum();
        let seq = self.arrivals;
        self.arrivals += 1;
        if self.eager {
            self.add(ctx.now(), &deltas);
        }
        let buf = self.pending.entry(clock).or_default();
        if !self.eager {
            buf.parts.insert((owner, from, seq), deltas);
        }
        if completes && !buf.done.insert(owner) {
            return Err(EngineError::protocol(
                me,
                format!("worker {owner} completed clock {clock} twice"),
            ));
        }
        // Buffering costs one add per element received.
        ctx.serve("aggregate", elems as f64).await;
        if ack {
            ctx.send(
                RoleId::Worker(from),
                Message::strategy(&UpdateAck { clock })?,
            );
        }
        self.apply_complete_clocks(ctx).await;
        Ok(())
    }
}

/// Block values as payloads, in block order.
fn payloads(values: &BTreeMap<BlockId, Payload>) -> Vec<BlockPayload> {
    values
        .iter()
        .map(|(&block, data)| BlockPayload {
            block,
            data: data.clone(),
        })
        .collect()
}

#[async_trait]
impl ServerHandler for FlexServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let RoleId::Worker(w) = env.from else {
            return Err(unexpected(ctx, &env));
        };
        if env.msg.has_tag(Update::TAG) {
            let (u, deltas) = Update::unpack(ctx.id(), env.msg)?;
            return self
                .on_update(ctx, w, u.clock, u.owner, u.completes_clock, u.ack, deltas)
                .await;
        }
        match env.msg {
            Message::Pull { clock, min_version } => {
                let blocks = || payloads(&self.values);
                self.reads
                    .pull(ctx, w, clock, min_version, self.version, blocks);
                Ok(())
            }
            _ => Err(unexpected(ctx, &env)),
        }
    }

    fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
        let mut report = std::mem::take(&mut self.report);
        report.reads = self.reads.take_answered();
        report.model.blocks = self.blocks();
        report.model.timed = self.timed.report();
        report.version = self.version;
        report.state = Some(RoleState::encode(&FlexServerState {
            version: self.version,
            arrivals: self.arrivals,
        })?);
        Ok(report)
    }
}

#[async_trait]
impl Server for FlexServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}
