//! Fela's probability-based sleep: every iteration each worker independently sleeps before
//! computing, with a fixed probability.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::common::{first_start_probe, in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "probabilistic-sleep";

/// Fela probability-based: every iteration each worker independently sleeps `delay_s`
/// at progress 0 with `probability`. Keyed by (seed, worker, iter).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbabilisticSleepConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Per-iteration straggling probability. Required (Fela: 0.1–0.5).
    pub probability: f64,
    /// Sleep in seconds (≥ 0). Required (Fela: 6 s VGG19, 3 s GoogLeNet).
    pub delay_s: f64,
}

impl Pattern for ProbabilisticSleepConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.prob("probability", self.probability)?;
        c.nonneg("delay_s", self.delay_s)
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
        Ok(Box::new(ProbabilisticSleep::new(
            seed,
            index,
            self.probability,
            self.delay_s,
        )))
    }
}

/// Every iteration the worker sleeps `delay_s` with `probability`, keyed by (seed, worker, iter).
/// Reported once per iteration, at the first progress-0 probe.
#[derive(Debug)]
pub(crate) struct ProbabilisticSleep {
    seed: u64,
    index: u32,
    probability: f64,
    delay_s: f64,
    last_iter: Option<u64>,
}

impl ProbabilisticSleep {
    pub(crate) fn new(seed: u64, index: u32, probability: f64, delay_s: f64) -> Self {
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
