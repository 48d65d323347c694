//! A Sven rank: a GPU trainer holding its shards of the embedding tables (each row on the device
//! or the host tier) and a replica of the dense part, running its tasks on a compute lane and a
//! communication lane as one event loop (the communication lane is the thesis's background
//! thread, §6.1.1).
//!
//! - `batch`: where a batch's ids come from, and what the rank keeps of it;
//! - `tasks`: the compute lane's tasks, closing a clock, the rank's report and memory;
//! - `lane`: the communication lane's task in flight;
//! - `residency`: which tier each looked-up row is on;
//! - `comm`: the alltoalls and the allreduce in flight;
//! - `stats`: the measured stage times and the figures of the summary.
//!
//! Compute tasks are charged with [`RoleContext::compute_deferred`]: the math runs when the task
//! starts and its result counts from the time the cost model gives, while the loop keeps taking
//! the communication lane's messages.

mod batch;
mod comm;
mod lane;
mod residency;
mod stats;
mod tasks;

use crate::options::{PlacementKind, Resolved};
use crate::placement::{
    AccessCounts, DeviceCache, Eviction, Importance, Shard, ShardPlan, Tier, TierMap,
};
use crate::protocol::Want;
use crate::schedule::{Kind, Program, Task};
use crate::source::SampleSource;
use batch::BatchState;
use comm::Collectives;
use concord_engine::collective::Group;
use concord_engine::data::ZipfIds;
use concord_engine::model::{DlrmDense, DlrmSpec};
use concord_engine::optim::OptState;
use concord_engine::prelude::*;
use concord_engine::ps::Snapshot;
use lane::ActiveComm;
use residency::Residency;
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

/// What a rank carries across a checkpoint beside the values of its shards and of the dense
/// part (the blocks it reports): the dense part's optimizer state, how many batches' sparse
/// updates its tables hold, the warm-up's access counts (hot placement) or its device tier
/// (caches), its measurements, and where its Zipf draws stand (throughput mode). A cut drains
/// the pipeline, so no batch is in flight.
#[derive(serde::Serialize, serde::Deserialize)]
struct SvenWorkerState {
    opt_states: Vec<OptState>,
    sparse_applied: u64,
    counts: Option<AccessCounts>,
    cache: Option<DeviceCache>,
    stats: Stats,
    draws: Option<u128>,
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
    residency: Residency,
    counts: Option<AccessCounts>,
    source: SampleSource,
    per: usize,
    batches: BTreeMap<u64, BatchState>,
    done: BTreeSet<Task>,
    sparse_applied: u64,
    shards_in: BTreeSet<u64>,
    chunks_in: BTreeMap<u64, u32>,
    stats: Stats,
    snapshots: Vec<Snapshot>,
    input_server: Option<RoleId>,
    /// The first batch of this stretch of the job (0 unless it continues from a checkpoint).
    first_batch: u64,
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
        // Every rank draws the same global batches (the same seed), as it reads the same data.
        let source = SampleSource::for_job(&job, || {
            ZipfIds::new(&rows, opts.opts.zipf, job.config.seed)
                .map_err(|e| EngineError::Composition(e.to_string()))
        })?;
        let mine = plan.rank_shards(rank);
        let cache = |eviction| -> Result<Residency> {
            // A device tier of α of the rows this rank's shards hold.
            let held: usize = mine.iter().map(|(_, s)| s.rows.len()).sum();
            let capacity = (opts.alpha * held as f64).ceil() as usize;
            let o = &opts.opts;
            let importance = Importance::new(o.importance_beta, o.importance_k, o.importance_l)
                .map_err(|e| EngineError::Composition(e.to_string()))?;
            Ok(Residency::Cache(Box::new(
                DeviceCache::new(capacity, eviction)
                    .with_importance(importance)
                    .with_seed(job.config.seed),
            )))
        };
        let residency = match opts.opts.placement {
            PlacementKind::Hot | PlacementKind::Host => {
                Residency::Static(TierMap::all(&rows, Tier::Host))
            }
            PlacementKind::Device => Residency::Static(TierMap::all(&rows, Tier::Device)),
            PlacementKind::Random => Residency::Static(
                TierMap::random(&rows, opts.alpha, job.config.seed)
                    .map_err(|e| EngineError::Composition(e.to_string()))?,
            ),
            PlacementKind::Importance => cache(Eviction::Importance)?,
            PlacementKind::Lru => cache(Eviction::Lru)?,
            PlacementKind::EvictRandom => cache(Eviction::Random)?,
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
        let mut worker = SvenWorker {
            id,
            rank,
            ranks,
            mine,
            group: Group::workers(job.config.workers)?,
            values: job.init.clone(),
            opt_states,
            dense,
            residency,
            counts,
            source,
            per: job.config.batch as usize,
            batches: BTreeMap::new(),
            done: BTreeSet::new(),
            sparse_applied: 0,
            shards_in: BTreeSet::new(),
            chunks_in: BTreeMap::new(),
            stats: Stats::default().skip(opts.opts.warmup_iters.max(2)),
            snapshots: Vec::new(),
            input_server,
            first_batch: job.clocks().start,
            plan,
            spec,
            opts,
            job,
        };
        if let Some(cp) = worker.job.resumed(RoleId::Worker(id)) {
            worker.restore(&cp)?;
        }
        Ok(worker)
    }

    /// Continues from `cp`, this rank's checkpoint: its shards' values (its reported blocks), the
    /// dense part's (rank 0's: every rank applies the same dense update) and its own state.
    fn restore(&mut self, cp: &RoleCheckpoint) -> Result<()> {
        let role = RoleId::Worker(self.id);
        let state: SvenWorkerState = cp.decode_state(role, "Sven rank state")?;
        if let Some(values) = self.values.as_mut() {
            let missing = |whose: &str| {
                EngineError::protocol(role, format!("its checkpoint holds no blocks of {whose}"))
            };
            let own = cp.model.as_ref().ok_or_else(|| missing("its shards"))?;
            let first = self
                .job
                .resumed(RoleId::Worker(0))
                .and_then(|c| c.model)
                .ok_or_else(|| missing("the dense part (rank 0's)"))?;
            let (k, n) = (self.spec.num_tables(), values.len());
            self.job.layout.write_part(&own.blocks, 0..k, values);
            let dense = &mut values[k..];
            self.job.layout.write_part(&first.blocks, k..n, dense);
        }
        if state.opt_states.len() != self.opt_states.len() {
            return Err(EngineError::protocol(
                role,
                format!(
                    "its checkpoint holds optimizer state of {} dense tensors, the model has {}",
                    state.opt_states.len(),
                    self.opt_states.len()
                ),
            ));
        }
        self.opt_states = state.opt_states;
        self.sparse_applied = state.sparse_applied;
        if state.counts.is_some() {
            self.counts = state.counts;
        }
        if let (Residency::Cache(cache), Some(saved)) = (&mut self.residency, state.cache) {
            **cache = saved;
        }
        // Hot placement: the warm-up's top α, once the warm-up is over.
        let warmup = self.opts.opts.warmup_iters;
        if let Some(counts) = self.counts.as_ref() {
            if warmup > 0 && self.first_batch >= warmup {
                self.residency = Residency::Static(
                    TierMap::hot_top_alpha(counts, self.opts.alpha)
                        .map_err(|e| EngineError::protocol(role, e.to_string()))?,
                );
            }
        }
        self.stats = state.stats;
        self.source.set_position(state.draws);
        Ok(())
    }

    /// This rank's state after the last batch of its stretch, for a checkpoint.
    fn state(&mut self) -> SvenWorkerState {
        SvenWorkerState {
            opt_states: self.opt_states.clone(),
            sparse_applied: self.sparse_applied,
            counts: self.counts.clone(),
            cache: match &self.residency {
                Residency::Cache(cache) => Some((**cache).clone()),
                Residency::Static(_) => None,
            },
            stats: std::mem::take(&mut self.stats),
            draws: self.source.position(),
        }
    }

    fn tables(&self) -> usize {
        self.spec.num_tables()
    }

    /// Whether `task` may start: its dependencies done (those of batches before this stretch
    /// of the job were, before its checkpoint), and for a sparse forward of an offloaded input,
    /// its shard from the input service arrived.
    fn ready(&self, task: Task) -> bool {
        let mode = self.opts.opts.pipeline;
        let first = self.first_batch;
        let input_ok = task.kind != Kind::Sfp
            || self.input_server.is_none()
            || self.shards_in.contains(&task.batch);
        input_ok
            && task
                .deps(mode)
                .iter()
                .all(|d| d.batch < first || self.done.contains(d))
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
        let state = RoleState::encode(&self.state())?;
        Ok(WorkerReport {
            iterations: records,
            model: Some(model),
            state: Some(state),
        })
    }
}
