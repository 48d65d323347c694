//! The `[strategy.agileml]` options, their defaults (the thesis's, §4.2) and their validation.

use super::stage::StageThresholds;
use concord_engine::prelude::*;

/// Which stage AgileML runs in: chosen from the ratio of transient to reliable machines as it
/// changes (the thesis's controller), or held fixed (to measure one stage at a ratio the
/// controller would not pick, as the thesis's Figs. 4.10–4.13 do).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageChoice {
    /// By the ratio r = transient / reliable and the thresholds.
    #[default]
    Auto,
    /// Stage 1: parameter servers on reliable machines only.
    One,
    /// Stage 2: ActivePSs on transient machines, BackupPSs on reliable ones.
    Two,
    /// Stage 3: as stage 2, no workers on reliable machines.
    Three,
}

/// Options of the `agileml` strategy (`[strategy.agileml]`). Every field has a default.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgileOptions {
    /// `auto` (default), `one`, `two` or `three`.
    pub stage: StageChoice,
    /// r above which stage 2 starts (default 1, i.e. 1:1).
    pub two_above: f64,
    /// r above which stage 3 starts (default 15, i.e. 15:1).
    pub three_above: f64,
    /// Partitions Np of the parameters: the most ActivePSs there can be. Default 0: half the
    /// cluster's machines (the thesis's choice), at most one per parameter block.
    pub partitions: u32,
    /// ActivePSs to run in stages 2 and 3. Default 0: half the machines in the job, at most Np
    /// (the thesis's best performance).
    pub active_servers: u32,
    /// The machine label that says a machine's tier, and the value that means transient; any
    /// other value (or no label) is reliable.
    pub tier_label: String,
    /// See `tier_label`.
    pub transient: String,
    /// Bandwidth a joining worker loads its data at, Gbit/s (object storage; default 1).
    pub load_gbps: f64,
    /// Size of the training data, GB, for the loading time of a joining worker. Default: the
    /// data set's size in memory (none in throughput mode: loading is then instant).
    pub data_gb: Option<f64>,
}

impl Default for AgileOptions {
    fn default() -> Self {
        AgileOptions {
            stage: StageChoice::Auto,
            two_above: 1.0,
            three_above: 15.0,
            partitions: 0,
            active_servers: 0,
            tier_label: "tier".into(),
            transient: "transient".into(),
            load_gbps: 1.0,
            data_gb: None,
        }
    }
}

impl AgileOptions {
    /// Checks the values types do not; errors name the key.
    pub fn validate(&self) -> Result<()> {
        let key = |k: &str| format!("strategy.agileml.{k}");
        if !(self.two_above.is_finite() && self.two_above >= 0.0) {
            return Err(EngineError::config(
                key("two_above"),
                self.two_above,
                "must be a non-negative ratio",
            ));
        }
        if !(self.three_above.is_finite() && self.three_above >= self.two_above) {
            return Err(EngineError::config(
                key("three_above"),
                self.three_above,
                format!("must be a ratio at least two_above = {}", self.two_above),
            ));
        }
        if !(self.load_gbps.is_finite() && self.load_gbps > 0.0) {
            return Err(EngineError::config(
                key("load_gbps"),
                self.load_gbps,
                "must be a positive bandwidth",
            ));
        }
        if let Some(gb) = self.data_gb {
            if !(gb.is_finite() && gb >= 0.0) {
                return Err(EngineError::config(
                    key("data_gb"),
                    gb,
                    "must be a non-negative size",
                ));
            }
        }
        Ok(())
    }

    /// The stage thresholds.
    pub fn thresholds(&self) -> StageThresholds {
        StageThresholds {
            two_above: self.two_above,
            three_above: self.three_above,
        }
    }
}
