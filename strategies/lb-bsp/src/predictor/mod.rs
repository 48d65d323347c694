//! Speed predictors behind one trait (B1.3): Memoryless, EMA(α), NARX and an Oracle.
//!
//! Time indexing: for clock `k`, a predictor is told the observed speed `v^k` and the resource
//! signals `(c^k, m^k)` read at the *start* of clock `k` ([`SpeedPredictor::observe`]), then asked
//! for `v̂^{k+1}` given the signals read at the start of clock `k+1`
//! ([`SpeedPredictor::predict`]); the engine's worker reports carry exactly those
//! (`Report::next_signals`).

mod adam;
mod narx;
mod oracle;

pub use narx::{Narx, NarxConfig};
pub use oracle::Oracle;

use concord_engine::prelude::*;

/// Exogenous resource signals of one clock: competing CPU share and memory pressure, in [0, 1].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
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

    /// Everything it learned, for a checkpoint.
    fn save(&self) -> Result<RoleState>;

    /// Continues from what [`SpeedPredictor::save`] returned.
    fn restore(&mut self, state: &RoleState) -> Result<()>;
}

/// `v̂^{k+1} = v^k`: the last observed speed (Table 3's "Memoryless").
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
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
    fn save(&self) -> Result<RoleState> {
        RoleState::encode(self)
    }
    fn restore(&mut self, state: &RoleState) -> Result<()> {
        *self = state.decode()?;
        Ok(())
    }
}

/// `v̂^{k+1} = α v^k + (1 − α) v̂^k`, started at the first observation (Table 3's "EMA").
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    fn save(&self) -> Result<RoleState> {
        RoleState::encode(self)
    }
    fn restore(&mut self, state: &RoleState) -> Result<()> {
        *self = state.decode()?;
        Ok(())
    }
}
