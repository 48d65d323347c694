//! A parameter server of the baseline: its row shard of every embedding table and the dense
//! tensors dealt to it, read and updated as requests arrive, with no synchronization among
//! workers (TensorFlow's asynchronous parameter server, thesis §6.2).
//!
//! - A [`Pull`] is answered with the current values; the server remembers how many pushes it
//!   had applied then, to measure the staleness of the worker's push that follows.
//! - A [`Push`] is applied on arrival: row-wise SGD at the run's learning rate on the rows it
//!   names (one gradient per unique id), the run's optimizer on the dense tensors.
//! - Costs: each row read or updated costs `row_ns` (host memory), the dense update its
//!   optimizer FLOPs. Copying the dense values into a reply is not charged: it moves the same
//!   bytes as the network does, at host memory bandwidth (tens of GB/s against a NIC's few),
//!   and the link model charges the network.
//! - Snapshots for offline evaluation: one "iteration" of the cluster is one push from every
//!   worker, so the server snapshots after every `eval_every × workers` pushes it applied, as
//!   iteration `pushes / workers`. Every worker pushes to every server once per clock, so all
//!   servers' snapshots of an iteration exist; an asynchronous run has no common model at that
//!   iteration, and each server's snapshot is its values after that many pushes.

use super::layout::{dense_owner, rows_of, server_plan};
use super::options::AsyncPsOptions;
use super::protocol::{Pull, Push, RequestError, Rows};
use concord_engine::model::{gather_rows, sgd_rows};
use concord_engine::optim::{OptState, OptimizerConfig};
use concord_engine::prelude::*;
use concord_engine::ps::{ParamLayout, Snapshot, TimedSnapshots};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// A server's rows of one table: `[width, rows.len()]` dimension-major (`None` in throughput
/// mode).
struct LocalTable {
    rows: Range<usize>,
    values: Option<Vec<f32>>,
}

/// A dense tensor the server holds, with its optimizer state.
struct DenseTensor {
    value: Payload,
    opt: OptState,
}

/// Where a worker's pull found the server: pushes applied in all, and the worker's own.
#[derive(Clone, Copy)]
struct PullMark {
    applied: u64,
    own: u64,
}

/// What a server carries across a checkpoint beside its values (the run's model): the pushes
/// it applied, in all and by worker, the staleness it has yet to tell each worker, and its dense
/// tensors' optimizer state.
#[derive(serde::Serialize, serde::Deserialize)]
struct AsyncServerState {
    applied: u64,
    applied_by: Vec<u64>,
    staleness: Vec<Vec<u64>>,
    dense_opt: BTreeMap<usize, OptState>,
}

/// One asynchronous parameter server.
pub struct AsyncPsServer {
    id: ServerId,
    workers: u32,
    width: usize,
    table_rows: Vec<usize>,
    tables: Vec<LocalTable>,
    dense: BTreeMap<usize, DenseTensor>,
    layout: Arc<ParamLayout>,
    lr: f32,
    optimizer: OptimizerConfig,
    row_s: f64,
    applied: u64,
    applied_by: Vec<u64>,
    pulls: BTreeMap<(WorkerId, u64), PullMark>,
    staleness: Vec<Vec<u64>>,
    snapshot_every: u64,
    snapshots: Vec<Snapshot>,
    timed: TimedSnapshots<Vec<BlockPayload>>,
}

impl AsyncPsServer {
    /// Server `id` of `job`, initialised from the job's initial values (virtual payloads in
    /// throughput mode).
    pub fn new(job: &Job, id: ServerId, opts: &AsyncPsOptions) -> Result<AsyncPsServer> {
        let role = RoleId::Server(id);
        let spec = job.model.dlrm().ok_or_else(|| {
            EngineError::Composition(format!(
                "`dlrm-async-ps` trains a DLRM (`[model] kind = \"dlrm\"`, or a dlrm-* profile), not a {} model",
                job.model.kind()
            ))
        })?;
        let servers = job.config.servers as usize;
        let width = spec.width();
        let k = spec.num_tables();
        let shapes: Vec<(usize, usize)> = spec.fields.iter().map(|&r| (r, width)).collect();
        let plan = server_plan(&shapes, servers).ok_or_else(|| {
            EngineError::protocol(
                role,
                format!("no row-wise plan of {k} tables over {servers} servers"),
            )
        })?;
        let init = job.init.as_deref();
        let tables = (0..k)
            .map(|t| {
                let rows = rows_of(&plan, t, id as usize);
                let total = spec.fields[t];
                let values = init.map(|v| {
                    (0..width)
                        .flat_map(|c| v[t][c * total + rows.start..c * total + rows.end].iter())
                        .copied()
                        .collect()
                });
                LocalTable { rows, values }
            })
            .collect();
        let params = job.layout.params();
        let dense = spec
            .dense_param_range()
            .filter(|&p| dense_owner(p, k, servers) == id as usize)
            .map(|p| {
                let elems = params[p].elems();
                let (value, opt) = match init {
                    Some(v) => (
                        Payload::Real(v[p].clone()),
                        job.config.optimizer.init_state(elems),
                    ),
                    None => (
                        Payload::Virtual {
                            elems: elems as u64,
                        },
                        OptState::default(),
                    ),
                };
                (p, DenseTensor { value, opt })
            })
            .collect();
        let workers = job.config.workers;
        let mut server = AsyncPsServer {
            id,
            workers,
            width,
            table_rows: spec.fields.clone(),
            tables,
            dense,
            layout: job.layout.clone(),
            lr: job.config.optimizer.lr() as f32,
            optimizer: job.config.optimizer.clone(),
            row_s: opts.row_s(),
            applied: 0,
            applied_by: vec![0; workers as usize],
            pulls: BTreeMap::new(),
            staleness: vec![Vec::new(); workers as usize],
            snapshot_every: job.config.eval_every.max(1) * u64::from(workers.max(1)),
            snapshots: Vec::new(),
            timed: TimedSnapshots::new(job.config.eval_every_s),
        };
        if let Some(cp) = job.resumed(role) {
            server.restore(&cp)?;
        }
        Ok(server)
    }

    /// Continues from `cp`, this server's checkpoint: its rows and dense values (the blocks it
    /// reported), their optimizer state and its counts.
    fn restore(&mut self, cp: &RoleCheckpoint) -> Result<()> {
        let role = RoleId::Server(self.id);
        let state: AsyncServerState = cp.decode_state(role, "dlrm-async-ps server state")?;
        let workers = self.workers as usize;
        if state.applied_by.len() != workers || state.staleness.len() != workers {
            return Err(EngineError::protocol(
                role,
                format!(
                    "its checkpoint counts pushes of {} workers, the job has {workers}",
                    state.applied_by.len()
                ),
            ));
        }
        let own = self.layout.blocks_of(self.id);
        let model = cp.checked_blocks(role, own.len(), |id| {
            own.iter().find(|b| b.id == id).map(|b| b.len as u64)
        })?;
        let k = self.tables.len();
        for bp in &model.blocks {
            let (Some(b), Some(values)) = (own.iter().find(|b| b.id == bp.block), bp.data.values())
            else {
                continue;
            };
            if b.param < k {
                let t = &mut self.tables[b.param];
                let total = self.table_rows[b.param];
                let len = t.rows.len();
                if let Some(v) = t.values.as_mut() {
                    for (i, &x) in (b.offset..b.offset + b.len).zip(values) {
                        v[(i / total) * len + (i % total) - t.rows.start] = x;
                    }
                }
            } else if let Some(Payload::Real(v)) =
                self.dense.get_mut(&b.param).map(|d| &mut d.value)
            {
                v[b.offset..b.offset + b.len].copy_from_slice(values);
            }
        }
        for (p, opt) in state.dense_opt {
            if let Some(d) = self.dense.get_mut(&p) {
                d.opt = opt;
            }
        }
        self.applied = state.applied;
        self.applied_by = state.applied_by;
        self.staleness = state.staleness;
        Ok(())
    }

    /// The ids of a request as local row indices per table, each checked to be this server's.
    fn local_ids(
        &self,
        what: &'static str,
        worker: WorkerId,
        ids: &[Vec<u32>],
    ) -> std::result::Result<Vec<Vec<u32>>, RequestError> {
        if ids.len() != self.tables.len() {
            return Err(RequestError::Tables {
                what,
                worker,
                got: ids.len(),
                want: self.tables.len(),
            });
        }
        ids.iter()
            .zip(&self.tables)
            .enumerate()
            .map(|(table, (ids, t))| {
                ids.iter()
                    .map(|&id| {
                        if t.rows.contains(&(id as usize)) {
                            Ok(id - t.rows.start as u32)
                        } else {
                            Err(RequestError::NotHeld {
                                what,
                                worker,
                                table,
                                id,
                                start: t.rows.start,
                                end: t.rows.end,
                            })
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// Answers a pull: the rows asked for and the dense tensors, after the lookup's cost.
    async fn on_pull(&mut self, ctx: &mut RoleContext, worker: WorkerId, pull: Pull) -> Result<()> {
        let local = self
            .local_ids("pull", worker, &pull.ids)
            .map_err(|e| EngineError::protocol(ctx.id(), e.to_string()))?;
        let n: usize = local.iter().map(Vec::len).sum();
        let rows = if self.tables.iter().all(|t| t.values.is_some()) {
            let mut out = Vec::with_capacity(n * self.width);
            for (t, ids) in self.tables.iter().zip(&local) {
                if let Some(v) = &t.values {
                    out.extend(gather_rows(v, t.rows.len(), ids, 0..self.width));
                }
            }
            Payload::Real(out)
        } else {
            Payload::Virtual {
                elems: (n * self.width) as u64,
            }
        };
        let mut payloads = vec![rows];
        payloads.extend(self.dense.values().map(|d| d.value.clone()));
        self.pulls.insert(
            (worker, pull.clock),
            PullMark {
                applied: self.applied,
                own: self.applied_by[worker as usize],
            },
        );
        ctx.compute("lookup", Work::modeled(n as f64 * self.row_s), || ())
            .await;
        let reply = Rows {
            clock: pull.clock,
            applied: self.applied,
            staleness: std::mem::take(&mut self.staleness[worker as usize]),
        };
        ctx.send(
            RoleId::Worker(worker),
            Message::strategy_with(&reply, payloads)?,
        );
        Ok(())
    }

    /// Applies a push on arrival and charges its cost.
    async fn on_push(
        &mut self,
        ctx: &mut RoleContext,
        worker: WorkerId,
        push: Push,
        payloads: Vec<Payload>,
    ) -> Result<()> {
        let bad = |e: RequestError| EngineError::protocol(RoleId::Server(self.id), e.to_string());
        let local = self.local_ids("push", worker, &push.ids).map_err(bad)?;
        let mark = self.pulls.remove(&(worker, push.clock)).ok_or_else(|| {
            bad(RequestError::Unpulled {
                worker,
                clock: push.clock,
            })
        })?;
        let n: usize = local.iter().map(Vec::len).sum();
        let mut parts = payloads.into_iter().skip(1);
        let rows = parts.next().unwrap_or(Payload::Virtual { elems: 0 });
        let dense: Vec<Payload> = parts.collect();
        if dense.len() != self.dense.len() {
            return Err(bad(RequestError::Size {
                worker,
                part: "dense tensors".into(),
                got: dense.len(),
                want: self.dense.len(),
            }));
        }
        if rows.elems() != (n * self.width) as u64 {
            return Err(bad(RequestError::Size {
                worker,
                part: "rows".into(),
                got: rows.elems() as usize,
                want: n * self.width,
            }));
        }
        for ((&p, d), g) in self.dense.iter().zip(&dense) {
            if g.elems() != d.value.elems() {
                return Err(bad(RequestError::Size {
                    worker,
                    part: format!("parameter {p}"),
                    got: g.elems() as usize,
                    want: d.value.elems() as usize,
                }));
            }
        }
        let now = ctx.now();
        // Taken out for the call: the values are made (from `self`) only when a time is due.
        let mut timed = std::mem::replace(&mut self.timed, TimedSnapshots::new(None));
        timed.before_change(now, || self.blocks());
        self.timed = timed;
        if let Some(g) = rows.values() {
            let mut at = 0;
            for (t, ids) in self.tables.iter_mut().zip(&local) {
                let len = ids.len() * self.width;
                if let Some(v) = t.values.as_mut() {
                    sgd_rows(
                        v,
                        t.rows.len(),
                        ids,
                        &g[at..at + len],
                        0..self.width,
                        self.lr,
                    );
                }
                at += len;
            }
        }
        let mut dense_elems = 0u64;
        for (d, g) in self.dense.values_mut().zip(&dense) {
            dense_elems += g.elems();
            if let (Payload::Real(v), Some(g)) = (&mut d.value, g.values()) {
                self.optimizer.step(v, g, &mut d.opt);
            }
        }
        let w = worker as usize;
        let others = (self.applied - mark.applied) - (self.applied_by[w] - mark.own);
        self.staleness[w].push(others);
        self.applied += 1;
        self.applied_by[w] += 1;
        ctx.compute("update", Work::modeled(n as f64 * self.row_s), || ())
            .await;
        if dense_elems > 0 {
            ctx.serve(
                "apply",
                self.optimizer.flops_per_elem() * dense_elems as f64,
            )
            .await;
        }
        if self.applied.is_multiple_of(self.snapshot_every) {
            self.snapshots.push(Snapshot {
                iterations: self.applied / u64::from(self.workers.max(1)),
                time_s: ctx.now(),
                blocks: self.blocks(),
            });
        }
        Ok(())
    }

    /// The server's layout blocks with their current values.
    fn blocks(&self) -> Vec<BlockPayload> {
        let k = self.tables.len();
        self.layout
            .blocks_of(self.id)
            .into_iter()
            .map(|b| {
                let data = if b.param < k {
                    let t = &self.tables[b.param];
                    let total = self.table_rows[b.param];
                    let len = t.rows.len();
                    match &t.values {
                        Some(v) => Payload::Real(
                            (b.offset..b.offset + b.len)
                                .map(|i| v[(i / total) * len + (i % total) - t.rows.start])
                                .collect(),
                        ),
                        None => Payload::Virtual {
                            elems: b.len as u64,
                        },
                    }
                } else {
                    match self.dense.get(&b.param).map(|d| &d.value) {
                        Some(Payload::Real(v)) => {
                            Payload::Real(v[b.offset..b.offset + b.len].to_vec())
                        }
                        _ => Payload::Virtual {
                            elems: b.len as u64,
                        },
                    }
                };
                BlockPayload { block: b.id, data }
            })
            .collect()
    }
}

#[async_trait]
impl ServerHandler for AsyncPsServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let RoleId::Worker(w) = env.from else {
            return Err(unexpected(ctx, &env));
        };
        if w >= self.workers {
            return Err(unexpected(ctx, &env));
        }
        if let Some(pull) = env.msg.decode::<Pull>()? {
            return self.on_pull(ctx, w, pull).await;
        }
        if let Some(push) = env.msg.decode::<Push>()? {
            let payloads = match env.msg {
                Message::Custom(m) => m.payloads,
                _ => Vec::new(),
            };
            return self.on_push(ctx, w, push, payloads).await;
        }
        Err(unexpected(ctx, &env))
    }

    fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
        // A checkpoint is a consistent cut: every pull has had its push applied (else there is
        // no state to continue from, and a resume says so).
        let state = if self.pulls.is_empty() {
            Some(RoleState::encode(&AsyncServerState {
                applied: self.applied,
                applied_by: self.applied_by.clone(),
                staleness: self.staleness.clone(),
                dense_opt: self
                    .dense
                    .iter()
                    .map(|(&p, d)| (p, d.opt.clone()))
                    .collect(),
            })?)
        } else {
            None
        };
        let model = ModelState {
            blocks: self.blocks(),
            snapshots: std::mem::take(&mut self.snapshots),
            timed: self.timed.report(),
            ..ModelState::default()
        };
        Ok(ServerReport {
            model,
            version: (self.applied / u64::from(self.workers.max(1))) as i64 - 1,
            state,
            ..ServerReport::default()
        })
    }
}

#[async_trait]
impl Server for AsyncPsServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}
