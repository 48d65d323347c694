//! PSLD scheduled server slowdown: a fixed bandwidth / CPU / per-request effect on a time
//! window.

use serde::{Deserialize, Serialize};

use crate::common::{d_one, in_filter, Check};
use crate::config::Pattern;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "slow-server";

/// PSLD scheduled server slowdown: from `start_s` to `end_s` (exclusive; None = forever),
/// the servers get `bandwidth_factor`, `cpu_factor` (service time multiplier) and
/// `per_request_s`. Deterministic. Server-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowServerConfig {
    /// Servers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<u32>>,
    /// Start time in seconds (≥ 0). Default 0.
    #[serde(default)]
    pub start_s: f64,
    /// End time in seconds (> start_s), None = until the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
    /// NIC bandwidth multiplier (> 0; 0.1 = a tenth). Default 1.
    #[serde(default = "d_one")]
    pub bandwidth_factor: f64,
    /// Service (CPU) time multiplier (> 0). Default 1.
    #[serde(default = "d_one")]
    pub cpu_factor: f64,
    /// Fixed extra seconds per request (≥ 0). Default 0.
    #[serde(default)]
    pub per_request_s: f64,
}

impl Pattern for SlowServerConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.nonneg("start_s", self.start_s)?;
        if let Some(end) = self.end_s {
            if !(end.is_finite() && end > self.start_s) {
                return Err(c.err("end_s", end, "a finite time > start_s"));
            }
        }
        c.pos("bandwidth_factor", self.bandwidth_factor)?;
        c.pos("cpu_factor", self.cpu_factor)?;
        c.nonneg("per_request_s", self.per_request_s)
    }

    fn applies_to(&self, kind: RoleKind, index: u32, _machine: u32) -> bool {
        kind == RoleKind::Server && in_filter(&self.servers, index)
    }

    fn build(
        &self,
        _seed: u64,
        _kind: RoleKind,
        _index: u32,
        _machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(SlowServer {
            start_s: self.start_s,
            end_s: self.end_s,
            effect: Effect {
                compute_factor: self.cpu_factor,
                extra_delay_s: 0.0,
                bandwidth_factor: self.bandwidth_factor,
                per_request_s: self.per_request_s,
            },
        }))
    }
}

/// A fixed effect active on `[start_s, end_s)`.
#[derive(Debug)]
pub(crate) struct SlowServer {
    pub(crate) start_s: f64,
    pub(crate) end_s: Option<f64>,
    pub(crate) effect: Effect,
}

impl Straggler for SlowServer {
    fn effect(&mut self, p: &Probe) -> Effect {
        let started = p.now >= self.start_s;
        let ended = self.end_s.is_some_and(|end| p.now >= end);
        if started && !ended {
            self.effect
        } else {
            Effect::NONE
        }
    }
}
