//! FlexRR "Slow Worker" pattern (Harlap thesis §4.3.2 item 1): transient per-worker
//! slowdowns that start at decision points inside an iteration.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for_keys;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "slow-worker";

/// FlexRR Slow Worker: at each of `points` decision points per iteration (progress
/// 1/points, …, 1) an unslowed worker becomes slowed with `probability` for a time
/// ~ U[0, 2·T0]; while slowed it runs `1 + delay` times slower. About 9 % of time slowed.
///
/// The slowdown lasts a span of time, but an [`Effect`] holds until the next probe; for
/// the interval in which the slowdown ends, the factor is the exact time-average
/// (`(r + Δ − r/(1+d)) / Δ` for `r` slowed seconds left and `Δ` nominal seconds of work to
/// the next point), so `points` must match the engine's probe count. Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowWorkerConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Probability of starting a slowdown at each decision point. Default 0.01.
    #[serde(default = "d_slow_probability")]
    pub probability: f64,
    /// Decision points per iteration. Default 10.
    #[serde(default = "d_points")]
    pub points: u32,
    /// Delay intensity d (1.0 = 100 % = twice as slow); ≥ 0. Required.
    pub delay: f64,
    /// What the drawn length U[0, 2·T0] measures: `time` (run time, the default) or `work`
    /// (nominal seconds of the worker's own iteration, like the thesis's sleeps inserted at
    /// progress points: the added time is then `d` × the slowed work, linear in `d`).
    #[serde(default)]
    pub length: SlowLength,
}

fn d_slow_probability() -> f64 {
    0.01
}

fn d_points() -> u32 {
    10
}

/// What a Slow Worker slowdown's drawn length measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlowLength {
    /// Run time: the slowdown ends at a point in time.
    #[default]
    Time,
    /// Nominal work: the slowdown ends once that much of the worker's own iteration is done.
    Work,
}

impl Pattern for SlowWorkerConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.prob("probability", self.probability)?;
        if self.points == 0 {
            return Err(c.err(
                "points",
                self.points,
                "at least 1 decision point per iteration",
            ));
        }
        c.nonneg("delay", self.delay)
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
        Ok(Box::new(SlowWorker::new(
            seed,
            index,
            self.probability,
            self.points,
            self.delay,
            self.length,
        )))
    }
}

/// Tolerance for recognising a probe as sitting on a decision point.
const POINT_EPS: f64 = 1e-6;

/// Transient per-worker slowdowns: decisions at progress 1/points, …, 1 with probability
/// `probability`, duration ~ U[0, 2·T0], factor `1 + delay` (time-averaged on the last interval).
#[derive(Debug)]
pub(crate) struct SlowWorker {
    seed: u64,
    index: u32,
    probability: f64,
    points: u32,
    delay: f64,
    length: SlowLength,
    /// Time (seconds since start) at which the current slowdown ends; −∞ when never slowed.
    pub(crate) slowed_until: f64,
    /// Under [`SlowLength::Work`]: nominal seconds of work still to be done slowed.
    slowed_work: f64,
    /// Under [`SlowLength::Work`]: the previous probe's (iteration, progress).
    last_probe: Option<(u64, f64)>,
    /// The last decision point taken, so a repeated probe does not decide twice.
    last_decision: Option<(u64, u32)>,
}
impl SlowWorker {
    pub(crate) fn new(
        seed: u64,
        index: u32,
        probability: f64,
        points: u32,
        delay: f64,
        length: SlowLength,
    ) -> Self {
        SlowWorker {
            seed,
            index,
            probability,
            points,
            delay,
            length,
            slowed_until: f64::NEG_INFINITY,
            slowed_work: 0.0,
            last_probe: None,
            last_decision: None,
        }
    }

    /// `Some(k)` (1..=points) if `progress` is the k-th decision point.
    fn decision_point(&self, progress: f64) -> Option<u32> {
        let x = progress * f64::from(self.points);
        let k = x.round();
        if k >= 1.0 && k <= f64::from(self.points) && (x - k).abs() < POINT_EPS {
            Some(k as u32)
        } else {
            None
        }
    }

    /// Nominal seconds of work from `progress` to the next probe point.
    fn work_to_next_point(&self, progress: f64, t0: f64) -> f64 {
        let n = f64::from(self.points);
        let next = (((progress * n) + POINT_EPS).floor() + 1.0).min(n) / n;
        (next - progress).max(0.0) * t0
    }
}

/// What a slow-worker pattern carries from one probe to the next (its checkpoint).
#[derive(serde::Serialize, serde::Deserialize)]
struct SlowWorkerState {
    /// `None` when never slowed (−∞ has no JSON form).
    slowed_until: Option<f64>,
    slowed_work: f64,
    last_probe: Option<(u64, f64)>,
    last_decision: Option<(u64, u32)>,
}

impl Straggler for SlowWorker {
    fn save(&self) -> Option<serde_json::Value> {
        let state = SlowWorkerState {
            slowed_until: self.slowed_until.is_finite().then_some(self.slowed_until),
            slowed_work: self.slowed_work,
            last_probe: self.last_probe,
            last_decision: self.last_decision,
        };
        serde_json::to_value(state).ok()
    }

    fn restore(&mut self, state: &serde_json::Value) -> Result<(), StragglerError> {
        let s: SlowWorkerState = serde_json::from_value(state.clone())
            .map_err(|e| StragglerError::State(format!("slow-worker: {e}")))?;
        self.slowed_until = s.slowed_until.unwrap_or(f64::NEG_INFINITY);
        self.slowed_work = s.slowed_work;
        self.last_probe = s.last_probe;
        self.last_decision = s.last_decision;
        Ok(())
    }

    fn effect(&mut self, p: &Probe) -> Effect {
        if self.length == SlowLength::Work {
            // Work done since the previous probe runs the slowed work down.
            let done = match self.last_probe {
                Some((iter, prev)) if iter == p.iter => (p.progress - prev).max(0.0),
                Some((_, prev)) => (1.0 - prev).max(0.0) + p.progress,
                None => 0.0,
            };
            self.slowed_work = (self.slowed_work - done * p.nominal_iter_s).max(0.0);
            self.last_probe = Some((p.iter, p.progress));
        }
        if let Some(k) = self.decision_point(p.progress) {
            if self.last_decision != Some((p.iter, k)) {
                self.last_decision = Some((p.iter, k));
                // Decisions are ignored while already slowed (thesis [C]).
                if !self.slowed(p.now) {
                    let mut rng = rng_for_keys(
                        self.seed,
                        "slow-worker",
                        &[u64::from(self.index), p.iter, u64::from(k)],
                    );
                    if rng.gen::<f64>() < self.probability {
                        let length = rng.gen::<f64>() * 2.0 * p.nominal_iter_s;
                        match self.length {
                            SlowLength::Time => self.slowed_until = p.now + length,
                            SlowLength::Work => self.slowed_work = length,
                        }
                    }
                }
            }
        }
        if !self.slowed(p.now) {
            return Effect::NONE;
        }
        let slow = 1.0 + self.delay;
        let work = self.work_to_next_point(p.progress, p.nominal_iter_s);
        // Slowed work left, in nominal seconds.
        let remaining = match self.length {
            SlowLength::Time => (self.slowed_until - p.now) / slow,
            SlowLength::Work => self.slowed_work,
        };
        if work <= 0.0 || remaining >= work {
            return Effect::compute(slow);
        }
        // The slowdown ends inside this interval: `remaining` of the work runs at 1+d, the rest
        // at nominal speed.
        Effect::compute((remaining * slow + work - remaining) / work)
    }
}

impl SlowWorker {
    fn slowed(&self, now: f64) -> bool {
        match self.length {
            SlowLength::Time => now < self.slowed_until,
            SlowLength::Work => self.slowed_work > 0.0,
        }
    }
}
