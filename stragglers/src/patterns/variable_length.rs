//! Inherent load imbalance from variable-length batches (RNA §2.1.0, UCF101 + LSTM):
//! iteration time proportional to the batch's total sequence length.

use rand_distr::{Distribution, LogNormal};
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "variable-length";

/// Inherent load imbalance (RNA §2.1.0, UCF101 + LSTM): iteration time ∝ the total length
/// of `sequences` sequences whose lengths are lognormal with mean `mean_len` and standard
/// deviation `std_len`, clipped to [`min_len`, `max_len`]; factor = total / (sequences ·
/// mean_len). Defaults are UCF101's (186, 97.7, 29, 1776) with one length per batch, whose
/// spread (CV ≈ 0.5) is close to the thesis's measured per-batch times (mean 1219 ms, std
/// 760 ms). Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableLengthConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Mean sequence length (> 0). Default 186.
    #[serde(default = "d_mean_len")]
    pub mean_len: f64,
    /// Standard deviation of the length (≥ 0). Default 97.7.
    #[serde(default = "d_std_len")]
    pub std_len: f64,
    /// Shortest length (> 0). Default 29.
    #[serde(default = "d_min_len")]
    pub min_len: f64,
    /// Longest length (≥ min_len). Default 1776.
    #[serde(default = "d_max_len")]
    pub max_len: f64,
    /// Sequences per batch whose lengths add up (≥ 1). Default 1.
    #[serde(default = "d_sequences")]
    pub sequences: u32,
}

fn d_mean_len() -> f64 {
    186.0
}

fn d_std_len() -> f64 {
    97.7
}

fn d_min_len() -> f64 {
    29.0
}

fn d_max_len() -> f64 {
    1776.0
}

fn d_sequences() -> u32 {
    1
}

impl Pattern for VariableLengthConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.pos("mean_len", self.mean_len)?;
        c.nonneg("std_len", self.std_len)?;
        c.pos("min_len", self.min_len)?;
        c.pos("max_len", self.max_len)?;
        if self.max_len < self.min_len {
            return Err(c.err("max_len", self.max_len, "max_len >= min_len"));
        }
        if self.sequences == 0 {
            return Err(c.err("sequences", self.sequences, "at least 1 sequence per batch"));
        }
        Ok(())
    }

    fn applies_to(&self, kind: RoleKind, index: u32, _machine: u32) -> bool {
        kind == RoleKind::Worker && in_filter(&self.workers, index)
    }

    fn build(
        &self,
        seed: u64,
        _kind: RoleKind,
        index: u32,
        _machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(VariableLength {
            seed,
            index,
            dist: VariableLength::lognormal(self.mean_len, self.std_len),
            mean_len: self.mean_len,
            min_len: self.min_len,
            max_len: self.max_len,
            sequences: self.sequences,
        }))
    }
}

/// Compute time proportional to the total length of the batch's sequences: `sequences` lengths
/// drawn from a lognormal of mean `mean_len` and standard deviation `std_len`, clipped to
/// `[min_len, max_len]`; factor = total / (sequences · mean_len). Keyed by (seed, worker, iter).
#[derive(Debug)]
struct VariableLength {
    seed: u64,
    index: u32,
    dist: LogNormal<f64>,
    mean_len: f64,
    min_len: f64,
    max_len: f64,
    sequences: u32,
}

impl VariableLength {
    /// The lognormal with the given mean and standard deviation.
    fn lognormal(mean: f64, std: f64) -> LogNormal<f64> {
        let s2 = (1.0 + (std / mean).powi(2)).ln();
        let mu = mean.ln() - 0.5 * s2;
        // Validated: mean > 0 and std >= 0 give a finite, non-negative sigma.
        LogNormal::new(mu, s2.sqrt()).unwrap_or_else(|_| LogNormal::new(0.0, 0.0).expect("σ = 0"))
    }

    /// The time multiplier of iteration `iter`.
    fn factor(&self, iter: u64) -> f64 {
        let mut rng = rng_for(self.seed, "variable-length", u64::from(self.index), iter);
        let total: f64 = (0..self.sequences)
            .map(|_| self.dist.sample(&mut rng).clamp(self.min_len, self.max_len))
            .sum();
        total / (f64::from(self.sequences) * self.mean_len)
    }
}

impl Straggler for VariableLength {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(self.factor(p.iter))
    }
}
