//! RNA's heterogeneity injectors (Yang thesis §5.5, spec §2.5): uniform random delays, Hop-like
//! random slowdowns, and inherent load imbalance from variable-length batches.

use rand::Rng;
use rand_distr::{Distribution, LogNormal};

use super::rng::rng_for;
use super::{Effect, Probe, Straggler};

/// Tolerance for "progress 0".
const START_EPS: f64 = 1e-9;

/// Whether this probe is the first progress-0 probe of its iteration; records it.
fn first_start_probe(last_iter: &mut Option<u64>, p: &Probe) -> bool {
    if p.progress > START_EPS || *last_iter == Some(p.iter) {
        return false;
    }
    *last_iter = Some(p.iter);
    true
}

/// A delay ~ U[min_s, max_s] before every iteration, keyed by (seed, worker, iter).
#[derive(Debug)]
pub(super) struct UniformDelay {
    pub(super) seed: u64,
    pub(super) index: u32,
    pub(super) min_s: f64,
    pub(super) max_s: f64,
    pub(super) last_iter: Option<u64>,
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

/// With `probability` (default 1/N) an iteration runs `factor`× slower, keyed by (seed, worker,
/// iter); constant over the iteration.
#[derive(Debug)]
pub(super) struct RandomSlowdown {
    pub(super) seed: u64,
    pub(super) index: u32,
    pub(super) probability: Option<f64>,
    pub(super) factor: f64,
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

/// Compute time proportional to the total length of the batch's sequences: `sequences` lengths
/// drawn from a lognormal of mean `mean_len` and standard deviation `std_len`, clipped to
/// `[min_len, max_len]`; factor = total / (sequences · mean_len). Keyed by (seed, worker, iter).
#[derive(Debug)]
pub(super) struct VariableLength {
    pub(super) seed: u64,
    pub(super) index: u32,
    pub(super) dist: LogNormal<f64>,
    pub(super) mean_len: f64,
    pub(super) min_len: f64,
    pub(super) max_len: f64,
    pub(super) sequences: u32,
}

impl VariableLength {
    /// The lognormal with the given mean and standard deviation.
    pub(super) fn lognormal(mean: f64, std: f64) -> LogNormal<f64> {
        let s2 = (1.0 + (std / mean).powi(2)).ln();
        let mu = mean.ln() - 0.5 * s2;
        // Validated: mean > 0 and std >= 0 give a finite, non-negative sigma.
        LogNormal::new(mu, s2.sqrt()).unwrap_or_else(|_| LogNormal::new(0.0, 0.0).expect("σ = 0"))
    }

    /// The time multiplier of iteration `iter`.
    pub(super) fn factor(&self, iter: u64) -> f64 {
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
