//! FlexRR "Slow Worker" pattern (Harlap thesis §4.3.2 item 1).

use rand::Rng;

use super::rng::rng_for_keys;
use super::{Effect, Probe, SlowLength, Straggler};

/// Tolerance for recognising a probe as sitting on a decision point.
const POINT_EPS: f64 = 1e-6;

/// Transient per-worker slowdowns: decisions at progress 1/points, …, 1 with probability
/// `probability`, duration ~ U[0, 2·T0], factor `1 + delay` (time-averaged on the last interval).
#[derive(Debug)]
pub(super) struct SlowWorker {
    seed: u64,
    index: u32,
    probability: f64,
    points: u32,
    delay: f64,
    length: SlowLength,
    /// Time (seconds since start) at which the current slowdown ends; −∞ when never slowed.
    pub(super) slowed_until: f64,
    /// Under [`SlowLength::Work`]: nominal seconds of work still to be done slowed.
    slowed_work: f64,
    /// Under [`SlowLength::Work`]: the previous probe's (iteration, progress).
    last_probe: Option<(u64, f64)>,
    /// The last decision point taken, so a repeated probe does not decide twice.
    last_decision: Option<(u64, u32)>,
}

impl SlowWorker {
    pub(super) fn new(
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

impl Straggler for SlowWorker {
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
