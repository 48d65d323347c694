//! Fela's sleep injections (round-robin and probability-based), reported at progress 0.

use rand::Rng;

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

/// In iteration k, worker `k mod N` sleeps `delay_s` before computing. The delay is reported
/// once per iteration, at the first progress-0 probe.
#[derive(Debug)]
pub(super) struct RoundRobinSleep {
    index: u32,
    delay_s: f64,
    last_iter: Option<u64>,
}

impl RoundRobinSleep {
    pub(super) fn new(index: u32, delay_s: f64) -> Self {
        RoundRobinSleep {
            index,
            delay_s,
            last_iter: None,
        }
    }
}

impl Straggler for RoundRobinSleep {
    fn effect(&mut self, p: &Probe) -> Effect {
        if p.num_workers == 0 || !first_start_probe(&mut self.last_iter, p) {
            return Effect::NONE;
        }
        if p.iter % u64::from(p.num_workers) == u64::from(self.index) {
            Effect {
                extra_delay_s: self.delay_s,
                ..Effect::NONE
            }
        } else {
            Effect::NONE
        }
    }
}

/// Every iteration the worker sleeps `delay_s` with `probability`, keyed by (seed, worker, iter).
/// Reported once per iteration, at the first progress-0 probe.
#[derive(Debug)]
pub(super) struct ProbabilisticSleep {
    seed: u64,
    index: u32,
    probability: f64,
    delay_s: f64,
    last_iter: Option<u64>,
}

impl ProbabilisticSleep {
    pub(super) fn new(seed: u64, index: u32, probability: f64, delay_s: f64) -> Self {
        ProbabilisticSleep {
            seed,
            index,
            probability,
            delay_s,
            last_iter: None,
        }
    }
}

impl Straggler for ProbabilisticSleep {
    fn effect(&mut self, p: &Probe) -> Effect {
        if !first_start_probe(&mut self.last_iter, p) {
            return Effect::NONE;
        }
        let u: f64 = rng_for(
            self.seed,
            "probabilistic-sleep",
            u64::from(self.index),
            p.iter,
        )
        .gen();
        if u < self.probability {
            Effect {
                extra_delay_s: self.delay_s,
                ..Effect::NONE
            }
        } else {
            Effect::NONE
        }
    }
}
