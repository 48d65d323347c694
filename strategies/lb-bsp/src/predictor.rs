//! Speed predictors behind one trait (B1.3): Memoryless, EMA(α), NARX and an Oracle.
//!
//! Time indexing: for clock `k`, a predictor is told the observed speed `v^k` and the resource
//! signals `(c^k, m^k)` read at the *start* of clock `k` ([`SpeedPredictor::observe`]), then asked
//! for `v̂^{k+1}` given the signals read at the start of clock `k+1`
//! ([`SpeedPredictor::predict`]); the engine's worker reports carry exactly those
//! (`Report::next_signals`).

use candle_core::{Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use concord_engine::cluster::DeviceProfile;
use concord_engine::error::TensorContext;
use concord_engine::prelude::*;
use concord_engine::stragglers::{rng_for, Probe, RoleKind, StragglerSet};
use rand::Rng;
use std::collections::VecDeque;

/// Exogenous resource signals of one clock: competing CPU share and memory pressure, in [0, 1].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Signals {
    /// CPU share taken by competing work.
    pub cpu: f64,
    /// Memory-pressure proxy.
    pub mem: f64,
}

/// A per-worker sample-processing-speed predictor.
pub trait SpeedPredictor: Send {
    /// Records clock `k`'s observed speed `v^k` and the signals read at the start of clock `k`
    /// (`None` when unknown, e.g. clock 0, or when no straggler pattern exposes any).
    fn observe(&mut self, speed: f64, signals: Option<Signals>);

    /// Predicts the speed of the next clock, given the signals read at its start. `now` is the
    /// run time of the decision (background-trained models take effect only once ready).
    fn predict(&mut self, next: Option<Signals>, now: f64) -> f64;

    /// Background model maintenance after an observation: may retrain. The work starts at
    /// `start_at` (run seconds) and costs `secs_per_flop` per FLOP; returns the seconds of
    /// background work done (0 when nothing was due).
    fn maintain(&mut self, _start_at: f64, _secs_per_flop: f64) -> Result<f64> {
        Ok(0.0)
    }

    /// Modeled FLOPs of one prediction (charged on the coordinator's critical path).
    fn predict_flops(&self) -> f64 {
        4.0
    }
}

/// `v̂^{k+1} = v^k`: the last observed speed (Table 3's "Memoryless").
#[derive(Clone, Debug, Default)]
pub struct Memoryless {
    last: Option<f64>,
}

impl Memoryless {
    /// A predictor that has seen nothing (predicts 0 until the first observation).
    pub fn new() -> Memoryless {
        Memoryless::default()
    }
}

impl SpeedPredictor for Memoryless {
    fn observe(&mut self, speed: f64, _signals: Option<Signals>) {
        if speed.is_finite() && speed > 0.0 {
            self.last = Some(speed);
        }
    }
    fn predict(&mut self, _next: Option<Signals>, _now: f64) -> f64 {
        self.last.unwrap_or(0.0)
    }
}

/// `v̂^{k+1} = α v^k + (1 − α) v̂^k`, started at the first observation (Table 3's "EMA").
#[derive(Clone, Debug)]
pub struct Ema {
    alpha: f64,
    value: Option<f64>,
}

impl Ema {
    /// An EMA with weight `alpha` on the newest observation.
    pub fn new(alpha: f64) -> Ema {
        Ema { alpha, value: None }
    }

    /// The current average (`None` before the first observation).
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Folds in one observation.
    pub fn update(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.value = Some(match self.value {
            None => x,
            Some(v) => self.alpha * x + (1.0 - self.alpha) * v,
        });
    }
}

impl SpeedPredictor for Ema {
    fn observe(&mut self, speed: f64, _signals: Option<Signals>) {
        if speed > 0.0 {
            self.update(speed);
        }
    }
    fn predict(&mut self, _next: Option<Signals>, _now: f64) -> f64 {
        self.value.unwrap_or(0.0)
    }
}

/// NARX settings (see [`crate::LbBspOptions`] for the meaning and defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct NarxConfig {
    /// Speed look-back `d_v`.
    pub lookback: usize,
    /// Exogenous lags: `c^k … c^{k−exo_lags+1}` (same for memory).
    pub exo_lags: usize,
    /// Hidden tanh units.
    pub hidden: usize,
    /// Observations before NARX predictions are used (EMA before).
    pub warmup: u64,
    /// EMA weight during warm-up.
    pub alpha: f64,
    /// Retrain every this many observations.
    pub retrain_every: u64,
    /// Training window (most recent samples).
    pub window: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Early stopping: minimum loss decrease ...
    pub stop_delta: f64,
    /// ... for this many consecutive steps.
    pub stop_patience: u32,
    /// Cap on steps per retrain.
    pub max_steps: u32,
}

impl Default for NarxConfig {
    fn default() -> Self {
        NarxConfig {
            lookback: 2,
            exo_lags: 2,
            hidden: 2,
            warmup: 500,
            alpha: 0.2,
            retrain_every: 50,
            window: 1000,
            lr: 1e-2,
            stop_delta: 1e-4,
            stop_patience: 4,
            max_steps: 500,
        }
    }
}

impl NarxConfig {
    /// Network inputs: `lookback` speeds and `exo_lags` values of each of the two signals.
    pub fn inputs(&self) -> usize {
        self.lookback + 2 * self.exo_lags
    }

    /// Trainable parameters: `inputs·hidden + hidden + hidden + 1` (17 by default).
    pub fn parameters(&self) -> usize {
        self.inputs() * self.hidden + 2 * self.hidden + 1
    }

    /// Modeled FLOPs of one forward pass on one sample (multiply-adds count 2, tanh 10).
    pub fn forward_flops(&self) -> f64 {
        (2 * self.inputs() * self.hidden + 12 * self.hidden + 2) as f64
    }
}

/// A trained network's weights, frozen with the speed scale it was trained at.
#[derive(Clone, Debug, PartialEq)]
struct Snapshot {
    w1: Vec<f64>, // inputs × hidden, row-major
    b1: Vec<f64>,
    w2: Vec<f64>,
    b2: f64,
    scale: f64,
}

impl Snapshot {
    fn forward(&self, x: &[f64]) -> f64 {
        let h = self.b1.len();
        let mut out = self.b2;
        for j in 0..h {
            let mut a = self.b1[j];
            for (i, xi) in x.iter().enumerate() {
                a += xi * self.w1[i * h + j];
            }
            out += a.tanh() * self.w2[j];
        }
        out
    }
}

/// NARX speed predictor (B1.3, paper Eq. 4): a one-hidden-layer tanh network over
/// `[v^{k−1}, v^{k−2}, c^k, c^{k−1}, m^k, m^{k−1}]` (series-parallel: observed speeds in),
/// trained online **in candle** with Adam on MSE, speeds normalized by their running mean.
///
/// * Before `warmup` observations (and until a first model is ready) it predicts with EMA(α).
/// * It retrains every `retrain_every` observations on the last `window` samples, warm-starting
///   from its current weights, and stops when the loss decreases by less than `stop_delta` for
///   `stop_patience` consecutive steps (or after `max_steps`). Training starts at the last
///   retrain point before the warm-up ends, so a model is ready when it is first needed.
/// * Training is background work (the paper's low-priority threads): the new weights take effect
///   once its modeled time has passed ([`SpeedPredictor::maintain`]).
/// * Missing signals count as 0; a non-finite prediction falls back to the EMA, and predictions
///   are clamped to `[0.05, 20] ×` the speed scale.
pub struct Narx {
    cfg: NarxConfig,
    ema: Ema,
    /// `(v^k, signals at the start of k)`, the most recent `window + lags` clocks.
    history: VecDeque<(f64, Signals)>,
    observed: u64,
    speed_sum: f64,
    speed_count: u64,
    vars: Vec<Var>,
    opt: AdamW,
    active: Option<Snapshot>,
    pending: Option<(f64, Snapshot)>,
    /// Adam steps taken in all retrains.
    pub steps: u64,
    /// Retrains done.
    pub retrains: u64,
}

impl std::fmt::Debug for Narx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Narx")
            .field("cfg", &self.cfg)
            .field("observed", &self.observed)
            .field("retrains", &self.retrains)
            .finish()
    }
}

impl Narx {
    /// A fresh network, initialized deterministically from `(seed, worker)`.
    pub fn new(cfg: NarxConfig, seed: u64, worker: u32) -> Result<Narx> {
        let mut rng = rng_for(seed, "lb-bsp-narx-init", u64::from(worker), 0);
        let (n_in, h) = (cfg.inputs(), cfg.hidden);
        let r1 = 1.0 / (n_in as f64).sqrt();
        let r2 = 1.0 / (h as f64).sqrt();
        let w1: Vec<f64> = (0..n_in * h).map(|_| rng.gen_range(-r1..r1)).collect();
        let w2: Vec<f64> = (0..h).map(|_| rng.gen_range(-r2..r2)).collect();
        let dev = Device::Cpu;
        let mk = |data: Vec<f64>, shape: &[usize]| -> Result<Var> {
            Var::from_tensor(&Tensor::from_vec(data, shape, &dev).ctx("narx init")?)
                .ctx("narx init")
        };
        // Output bias 1: the normalized speed is about 1, so an untrained net starts at the mean.
        let vars = vec![
            mk(w1, &[n_in, h])?,
            mk(vec![0.0; h], &[h])?,
            mk(w2, &[h, 1])?,
            mk(vec![1.0], &[1])?,
        ];
        let opt = AdamW::new(
            vars.clone(),
            ParamsAdamW {
                lr: cfg.lr,
                weight_decay: 0.0,
                ..ParamsAdamW::default()
            },
        )
        .ctx("narx optimizer")?;
        Ok(Narx {
            ema: Ema::new(cfg.alpha),
            cfg,
            history: VecDeque::new(),
            observed: 0,
            speed_sum: 0.0,
            speed_count: 0,
            vars,
            opt,
            active: None,
            pending: None,
            steps: 0,
            retrains: 0,
        })
    }

    /// Whether a trained network (rather than the EMA) would answer a prediction at `now`.
    pub fn uses_network(&self, now: f64) -> bool {
        self.observed >= self.cfg.warmup
            && (self.active.is_some() || self.pending.as_ref().is_some_and(|(t, _)| *t <= now))
    }

    fn lags(&self) -> usize {
        self.cfg.lookback.max(self.cfg.exo_lags)
    }

    /// Features predicting the clock after history index `last` (exclusive end `end`):
    /// speeds `v[end−1], …, v[end−lookback]` (scaled), signals `next, s[end−1], …`.
    fn features(&self, end: usize, next: Signals, scale: f64) -> Vec<f64> {
        let mut x = Vec::with_capacity(self.cfg.inputs());
        for j in 1..=self.cfg.lookback {
            x.push(self.history[end - j].0 / scale);
        }
        let sig = |j: usize| {
            if j == 0 {
                next
            } else {
                self.history[end - j].1
            }
        };
        for j in 0..self.cfg.exo_lags {
            x.push(sig(j).cpu);
        }
        for j in 0..self.cfg.exo_lags {
            x.push(sig(j).mem);
        }
        x
    }

    fn snapshot(&self, scale: f64) -> Result<Snapshot> {
        let v = |i: usize| -> Result<Vec<f64>> {
            self.vars[i]
                .as_tensor()
                .flatten_all()
                .and_then(|t| t.to_vec1::<f64>())
                .ctx("narx snapshot")
        };
        Ok(Snapshot {
            w1: v(0)?,
            b1: v(1)?,
            w2: v(2)?,
            b2: v(3)?.first().copied().unwrap_or(0.0),
            scale,
        })
    }

    /// Trains on the current window; returns the modeled FLOPs.
    fn train(&mut self) -> Result<Option<(f64, Snapshot)>> {
        let scale = self.speed_sum / self.speed_count.max(1) as f64;
        if !(scale.is_finite() && scale > 0.0) {
            return Ok(None);
        }
        let lags = self.lags();
        let len = self.history.len();
        if len <= lags {
            return Ok(None);
        }
        let first = (lags).max(len.saturating_sub(self.cfg.window));
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for t in first..len {
            let (v, s) = self.history[t];
            xs.extend(self.features(t, s, scale));
            ys.push(v / scale);
        }
        let n = ys.len();
        if n < 8 {
            return Ok(None);
        }
        let dev = Device::Cpu;
        let x = Tensor::from_vec(xs, (n, self.cfg.inputs()), &dev).ctx("narx data")?;
        let y = Tensor::from_vec(ys, (n, 1), &dev).ctx("narx data")?;
        let mut prev = f64::INFINITY;
        let mut flat = 0;
        let mut steps = 0u64;
        for _ in 0..self.cfg.max_steps {
            let hidden = x
                .matmul(self.vars[0].as_tensor())
                .and_then(|a| a.broadcast_add(self.vars[1].as_tensor()))
                .and_then(|a| a.tanh())
                .ctx("narx forward")?;
            let out = hidden
                .matmul(self.vars[2].as_tensor())
                .and_then(|o| o.broadcast_add(self.vars[3].as_tensor()))
                .ctx("narx forward")?;
            let loss = out
                .sub(&y)
                .and_then(|d| d.sqr())
                .and_then(|d| d.mean_all())
                .ctx("narx loss")?;
            let value = loss.to_scalar::<f64>().ctx("narx loss")?;
            if !value.is_finite() {
                break;
            }
            if prev - value < self.cfg.stop_delta {
                flat += 1;
                if flat >= self.cfg.stop_patience {
                    break;
                }
            } else {
                flat = 0;
            }
            prev = value;
            self.opt.backward_step(&loss).ctx("narx step")?;
            steps += 1;
        }
        self.steps += steps;
        self.retrains += 1;
        let flops = steps as f64
            * (3.0 * self.cfg.forward_flops() * n as f64 + 12.0 * self.cfg.parameters() as f64);
        Ok(Some((flops, self.snapshot(scale)?)))
    }
}

impl SpeedPredictor for Narx {
    fn observe(&mut self, speed: f64, signals: Option<Signals>) {
        if !(speed.is_finite() && speed > 0.0) {
            return;
        }
        self.ema.update(speed);
        self.speed_sum += speed;
        self.speed_count += 1;
        self.history.push_back((speed, signals.unwrap_or_default()));
        let keep = self.cfg.window + self.lags();
        while self.history.len() > keep {
            self.history.pop_front();
        }
        self.observed += 1;
    }

    fn predict(&mut self, next: Option<Signals>, now: f64) -> f64 {
        if let Some((ready, _)) = &self.pending {
            if *ready <= now {
                self.active = self.pending.take().map(|(_, s)| s);
            }
        }
        let ema = self.ema.value().unwrap_or(0.0);
        if self.observed < self.cfg.warmup || self.history.len() < self.lags() {
            return ema;
        }
        let Some(model) = &self.active else {
            return ema;
        };
        let x = self.features(self.history.len(), next.unwrap_or_default(), model.scale);
        let y = model.forward(&x) * model.scale;
        if y.is_finite() {
            y.clamp(0.05 * model.scale, 20.0 * model.scale)
        } else {
            ema
        }
    }

    fn maintain(&mut self, start_at: f64, secs_per_flop: f64) -> Result<f64> {
        let due = self.observed > 0
            && self.observed.is_multiple_of(self.cfg.retrain_every)
            && self.observed + self.cfg.retrain_every >= self.cfg.warmup;
        if !due {
            return Ok(0.0);
        }
        match self.train()? {
            Some((flops, snap)) => {
                let secs = flops * secs_per_flop;
                self.pending = Some((start_at + secs, snap));
                Ok(secs)
            }
            None => Ok(0.0),
        }
    }

    fn predict_flops(&self) -> f64 {
        self.cfg.forward_flops() + 4.0
    }
}

/// The true next speed, for tests and as an upper bound on what prediction can achieve.
///
/// It builds the worker's own [`StragglerSet`] from the run's straggler config with the run's
/// seed (exactly what the engine gives the worker) and, for clock `k+1`, probes it the way
/// [`concord_engine::context::RoleContext::compute`] does: `points` probes at progress `i/points`, the
/// compute factor averaged and the extra delay of the first probe added, on the nominal time of
/// `batch` samples on the worker's device. Patterns keyed by iteration (persistent, contention,
/// power-law, sleeps) are reproduced exactly; patterns keyed by run time (trace-like,
/// disrupted-machine) are probed at the decision time, an approximation.
pub struct Oracle {
    set: StragglerSet,
    device: DeviceProfile,
    flops_per_sample: f64,
    batch: f64,
    index: u32,
    machine: u32,
    num_workers: u32,
    points: u32,
    ahead: u64,
    next_clock: u64,
}

impl std::fmt::Debug for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle")
            .field("index", &self.index)
            .field("next_clock", &self.next_clock)
            .finish()
    }
}

impl Oracle {
    /// An oracle for worker `index` on `machine`, whose speeds are measured at `batch` samples.
    /// `ahead` is how many clocks past the next one its predictions are used for (1 in the
    /// non-blocking mode, which sizes clock `k+2` after clock `k`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        set: StragglerSet,
        device: DeviceProfile,
        flops_per_sample: f64,
        batch: f64,
        index: u32,
        machine: u32,
        num_workers: u32,
        points: u32,
        ahead: u64,
    ) -> Oracle {
        Oracle {
            ahead,
            set,
            device,
            flops_per_sample,
            batch,
            index,
            machine,
            num_workers,
            points: points.max(1),
            next_clock: 0,
        }
    }

    /// The speed the worker will have in `clock`, probed at run time `now`.
    pub fn speed_at(&mut self, clock: u64, now: f64) -> f64 {
        let nominal = self
            .device
            .compute_seconds(self.flops_per_sample, self.batch);
        let parts = if self.set.is_empty() { 1 } else { self.points };
        let mut t = 0.0;
        for i in 0..parts {
            let e = self.set.effect(&Probe {
                kind: RoleKind::Worker,
                index: self.index,
                machine: self.machine,
                num_workers: self.num_workers,
                now,
                iter: clock,
                progress: f64::from(i) / f64::from(parts),
                nominal_iter_s: nominal,
            });
            t += nominal / f64::from(parts) * e.compute_factor;
            if i == 0 {
                t += e.extra_delay_s;
            }
        }
        if t > 0.0 {
            self.batch / t
        } else {
            0.0
        }
    }
}

impl SpeedPredictor for Oracle {
    fn observe(&mut self, _speed: f64, _signals: Option<Signals>) {
        self.next_clock += 1;
    }
    fn predict(&mut self, _next: Option<Signals>, now: f64) -> f64 {
        self.speed_at(self.next_clock + self.ahead, now)
    }
}
