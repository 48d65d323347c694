//! Snapshots of a model for offline evaluation: after every `eval_every` iterations ([`Snapshot`])
//! and at fixed run times (`eval_every_s`, [`TimedSnapshot`]), for time-indexed evaluation.
//!
//! Per-iteration snapshots say what the model was after k updates; strategies whose groups or
//! workers advance at different rates (RNA-H, asynchronous ones) have no common "iteration k",
//! and their users compare by time. A holder records its values at run times 0, Δ, 2Δ, …
//! without a timer: just before its values change at `now`, the values it holds are the model of
//! every due time before `now`. Times after its last change need no record — its final values
//! stand for them.

use crate::config::RunConfig;
use crate::payload::BlockPayload;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// A holder's block values after a number of iterations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Iterations applied (version + 1).
    pub iterations: u64,
    /// Run time when it was taken.
    pub time_s: f64,
    /// Block values.
    pub blocks: Vec<BlockPayload>,
}

/// When a model holder snapshots its values for offline evaluation: every `every` iterations
/// (`eval_every`) and, if set, every `every_s` seconds of run time (`eval_every_s`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapshotPlan {
    /// Iterations between snapshots (at least 1).
    pub every: u64,
    /// Run-time seconds between timed snapshots.
    pub every_s: Option<f64>,
}

impl SnapshotPlan {
    /// The plan a run's configuration asks for.
    pub fn of(config: &RunConfig) -> SnapshotPlan {
        SnapshotPlan {
            every: config.eval_every.max(1),
            every_s: config.eval_every_s,
        }
    }
}

/// A holder's values at run times `index · Δ` for every index in `indices`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

    /// Snapshots every `period` seconds from the first due time at or after `since`: for values
    /// that arrive mid-run (a block migrated here at `since`), whose earlier times the previous
    /// holder recorded.
    pub fn starting_at(period: Option<f64>, since: f64) -> TimedSnapshots<T> {
        let mut t = TimedSnapshots::new(period);
        if let Some(p) = period {
            while (t.next as f64) * p < since {
                t.next += 1;
            }
        }
        t
    }

    /// Whether run times are recorded at all.
    pub fn enabled(&self) -> bool {
        self.period.is_some()
    }

    /// Whether [`TimedSnapshots::before_change`] at `now` would record the values: some time is
    /// due strictly before `now` (so a holder whose values are costly to read reads them only
    /// then).
    pub fn due_before(&self, now: f64) -> bool {
        self.period
            .is_some_and(|period| (self.next as f64) * period < now)
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

impl TimedSnapshots<BlockPayload> {
    /// The records of one block as a server reports them.
    pub fn report_block(&self) -> Vec<TimedSnapshot> {
        self.map(Clone::clone)
            .into_iter()
            .map(|(indices, block)| TimedSnapshot {
                indices,
                blocks: vec![block],
            })
            .collect()
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

/// One holder's timed records and final blocks.
pub type Holder<'a> = (&'a [TimedSnapshot], &'a [BlockPayload]);

/// Which records (holder, record) cover time index `k`: times with the same records have the
/// same model, which [`model_from`] puts together.
pub fn records_at(holders: &[Holder<'_>], k: u64) -> Vec<(usize, usize)> {
    holders
        .iter()
        .enumerate()
        .flat_map(|(h, (timed, _))| {
            timed
                .iter()
                .enumerate()
                .filter(move |(_, rec)| rec.indices.contains(&k))
                .map(move |(i, _)| (h, i))
        })
        .collect()
}

/// The model from the records `used` (from [`records_at`]): each block from the record that
/// holds it, else from its final holder's final values — a holder records before each change,
/// so a block it changed no more after the time still has those values.
pub fn model_from(holders: &[Holder<'_>], used: &[(usize, usize)]) -> Vec<BlockPayload> {
    let mut values: std::collections::BTreeMap<u32, &BlockPayload> = Default::default();
    for &(h, i) in used {
        for b in &holders[h].0[i].blocks {
            values.entry(b.block).or_insert(b);
        }
    }
    for (_, finals) in holders {
        for b in finals.iter() {
            values.entry(b.block).or_insert(b);
        }
    }
    values.into_values().cloned().collect()
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

    fn block(id: u32, v: f32) -> BlockPayload {
        BlockPayload {
            block: id,
            data: crate::payload::Payload::Real(vec![v]),
        }
    }

    #[test]
    fn a_model_at_a_time_takes_each_block_from_its_record_else_its_final_value() {
        let rec = |indices, blocks| TimedSnapshot { indices, blocks };
        // Holder 0 recorded blocks 0 and 1 at times 0..2; block 1 then moved to holder 1 (which
        // recorded it at 2..4 before changing it again) and ends there.
        let h0 = vec![rec(0..2, vec![block(0, 1.0), block(1, 10.0)])];
        let h1 = vec![rec(2..4, vec![block(1, 11.0)])];
        let (f0, f1) = (vec![block(0, 2.0)], vec![block(1, 12.0)]);
        let holders = [
            (h0.as_slice(), f0.as_slice()),
            (h1.as_slice(), f1.as_slice()),
        ];
        let model_at = |k| {
            let used = records_at(&holders, k);
            (model_from(&holders, &used), used)
        };
        assert_eq!(
            model_at(1),
            (vec![block(0, 1.0), block(1, 10.0)], vec![(0, 0)])
        );
        assert_eq!(
            model_at(3),
            (vec![block(0, 2.0), block(1, 11.0)], vec![(1, 0)])
        );
        assert_eq!(
            model_at(4),
            (vec![block(0, 2.0), block(1, 12.0)], vec![]),
            "after every record: the final values"
        );
    }

    #[test]
    fn values_arriving_mid_run_start_at_the_next_due_time() {
        let mut t = TimedSnapshots::starting_at(Some(1.0), 2.5);
        t.before_change(5.5, || 7);
        assert_eq!(t.map(|v| *v), vec![(3..6, 7)]);
    }
}
