//! Fela's round-robin sleep: in iteration k, worker `k mod N` sleeps before computing.

use serde::{Deserialize, Serialize};

use crate::common::{first_start_probe, Check};
use crate::config::Pattern;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "round-robin-sleep";

/// Fela round-robin: in iteration k, worker `k mod N` sleeps `delay_s` at progress 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundRobinSleepConfig {
    /// Sleep in seconds (≥ 0). Required (Fela: 2–10 s VGG19, 1–5 s GoogLeNet).
    pub delay_s: f64,
}

impl Pattern for RoundRobinSleepConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        Check::new(NAME).nonneg("delay_s", self.delay_s)
    }

    fn applies_to(&self, kind: RoleKind, _index: u32, _machine: u32) -> bool {
        kind == RoleKind::Worker
    }

    fn build(
        &self,
        _seed: u64,
        _kind: RoleKind,
        index: u32,
        _machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(RoundRobinSleep::new(index, self.delay_s)))
    }
}

/// In iteration k, worker `k mod N` sleeps `delay_s` before computing. The delay is reported
/// once per iteration, at the first progress-0 probe.
#[derive(Debug)]
pub(crate) struct RoundRobinSleep {
    index: u32,
    delay_s: f64,
    last_iter: Option<u64>,
}

impl RoundRobinSleep {
    pub(crate) fn new(index: u32, delay_s: f64) -> Self {
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
