//! The `[strategy.lb-bsp]` options, their defaults and their validation.

use concord_engine::prelude::*;
use serde::Deserialize;

/// Which speed predictor the batch-size manager uses (CPU mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PredictorKind {
    /// NARX network over the last speeds and the CPU/memory signals (paper's choice); EMA while
    /// warming up.
    #[default]
    Narx,
    /// Exponential moving average of the observed speeds, `α` = `alpha`.
    Ema,
    /// The last observed speed.
    Memoryless,
    /// The true next speed, computed from the run's straggler config (for tests and bounds).
    Oracle,
}

impl PredictorKind {
    /// The name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            PredictorKind::Narx => "narx",
            PredictorKind::Ema => "ema",
            PredictorKind::Memoryless => "memoryless",
            PredictorKind::Oracle => "oracle",
        }
    }
}

/// Which allocation rule the batch-size manager solves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// CPU clusters (B1.2): `x_i ∝ v̂_i`, speeds predicted online; blocking by default.
    #[default]
    Cpu,
    /// GPU clusters (B1.4): linear time model `m_i·x + b_i` on `[x^s_i, x^o_i]` profiled from the
    /// device, plus an EMA of communication time; non-blocking by default.
    Gpu,
}

/// Options of the `lb-bsp` strategy (`[strategy.lb-bsp]`). Every field has a default.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LbBspOptions {
    /// Speed predictor: `narx` (default), `ema`, `memoryless` or `oracle`.
    pub predictor: String,
    /// EMA smoothing factor α in [0, 1] (the EMA predictor, NARX's warm-up, and the EMA of
    /// communication time). Default 0.2 (the paper's EMA setting).
    pub alpha: f64,
    /// Iterations during which NARX is not used yet and EMA predicts instead. Default 500 (the
    /// paper); smaller values are a documented deviation for short simulated runs.
    pub warmup: u64,
    /// `cpu` (default) or `gpu`.
    pub mode: Mode,
    /// Whether the manager waits for every worker's report of clock k before it sizes clock k+1
    /// (`true`, Algorithm 1). `false` publishes each clock's vector one clock ahead, from the
    /// reports of two clocks before. Default: `true` in CPU mode, `false` in GPU mode.
    pub blocking: Option<bool>,
    /// Smallest batch any worker gets. Default 1.
    pub min_batch: u64,
    /// CPU mode: water-fill with each worker's communication time (`x_i = v_i (T − t^m_i)`,
    /// B1.2 generalization) instead of the plain `x_i ∝ v_i`. Default false (the paper's rule).
    pub comm_aware: bool,
    /// GPU mode: the saturation point `x^s` is the batch at which the device reaches this
    /// fraction of its saturated throughput. Default 0.5 (the half-saturation batch).
    pub saturation: f64,
    /// NARX look-back of the speed series `d_v`. Default 2.
    pub lookback: usize,
    /// NARX number of exogenous lags (`c^k … c^{k−d+1}`, same for memory). Default 2; 3 is the
    /// literal reading of Eq. 4 (then use `hidden = 1` to stay under 20 parameters).
    pub exo_lags: usize,
    /// NARX hidden tanh units. Default 2 (17 parameters with the default lags).
    pub hidden: usize,
    /// Retrain each worker's NARX every this many iterations. Default 50.
    pub retrain_every: u64,
    /// Training window: the most recent samples a retrain uses. Default 1000.
    pub window: usize,
    /// NARX Adam learning rate. Default 1e-2.
    pub lr: f64,
    /// Early stopping: stop when the loss decreases by less than this ... Default 1e-4.
    pub stop_delta: f64,
    /// ... for this many consecutive steps. Default 4.
    pub stop_patience: u32,
    /// Cap on Adam steps per retrain. Default 500.
    pub max_steps: u32,
}

impl Default for LbBspOptions {
    fn default() -> Self {
        LbBspOptions {
            predictor: "narx".into(),
            alpha: 0.2,
            warmup: 500,
            mode: Mode::Cpu,
            blocking: None,
            min_batch: 1,
            comm_aware: false,
            saturation: 0.5,
            lookback: 2,
            exo_lags: 2,
            hidden: 2,
            retrain_every: 50,
            window: 1000,
            lr: 1e-2,
            stop_delta: 1e-4,
            stop_patience: 4,
            max_steps: 500,
        }
    }
}

/// Options after validation: the predictor resolved and the mode-dependent defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The options as given.
    pub options: LbBspOptions,
    /// The predictor.
    pub predictor: PredictorKind,
    /// Whether the manager blocks on every worker's report.
    pub blocking: bool,
}

fn key(name: &str) -> String {
    format!("strategy.lb-bsp.{name}")
}

impl LbBspOptions {
    /// Validates the options against the run config; errors name `strategy.lb-bsp.<key>`.
    pub fn resolve(&self, config: &RunConfig) -> Result<Resolved> {
        let predictor = match self.predictor.as_str() {
            "narx" => PredictorKind::Narx,
            "ema" => PredictorKind::Ema,
            "memoryless" => PredictorKind::Memoryless,
            "oracle" => PredictorKind::Oracle,
            other => {
                return Err(EngineError::config(
                    key("predictor"),
                    format!("\"{other}\""),
                    "unknown predictor; known: narx, ema, memoryless, oracle",
                ))
            }
        };
        if !(self.alpha.is_finite() && (0.0..=1.0).contains(&self.alpha)) {
            return Err(EngineError::config(
                key("alpha"),
                self.alpha,
                "must be in [0, 1] (EMA weight of the newest observation)",
            ));
        }
        if self.min_batch == 0 {
            return Err(EngineError::config(
                key("min_batch"),
                self.min_batch,
                "must be at least 1",
            ));
        }
        let global = config.batch.saturating_mul(u64::from(config.workers));
        let floor = self.min_batch.saturating_mul(u64::from(config.workers));
        if global < floor {
            return Err(EngineError::config(
                key("min_batch"),
                self.min_batch,
                format!(
                    "the global batch X = workers × batch = {} × {} = {global} is smaller than \
                     workers × min_batch = {floor}: every worker needs at least min_batch samples",
                    config.workers, config.batch
                ),
            ));
        }
        if !(self.saturation.is_finite() && self.saturation > 0.0 && self.saturation < 1.0) {
            return Err(EngineError::config(
                key("saturation"),
                self.saturation,
                "must be in (0, 1): the fraction of saturated throughput that defines x^s",
            ));
        }
        for (name, v) in [
            ("lookback", self.lookback),
            ("exo_lags", self.exo_lags),
            ("hidden", self.hidden),
            ("window", self.window),
        ] {
            if v == 0 {
                return Err(EngineError::config(key(name), v, "must be at least 1"));
            }
        }
        if self.retrain_every == 0 {
            return Err(EngineError::config(
                key("retrain_every"),
                self.retrain_every,
                "must be at least 1",
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(EngineError::config(key("lr"), self.lr, "must be > 0"));
        }
        if !(self.stop_delta.is_finite() && self.stop_delta >= 0.0) {
            return Err(EngineError::config(
                key("stop_delta"),
                self.stop_delta,
                "must be >= 0",
            ));
        }
        if self.stop_patience == 0 || self.max_steps == 0 {
            return Err(EngineError::config(
                key(if self.max_steps == 0 {
                    "max_steps"
                } else {
                    "stop_patience"
                }),
                0,
                "must be at least 1",
            ));
        }
        if self.mode == Mode::Gpu && predictor != PredictorKind::Narx {
            // GPU mode profiles compute time offline and predicts no speeds (B1.4); a predictor
            // named explicitly would be silently ignored, so say so.
            return Err(EngineError::config(
                key("predictor"),
                format!("\"{}\"", self.predictor),
                "GPU mode uses the profiled linear time model and predicts no speeds; \
                 leave `predictor` unset with mode = \"gpu\"",
            ));
        }
        let blocking = self.blocking.unwrap_or(self.mode == Mode::Cpu);
        Ok(Resolved {
            options: self.clone(),
            predictor,
            blocking,
        })
    }
}
