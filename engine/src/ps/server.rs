//! The sharded parameter server role: holds blocks, applies updates under a consistency rule,
//! answers reads once they are fresh enough.

use super::{ParamLayout, ReadGate, Snapshot, SnapshotPlan, TimedSnapshots};
use crate::context::RoleContext;
use crate::contract::Server;
use crate::contract::{
    ApplyMode, Consistency, ModelState, RoleCheckpoint, RoleState, ServerReport,
};
use crate::error::{EngineError, Result};
use crate::ids::{Clock, RoleId, ServerId, WorkerId};
use crate::message::Message;
use crate::optim::{OptState, OptimizerConfig};
use crate::payload::{BlockId, BlockPayload, Payload};
use crate::serve::{serve, unexpected, ServerHandler};
use crate::transport::Envelope;
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

struct BlockState {
    value: Payload,
    opt: OptState,
}

/// One worker's push for a clock: (worker, arrival order) and (samples, gradients).
type Part = ((WorkerId, u64), (u64, Vec<BlockPayload>));

#[derive(Default)]
struct ClockBuffer {
    /// Contributions keyed by (worker, arrival order), in arrival order: sorted by key once the
    /// clock is complete and summed in that canonical order (collected unsorted because a
    /// thousand workers' pushes per clock make an ordered insert the costlier path).
    parts: Vec<Part>,
    done: BTreeSet<WorkerId>,
}

/// The engine's sharded parameter server.
pub struct ParamServer {
    id: ServerId,
    consistency: Arc<dyn Consistency>,
    optimizer: OptimizerConfig,
    workers: u32,
    snapshot_every: u64,
    timed: TimedSnapshots<Vec<BlockPayload>>,
    blocks: BTreeMap<BlockId, BlockState>,
    version: i64,
    arrivals: u64,
    pending: BTreeMap<Clock, ClockBuffer>,
    reads: ReadGate,
    snapshots: Vec<Snapshot>,
}

impl ParamServer {
    /// A server holding `layout`'s blocks for `id`, initialised from `init` (per-parameter values;
    /// `None` in throughput mode).
    pub fn new(
        id: ServerId,
        layout: Arc<ParamLayout>,
        init: Option<&[Vec<f32>]>,
        consistency: Arc<dyn Consistency>,
        optimizer: OptimizerConfig,
        workers: u32,
        snapshots: SnapshotPlan,
    ) -> ParamServer {
        let blocks = layout
            .slice_for(id, init)
            .into_iter()
            .map(|bp| {
                let opt = match &bp.data {
                    Payload::Real(v) => optimizer.init_state(v.len()),
                    Payload::Virtual { .. } => OptState::default(),
                };
                (
                    bp.block,
                    BlockState {
                        value: bp.data,
                        opt,
                    },
                )
            })
            .collect();
        ParamServer {
            id,
            consistency,
            optimizer,
            workers,
            snapshot_every: snapshots.every.max(1),
            timed: TimedSnapshots::new(snapshots.every_s),
            blocks,
            version: -1,
            arrivals: 0,
            pending: BTreeMap::new(),
            reads: ReadGate::new(),
            snapshots: Vec::new(),
        }
    }

    /// The same server, keeping a record of every read it answers when `record` is set (see
    /// [`ReadGate::recording`]).
    pub fn recording_reads(mut self, record: bool) -> ParamServer {
        self.reads = ReadGate::recording(record);
        self
    }

    /// Continues from `cp`, this server's checkpoint: its blocks with their optimizer state, its
    /// version and its count of arrivals.
    pub fn restore(&mut self, cp: &RoleCheckpoint) -> Result<()> {
        let role = RoleId::Server(self.id);
        let state: ParamServerState = cp.decode_state(role, "server state")?;
        let model = cp.checked_blocks(role, self.blocks.len(), |b| {
            self.blocks.get(&b).map(|st| st.value.elems())
        })?;
        for bp in &model.blocks {
            if let Some(st) = self.blocks.get_mut(&bp.block) {
                st.value = bp.data.clone();
                st.opt = model.opt_state.get(&bp.block).cloned().unwrap_or_default();
            }
        }
        self.version = state.version;
        self.arrivals = state.arrivals;
        Ok(())
    }

    /// This server's index.
    pub fn id(&self) -> ServerId {
        self.id
    }

    fn elems(&self) -> u64 {
        self.blocks.values().map(|b| b.value.elems()).sum()
    }

    fn apply(&mut self, now: f64, grads: &BTreeMap<BlockId, Payload>) {
        let blocks = &self.blocks;
        self.timed.before_change(now, || payloads(blocks));
        for (block, g) in grads {
            if let Some(st) = self.blocks.get_mut(block) {
                if let (Payload::Real(p), Payload::Real(g)) = (&mut st.value, g) {
                    self.optimizer.step(p, g, &mut st.opt);
                }
            }
        }
    }

    fn maybe_snapshot(&mut self, ctx: &RoleContext) {
        let iterations = (self.version + 1) as u64;
        if iterations > 0 && iterations.is_multiple_of(self.snapshot_every) {
            self.snapshots.push(Snapshot {
                iterations,
                time_s: ctx.now(),
                blocks: self.current_blocks(),
            });
        }
    }

    fn current_blocks(&self) -> Vec<BlockPayload> {
        payloads(&self.blocks)
    }

    /// Applies every complete clock in order.
    async fn apply_complete_clocks(&mut self, ctx: &mut RoleContext) {
        loop {
            let next = (self.version + 1) as Clock;
            let complete = self
                .pending
                .get(&next)
                .is_some_and(|b| b.done.len() as u32 >= self.workers);
            if !complete {
                return;
            }
            let Some(mut buf) = self.pending.remove(&next) else {
                return;
            };
            let began = ctx.now();
            // Keys are unique (the arrival order is), so an unstable sort is the canonical order.
            buf.parts.sort_unstable_by_key(|(key, _)| *key);
            let total: u64 = buf.parts.iter().map(|(_, (s, _))| *s).sum::<u64>().max(1);
            let mut sum: BTreeMap<BlockId, Payload> = BTreeMap::new();
            for (_, (samples, grads)) in &buf.parts {
                let weight = *samples as f32 / total as f32;
                for bp in grads {
                    sum.entry(bp.block)
                        .or_insert_with(|| bp.data.zeros_like())
                        .axpy(weight, &bp.data);
                }
            }
            self.apply(ctx.now(), &sum);
            ctx.serve_since(
                "apply",
                self.optimizer.flops_per_elem() * self.elems() as f64,
                began,
            )
            .await;
            self.version = next as i64;
            self.maybe_snapshot(ctx);
            let blocks = || payloads(&self.blocks);
            self.reads.release(ctx, self.version, blocks);
        }
    }

    async fn on_push(
        &mut self,
        ctx: &mut RoleContext,
        worker: WorkerId,
        clock: Clock,
        samples: u64,
        completes: bool,
        grads: Vec<BlockPayload>,
    ) -> Result<()> {
        if let Some(bad) = grads.iter().find(|g| !self.blocks.contains_key(&g.block)) {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "worker {worker} pushed block {} which this server does not hold",
                    bad.block
                ),
            ));
        }
        // Aggregation cost: one multiply-add per element received.
        let elems: u64 = grads.iter().map(|g| g.data.elems()).sum();
        let aggregate_flops = 2.0 * elems as f64;
        match self.consistency.apply_mode() {
            ApplyMode::OnArrival => {
                let began = ctx.now();
                let scale = 1.0 / self.workers as f32;
                let scaled = grads
                    .into_iter()
                    .map(|mut bp| {
                        bp.data.scale(scale);
                        (bp.block, bp.data)
                    })
                    .collect();
                self.apply(ctx.now(), &scaled);
                let flops = self.optimizer.flops_per_elem() * elems as f64;
                ctx.serve_since("apply", flops, began).await;
                if completes {
                    self.arrivals += 1;
                    let version = (self.arrivals / self.workers as u64) as i64 - 1;
                    if version > self.version {
                        self.version = version;
                        self.maybe_snapshot(ctx);
                    }
                }
            }
            ApplyMode::PerClock => {
                if (clock as i64) <= self.version {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("worker {worker} pushed for clock {clock}, already applied (version {})", self.version),
                    ));
                }
                let seq = self.arrivals;
                self.arrivals += 1;
                let buf = self.pending.entry(clock).or_default();
                buf.parts.push(((worker, seq), (samples, grads)));
                if completes && !buf.done.insert(worker) {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!("worker {worker} completed clock {clock} twice"),
                    ));
                }
                ctx.serve("aggregate", aggregate_flops).await;
                self.apply_complete_clocks(ctx).await;
            }
        }
        Ok(())
    }
}

/// What a parameter server keeps beside its blocks, for a checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
struct ParamServerState {
    /// Clocks applied, minus one.
    version: i64,
    /// Pushes received.
    arrivals: u64,
}

/// Block values as payloads, in block order.
fn payloads(blocks: &BTreeMap<BlockId, BlockState>) -> Vec<BlockPayload> {
    blocks
        .iter()
        .map(|(&block, st)| BlockPayload {
            block,
            data: st.value.clone(),
        })
        .collect()
}

#[async_trait]
impl ServerHandler for ParamServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let RoleId::Worker(w) = env.from else {
            return Err(unexpected(ctx, &env));
        };
        match env.msg {
            Message::Push {
                clock,
                samples,
                completes_clock,
                grads,
            } => {
                self.on_push(ctx, w, clock, samples, completes_clock, grads)
                    .await
            }
            Message::Pull { clock, min_version } => {
                let blocks = || payloads(&self.blocks);
                self.reads
                    .pull(ctx, w, clock, min_version, self.version, blocks);
                Ok(())
            }
            _ => Err(unexpected(ctx, &env)),
        }
    }

    fn finish(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        // A checkpoint is a consistent cut: every clock pushed has been applied.
        let state = if self.pending.is_empty() {
            Some(RoleState::encode(&ParamServerState {
                version: self.version,
                arrivals: self.arrivals,
            })?)
        } else {
            tracing::debug!(
                "{}: {} clocks not yet applied at the end; no resumable state",
                ctx.id(),
                self.pending.len()
            );
            None
        };
        let model = ModelState {
            blocks: self.current_blocks(),
            opt_state: self
                .blocks
                .iter()
                .map(|(&b, st)| (b, st.opt.clone()))
                .collect(),
            snapshots: std::mem::take(&mut self.snapshots),
            timed: self.timed.report(),
        };
        Ok(ServerReport {
            model,
            reads: self.reads.take_answered(),
            version: self.version,
            state,
        })
    }
}

#[async_trait]
impl Server for ParamServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}
