//! The NARX speed predictor: a small tanh network over past speeds and resource signals,
//! trained online in candle.

use super::adam::Adam;
use super::{Ema, Signals, SpeedPredictor};
use candle_core::{Device, Tensor, Var};
use concord_engine::error::TensorContext;
use concord_engine::prelude::*;
use concord_engine::stragglers::rng_for;
use rand::Rng;
use std::collections::VecDeque;

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    opt: Adam,
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
        let opt = Adam::new(vars.clone(), cfg.lr, 0.0).ctx("narx optimizer")?;
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

    fn save(&self) -> Result<RoleState> {
        let weights = self
            .vars
            .iter()
            .map(|v| v.as_tensor().flatten_all()?.to_vec1::<f64>())
            .collect::<candle_core::Result<_>>()
            .ctx("narx checkpoint")?;
        RoleState::encode(&NarxState {
            ema: self.ema.clone(),
            history: self.history.iter().copied().collect(),
            observed: self.observed,
            speed_sum: self.speed_sum,
            speed_count: self.speed_count,
            weights,
            opt: self.opt.state().ctx("narx checkpoint")?,
            active: self.active.clone(),
            pending: self.pending.clone(),
            steps: self.steps,
            retrains: self.retrains,
        })
    }

    fn restore(&mut self, state: &RoleState) -> Result<()> {
        let s: NarxState = state.decode()?;
        if s.weights.len() != self.vars.len() {
            return Err(EngineError::Decode {
                tag: "narx state".into(),
                reason: format!(
                    "{} weight tensors, the network has {}",
                    s.weights.len(),
                    self.vars.len()
                ),
            });
        }
        for (var, w) in self.vars.iter().zip(s.weights) {
            let shape = var.shape().clone();
            let t = Tensor::from_vec(w, shape, var.device()).ctx("narx restore")?;
            var.set(&t).ctx("narx restore")?;
        }
        self.opt.restore(&s.opt).ctx("narx restore")?;
        self.ema = s.ema;
        self.history = s.history.into();
        self.observed = s.observed;
        self.speed_sum = s.speed_sum;
        self.speed_count = s.speed_count;
        self.active = s.active;
        self.pending = s.pending;
        self.steps = s.steps;
        self.retrains = s.retrains;
        Ok(())
    }
}

/// Everything a NARX predictor learned, for a checkpoint.
#[derive(Serialize, Deserialize)]
struct NarxState {
    ema: Ema,
    history: Vec<(f64, Signals)>,
    observed: u64,
    speed_sum: f64,
    speed_count: u64,
    weights: Vec<Vec<f64>>,
    opt: super::adam::AdamState,
    active: Option<Snapshot>,
    pending: Option<(f64, Snapshot)>,
    steps: u64,
    retrains: u64,
}
