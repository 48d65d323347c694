//! Multiplicative lognormal measurement jitter (PSLD §5.1 item 4; Harlap §7.1 `Jitter{σ}`).

use rand::Rng;
use rand_distr::StandardNormal;

use super::rng::rng_for_keys;
use super::{Effect, Probe, RoleKind, Straggler};

/// Mean-one lognormal factor `J = exp(σZ − σ²/2)` per (role, iteration, probe point), or per
/// (role, iteration) when `per_iteration`.
#[derive(Debug)]
pub(super) struct Jitter {
    seed: u64,
    kind: RoleKind,
    index: u32,
    sigma: f64,
    per_iteration: bool,
}

impl Jitter {
    pub(super) fn new(
        seed: u64,
        kind: RoleKind,
        index: u32,
        sigma: f64,
        per_iteration: bool,
    ) -> Self {
        Jitter {
            seed,
            kind,
            index,
            sigma,
            per_iteration,
        }
    }

    /// The time multiplier J for the probe.
    pub(super) fn factor(&self, p: &Probe) -> f64 {
        let stream = match self.kind {
            RoleKind::Worker => "jitter-worker",
            RoleKind::Server => "jitter-server",
        };
        let z: f64 = rng_for_keys(
            self.seed,
            stream,
            &[
                u64::from(self.index),
                p.iter,
                if self.per_iteration {
                    0
                } else {
                    p.progress.to_bits()
                },
            ],
        )
        .sample(StandardNormal);
        (self.sigma * z - 0.5 * self.sigma * self.sigma).exp()
    }
}

impl Straggler for Jitter {
    fn effect(&mut self, p: &Probe) -> Effect {
        let j = self.factor(p);
        match self.kind {
            RoleKind::Worker => Effect::compute(j),
            RoleKind::Server => Effect {
                bandwidth_factor: 1.0 / j,
                ..Effect::NONE
            },
        }
    }
}
