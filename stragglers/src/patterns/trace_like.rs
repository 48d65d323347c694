//! LB-BSP Cluster-B stand-in: piecewise-constant availability with random level shifts.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use super::contention::{MEM_BASE, MEM_PER_LOAD};
use crate::common::{d_half, d_one, in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, ResourceSignals, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "trace-like";

/// LB-BSP Cluster-B stand-in: piecewise-constant availability per worker; segment lengths
/// ~ Exp(mean `mean_segment_s`), level ~ U[`min`, `max`] at each shift; factor = 1/level.
/// Signals: `cpu = 1 − level`, `mem = 0.3 + 0.5·(1 − level)`. Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceLikeConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Mean segment length in seconds (> 0). Default 30.
    #[serde(default = "d_thirty")]
    pub mean_segment_s: f64,
    /// Lowest availability level (> 0). Default 0.5.
    #[serde(default = "d_half")]
    pub min: f64,
    /// Highest availability level (≥ min). Default 1.0.
    #[serde(default = "d_one")]
    pub max: f64,
}

fn d_thirty() -> f64 {
    30.0
}

impl Pattern for TraceLikeConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.pos("mean_segment_s", self.mean_segment_s)?;
        c.pos("min", self.min)?;
        c.pos("max", self.max)?;
        if self.min > self.max {
            return Err(c.err("min", self.min, "min <= max"));
        }
        Ok(())
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
        Ok(Box::new(TraceLike::new(
            seed,
            index,
            self.mean_segment_s,
            self.min,
            self.max,
        )))
    }
}

/// Availability segments generated lazily, in time order, from a per-worker stream keyed by
/// (seed, worker); the sequence is a function of the seed alone, whatever the probe times.
#[derive(Debug)]
pub(crate) struct TraceLike {
    seed: u64,
    index: u32,
    mean_segment_s: f64,
    min: f64,
    max: f64,
    rng: ChaCha8Rng,
    /// Current segment `[start, end)` and its level.
    start: f64,
    pub(crate) end: f64,
    level: f64,
}

impl TraceLike {
    pub(crate) fn new(seed: u64, index: u32, mean_segment_s: f64, min: f64, max: f64) -> Self {
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
    pub(crate) fn level_at(&mut self, now: f64) -> f64 {
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
