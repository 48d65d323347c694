//! The `[strategy.rna]` options, their defaults and their validation.

use concord_engine::config::RunConfig;
use concord_engine::error::{EngineError, Result};
use serde::Deserialize;

/// How a worker combines the gradients it computed since its last contribution (§5.1.3 vs §5.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accumulate {
    /// `Σ_t (t − min t + 1)·g_t / Σ_t (t − min t + 1)`: newer gradients weigh more (§5.1.3).
    #[default]
    WeightedAvg,
    /// Plain sum (the TF WriteOp of §5.4).
    Sum,
}

/// Options of `rna` (and `eager-sgd`, which is RNA with one probe).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RnaOptions {
    /// Probes per round (power-of-two choices): 2 (thesis); 1 is eager-SGD's random initiator.
    pub q: i64,
    /// Staleness bound η: a gradient computed on version t is dropped at round k if k − t > η.
    /// Default 3 (the thesis gives none; Sven's bound).
    pub eta: i64,
    /// Local accumulation rule: `weighted-avg` (default) or `sum`.
    pub accumulate: Accumulate,
    /// Probe every worker and trigger only when all are ready, one gradient per version: the BSP
    /// limit of RNA (R8 (i)). Default false.
    pub wait_for_all: bool,
    /// Tensor-fusion bucket size in MiB (> 0). Default 64.
    pub bucket_mib: f64,
}

impl Default for RnaOptions {
    fn default() -> Self {
        RnaOptions {
            q: 2,
            eta: 3,
            accumulate: Accumulate::WeightedAvg,
            wait_for_all: false,
            bucket_mib: 64.0,
        }
    }
}

/// Validated options.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// Probes per round (≤ workers).
    pub q: usize,
    /// Staleness bound.
    pub eta: u64,
    /// Accumulation rule.
    pub accumulate: Accumulate,
    /// BSP limit.
    pub wait_for_all: bool,
    /// Fusion bucket in elements.
    pub bucket_elems: usize,
}

impl RnaOptions {
    /// Checks every value against the run; errors name `strategy.<name>.<key>`.
    pub fn resolve(&self, name: &str, config: &RunConfig) -> Result<Resolved> {
        let key = |k: &str| format!("strategy.{name}.{k}");
        let workers = config.workers as i64;
        if self.q < 1 || self.q > workers {
            return Err(EngineError::config(
                key("q"),
                self.q,
                format!("must be between 1 and the number of workers ({workers})"),
            ));
        }
        if self.eta < 0 {
            return Err(EngineError::config(
                key("eta"),
                self.eta,
                "the staleness bound must be >= 0",
            ));
        }
        if !(self.bucket_mib.is_finite() && self.bucket_mib > 0.0) {
            return Err(EngineError::config(
                key("bucket_mib"),
                self.bucket_mib,
                "must be a finite size in MiB > 0",
            ));
        }
        Ok(Resolved {
            q: if self.wait_for_all {
                config.workers as usize
            } else {
                self.q as usize
            },
            eta: self.eta as u64,
            accumulate: self.accumulate,
            wait_for_all: self.wait_for_all,
            bucket_elems: ((self.bucket_mib * 1024.0 * 1024.0 / 4.0) as usize).max(1),
        })
    }
}
