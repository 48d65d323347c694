//! The batch-size manager (BSM) as a [`Coordinator`]: gathers worker reports, predicts speeds,
//! allocates per-worker batches summing to the global batch, and directs every clock.

use crate::alloc::{cpu_rule, gpu_rule, Allocation, GpuProfile};
use crate::options::{Mode, PredictorKind, Resolved};
use crate::predictor::{Ema, Memoryless, Narx, NarxConfig, Oracle, Signals, SpeedPredictor};
use concord_engine::prelude::*;
use concord_engine::stragglers::{RoleKind, StragglerSet};
use std::collections::BTreeMap;

/// Ratio of a worker's non-overlapped communication time to the pull time it reports: the push
/// of the gradients is the same size as the pull of the parameters and is not measured by the
/// worker, so `t^m ≈ 2 × comm_s`.
pub const COMM_ROUND_TRIP: f64 = 2.0;

/// Modeled FLOPs of one water-filling solve per worker (200 bisection steps of a clamp and a sum,
/// plus rounding).
const SOLVE_FLOPS_PER_WORKER: f64 = 200.0 * 6.0 + 20.0;

/// How the manager turns telemetry into batch sizes.
enum Rule {
    /// Per-worker speed predictors (CPU mode).
    Cpu(Vec<Box<dyn SpeedPredictor>>),
    /// Per-worker profiled time models (GPU mode).
    Gpu(Vec<GpuProfile>),
}

/// LB-BSP's batch-size manager.
///
/// *Blocking* (Algorithm 1): once every worker's report of clock `k` is in, it predicts each
/// worker's speed for `k+1`, allocates, and sends every worker its [`Directive`] for `k+1`.
/// *Non-blocking* (B1.4, "publish a full vector; workers read the latest"): once every report of
/// clock `k` is in it publishes the vector for `k+2`, so a worker finds its next batch waiting and
/// never waits on the manager; the vector is one update late, and `Σ x = X` holds every clock.
/// Clocks before the first decision get the equal split (CPU) or the profiled GPU allocation with
/// no communication time (GPU).
///
/// Reports are folded into the predictors clock by clock, in worker order, once a clock is
/// complete, so decisions never depend on the arrival order of simultaneous messages.
pub struct LbBspCoordinator {
    cfg: Resolved,
    n: usize,
    iterations: u64,
    global: u64,
    lag: u64,
    rule: Rule,
    secs_per_flop: f64,
    /// What it has learned and counted so far: what a checkpoint keeps besides the predictors.
    learned: Learned,
    /// The first clock it runs: 0, or the clock of the checkpoint it continues from.
    first_clock: u64,
}

/// What the batch-size manager learns and counts as clocks complete, besides its predictors.
#[derive(Clone, Serialize, Deserialize)]
struct Learned {
    comm: Vec<Ema>,
    /// Signals read at the start of the next clock to be observed, per worker.
    signals: Vec<Option<Signals>>,
    pending: BTreeMap<u64, Vec<Option<Report>>>,
    next_complete: u64,
    predicted: BTreeMap<u64, Vec<f64>>,
    rmse_from: u64,
    sq_err: f64,
    err_count: u64,
    err_speed_sum: f64,
    infeasible: u64,
    overhead_s: f64,
    train_s: f64,
    trainer_free_at: f64,
    batch_sums: Vec<f64>,
    clocks_sized: u64,
    /// Every worker report so far, in arrival order.
    reports: Vec<(u32, Report)>,
}

/// What the batch-size manager keeps in a checkpoint: its predictors' states and what it learned.
#[derive(Serialize, Deserialize)]
struct ManagerState {
    predictors: Vec<RoleState>,
    #[serde(flatten)]
    learned: Learned,
}

impl std::fmt::Debug for LbBspCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LbBspCoordinator")
            .field("cfg", &self.cfg)
            .field("n", &self.n)
            .field("lag", &self.lag)
            .finish()
    }
}

impl LbBspCoordinator {
    /// Builds the manager of `job` with validated options.
    pub fn new(job: &Job, cfg: Resolved) -> Result<LbBspCoordinator> {
        let config = &job.config;
        let n = config.workers as usize;
        let o = &cfg.options;
        let lag = if cfg.blocking { 1 } else { 2 };
        let rule = match o.mode {
            Mode::Cpu => {
                let mut ps: Vec<Box<dyn SpeedPredictor>> = Vec::with_capacity(n);
                for w in 0..config.workers {
                    ps.push(match cfg.predictor {
                        PredictorKind::Memoryless => Box::new(Memoryless::new()),
                        PredictorKind::Ema => Box::new(Ema::new(o.alpha)),
                        PredictorKind::Narx => Box::new(Narx::new(
                            NarxConfig {
                                lookback: o.lookback,
                                exo_lags: o.exo_lags,
                                hidden: o.hidden,
                                warmup: o.warmup,
                                alpha: o.alpha,
                                retrain_every: o.retrain_every,
                                window: o.window,
                                lr: o.lr,
                                stop_delta: o.stop_delta,
                                stop_patience: o.stop_patience,
                                max_steps: o.max_steps,
                            },
                            config.seed,
                            w,
                        )?),
                        PredictorKind::Oracle => {
                            let role = RoleId::Worker(w);
                            let machine = job.cluster.machine_of(role);
                            let set = StragglerSet::build(
                                &config.stragglers,
                                config.seed,
                                RoleKind::Worker,
                                w,
                                machine,
                            )?;
                            Box::new(Oracle::new(
                                set,
                                job.cluster.device_of(role).clone(),
                                job.cost_sheet.clone(),
                                job.model.training_flops_per_sample(),
                                config.batch as f64,
                                w,
                                machine,
                                config.workers,
                                config.progress_points,
                                lag - 1,
                            ))
                        }
                    });
                }
                Rule::Cpu(ps)
            }
            Mode::Gpu => {
                let param_bytes = job.layout.param_bytes();
                let stages = job.model.stage_facts();
                let flops = job.model.training_flops_per_sample();
                Rule::Gpu(
                    (0..config.workers)
                        .map(|w| {
                            GpuProfile::from_device(
                                job.cluster.device_of(RoleId::Worker(w)),
                                flops,
                                &stages,
                                param_bytes,
                                o.saturation,
                                o.min_batch,
                            )
                        })
                        .collect(),
                )
            }
        };
        let dev = job.cluster.device_of(RoleId::Coordinator);
        let sustained = dev.peak_tflops * 1e12 * dev.efficiency;
        let rmse_from = if o.warmup < config.iterations {
            o.warmup.max(lag)
        } else {
            lag
        };
        let clocks = job.clocks();
        let mut manager = LbBspCoordinator {
            n,
            iterations: clocks.end,
            global: config.batch * u64::from(config.workers),
            lag,
            rule,
            secs_per_flop: if sustained > 0.0 {
                1.0 / sustained
            } else {
                0.0
            },
            learned: Learned {
                comm: (0..n).map(|_| Ema::new(o.alpha)).collect(),
                signals: vec![None; n],
                pending: BTreeMap::new(),
                next_complete: 0,
                predicted: BTreeMap::new(),
                rmse_from,
                sq_err: 0.0,
                err_count: 0,
                err_speed_sum: 0.0,
                infeasible: 0,
                overhead_s: 0.0,
                train_s: 0.0,
                trainer_free_at: 0.0,
                batch_sums: vec![0.0; n],
                clocks_sized: 0,
                reports: Vec::new(),
            },
            first_clock: clocks.start,
            cfg,
        };
        if let Some(state) = job.resumed(RoleId::Coordinator).and_then(|cp| cp.state) {
            manager.restore(&state.decode()?)?;
        }
        Ok(manager)
    }

    /// Everything it learned and counted, for a checkpoint.
    fn save(&self) -> Result<ManagerState> {
        let predictors = match &self.rule {
            Rule::Cpu(ps) => ps.iter().map(|p| p.save()).collect::<Result<_>>()?,
            Rule::Gpu(_) => Vec::new(),
        };
        Ok(ManagerState {
            predictors,
            learned: self.learned.clone(),
        })
    }

    /// Continues from what [`LbBspCoordinator::save`] returned.
    fn restore(&mut self, s: &ManagerState) -> Result<()> {
        if let Rule::Cpu(ps) = &mut self.rule {
            if s.predictors.len() != ps.len() {
                return Err(EngineError::protocol(
                    RoleId::Coordinator,
                    format!(
                        "the checkpoint holds {} speed predictors for {} workers",
                        s.predictors.len(),
                        ps.len()
                    ),
                ));
            }
            for (p, state) in ps.iter_mut().zip(&s.predictors) {
                p.restore(state)?;
            }
        }
        self.learned = s.learned.clone();
        Ok(())
    }

    /// Communication-time estimates `t^m_i` (EMA of reported pull time × [`COMM_ROUND_TRIP`]).
    fn comm_times(&self) -> Vec<f64> {
        self.learned
            .comm
            .iter()
            .map(|e| e.value().unwrap_or(0.0))
            .collect()
    }

    /// The vector for the clocks sized before any telemetry.
    fn initial(&mut self) -> Allocation {
        match &self.rule {
            Rule::Cpu(_) => cpu_rule(
                &vec![1.0; self.n],
                None,
                self.global,
                self.cfg.options.min_batch,
            ),
            Rule::Gpu(p) => gpu_rule(
                p,
                &vec![0.0; self.n],
                self.global,
                self.cfg.options.min_batch,
            ),
        }
    }

    /// Sends clock `clock`'s directives from `alloc` and books its figures.
    fn direct(&mut self, ctx: &RoleContext, clock: u64, alloc: &Allocation) {
        if alloc.relaxed.is_some() {
            self.learned.infeasible += 1;
        }
        let mut offset = clock * self.global;
        for (w, &b) in alloc.batches.iter().enumerate() {
            ctx.send(
                RoleId::Worker(w as u32),
                Message::Directive(Directive {
                    clock,
                    batch: b,
                    stream_offset: offset,
                    global_batch: self.global,
                }),
            );
            offset += b;
            self.learned.batch_sums[w] += b as f64;
        }
        self.learned.clocks_sized += 1;
    }

    /// Folds complete clocks into the predictors and sizes the clocks they unlock.
    async fn advance(&mut self, ctx: &mut RoleContext) -> Result<()> {
        while self
            .learned
            .pending
            .get(&self.learned.next_complete)
            .is_some_and(|v| v.iter().all(Option::is_some))
        {
            let c = self.learned.next_complete;
            let reports: Vec<Report> = self
                .learned
                .pending
                .remove(&c)
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect();
            let predicted = self.learned.predicted.remove(&c);
            for (w, r) in reports.iter().enumerate() {
                if let Rule::Cpu(ps) = &mut self.rule {
                    ps[w].observe(r.speed, self.learned.signals[w]);
                    if let Some(p) = predicted.as_ref().and_then(|p| p.get(w)) {
                        if c >= self.learned.rmse_from && r.speed.is_finite() && r.speed > 0.0 {
                            self.learned.sq_err += (p - r.speed).powi(2);
                            self.learned.err_speed_sum += r.speed;
                            self.learned.err_count += 1;
                        }
                    }
                }
                self.learned.signals[w] = r.next_signals.map(|(cpu, mem)| Signals { cpu, mem });
                self.learned.comm[w].update(COMM_ROUND_TRIP * r.comm_s);
            }
            self.learned.next_complete += 1;
            let target = c + self.lag;
            if target < self.iterations {
                self.decide(ctx, target).await;
            }
            // Background retraining (the paper's low-priority trainer threads, round-robin over
            // workers): the work is queued on one trainer and models take effect when it is done.
            if let Rule::Cpu(ps) = &mut self.rule {
                for p in ps.iter_mut() {
                    let start = self.learned.trainer_free_at.max(ctx.now());
                    let secs = p.maintain(start, self.secs_per_flop)?;
                    if secs > 0.0 {
                        self.learned.trainer_free_at = start + secs;
                        self.learned.train_s += secs;
                    }
                }
            }
        }
        Ok(())
    }

    /// Sizes clock `target`'s batches from the predictions and directs it.
    async fn decide(&mut self, ctx: &mut RoleContext, target: u64) {
        let now = ctx.now();
        let comm = self.comm_times();
        let min_batch = self.cfg.options.min_batch;
        let comm_aware = self.cfg.options.comm_aware;
        let global = self.global;
        let n = self.n;
        let signals = self.learned.signals.clone();
        let (alloc, speeds, flops) = match &mut self.rule {
            Rule::Cpu(ps) => {
                let mut flops = SOLVE_FLOPS_PER_WORKER * n as f64;
                let speeds: Vec<f64> = ps
                    .iter_mut()
                    .zip(&signals)
                    .map(|(p, s)| {
                        flops += p.predict_flops();
                        p.predict(*s, now)
                    })
                    .collect();
                let alloc = cpu_rule(&speeds, comm_aware.then_some(&comm[..]), global, min_batch);
                (alloc, Some(speeds), flops)
            }
            Rule::Gpu(p) => (
                gpu_rule(p, &comm, global, min_batch),
                None,
                SOLVE_FLOPS_PER_WORKER * n as f64,
            ),
        };
        // The decision is on the critical path: charge it before the directives leave.
        let t0 = ctx.now();
        ctx.compute("lb-bsp.batch-sizes", Work::fixed(flops), || ())
            .await;
        self.learned.overhead_s += ctx.now() - t0;
        if let Some(s) = speeds {
            self.learned.predicted.insert(target, s);
        }
        self.direct(ctx, target, &alloc);
    }

    fn figures(&self, end: f64) -> Vec<(String, f64)> {
        let mut f = vec![
            ("lb-bsp.overhead_s".to_string(), self.learned.overhead_s),
            (
                "lb-bsp.overhead_share".to_string(),
                if end > 0.0 {
                    self.learned.overhead_s / end
                } else {
                    0.0
                },
            ),
            ("lb-bsp.train_s".to_string(), self.learned.train_s),
            (
                "lb-bsp.infeasible_clocks".to_string(),
                self.learned.infeasible as f64,
            ),
        ];
        if matches!(self.rule, Rule::Cpu(_)) && self.learned.err_count > 0 {
            let rmse = (self.learned.sq_err / self.learned.err_count as f64).sqrt();
            let mean = self.learned.err_speed_sum / self.learned.err_count as f64;
            f.push(("lb-bsp.rmse".to_string(), rmse));
            f.push((
                "lb-bsp.rmse_relative".to_string(),
                if mean > 0.0 { rmse / mean } else { 0.0 },
            ));
            f.push((
                "lb-bsp.rmse_samples".to_string(),
                self.learned.err_count as f64,
            ));
        }
        if let Rule::Gpu(p) = &self.rule {
            for (w, g) in p.iter().enumerate() {
                f.push((format!("lb-bsp.saturation_w{w}"), g.saturation as f64));
                f.push((format!("lb-bsp.oom_w{w}"), g.oom.min(self.global) as f64));
            }
        }
        if self.learned.clocks_sized > 0 {
            for (w, s) in self.learned.batch_sums.iter().enumerate() {
                f.push((
                    format!("lb-bsp.mean_batch_w{w}"),
                    s / self.learned.clocks_sized as f64,
                ));
            }
        }
        f
    }
}

#[async_trait]
impl Coordinator for LbBspCoordinator {
    fn directs_batches(&self) -> bool {
        true
    }

    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let first_clocks = self.first_clock..(self.first_clock + self.lag).min(self.iterations);
        if self.first_clock == 0 {
            let first = self.initial();
            for clock in first_clocks {
                self.direct(ctx, clock, &first);
            }
        } else {
            // Continuing from a checkpoint: the clocks the last reports before it would have sized.
            for clock in first_clocks {
                self.decide(ctx, clock).await;
            }
        }
        loop {
            let env = ctx.recv().await?;
            match (env.msg, env.from) {
                (Message::Shutdown, _) => {
                    return Ok(CoordinatorReport {
                        reports: self.learned.reports.clone(),
                        figures: self.figures(ctx.now()),
                        state: Some(RoleState::encode(&self.save()?)?),
                    });
                }
                (Message::Report(r), RoleId::Worker(w)) => {
                    let slot = self
                        .learned
                        .pending
                        .entry(r.clock)
                        .or_insert_with(|| vec![None; self.n]);
                    match slot.get_mut(w as usize) {
                        Some(s) if s.is_none() => *s = Some(r.clone()),
                        _ => {
                            return Err(EngineError::protocol(
                                ctx.id(),
                                format!("unexpected report from worker {w} for clock {}", r.clock),
                            ))
                        }
                    }
                    self.learned.reports.push((w, r));
                    self.advance(ctx).await?;
                }
                _ => {}
            }
        }
    }
}
