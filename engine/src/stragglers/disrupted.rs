//! FlexRR "Disrupted Machine" pattern (Harlap thesis §4.3.2 item 2).

use rand::Rng;

use super::rng::rng_for;
use super::{Effect, Probe, Straggler};

/// Machine-level contention windows: period `j` starts a disruption on the machine with
/// probability `probability`, lasting `[j·period_s, j·period_s + duration_s)`. Draws are keyed by
/// (seed, machine, j), so every role on the machine agrees without shared state.
#[derive(Debug)]
pub(super) struct DisruptedMachine {
    seed: u64,
    machine: u32,
    probability: f64,
    period_s: f64,
    duration_s: f64,
    delay: f64,
}

impl DisruptedMachine {
    pub(super) fn new(
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
    pub(super) fn period_fires(&self, j: u64) -> bool {
        rng_for(self.seed, "disrupted-machine", u64::from(self.machine), j).gen::<f64>()
            < self.probability
    }

    /// Whether the machine is disrupted at time `now`.
    pub(super) fn disrupted_at(&self, now: f64) -> bool {
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
