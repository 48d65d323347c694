//! LB-BSP competing-process emulation (Paper L, B5 item 3, "dynamic"): a per-worker on/off
//! competitor with load share, noise, spikes and the exogenous signals LB-BSP's NARX reads.

use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use super::persistent::spread_speed;
use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, ResourceSignals, RoleKind, Span, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "contention";

/// LB-BSP competing process: per worker an on/off Markov chain over iterations
/// (P(off→on) = `p_on`, P(on→off) = `p_off`) with load share ℓ; availability
/// `s = (1 − ℓ·on)·exp(noise·Z)`; compute factor `spike / s`, where single-iteration spikes
/// (factor `spike_factor`, probability `spike_probability`) do not show in the signals.
/// Signals: `cpu = ℓ·on + signal_noise·Z₁`, `mem = 0.3 + 0.5·ℓ·on + signal_noise·Z₂`
/// (resident trainer plus the competitor's memory, which scales with its load), clamped to
/// [0, 1]. Exactly one of `load` / `load_spread`. Worker-only. For LB-BSP's static levels
/// use `persistent` with `spread`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentionConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// P(off → on) per iteration. Required.
    pub p_on: f64,
    /// P(on → off) per iteration. Required.
    pub p_off: f64,
    /// Explicit load share ℓ per worker index, each in [0, 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Vec<f64>>,
    /// Loads linearly spaced from `max` (worker 0) to `min` (worker N−1), within [0, 1);
    /// a single worker gets `min`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_spread: Option<Span>,
    /// σ of the multiplicative lognormal (median 1) availability noise. Default 0.05.
    #[serde(default = "d_noise")]
    pub noise: f64,
    /// Probability of a transient single-iteration spike. Default 0.05.
    #[serde(default = "d_spike_probability")]
    pub spike_probability: f64,
    /// Compute factor of a spike (> 0). Default 2.0.
    #[serde(default = "d_two")]
    pub spike_factor: f64,
    /// σ of the additive Gaussian noise on both signals. Default 0.02.
    #[serde(default = "d_signal_noise")]
    pub signal_noise: f64,
}

fn d_noise() -> f64 {
    0.05
}

fn d_spike_probability() -> f64 {
    0.05
}

fn d_two() -> f64 {
    2.0
}

fn d_signal_noise() -> f64 {
    0.02
}

/// The error for a config with neither or both of `load` / `load_spread`.
fn load_choice_error(c: &Check, load_given: bool) -> StragglerError {
    c.err(
        "load/load_spread",
        if load_given {
            "both set"
        } else {
            "neither set"
        },
        "exactly one of `load` or `load_spread`",
    )
}

impl Pattern for ContentionConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.prob("p_on", self.p_on)?;
        c.prob("p_off", self.p_off)?;
        if self.p_on + self.p_off <= 0.0 {
            return Err(c.err(
                "p_on",
                self.p_on,
                "p_on + p_off > 0 (otherwise the chain has no stationary on-fraction)",
            ));
        }
        match (&self.load, self.load_spread) {
            (Some(list), None) => {
                if list.is_empty() {
                    return Err(c.err("load", "[]", "a non-empty list of load shares in [0, 1)"));
                }
                for &l in list {
                    c.load("load", l)?;
                }
            }
            (None, Some(Span { min, max })) => {
                c.load("load_spread.min", min)?;
                c.load("load_spread.max", max)?;
                if min > max {
                    return Err(c.err(
                        "load_spread",
                        format!("{{min = {min}, max = {max}}}"),
                        "min <= max",
                    ));
                }
            }
            _ => return Err(load_choice_error(&c, self.load.is_some())),
        }
        c.nonneg("noise", self.noise)?;
        c.prob("spike_probability", self.spike_probability)?;
        c.pos("spike_factor", self.spike_factor)?;
        c.nonneg("signal_noise", self.signal_noise)
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
        let c = Check::new(NAME);
        let load = match (&self.load, self.load_spread) {
            (Some(list), _) => Load::Fixed(*list.get(index as usize).ok_or_else(|| {
                c.err(
                    "load",
                    format!("a list of {} entries", list.len()),
                    &format!(
                        "one load share per worker; worker {index} needs at least {}",
                        index + 1
                    ),
                )
            })?),
            (None, Some(span)) => Load::Spread(span),
            (None, None) => return Err(load_choice_error(&c, false)),
        };
        Ok(Box::new(Contention::new(Params {
            seed,
            index,
            p_on: self.p_on,
            p_off: self.p_off,
            load,
            noise: self.noise,
            spike_probability: self.spike_probability,
            spike_factor: self.spike_factor,
            signal_noise: self.signal_noise,
        })))
    }
}

/// Memory pressure of the worker itself (the resident trainer), with no competitor.
pub(crate) const MEM_BASE: f64 = 0.3;
/// Memory pressure added per unit of competitor load share while the competitor runs.
pub(crate) const MEM_PER_LOAD: f64 = 0.5;

/// Where this worker's load share ℓ comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Load {
    /// Resolved from the `load` list at build time.
    Fixed(f64),
    /// Linear from `max` (worker 0) to `min` (worker N−1), resolved per probe.
    Spread(Span),
}

/// Construction parameters (validated by the config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub(crate) seed: u64,
    pub(crate) index: u32,
    pub(crate) p_on: f64,
    pub(crate) p_off: f64,
    pub(crate) load: Load,
    pub(crate) noise: f64,
    pub(crate) spike_probability: f64,
    pub(crate) spike_factor: f64,
    pub(crate) signal_noise: f64,
}

/// Per-iteration on/off chain with load share, noise, spikes and exogenous signals.
///
/// The chain state of iteration k is `f(state(k−1), u(seed, worker, k))` with state(0) drawn
/// from the stationary law, so it is a pure function of (seed, worker, k); a cache of the last
/// computed iteration makes in-order probing O(1).
#[derive(Debug)]
pub(crate) struct Contention {
    p: Params,
    cache: Option<(u64, bool)>,
}

impl Contention {
    pub(crate) fn new(p: Params) -> Self {
        Contention { p, cache: None }
    }

    fn uniform(&self, stream: &str, iter: u64) -> f64 {
        rng_for(self.p.seed, stream, u64::from(self.p.index), iter).gen()
    }

    /// Whether the competing process runs during iteration `iter`.
    pub(crate) fn on_at(&mut self, iter: u64) -> bool {
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
