//! LB-BSP competing-process emulation (Paper L, B5 item 3, "dynamic").

use rand::Rng;
use rand_distr::StandardNormal;

use super::persistent::spread_speed;
use super::rng::rng_for;
use super::{Effect, Probe, ResourceSignals, Span, Straggler};

/// Memory pressure of the worker itself (the resident trainer), with no competitor.
pub(super) const MEM_BASE: f64 = 0.3;
/// Memory pressure added per unit of competitor load share while the competitor runs.
pub(super) const MEM_PER_LOAD: f64 = 0.5;

/// Where this worker's load share ℓ comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Load {
    /// Resolved from the `load` list at build time.
    Fixed(f64),
    /// Linear from `max` (worker 0) to `min` (worker N−1), resolved per probe.
    Spread(Span),
}

/// Construction parameters (validated by the config).
#[derive(Debug, Clone, Copy)]
pub(super) struct Params {
    pub(super) seed: u64,
    pub(super) index: u32,
    pub(super) p_on: f64,
    pub(super) p_off: f64,
    pub(super) load: Load,
    pub(super) noise: f64,
    pub(super) spike_probability: f64,
    pub(super) spike_factor: f64,
    pub(super) signal_noise: f64,
}

/// Per-iteration on/off chain with load share, noise, spikes and exogenous signals.
///
/// The chain state of iteration k is `f(state(k−1), u(seed, worker, k))` with state(0) drawn
/// from the stationary law, so it is a pure function of (seed, worker, k); a cache of the last
/// computed iteration makes in-order probing O(1).
#[derive(Debug)]
pub(super) struct Contention {
    p: Params,
    cache: Option<(u64, bool)>,
}

impl Contention {
    pub(super) fn new(p: Params) -> Self {
        Contention { p, cache: None }
    }

    fn uniform(&self, stream: &str, iter: u64) -> f64 {
        rng_for(self.p.seed, stream, u64::from(self.p.index), iter).gen()
    }

    /// Whether the competing process runs during iteration `iter`.
    pub(super) fn on_at(&mut self, iter: u64) -> bool {
        let (mut k, mut on) = match self.cache {
            Some((k, on)) if k <= iter => (k, on),
            _ => {
                let pi_on = self.p.p_on / (self.p.p_on + self.p.p_off);
                (0, self.uniform("contention-chain", 0) < pi_on)
            }
        };
        while k < iter {
            k += 1;
            let u = self.uniform("contention-chain", k);
            on = if on {
                u >= self.p.p_off
            } else {
                u < self.p.p_on
            };
        }
        self.cache = Some((k, on));
        on
    }

    fn load(&self, num_workers: u32) -> f64 {
        match self.p.load {
            Load::Fixed(l) => l,
            // Reuse the speed spread with the ends swapped: worker 0 gets `max`.
            Load::Spread(span) => {
                span.max + span.min - spread_speed(span, self.p.index, num_workers)
            }
        }
    }

    /// ℓ·on for the probe's iteration.
    fn busy(&mut self, p: &Probe) -> f64 {
        if self.on_at(p.iter) {
            self.load(p.num_workers)
        } else {
            0.0
        }
    }
}

impl Straggler for Contention {
    fn effect(&mut self, p: &Probe) -> Effect {
        let busy = self.busy(p);
        let z: f64 = rng_for(
            self.p.seed,
            "contention-noise",
            u64::from(self.p.index),
            p.iter,
        )
        .sample(StandardNormal);
        let availability = (1.0 - busy) * (self.p.noise * z).exp();
        let spike = if self.uniform("contention-spike", p.iter) < self.p.spike_probability {
            self.p.spike_factor
        } else {
            1.0
        };
        Effect::compute(spike / availability)
    }

    fn signals(&mut self, p: &Probe) -> Option<ResourceSignals> {
        let busy = self.busy(p);
        let mut rng = rng_for(
            self.p.seed,
            "contention-signals",
            u64::from(self.p.index),
            p.iter,
        );
        let z1: f64 = rng.sample(StandardNormal);
        let z2: f64 = rng.sample(StandardNormal);
        Some(ResourceSignals {
            cpu: (busy + self.p.signal_noise * z1).clamp(0.0, 1.0),
            mem: (MEM_BASE + MEM_PER_LOAD * busy + self.p.signal_noise * z2).clamp(0.0, 1.0),
        })
    }
}
