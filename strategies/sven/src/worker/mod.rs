//! A Sven rank: a GPU trainer holding its shards of the embedding tables (each row on the device
//! or the host tier) and a replica of the dense part, running its tasks on a compute lane and a
//! communication lane as one event loop (the communication lane is the thesis's background
//! thread, §6.1.1).
//!
//! - `comm`: the alltoalls and the allreduce in flight.
//! - `stats`: the measured stage times and the figures of the summary.
//!
//! Compute tasks are charged with [`RoleContext::compute_deferred`]: the math runs when the task
//! starts and its result counts from the time the cost model gives, while the loop keeps taking
//! the communication lane's messages.

mod comm;
mod stats;

use crate::options::{AlltoallKind, PlacementKind, Resolved};
use crate::placement::{AccessCounts, Shard, ShardPlan, Tier, TierMap};
use crate::protocol::{OpKind, Want};
use crate::schedule::{staleness, Kind, Program, Task, STALENESS_BOUND};
use crate::shards::{self, BatchIds};
use comm::Collectives;
use concord_engine::collective::Group;
use concord_engine::data::{split_ctr, ZipfIds};
use concord_engine::memory::{MemEvent, TensorClass};
use concord_engine::model::{DenseStep, DlrmDense, DlrmSpec};
use concord_engine::optim::OptState;
use concord_engine::prelude::*;
use concord_engine::ps::Snapshot;
use stats::Stats;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The run clock's resolution in `sim`: an event this close to now is due (waiting for it would
/// not advance the clock).
const TICK_S: f64 = 1e-3 / concord_engine::time::SIM_DILATION;

/// Whether an event at `at` is due at `now`.
fn due(now: f64, at: f64) -> bool {
    now + TICK_S >= at
}

/// Where a batch's ids come from: the job's data (a real run) or a Zipf sampler (throughput).
enum Ids {
    Data,
    Zipf(Box<ZipfIds>),
}

/// What a rank keeps of one batch until its tasks are done.
#[derive(Default)]
struct BatchState {
    ids: Option<Arc<BatchIds>>,
    dense_x: Vec<f32>,
    labels: Vec<u32>,
    fwd_splits: Option<Vec<Payload>>,
    host_elems: u64,
    emb: Option<Vec<f32>>,
    step: Option<DenseStep>,
    bwd_splits: Option<Vec<Payload>>,
    grads_from: Option<Vec<Payload>>,
    dense_sum: Option<Payload>,
    started: Option<f64>,
    compute_s: f64,
    comm_s: f64,
    bytes_sent: u64,
}

/// The communication task in flight.
struct ActiveComm {
    task: Task,
    op: u64,
    started: f64,
    /// Before this time the lane is busy with a copy that precedes the exchange (the blocking
    /// alltoall's host-to-device copy of host-tier lookups).
    send_at: f64,
    sent: bool,
    /// Set once the collective completed: the lane is free from this time (after the staging
    /// copy of an asynchronous alltoall).
    done_at: Option<f64>,
}

/// One Sven rank (worker).
pub struct SvenWorker {
    id: WorkerId,
    rank: usize,
    ranks: usize,
    job: Arc<Job>,
    opts: Arc<Resolved>,
    spec: DlrmSpec,
    plan: Arc<ShardPlan>,
    mine: Vec<(usize, Shard)>,
    group: Group,
    values: Option<Vec<Vec<f32>>>,
    opt_states: Vec<OptState>,
    dense: Option<DlrmDense>,
    tiers: TierMap,
    counts: Option<AccessCounts>,
    ids: Ids,
    per: usize,
    batches: BTreeMap<u64, BatchState>,
    done: BTreeSet<Task>,
    sparse_applied: u64,
    shards_in: BTreeSet<u64>,
    chunks_in: BTreeMap<u64, u32>,
    stats: Stats,
    snapshots: Vec<Snapshot>,
    input_server: Option<RoleId>,
}

impl SvenWorker {
    /// Rank `id` of `job`, sharded by `plan`.
    pub fn new(
        job: Arc<Job>,
        id: WorkerId,
        opts: Arc<Resolved>,
        plan: Arc<ShardPlan>,
    ) -> Result<SvenWorker> {
        let spec = job.model.dlrm().cloned().ok_or_else(|| {
            EngineError::Composition(format!(
                "`sven` trains a DLRM (`[model] kind = \"dlrm\"`, or a dlrm-* profile), not a {} model",
                job.model.kind()
            ))
        })?;
        let ranks = job.config.workers as usize;
        let rank = id as usize;
        let rows = spec.fields.clone();
        let device = concord_engine::gpu::tensor_device(job.cluster.gpu_of(RoleId::Worker(id)))?;
        let dense = match &job.data {
            Some(_) => Some(DlrmDense::new(&spec, &device)?),
            None => None,
        };
        let ids = match &job.data {
            Some(_) => Ids::Data,
            None => Ids::Zipf(Box::new(
                ZipfIds::new(&rows, opts.opts.zipf, job.config.seed)
                    .map_err(|e| EngineError::Composition(e.to_string()))?,
            )),
        };
        let tiers = match opts.opts.placement {
            PlacementKind::Hot | PlacementKind::Host => TierMap::all(&rows, Tier::Host),
            PlacementKind::Device => TierMap::all(&rows, Tier::Device),
            PlacementKind::Random => TierMap::random(&rows, opts.alpha, job.config.seed)
                .map_err(|e| EngineError::Composition(e.to_string()))?,
        };
        let counts = (opts.opts.placement == PlacementKind::Hot).then(|| AccessCounts::new(&rows));
        let opt_states = spec
            .dense_param_range()
            .map(|p| {
                job.config
                    .optimizer
                    .init_state(job.layout.params()[p].elems())
            })
            .collect();
        let input_server = (opts.opts.pipeline.offloads_input() && job.config.servers > 0)
            .then(|| RoleId::Server(id % job.config.servers));
        Ok(SvenWorker {
            id,
            rank,
            ranks,
            mine: plan.rank_shards(rank),
            group: Group::workers(job.config.workers)?,
            values: job.init.clone(),
            opt_states,
            dense,
            tiers,
            counts,
            ids,
            per: job.config.batch as usize,
            batches: BTreeMap::new(),
            done: BTreeSet::new(),
            sparse_applied: 0,
            shards_in: BTreeSet::new(),
            chunks_in: BTreeMap::new(),
            stats: Stats::default().skip(opts.opts.warmup_iters.max(2)),
            snapshots: Vec::new(),
            input_server,
            plan,
            spec,
            opts,
            job,
        })
    }

    fn tables(&self) -> usize {
        self.spec.num_tables()
    }

    /// The global batch `b`: its ids, and this rank's samples' dense features and labels.
    fn load_batch(&mut self, b: u64) -> Result<()> {
        let global = self.per * self.ranks;
        let k = self.tables();
        let mut state = BatchState::default();
        match (&mut self.ids, &self.job.data) {
            (Ids::Data, Some(data)) => {
                let schema = data.train.ctr.as_ref().ok_or_else(|| {
                    EngineError::Composition(
                        "`sven` needs click-through data (`[data] kind = \"ctr\"` or \"ctr-file\")"
                            .into(),
                    )
                })?;
                let idx = self
                    .job
                    .stream
                    .range(u128::from(b) * global as u128, global);
                let (features, labels) = data.train.gather(&idx);
                let (dense, ids) = split_ctr(schema, &features);
                let mine = shards::owned(self.rank, self.per);
                state.dense_x = dense[mine.start * schema.dense..mine.end * schema.dense].to_vec();
                state.labels = labels[mine].to_vec();
                state.ids = Some(Arc::new(BatchIds { ids, fields: k }));
            }
            (Ids::Zipf(z), _) => {
                let mut ids = Vec::with_capacity(global * k);
                z.fill_batch(global, &mut ids);
                state.ids = Some(Arc::new(BatchIds { ids, fields: k }));
            }
            (Ids::Data, None) => {
                return Err(EngineError::protocol(
                    RoleId::Worker(self.id),
                    "a real DLRM run without data",
                ))
            }
        }
        self.batches.insert(b, state);
        Ok(())
    }

    fn batch(&mut self, b: u64) -> Result<&mut BatchState> {
        let id = self.id;
        self.batches.get_mut(&b).ok_or_else(|| {
            EngineError::protocol(RoleId::Worker(id), format!("batch {b} is not loaded"))
        })
    }

    /// Whether `task` may start: its dependencies done, and for a sparse forward of an
    /// offloaded input, its shard from the input service arrived.
    fn ready(&self, task: Task) -> bool {
        let mode = self.opts.opts.pipeline;
        let input_ok = task.kind != Kind::Sfp
            || self.input_server.is_none()
            || self.shards_in.contains(&task.batch);
        input_ok && task.deps(mode).iter().all(|d| self.done.contains(d))
    }

    /// Seconds of this rank's lookups (or updates) for `ids`: per row by tier, host rows also
    /// crossing PCIe.
    fn sparse_seconds(&mut self, ctx: &RoleContext, ids: &BatchIds, count: bool) -> (f64, u64) {
        let (dev, host, host_elems) = shards::lookups(&self.mine, ids, &self.tiers);
        if count {
            self.stats.device_rows += dev;
            self.stats.host_rows += host;
        }
        let pcie = host_elems as f64 * 4.0 / ctx.device().host_link_bytes_per_s();
        let s = dev as f64 * self.opts.device_row_s() + host as f64 * self.opts.host_row_s() + pcie;
        (s, host_elems)
    }

    /// Starts compute task `task`; returns when its result is ready.
    fn start_compute(&mut self, ctx: &mut RoleContext, task: Task) -> Result<f64> {
        let b = task.batch;
        let n = self.ranks;
        let per = self.per;
        let width = self.spec.width();
        let rows = self.spec.fields.clone();
        let dense_train = self.job.model.training_flops_per_sample();
        let sheet = self.job.cost_sheet.len();
        let part = |share| StepPart {
            first: 0,
            end: sheet,
            share,
        };
        let done = match task.kind {
            Kind::Sfp => {
                let applied = self.sparse_applied;
                let lag = staleness(b, applied);
                if lag > STALENESS_BOUND {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        format!(
                            "batch {b} looks up tables missing {lag} updates (bound {STALENESS_BOUND})"
                        ),
                    ));
                }
                self.stats.max_staleness = self.stats.max_staleness.max(lag);
                // A batch's iteration starts with its lookups: a straggler's delay lands here,
                // before this rank's arrival at the forward alltoall.
                ctx.set_iter(b);
                if !self.batches.contains_key(&b) {
                    self.load_batch(b)?;
                }
                let ids = self.batch(b)?.ids.clone().unwrap_or_else(|| {
                    Arc::new(BatchIds {
                        ids: Vec::new(),
                        fields: 1,
                    })
                });
                let warm = b < self.opts.opts.warmup_iters;
                if let Some(counts) = self.counts.as_mut() {
                    if warm {
                        for k in 0..ids.fields {
                            let col: Vec<usize> = (0..ids.samples())
                                .map(|m| ids.ids[m * ids.fields + k] as usize)
                                .collect();
                            counts
                                .record(k, &col)
                                .map_err(|e| EngineError::protocol(ctx.id(), e.to_string()))?;
                        }
                    }
                }
                let (seconds, host_elems) = self.sparse_seconds(ctx, &ids, !warm);
                let splits = match &self.values {
                    Some(values) => {
                        let tables: Vec<Vec<f32>> = values[..self.tables()].to_vec();
                        shards::forward_splits(&self.mine, &ids, &tables, &rows, n, per)
                            .into_iter()
                            .map(Payload::Real)
                            .collect()
                    }
                    None => {
                        let e = shards::split_elems(&self.mine, per) as u64;
                        vec![Payload::Virtual { elems: e }; n]
                    }
                };
                let st = self.batch(b)?;
                st.fwd_splits = Some(splits);
                st.host_elems = host_elems;
                st.started.get_or_insert(ctx.now());
                if let Some(server) = self.input_server {
                    let want = b + 2;
                    if want < self.job.clocks().end {
                        ctx.send(server, Message::strategy(&Want { clock: want })?);
                    }
                }
                ctx.compute_deferred("SFP", Work::modeled(seconds), || ()).1
            }
            Kind::Fp => {
                let dense_values = self
                    .values
                    .as_ref()
                    .map(|v| v[self.spec.dense_param_range()].to_vec());
                let dense = self.dense.as_ref();
                let st = self.batches.get_mut(&b).ok_or_else(|| {
                    EngineError::protocol(ctx.id(), format!("batch {b} is not loaded"))
                })?;
                let step = match (dense, &st.emb, dense_values) {
                    (Some(d), Some(emb), Some(v)) => {
                        d.set_params(&v)?;
                        Some(d.step(emb, &st.dense_x, &st.labels)?)
                    }
                    _ => None,
                };
                st.step = step;
                let work = Work::step_part(part(StepPart::FORWARD), dense_train, per as f64);
                ctx.compute_deferred("FP", work, || ()).1
            }
            Kind::Bp => {
                let plan = self.plan.clone();
                let dense_elems = self.spec.dense_param_elems() as u64;
                let st = self.batch(b)?;
                let (bwd, sum) = match &st.step {
                    Some(step) => (
                        shards::backward_splits(&plan, &step.emb_grad, per, width, 1.0 / n as f32)
                            .into_iter()
                            .map(Payload::Real)
                            .collect(),
                        Payload::Real(step.grads.concat()),
                    ),
                    None => (
                        (0..n)
                            .map(|j| Payload::Virtual {
                                elems: shards::split_elems(&plan.rank_shards(j), per) as u64,
                            })
                            .collect(),
                        Payload::Virtual { elems: dense_elems },
                    ),
                };
                st.bwd_splits = Some(bwd);
                st.dense_sum = Some(sum);
                let work = Work::step_part(part(StepPart::BACKWARD), dense_train, per as f64);
                ctx.compute_deferred("BP", work, || ()).1
            }
            Kind::Sbp => {
                let ids = self.batch(b)?.ids.clone();
                let grads = self.batch(b)?.grads_from.take();
                let lr = self.job.config.optimizer.lr() as f32;
                let seconds = match &ids {
                    Some(ids) => self.sparse_seconds(ctx, ids, false).0,
                    None => 0.0,
                };
                if let (Some(values), Some(ids), Some(grads)) = (self.values.as_mut(), &ids, grads)
                {
                    let splits: Vec<Vec<f32>> = grads
                        .into_iter()
                        .map(|p| p.values().map(<[f32]>::to_vec).unwrap_or_default())
                        .collect();
                    shards::apply_sparse(&self.mine, ids, &splits, values, &rows, per, lr);
                }
                ctx.compute_deferred("SBP", Work::modeled(seconds), || ()).1
            }
            Kind::Opt => {
                let range = self.spec.dense_param_range();
                let sum = self.batch(b)?.dense_sum.take();
                if let (Some(values), Some(Payload::Real(flat))) = (self.values.as_mut(), sum) {
                    let mut at = 0;
                    for (p, st) in range.clone().zip(self.opt_states.iter_mut()) {
                        let len = values[p].len();
                        let g: Vec<f32> = flat[at..at + len].iter().map(|x| x / n as f32).collect();
                        self.job.config.optimizer.step(&mut values[p], &g, st);
                        at += len;
                    }
                }
                let flops = self.job.config.optimizer.flops_per_elem()
                    * self.spec.dense_param_elems() as f64;
                ctx.compute_deferred("opt", Work::fixed(flops), || ()).1
            }
            Kind::Input | Kind::FwdA2a | Kind::BwdA2a | Kind::Allreduce => {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("{} is not a compute task", task.kind.label()),
                ))
            }
        };
        let st = self.batch(b)?;
        st.compute_s += done - ctx.now();
        Ok(done)
    }

    /// Finishes compute task `task` at its done time.
    fn finish_compute(
        &mut self,
        ctx: &mut RoleContext,
        task: Task,
        started: f64,
    ) -> Result<Option<IterRecord>> {
        self.stats.task(task, started, ctx.now());
        self.done.insert(task);
        match task.kind {
            Kind::Sfp if task.batch + 1 == self.opts.opts.warmup_iters => {
                if let Some(counts) = &self.counts {
                    self.tiers = TierMap::hot_top_alpha(counts, self.opts.alpha)
                        .map_err(|e| EngineError::protocol(ctx.id(), e.to_string()))?;
                }
            }
            Kind::Sbp => self.sparse_applied = task.batch + 1,
            Kind::Opt => return self.close(ctx, task.batch).map(Some),
            _ => {}
        }
        Ok(None)
    }

    /// Closes clock `b` once its dense update is applied.
    fn close(&mut self, ctx: &mut RoleContext, b: u64) -> Result<IterRecord> {
        let job = self.job.clone();
        let st = self.batch(b)?;
        let start = st.started.unwrap_or(0.0);
        let tally = ClockTally {
            samples: job.config.batch,
            compute_s: st.compute_s,
            wait_s: 0.0,
            comm_s: st.comm_s,
            loss: st.step.as_ref().map_or(f64::NAN, |s| s.loss),
            version_read: b as i64 - 1,
            bytes_sent: st.bytes_sent,
        };
        self.stats.iteration_done(b, ctx.now());
        if (b + 1).is_multiple_of(job.config.eval_every.max(1)) {
            if let Some(values) = &self.values {
                self.snapshots.push(Snapshot {
                    iterations: b + 1,
                    time_s: ctx.now(),
                    blocks: self.my_blocks(Some(values)),
                });
            }
        }
        Ok(close_clock(ctx, &job, b, start, tally))
    }

    /// The layout blocks this rank reports: those inside its shards, and the dense part on rank 0.
    fn my_blocks(&self, values: Option<&[Vec<f32>]>) -> Vec<BlockPayload> {
        let k = self.tables();
        self.job
            .layout
            .blocks()
            .iter()
            .filter(|b| {
                if b.param < k {
                    let rows = self.spec.fields[b.param];
                    self.plan
                        .owner_of(b.param, b.offset % rows, b.offset / rows)
                        == self.rank
                } else {
                    self.rank == 0
                }
            })
            .filter_map(|b| self.job.layout.block_payload(b.id, values))
            .collect()
    }

    /// Reports what the rank keeps on its device all run: the device-tier rows of its shards, the
    /// dense replica, its gradients and optimizer state, and the buffers of the batches in flight
    /// (lookups out, embeddings in, their gradients both ways; two batches in the 4-stage
    /// pipeline, which doubles the memory per stage, §6.1.2).
    async fn hold_memory(&self, ctx: &mut RoleContext) -> Result<()> {
        let shard_bytes: u64 = self.mine.iter().map(|(_, s)| s.bytes()).sum();
        let device_share = match self.opts.opts.placement {
            PlacementKind::Device => 1.0,
            PlacementKind::Host => 0.0,
            PlacementKind::Hot | PlacementKind::Random => self.opts.alpha,
        };
        let dense = self.spec.dense_param_elems() as u64 * 4;
        let slots = self
            .opt_states
            .first()
            .map_or(0, |st| st.slots.len() as u64);
        let per_batch = 4
            * 4
            * (shards::split_elems(&self.mine, self.per) * self.ranks
                + self.per * self.tables() * self.spec.width()) as u64;
        let in_flight = if self.opts.opts.pipeline == crate::schedule::Mode::FourStage {
            2
        } else {
            1
        };
        for (class, bytes, what) in [
            (
                TensorClass::Params,
                (shard_bytes as f64 * device_share) as u64 + dense,
                "device-tier embedding rows and the dense replica",
            ),
            (TensorClass::Grads, dense, "dense gradients"),
            (
                TensorClass::OptimizerState,
                slots * dense,
                "dense optimizer state",
            ),
            (
                TensorClass::Buffers,
                in_flight * per_batch,
                "lookups, embeddings and their gradients in flight",
            ),
        ] {
            let what = what.to_string();
            ctx.memory_event(MemEvent::Allocate { class, bytes, what })
                .await?;
        }
        Ok(())
    }

    /// Starts communication task `task`.
    fn start_comm(
        &mut self,
        ctx: &mut RoleContext,
        cols: &mut Collectives,
        task: Task,
    ) -> Result<ActiveComm> {
        let b = task.batch;
        let Some(first) = OpKind::first_of(task.kind) else {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("{} is not a communication task", task.kind.label()),
            ));
        };
        if !self.batches.contains_key(&b) {
            self.load_batch(b)?;
        }
        let now = ctx.now();
        let mut send_at = now;
        if task.kind == Kind::FwdA2a && self.opts.opts.alltoall == AlltoallKind::Blocking {
            // NCCL moves device memory only: host-tier lookups are first copied to the device.
            let host = self.batch(b)?.host_elems;
            send_at += host as f64 * 4.0 / ctx.device().host_link_bytes_per_s();
        }
        if task.kind == Kind::Input {
            self.batch(b)?.started.get_or_insert(now);
        }
        let mut active = ActiveComm {
            task,
            op: first.op(b),
            started: now,
            send_at,
            sent: false,
            done_at: None,
        };
        if due(now, send_at) {
            self.send_comm(ctx, cols, &mut active)?;
        }
        Ok(active)
    }

    /// The sends of the active communication task (its arrival at the collective).
    fn send_comm(
        &mut self,
        ctx: &mut RoleContext,
        cols: &mut Collectives,
        active: &mut ActiveComm,
    ) -> Result<()> {
        let b = active.task.batch;
        let n = self.ranks;
        let kind = self.opts.opts.alltoall;
        let (op_kind, _) = OpKind::parse(active.op).unwrap_or((OpKind::Fwd, b));
        active.sent = true;
        match op_kind {
            OpKind::Allreduce => {
                let buf = self
                    .batch(b)?
                    .dense_sum
                    .take()
                    .unwrap_or(Payload::Virtual { elems: 0 });
                cols.start_ring(ctx, &self.group, active.op, buf)
            }
            OpKind::InputLengths => {
                let splits = vec![
                    Payload::Virtual {
                        elems: self.tables() as u64
                    };
                    n
                ];
                cols.arrive(ctx, &self.group, kind, active.op, splits)
            }
            OpKind::InputIndices => {
                // Each rank's own samples' ids (int64), to every rank whose shards look them up.
                let elems = (self.per * self.tables() * 2) as u64;
                cols.arrive(
                    ctx,
                    &self.group,
                    kind,
                    active.op,
                    vec![Payload::Virtual { elems }; n],
                )
            }
            OpKind::Fwd => {
                let splits = self.batch(b)?.fwd_splits.take().unwrap_or_default();
                cols.arrive(ctx, &self.group, kind, active.op, splits)
            }
            OpKind::Bwd => {
                let splits = self.batch(b)?.bwd_splits.take().unwrap_or_default();
                cols.arrive(ctx, &self.group, kind, active.op, splits)
            }
        }
    }

    /// Progresses the active communication task; `true` once it is finished.
    fn progress_comm(
        &mut self,
        ctx: &mut RoleContext,
        cols: &mut Collectives,
        active: &mut ActiveComm,
    ) -> Result<bool> {
        let now = ctx.now();
        if !active.sent {
            if !due(now, active.send_at) {
                return Ok(false);
            }
            self.send_comm(ctx, cols, active)?;
        }
        if let Some(done_at) = active.done_at {
            return Ok(due(now, done_at));
        }
        let b = active.task.batch;
        let (op_kind, _) = OpKind::parse(active.op).unwrap_or((OpKind::Fwd, b));
        match op_kind {
            OpKind::Allreduce => {
                if !cols.ring_done(active.op) {
                    return Ok(false);
                }
                let (sum, bytes) = cols
                    .take_ring(active.op)
                    .unwrap_or((Payload::Virtual { elems: 0 }, 0));
                let st = self.batch(b)?;
                st.dense_sum = Some(sum);
                st.bytes_sent += bytes;
                active.done_at = Some(now);
            }
            _ => {
                if !cols.exchange_done(active.op) {
                    return Ok(false);
                }
                let (parts, staged) = cols.take_exchange(active.op).unwrap_or_default();
                let op_bytes: u64 = parts.iter().map(Payload::bytes).sum();
                self.stats.staging(op_bytes, staged);
                let copy = staged as f64 / self.opts.copy_bytes_per_s();
                let width = self.spec.width();
                let st = self.batches.get_mut(&b).ok_or_else(|| {
                    EngineError::protocol(ctx.id(), format!("batch {b} is not loaded"))
                })?;
                match op_kind {
                    OpKind::InputLengths => {
                        // The indices follow the lengths on the same lane.
                        active.op = OpKind::InputIndices.op(b);
                        active.sent = false;
                        active.send_at = now + copy;
                        return Ok(false);
                    }
                    OpKind::Fwd => {
                        if parts.iter().all(|p| p.values().is_some()) {
                            let splits: Vec<Vec<f32>> = parts
                                .iter()
                                .map(|p| p.values().map(<[f32]>::to_vec).unwrap_or_default())
                                .collect();
                            st.emb = Some(shards::assemble(&self.plan, &splits, self.per, width));
                        }
                    }
                    OpKind::Bwd => st.grads_from = Some(parts),
                    OpKind::InputIndices | OpKind::Allreduce => {}
                }
                active.done_at = Some(now + copy);
                return Ok(copy < TICK_S);
            }
        }
        Ok(true)
    }
}

#[async_trait]
impl Worker for SvenWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let clocks = self.job.clocks();
        let program = Program::new(self.opts.opts.pipeline, clocks.start, clocks.end);
        if let Some(server) = self.input_server {
            for c in clocks.start..(clocks.start + 2).min(clocks.end) {
                ctx.send(server, Message::strategy(&Want { clock: c })?);
            }
        }
        self.hold_memory(ctx).await?;
        let mut cols = Collectives::default();
        let (mut ci, mut mi) = (0usize, 0usize);
        let mut computing: Option<(Task, f64, f64)> = None;
        let mut comm: Option<ActiveComm> = None;
        let mut records = Vec::new();
        let kind = self.opts.opts.alltoall;
        loop {
            let mut progressed = false;
            if let Some((task, started, at)) = computing {
                if due(ctx.now(), at) {
                    computing = None;
                    if let Some(r) = self.finish_compute(ctx, task, started)? {
                        records.push(r);
                    }
                    progressed = true;
                }
            }
            if let Some(mut active) = comm.take() {
                if self.progress_comm(ctx, &mut cols, &mut active)? {
                    let now = ctx.now();
                    self.stats.task(active.task, active.started, now);
                    let st = self.batch(active.task.batch)?;
                    st.comm_s += now - active.started;
                    self.done.insert(active.task);
                    progressed = true;
                } else {
                    comm = Some(active);
                }
            }
            if computing.is_none() {
                if let Some(&task) = program.compute.get(ci) {
                    if self.ready(task) {
                        let started = ctx.now();
                        let at = self.start_compute(ctx, task)?;
                        computing = Some((task, started, at));
                        ci += 1;
                        progressed = true;
                    }
                }
            }
            if comm.is_none() {
                if let Some(&task) = program.comm.get(mi) {
                    if self.ready(task) {
                        comm = Some(self.start_comm(ctx, &mut cols, task)?);
                        mi += 1;
                        progressed = true;
                    }
                }
            }
            if ci == program.compute.len()
                && mi == program.comm.len()
                && computing.is_none()
                && comm.is_none()
            {
                break;
            }
            if progressed {
                continue;
            }
            let mut deadline = f64::INFINITY;
            if let Some((_, _, at)) = computing {
                deadline = deadline.min(at);
            }
            if let Some(a) = &comm {
                if !a.sent {
                    deadline = deadline.min(a.send_at);
                }
                if let Some(d) = a.done_at {
                    deadline = deadline.min(d);
                }
            }
            if let Some(env) = ctx.recv_until(deadline).await? {
                if let Some(shard) = env.msg.decode::<crate::protocol::Shard>()? {
                    let got = self.chunks_in.entry(shard.clock).or_default();
                    *got += 1;
                    if *got == shard.chunks {
                        self.chunks_in.remove(&shard.clock);
                        self.shards_in.insert(shard.clock);
                    }
                } else {
                    cols.on_hop(ctx, &self.group, kind, env)?;
                }
            }
        }
        self.stats.publish(ctx, &self.opts);
        let values = self.values.as_deref();
        let model = ModelState {
            blocks: self.my_blocks(values),
            snapshots: std::mem::take(&mut self.snapshots),
            ..ModelState::default()
        };
        Ok(WorkerReport {
            iterations: records,
            model: Some(model),
            state: None,
        })
    }
}
