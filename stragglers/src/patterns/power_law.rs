//! FlexRR "Power-law" pattern (Harlap thesis §4.3.2 item 3, ASCI Q model): heavy-tailed
//! per-iteration time multipliers.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "power-law";

/// FlexRR Power-law: each (worker, iteration) has time multiplier `U^(−1/(α−1))`, i.e.
/// `p(t) ∝ t^−α` on `t ≥ T0`, constant over the iteration. Means 1.11 / 1.2 / 1.5 for
/// α = 11 / 7 / 4. Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerLawConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Exponent α > 2 (finite mean). Required; 4, 7, 11 typical.
    pub alpha: f64,
}

impl Pattern for PowerLawConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        if self.alpha.is_finite() && self.alpha > 2.0 {
            Ok(())
        } else {
            Err(Check::new(NAME).err(
                "alpha",
                self.alpha,
                "a finite exponent > 2: p(t) ∝ t^-alpha has an infinite mean for alpha <= 2 \
                 (typical values 4, 7, 11)",
            ))
        }
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
        Ok(Box::new(PowerLaw::new(seed, index, self.alpha)))
    }
}

/// Per-(worker, iteration) time multiplier drawn from the Pareto law `p(t) ∝ t^−α`, `t ≥ T0`.
#[derive(Debug)]
pub(crate) struct PowerLaw {
    seed: u64,
    index: u32,
    alpha: f64,
}

impl PowerLaw {
    pub(crate) fn new(seed: u64, index: u32, alpha: f64) -> Self {
        PowerLaw { seed, index, alpha }
    }

    /// The multiplier t/T0 of iteration `iter`: `U^(−1/(α−1))` with U ∈ (0, 1], so always ≥ 1.
    pub(crate) fn multiplier(&self, iter: u64) -> f64 {
        let u = 1.0 - rng_for(self.seed, "power-law", u64::from(self.index), iter).gen::<f64>();
        u.powf(-1.0 / (self.alpha - 1.0))
    }
}

impl Straggler for PowerLaw {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(self.multiplier(p.iter))
    }
}
