//! LB-BSP Cluster-B stand-in: piecewise-constant availability with random level shifts.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

use super::contention::{MEM_BASE, MEM_PER_LOAD};
use super::rng::rng_for;
use super::{Effect, Probe, ResourceSignals, Straggler};

/// Availability segments generated lazily, in time order, from a per-worker stream keyed by
/// (seed, worker); the sequence is a function of the seed alone, whatever the probe times.
#[derive(Debug)]
pub(super) struct TraceLike {
    seed: u64,
    index: u32,
    mean_segment_s: f64,
    min: f64,
    max: f64,
    rng: ChaCha8Rng,
    /// Current segment `[start, end)` and its level.
    start: f64,
    pub(super) end: f64,
    level: f64,
}

impl TraceLike {
    pub(super) fn new(seed: u64, index: u32, mean_segment_s: f64, min: f64, max: f64) -> Self {
        let mut t = TraceLike {
            seed,
            index,
            mean_segment_s,
            min,
            max,
            rng: rng_for(seed, "trace-like", u64::from(index), 0),
            start: 0.0,
            end: 0.0,
            level: 1.0,
        };
        t.reset();
        t
    }

    fn reset(&mut self) {
        self.rng = rng_for(self.seed, "trace-like", u64::from(self.index), 0);
        self.start = 0.0;
        self.end = 0.0;
        self.next_segment();
    }

    fn next_segment(&mut self) {
        self.start = self.end;
        self.level = if self.max > self.min {
            self.rng.gen_range(self.min..=self.max)
        } else {
            self.min
        };
        let len = Exp::new(1.0 / self.mean_segment_s)
            .expect("validated: mean_segment_s > 0")
            .sample(&mut self.rng);
        self.end = self.start + len;
    }

    /// Availability level at time `now` (segments before time 0 use the first one).
    pub(super) fn level_at(&mut self, now: f64) -> f64 {
        if now < self.start {
            self.reset();
        }
        while now >= self.end {
            self.next_segment();
        }
        self.level
    }
}

impl Straggler for TraceLike {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(1.0 / self.level_at(p.now))
    }

    fn signals(&mut self, p: &Probe) -> Option<ResourceSignals> {
        let busy = 1.0 - self.level_at(p.now);
        Some(ResourceSignals {
            cpu: busy.clamp(0.0, 1.0),
            mem: (MEM_BASE + MEM_PER_LOAD * busy).clamp(0.0, 1.0),
        })
    }
}
