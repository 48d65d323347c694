//! FlexRR "Disrupted Machine" pattern (Harlap thesis §4.3.2 item 2): machine-level
//! contention windows shared by every role placed on the machine.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "disrupted-machine";

/// FlexRR Disrupted Machine: every `period_s`, each machine independently is disrupted with
/// `probability` for `duration_s`; every worker on it (and every server, if
/// `include_servers`) runs `1 + delay` times slower. Keyed by (seed, machine, period).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisruptedMachineConfig {
    /// Machines that can be disrupted (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machines: Option<Vec<u32>>,
    /// Per-machine, per-period disruption probability. Default 0.2.
    #[serde(default = "d_disrupt_probability")]
    pub probability: f64,
    /// Decision period in seconds. Default 20.
    #[serde(default = "d_twenty")]
    pub period_s: f64,
    /// Disruption length in seconds. Default 20.
    #[serde(default = "d_twenty")]
    pub duration_s: f64,
    /// Delay intensity d; ≥ 0. Required.
    pub delay: f64,
    /// Also slow servers placed on a disrupted machine (service time × (1+d)). Default false.
    #[serde(default)]
    pub include_servers: bool,
}

fn d_disrupt_probability() -> f64 {
    0.2
}

fn d_twenty() -> f64 {
    20.0
}

impl Pattern for DisruptedMachineConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.prob("probability", self.probability)?;
        c.pos("period_s", self.period_s)?;
        c.nonneg("duration_s", self.duration_s)?;
        c.nonneg("delay", self.delay)
    }

    fn applies_to(&self, kind: RoleKind, _index: u32, machine: u32) -> bool {
        (kind == RoleKind::Worker || self.include_servers) && in_filter(&self.machines, machine)
    }

    fn build(
        &self,
        seed: u64,
        _kind: RoleKind,
        _index: u32,
        machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(DisruptedMachine::new(
            seed,
            machine,
            self.probability,
            self.period_s,
            self.duration_s,
            self.delay,
        )))
    }
}

/// Machine-level contention windows: period `j` starts a disruption on the machine with
/// probability `probability`, lasting `[j·period_s, j·period_s + duration_s)`. Draws are keyed by
/// (seed, machine, j), so every role on the machine agrees without shared state.
#[derive(Debug)]
pub(crate) struct DisruptedMachine {
    seed: u64,
    machine: u32,
    probability: f64,
    period_s: f64,
    duration_s: f64,
    delay: f64,
}

impl DisruptedMachine {
    pub(crate) fn new(
        seed: u64,
        machine: u32,
        probability: f64,
        period_s: f64,
        duration_s: f64,
        delay: f64,
    ) -> Self {
        DisruptedMachine {
            seed,
            machine,
            probability,
            period_s,
            duration_s,
            delay,
        }
    }

    /// Whether the disruption draw of period `j` fired.
    pub(crate) fn period_fires(&self, j: u64) -> bool {
        rng_for(self.seed, "disrupted-machine", u64::from(self.machine), j).gen::<f64>()
            < self.probability
    }

    /// Whether the machine is disrupted at time `now`.
    pub(crate) fn disrupted_at(&self, now: f64) -> bool {
        if now.is_nan() || now < 0.0 || self.duration_s <= 0.0 {
            return false;
        }
        let last = (now / self.period_s).floor() as u64;
        let first = ((now - self.duration_s) / self.period_s).floor().max(0.0) as u64;
        (first..=last).any(|j| {
            let start = j as f64 * self.period_s;
            start <= now && now < start + self.duration_s && self.period_fires(j)
        })
    }
}

impl Straggler for DisruptedMachine {
    fn effect(&mut self, p: &Probe) -> Effect {
        if self.disrupted_at(p.now) {
            Effect::compute(1.0 + self.delay)
        } else {
            Effect::NONE
        }
    }
}
