//! FlexRR "Power-law" pattern (Harlap thesis §4.3.2 item 3, ASCI Q model).

use rand::Rng;

use super::rng::rng_for;
use super::{Effect, Probe, Straggler};

/// Per-(worker, iteration) time multiplier drawn from the Pareto law `p(t) ∝ t^−α`, `t ≥ T0`.
#[derive(Debug)]
pub(super) struct PowerLaw {
    seed: u64,
    index: u32,
    alpha: f64,
}

impl PowerLaw {
    pub(super) fn new(seed: u64, index: u32, alpha: f64) -> Self {
        PowerLaw { seed, index, alpha }
    }

    /// The multiplier t/T0 of iteration `iter`: `U^(−1/(α−1))` with U ∈ (0, 1], so always ≥ 1.
    pub(super) fn multiplier(&self, iter: u64) -> f64 {
        let u = 1.0 - rng_for(self.seed, "power-law", u64::from(self.index), iter).gen::<f64>();
        u.powf(-1.0 / (self.alpha - 1.0))
    }
}

impl Straggler for PowerLaw {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(self.multiplier(p.iter))
    }
}
