//! RNA's random delay (Yang thesis §5.5, spec §2.5): a uniform sleep before every iteration.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::common::{first_start_probe, in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "uniform-delay";

/// RNA's random delay: before every iteration a worker sleeps U[`min_s`, `max_s`] seconds,
/// keyed by (seed, worker, iter). The thesis injects U(0, 50 ms) per process per iteration,
/// and U(50, 100 ms) on group B of its mixed setting (`workers` = group B). Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UniformDelayConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Shortest delay in seconds (≥ 0). Default 0.
    #[serde(default)]
    pub min_s: f64,
    /// Longest delay in seconds (≥ min_s). Required.
    pub max_s: f64,
}

impl Pattern for UniformDelayConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.nonneg("min_s", self.min_s)?;
        c.nonneg("max_s", self.max_s)?;
        if self.max_s < self.min_s {
            return Err(c.err("max_s", self.max_s, "max_s >= min_s"));
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
        Ok(Box::new(UniformDelay {
            seed,
            index,
            min_s: self.min_s,
            max_s: self.max_s,
            last_iter: None,
        }))
    }
}

/// A delay ~ U[min_s, max_s] before every iteration, keyed by (seed, worker, iter).
#[derive(Debug)]
struct UniformDelay {
    seed: u64,
    index: u32,
    min_s: f64,
    max_s: f64,
    last_iter: Option<u64>,
}

impl Straggler for UniformDelay {
    fn effect(&mut self, p: &Probe) -> Effect {
        if !first_start_probe(&mut self.last_iter, p) {
            return Effect::NONE;
        }
        let u: f64 = rng_for(self.seed, "uniform-delay", u64::from(self.index), p.iter).gen();
        Effect {
            extra_delay_s: self.min_s + u * (self.max_s - self.min_s),
            ..Effect::NONE
        }
    }
}
