//! Multiplicative lognormal measurement jitter (PSLD §5.1 item 4; Harlap §7.1 `Jitter{σ}`).

use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for_keys;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "jitter";

/// Multiplicative lognormal jitter `J = exp(σZ − σ²/2)` (mean 1): compute factor J for
/// workers, per (worker, iteration, probe point); bandwidth factor 1/J (transfer time × J)
/// for servers, drawn anew for every transfer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JitterConfig {
    /// Which kinds to jitter. Default `all`.
    #[serde(default)]
    pub roles: JitterRoles,
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Servers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<u32>>,
    /// σ of the lognormal (≥ 0). Default 0.1.
    #[serde(default = "d_jitter_sigma")]
    pub sigma: f64,
    /// One factor per (worker, iteration) instead of per probe point: noise that does not
    /// average out over an iteration however finely a strategy charges it (FlexRR's
    /// baseline jitter). Default false.
    #[serde(default)]
    pub per_iteration: bool,
}

fn d_jitter_sigma() -> f64 {
    0.1
}

/// Which roles the `jitter` pattern touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JitterRoles {
    /// Workers only (compute jitter).
    Workers,
    /// Servers only (transfer/bandwidth jitter).
    Servers,
    /// Both kinds.
    #[default]
    All,
}

impl Pattern for JitterConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        Check::new(NAME).nonneg("sigma", self.sigma)
    }

    fn applies_to(&self, kind: RoleKind, index: u32, _machine: u32) -> bool {
        match kind {
            RoleKind::Worker => {
                self.roles != JitterRoles::Servers && in_filter(&self.workers, index)
            }
            RoleKind::Server => {
                self.roles != JitterRoles::Workers && in_filter(&self.servers, index)
            }
        }
    }

    fn build(
        &self,
        seed: u64,
        kind: RoleKind,
        index: u32,
        _machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(Jitter::new(
            seed,
            kind,
            index,
            self.sigma,
            self.per_iteration,
        )))
    }
}

/// Mean-one lognormal factor `J = exp(σZ − σ²/2)` per (role, iteration, probe point), or per
/// (role, iteration) when `per_iteration`.
#[derive(Debug)]
pub(crate) struct Jitter {
    seed: u64,
    kind: RoleKind,
    index: u32,
    sigma: f64,
    per_iteration: bool,
}

impl Jitter {
    pub(crate) fn new(
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
    pub(crate) fn factor(&self, p: &Probe) -> f64 {
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
