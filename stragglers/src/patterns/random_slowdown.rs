//! Hop-like random slowdown (RNA §5.5): whole iterations run a fixed factor slower with a
//! small probability.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "random-slowdown";

/// Hop-like random slowdown (RNA §5.5, garbled in the thesis; spec's choice): each iteration
/// a worker runs `factor`× slower with `probability` (default 1/N), keyed by (seed, worker,
/// iter). Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomSlowdownConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Per-iteration probability in [0, 1]; default 1/N for N workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// Slowdown factor (≥ 1). Default 6.
    #[serde(default = "d_six")]
    pub factor: f64,
}

fn d_six() -> f64 {
    6.0
}

impl Pattern for RandomSlowdownConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        if let Some(p) = self.probability {
            c.prob("probability", p)?;
        }
        if !(self.factor.is_finite() && self.factor >= 1.0) {
            return Err(c.err("factor", self.factor, "a finite slowdown factor >= 1"));
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
        Ok(Box::new(RandomSlowdown {
            seed,
            index,
            probability: self.probability,
            factor: self.factor,
        }))
    }
}

/// With `probability` (default 1/N) an iteration runs `factor`× slower, keyed by (seed, worker,
/// iter); constant over the iteration.
#[derive(Debug)]
struct RandomSlowdown {
    seed: u64,
    index: u32,
    probability: Option<f64>,
    factor: f64,
}

impl Straggler for RandomSlowdown {
    fn effect(&mut self, p: &Probe) -> Effect {
        let prob = self
            .probability
            .unwrap_or(1.0 / f64::from(p.num_workers.max(1)));
        let u: f64 = rng_for(self.seed, "random-slowdown", u64::from(self.index), p.iter).gen();
        if u < prob {
            Effect::compute(self.factor)
        } else {
            Effect::NONE
        }
    }
}
