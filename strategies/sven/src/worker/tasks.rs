//! The compute lane's tasks: sparse forward (lookups), dense forward and backward, sparse
//! backward fused with the row-wise update, the dense optimizer step; closing a clock; what the
//! rank reports and holds in device memory.

use super::residency::{Lookups, Residency};
use super::{PlacementKind, SvenWorker};
use crate::placement::TierMap;
use crate::protocol::Want;
use crate::schedule::{staleness, Kind, Task, STALENESS_BOUND};
use crate::shards::{self, BatchIds};
use concord_engine::memory::{MemEvent, TensorClass};
use concord_engine::prelude::*;
use concord_engine::ps::Snapshot;
use std::sync::Arc;

impl SvenWorker {
    /// Seconds of this rank's lookups (or, the same rows, updates) of a batch: per row by
    /// tier, host rows also crossing PCIe.
    fn sparse_seconds(&self, ctx: &RoleContext, l: Lookups) -> f64 {
        let pcie = l.host_elems as f64 * 4.0 / ctx.device().host_link_bytes_per_s();
        l.device as f64 * self.opts.device_row_s() + l.host as f64 * self.opts.host_row_s() + pcie
    }

    /// Starts compute task `task`; returns when its result is ready.
    pub(super) fn start_compute(&mut self, ctx: &mut RoleContext, task: Task) -> Result<f64> {
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
                let clicks = std::mem::take(&mut self.batch(b)?.clicks);
                let lookups = self.residency.lookups(&self.mine, &ids, &clicks);
                if !warm {
                    self.stats.device_rows += lookups.device;
                    self.stats.host_rows += lookups.host;
                }
                let seconds = self.sparse_seconds(ctx, lookups);
                let splits = match &self.values {
                    Some(values) => {
                        let tables = &values[..self.tables()];
                        shards::forward_splits(&self.mine, &ids, tables, &rows, n, per)
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
                st.lookups = lookups;
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
                    .as_deref()
                    .map(|v| &v[self.spec.dense_param_range()]);
                let dense = self.dense.as_ref();
                let st = self.batches.get_mut(&b).ok_or_else(|| {
                    EngineError::protocol(ctx.id(), format!("batch {b} is not loaded"))
                })?;
                let step = match (dense, &st.emb, dense_values) {
                    (Some(d), Some(emb), Some(v)) => {
                        d.set_params(v)?;
                        Some(d.step(emb, &st.dense_x, &st.labels)?)
                    }
                    _ => None,
                };
                if let Some(step) = &step {
                    check_loss(ctx, &self.job, b, step.loss)?;
                }
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
                let lookups = self.batch(b)?.lookups;
                let seconds = self.sparse_seconds(ctx, lookups);
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
    pub(super) fn finish_compute(
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
                    self.residency = Residency::Static(
                        TierMap::hot_top_alpha(counts, self.opts.alpha)
                            .map_err(|e| EngineError::protocol(ctx.id(), e.to_string()))?,
                    );
                }
            }
            Kind::Sbp => {
                // A batch's sparse update is its last task: nothing of it is needed any more.
                self.sparse_applied = task.batch + 1;
                self.batches.remove(&task.batch);
            }
            Kind::Opt => return self.close(ctx, task.batch).map(Some),
            _ => {}
        }
        Ok(None)
    }

    /// Closes clock `b` once its dense update is applied.
    pub(super) fn close(&mut self, ctx: &mut RoleContext, b: u64) -> Result<IterRecord> {
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
    pub(super) fn my_blocks(&self, values: Option<&[Vec<f32>]>) -> Vec<BlockPayload> {
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
    pub(super) async fn hold_memory(&self, ctx: &mut RoleContext) -> Result<()> {
        let shard_bytes: u64 = self.mine.iter().map(|(_, s)| s.bytes()).sum();
        let device_share = match self.opts.opts.placement {
            PlacementKind::Device => 1.0,
            PlacementKind::Host => 0.0,
            PlacementKind::Hot
            | PlacementKind::Random
            | PlacementKind::Importance
            | PlacementKind::Lru
            | PlacementKind::EvictRandom => self.opts.alpha,
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
}
