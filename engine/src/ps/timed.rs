//! Snapshots of a model at fixed run times (`eval_every_s`), for time-indexed evaluation.
//!
//! Per-iteration snapshots say what the model was after k updates; strategies whose groups or
//! workers advance at different rates (RNA-H, asynchronous ones) have no common "iteration k",
//! and their users compare by time. A holder records its values at run times 0, Δ, 2Δ, …
//! without a timer: just before its values change at `now`, the values it holds are the model of
//! every due time before `now`. Times after its last change need no record — its final values
//! stand for them.

use crate::payload::BlockPayload;
use std::ops::Range;

/// A holder's values at run times `index · Δ` for every index in `indices`.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedSnapshot {
    /// Indices k of the run times k · Δ these values held at.
    pub indices: Range<u64>,
    /// Block values.
    pub blocks: Vec<BlockPayload>,
}

/// Records a holder's values at run times 0, Δ, 2Δ, … (Δ = `period`; none recorded without one).
#[derive(Clone, Debug)]
pub struct TimedSnapshots<T> {
    period: Option<f64>,
    next: u64,
    taken: Vec<(Range<u64>, T)>,
}

impl<T> TimedSnapshots<T> {
    /// Snapshots every `period` seconds of run time; `None` records nothing.
    pub fn new(period: Option<f64>) -> TimedSnapshots<T> {
        TimedSnapshots {
            period,
            next: 0,
            taken: Vec::new(),
        }
    }

    /// Whether run times are recorded at all.
    pub fn enabled(&self) -> bool {
        self.period.is_some()
    }

    /// Call just before the values change at run time `now`: the current values (made by
    /// `values` only when some time is due) are recorded for every due time strictly before `now`
    /// (the model at time t includes changes made at t).
    pub fn before_change(&mut self, now: f64, values: impl FnOnce() -> T) {
        let Some(period) = self.period else {
            return;
        };
        let first = self.next;
        while (self.next as f64) * period < now {
            self.next += 1;
        }
        if self.next > first {
            self.taken.push((first..self.next, values()));
        }
    }

    /// The records, oldest first, with their values mapped by `f` (e.g. cut into blocks).
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Vec<(Range<u64>, U)> {
        self.taken.iter().map(|(r, v)| (r.clone(), f(v))).collect()
    }
}

impl TimedSnapshots<Vec<BlockPayload>> {
    /// The records as a server reports them (`None` when no period is set).
    pub fn report(&self) -> Option<Vec<TimedSnapshot>> {
        self.enabled().then(|| {
            self.map(Clone::clone)
                .into_iter()
                .map(|(indices, blocks)| TimedSnapshot { indices, blocks })
                .collect()
        })
    }
}

/// Which of a holder's records holds its values at time index `k`; `None` when it changed no
/// more after `k · Δ`, so its final values stand for that time.
pub fn record_at(timed: &[TimedSnapshot], k: u64) -> Option<usize> {
    timed.iter().position(|s| s.indices.contains(&k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_before_a_change_stand_for_every_due_time_before_it() {
        let mut t = TimedSnapshots::new(Some(1.0));
        let mut calls = 0;
        // Changes at 0.5 (time 0 due), 0.7 (nothing due), 3.0 (times 1 and 2 due), 3.5 (3 due).
        for (now, v) in [(0.5, "a"), (0.7, "b"), (3.0, "c"), (3.5, "d")] {
            t.before_change(now, || {
                calls += 1;
                v
            });
        }
        assert_eq!(calls, 3, "values are only made when a time is due");
        assert_eq!(t.map(|v| *v), vec![(0..1, "a"), (1..3, "c"), (3..4, "d")]);
    }

    #[test]
    fn a_change_at_a_due_time_belongs_to_that_time() {
        let mut t = TimedSnapshots::new(Some(0.5));
        t.before_change(1.0, || 1);
        // Times 0 and 0.5 held the old values; time 1.0 already sees the change.
        assert_eq!(t.map(|v| *v), vec![(0..2, 1)]);
    }

    #[test]
    fn without_a_period_nothing_is_recorded() {
        let mut t: TimedSnapshots<u32> = TimedSnapshots::new(None);
        t.before_change(10.0, || unreachable!("no period: values are never made"));
        assert!(!t.enabled() && t.map(|v| *v).is_empty());
    }

    #[test]
    fn times_after_the_last_change_have_no_record() {
        let at = |indices| TimedSnapshot {
            indices,
            blocks: Vec::new(),
        };
        let timed = vec![at(0..2), at(2..5)];
        assert_eq!(record_at(&timed, 1), Some(0));
        assert_eq!(record_at(&timed, 4), Some(1));
        assert_eq!(record_at(&timed, 5), None, "the final values stand for it");
    }
}
