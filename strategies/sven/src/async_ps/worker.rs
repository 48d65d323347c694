//! A worker of the parameter-server baseline. Per clock it takes its own batch, pulls the
//! unique rows its batch looks up and the dense parameters from the servers holding them, steps
//! the dense part, pushes the row gradients (one per unique id, duplicates summed) and the dense
//! gradients, and goes on to the next clock without waiting for the pushes to be applied: the
//! servers apply every push on arrival, so staleness is unbounded.

use super::batch::TableIds;
use super::layout::{dense_owner, rows_of, server_plan};
use super::options::AsyncPsOptions;
use super::protocol::{ids_payload, Pull, Push, Rows};
use crate::placement::ShardPlan;
use crate::source::SampleSource;
use concord_engine::data::ZipfIds;
use concord_engine::memory::{MemEvent, TensorClass};
use concord_engine::model::{DenseStep, DlrmDense, DlrmSpec};
use concord_engine::prelude::*;
use std::ops::Range;
use std::sync::Arc;

/// Seed offset of a worker's own Zipf draw stream (throughput mode), apart from other streams
/// derived from the run seed.
const ZIPF_DRAWS: u64 = 0xA5F5_0000;

/// One clock's batch: its ids by table, dense features and labels (empty in throughput mode).
struct Batch {
    ids: TableIds,
    dense_x: Vec<f32>,
    labels: Vec<u32>,
}

/// The staleness of this worker's pushes the servers reported.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Staleness {
    sum: u64,
    count: u64,
    max: u64,
}

/// What a worker carries across a checkpoint: the staleness its pushes met so far (its figures
/// cover the whole run) and where its Zipf draws stand (throughput mode).
#[derive(serde::Serialize, serde::Deserialize)]
struct AsyncWorkerState {
    staleness: Staleness,
    draws: Option<u128>,
}

/// One worker of `dlrm-async-ps`.
pub struct AsyncPsWorker {
    id: WorkerId,
    job: Arc<Job>,
    spec: DlrmSpec,
    plan: ShardPlan,
    servers: usize,
    per: usize,
    dense: Option<DlrmDense>,
    source: SampleSource,
    staleness: Staleness,
}

impl AsyncPsWorker {
    /// Worker `id` of `job`.
    pub fn new(job: Arc<Job>, id: WorkerId, opts: &AsyncPsOptions) -> Result<AsyncPsWorker> {
        let spec = job.model.dlrm().cloned().ok_or_else(|| {
            EngineError::Composition(format!(
                "`dlrm-async-ps` trains a DLRM (`[model] kind = \"dlrm\"`, or a dlrm-* profile), not a {} model",
                job.model.kind()
            ))
        })?;
        let servers = job.config.servers as usize;
        let shapes: Vec<(usize, usize)> = spec.fields.iter().map(|&r| (r, spec.width())).collect();
        let plan = server_plan(&shapes, servers).ok_or_else(|| {
            EngineError::config(
                "servers",
                servers,
                "`dlrm-async-ps` keeps the tables on parameter servers: set servers >= 1",
            )
        })?;
        let device = concord_engine::gpu::tensor_device(job.cluster.gpu_of(RoleId::Worker(id)))?;
        let dense = match &job.data {
            Some(_) => Some(DlrmDense::new(&spec, &device)?),
            None => None,
        };
        // Each worker draws its own batches (its own stream), as it reads its own samples.
        let source = SampleSource::for_job(&job, || {
            let z = ZipfIds::new(&spec.fields, opts.zipf, job.config.seed)
                .map_err(|e| EngineError::Composition(e.to_string()))?;
            Ok(z.with_draw_seed(job.config.seed ^ (ZIPF_DRAWS + u64::from(id))))
        })?;
        let mut worker = AsyncPsWorker {
            id,
            per: job.config.batch as usize,
            job,
            spec,
            plan,
            servers,
            dense,
            source,
            staleness: Staleness::default(),
        };
        if let Some(cp) = worker.job.resumed(RoleId::Worker(id)) {
            let state: AsyncWorkerState =
                cp.decode_state(RoleId::Worker(id), "dlrm-async-ps worker state")?;
            worker.staleness = state.staleness;
            worker.source.set_position(state.draws);
        }
        Ok(worker)
    }

    /// The batch of `clock`: samples `clock·workers·batch + id·batch ..` of the job's stream, or
    /// Zipf draws.
    fn batch(&mut self, clock: u64) -> Result<Batch> {
        let k = self.spec.num_tables();
        let workers = u128::from(self.job.config.workers);
        let per = self.per as u128;
        let at = u128::from(clock) * workers * per + u128::from(self.id) * per;
        let job = self.job.clone();
        let samples = self.source.take(
            &job,
            "dlrm-async-ps",
            RoleId::Worker(self.id),
            at,
            self.per,
            k,
        )?;
        Ok(Batch {
            ids: TableIds::new(&samples.ids, k),
            dense_x: samples.dense_x,
            labels: samples.labels,
        })
    }

    /// Per table, the positions in the batch's unique ids that server `s` holds.
    fn ranges(&self, ids: &TableIds, s: usize) -> Vec<Range<usize>> {
        (0..self.spec.num_tables())
            .map(|k| ids.within(k, &rows_of(&self.plan, k, s)))
            .collect()
    }

    /// The dense parameters (indices into the model's parameters) server `s` holds, in order.
    fn dense_of(&self, s: usize) -> Vec<usize> {
        let k = self.spec.num_tables();
        self.spec
            .dense_param_range()
            .filter(|&p| dense_owner(p, k, self.servers) == s)
            .collect()
    }

    /// Pulls the batch's rows and the dense parameters; returns the rows per table (`[unique,
    /// width]`), the dense values in layout order (empty in throughput mode), the fewest pushes
    /// any server had applied, and the bytes sent.
    async fn pull(
        &mut self,
        ctx: &mut RoleContext,
        clock: u64,
        ids: &TableIds,
        ranges: &[Vec<Range<usize>>],
    ) -> Result<(Vec<Vec<f32>>, Vec<Vec<f32>>, u64, u64)> {
        let width = self.spec.width();
        let k = self.spec.num_tables();
        let mut bytes = 0;
        for (s, r) in ranges.iter().enumerate() {
            let want: Vec<Vec<u32>> = r
                .iter()
                .enumerate()
                .map(|(t, r)| ids.unique[t][r.clone()].to_vec())
                .collect();
            let charge = ids_payload(&want);
            let msg = Message::strategy_with(&Pull { clock, ids: want }, vec![charge])?;
            bytes += msg.wire_bytes();
            ctx.send(RoleId::Server(s as ServerId), msg);
        }
        let mut rows: Vec<Vec<f32>> = ids
            .unique
            .iter()
            .map(|u| vec![0.0; u.len() * width])
            .collect();
        let mut dense: Vec<Vec<f32>> = Vec::new();
        if self.dense.is_some() {
            let params = self.job.layout.params();
            dense = self
                .spec
                .dense_param_range()
                .map(|p| vec![0.0; params[p].elems()])
                .collect();
        }
        let mut applied = u64::MAX;
        for _ in 0..self.servers {
            let env = ctx
                .recv_matching(|e| {
                    matches!(e.from, RoleId::Server(_))
                        && e.msg
                            .decode::<Rows>()
                            .ok()
                            .flatten()
                            .is_some_and(|r| r.clock == clock)
                })
                .await?;
            let RoleId::Server(s) = env.from else {
                return Err(unexpected(ctx, &env));
            };
            let Some(reply) = env.msg.decode::<Rows>()? else {
                return Err(unexpected(ctx, &env));
            };
            applied = applied.min(reply.applied);
            for &x in &reply.staleness {
                self.staleness.sum += x;
                self.staleness.count += 1;
                self.staleness.max = self.staleness.max.max(x);
            }
            let payloads = match env.msg {
                Message::Custom(m) => m.payloads,
                _ => Vec::new(),
            };
            let s = s as usize;
            let owned = self.dense_of(s);
            if payloads.len() != owned.len() + 1 {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "server {s} answered with {} payloads, expected {} (rows and {} dense tensors)",
                        payloads.len(),
                        owned.len() + 1,
                        owned.len()
                    ),
                ));
            }
            if let Some(v) = payloads[0].values() {
                let mut at = 0;
                for (t, r) in ranges[s].iter().enumerate() {
                    let len = r.len() * width;
                    let src = v.get(at..at + len).ok_or_else(|| {
                        EngineError::protocol(
                            ctx.id(),
                            format!("server {s} sent {} row values, fewer than asked", v.len()),
                        )
                    })?;
                    rows[t][r.start * width..r.end * width].copy_from_slice(src);
                    at += len;
                }
            }
            for (p, payload) in owned.iter().zip(&payloads[1..]) {
                if let (Some(dst), Some(v)) = (dense.get_mut(p - k), payload.values()) {
                    if dst.len() != v.len() {
                        return Err(EngineError::protocol(
                            ctx.id(),
                            format!(
                                "server {s} sent {} values of parameter {p}, not {}",
                                v.len(),
                                dst.len()
                            ),
                        ));
                    }
                    dst.copy_from_slice(v);
                }
            }
        }
        Ok((rows, dense, applied, bytes))
    }

    /// Pushes one clock's gradients to every server (no acknowledgement awaited); returns the
    /// bytes sent.
    fn push(
        &self,
        ctx: &mut RoleContext,
        clock: u64,
        ids: &TableIds,
        ranges: &[Vec<Range<usize>>],
        step: Option<&DenseStep>,
    ) -> Result<u64> {
        let width = self.spec.width();
        let k = self.spec.num_tables();
        let sums = step.map(|st| ids.sum_grads(&st.emb_grad, width));
        let mut bytes = 0;
        for (s, r) in ranges.iter().enumerate() {
            let want: Vec<Vec<u32>> = r
                .iter()
                .enumerate()
                .map(|(t, r)| ids.unique[t][r.clone()].to_vec())
                .collect();
            let n: usize = r.iter().map(Range::len).sum();
            let rows = match &sums {
                Some(sums) => Payload::Real(
                    r.iter()
                        .enumerate()
                        .flat_map(|(t, r)| sums[t][r.start * width..r.end * width].iter())
                        .copied()
                        .collect(),
                ),
                None => Payload::Virtual {
                    elems: (n * width) as u64,
                },
            };
            let mut payloads = vec![ids_payload(&want), rows];
            for p in self.dense_of(s) {
                payloads.push(match step {
                    Some(st) => Payload::Real(st.grads[p - k].clone()),
                    None => Payload::Virtual {
                        elems: self.job.layout.params()[p].elems() as u64,
                    },
                });
            }
            let msg = Message::strategy_with(&Push { clock, ids: want }, payloads)?;
            bytes += msg.wire_bytes();
            ctx.send(RoleId::Server(s as ServerId), msg);
        }
        Ok(bytes)
    }

    /// Reports what the worker keeps all run to its memory policy: the dense parameters and
    /// their gradients, and one batch's pulled rows with their gradients (the tables stay on the
    /// servers).
    async fn hold_memory(&self, ctx: &mut RoleContext) -> Result<()> {
        let dense = self.spec.dense_param_elems() as u64 * 4;
        let rows = (self.per * self.spec.num_tables() * self.spec.width()) as u64 * 4;
        for (class, bytes, what) in [
            (TensorClass::Params, dense, "dense parameters"),
            (TensorClass::Grads, dense, "dense gradients"),
            (
                TensorClass::Buffers,
                2 * rows,
                "pulled rows and their gradients",
            ),
        ] {
            let what = what.to_string();
            ctx.memory_event(MemEvent::Allocate { class, bytes, what })
                .await?;
        }
        Ok(())
    }

    /// One clock: pull, step, push.
    async fn clock(&mut self, ctx: &mut RoleContext, clock: u64) -> Result<IterRecord> {
        ctx.set_iter(clock);
        let start = ctx.now();
        let batch = self.batch(clock)?;
        let ranges: Vec<Vec<Range<usize>>> = (0..self.servers)
            .map(|s| self.ranges(&batch.ids, s))
            .collect();
        let (rows, dense_values, applied, pull_bytes) =
            self.pull(ctx, clock, &batch.ids, &ranges).await?;
        let pulled = ctx.now();
        let work = Work::training_step(self.job.model.training_flops_per_sample(), self.per as f64);
        let width = self.spec.width();
        let dense = self.dense.as_ref();
        let out = ctx
            .compute("step", work, || {
                dense.map(|d| {
                    let emb = batch.ids.assemble(&rows, width);
                    d.set_params(&dense_values)?;
                    d.step(&emb, &batch.dense_x, &batch.labels)
                })
            })
            .await;
        let step = match out {
            Some(r) => {
                let step = r?;
                check_loss(ctx, &self.job, clock, step.loss)?;
                Some(step)
            }
            None => None,
        };
        let computed = ctx.now();
        let push_bytes = self.push(ctx, clock, &batch.ids, &ranges, step.as_ref())?;
        ctx.set_iter(clock + 1);
        let workers = u64::from(self.job.config.workers.max(1));
        let tally = ClockTally {
            samples: self.per as u64,
            compute_s: computed - pulled,
            wait_s: 0.0,
            comm_s: pulled - start,
            loss: step.as_ref().map_or(f64::NAN, |s| s.loss),
            version_read: (applied / workers) as i64 - 1,
            bytes_sent: pull_bytes + push_bytes,
        };
        Ok(close_clock(ctx, &self.job, clock, start, tally))
    }
}

#[async_trait]
impl Worker for AsyncPsWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        self.hold_memory(ctx).await?;
        let clocks = self.job.clocks();
        let mut records = Vec::with_capacity((clocks.end - clocks.start) as usize);
        for clock in clocks {
            records.push(self.clock(ctx, clock).await?);
        }
        let st = &self.staleness;
        if st.count > 0 {
            ctx.set_figure("async_ps.mean_staleness", st.sum as f64 / st.count as f64);
        } else {
            ctx.set_figure("async_ps.mean_staleness", 0.0);
        }
        ctx.set_figure("async_ps.max_staleness", st.max as f64);
        let state = AsyncWorkerState {
            staleness: std::mem::take(&mut self.staleness),
            draws: self.source.position(),
        };
        Ok(WorkerReport {
            iterations: records,
            model: None,
            state: Some(RoleState::encode(&state)?),
        })
    }
}
