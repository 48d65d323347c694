//! Parameter partitions as an ActivePS / ParamServ holds them, and their BackupPS copies
//! (spec §5.1.4, §5.1.5).
//!
//! The parameters are one flat vector cut into `Np` contiguous partitions ([`partition_ranges`]),
//! never resharded, only reassigned. A [`Partition`] applies one mean gradient per clock with the
//! engine's optimizer and keeps, for every clock not yet committed, the value delta it caused and
//! the optimizer state after it. From these it can
//! - push a consistent state to its backup: the summed deltas of every clock up to `c` and none
//!   later, with the optimizer state at `c` ([`Partition::take_push`]);
//! - roll back to the last committed clock: `value −= pending_delta`, optimizer state restored
//!   exactly ([`Partition::rollback`]);
//! - move whole to another machine ([`Partition::export`] / [`Partition::import`]) so the backup
//!   stream continues where it was.
//!
//! A [`Backup`] stages pushes in order, folds them in at a commit, adopts an END-OF-LIFE snapshot
//! exactly, and turns into a serving partition when it takes over.

use super::ids::{Clock, PartitionId};
use concord_engine::optim::{OptState, OptimizerConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use thiserror::Error;

/// Contiguous ranges cutting `len` elements into `np` partitions whose sizes differ by at most
/// one (partition `i` is `⌊len·i/np⌋..⌊len·(i+1)/np⌋`); empty for `np = 0`.
pub fn partition_ranges(len: usize, np: usize) -> Vec<Range<usize>> {
    let bound = |i: usize| (len as u128 * i as u128 / np as u128) as usize;
    (0..np).map(|i| bound(i)..bound(i + 1)).collect()
}

/// What can go wrong applying, pushing, committing or moving partition state; every variant names
/// the partition and the clock or lengths concerned.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PartitionError {
    /// A vector of the wrong length for the partition.
    #[error(
        "partition {partition} (elements {range:?}): {what} has {got} values, expected {expected}"
    )]
    Length {
        /// The partition.
        partition: PartitionId,
        /// Its elements.
        range: Range<usize>,
        /// Which vector (gradient, value, delta, ...).
        what: &'static str,
        /// The partition's length.
        expected: usize,
        /// The vector's length.
        got: usize,
    },
    /// Clocks must be applied one after another.
    #[error("partition {partition}: clock {got} arrived out of order, expected clock {expected}")]
    OutOfOrder {
        /// The partition.
        partition: PartitionId,
        /// The next clock.
        expected: Clock,
        /// The clock given.
        got: Clock,
    },
    /// A commit of a clock not applied yet.
    #[error(
        "partition {partition}: cannot commit clock {clock}, last applied clock is {applied:?}"
    )]
    CommitAhead {
        /// The partition.
        partition: PartitionId,
        /// The clock asked for.
        clock: Clock,
        /// The last applied clock.
        applied: Option<Clock>,
    },
    /// A push that does not continue the backup's stream.
    #[error(
        "partition {partition}: push for clocks {from_clock}..={upto} arrived, expected one starting at clock {expected}"
    )]
    PushOutOfOrder {
        /// The partition.
        partition: PartitionId,
        /// First clock in the push.
        from_clock: Clock,
        /// Last clock in the push.
        upto: Clock,
        /// The clock the next push must start at.
        expected: Clock,
    },
    /// State for another partition.
    #[error("partition {expected}: received state for partition {got}")]
    WrongPartition {
        /// This partition.
        expected: PartitionId,
        /// The partition the state belongs to.
        got: PartitionId,
    },
    /// A snapshot whose clocks contradict each other.
    #[error("partition {partition}: snapshot is inconsistent: {what}")]
    Inconsistent {
        /// The partition.
        partition: PartitionId,
        /// What does not hold.
        what: String,
    },
}

/// Aggregated updates an ActivePS sends its BackupPS: clocks `from_clock..=upto`, complete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Push {
    /// The partition.
    pub partition: PartitionId,
    /// First clock included.
    pub from_clock: Clock,
    /// Last clock included: the backup is consistent at `upto` once it folds this in.
    pub upto: Clock,
    /// Σ of the value deltas of the included clocks, in clock order.
    pub delta: Vec<f32>,
    /// Optimizer state after clock `upto`.
    pub opt: OptState,
}

/// A partition served by an ActivePS or ParamServ, with what it needs to push, commit, roll back
/// and migrate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Partition {
    /// The partition's id.
    pub id: PartitionId,
    /// Its elements in the flat parameter vector.
    pub range: Range<usize>,
    /// Current parameters (every applied clock included).
    pub value: Vec<f32>,
    /// Current optimizer state.
    pub opt: OptState,
    /// Last clock applied.
    pub applied: Option<Clock>,
    /// Value delta (new − old) of every applied clock after `committed`.
    pub deltas: BTreeMap<Clock, Vec<f32>>,
    /// Optimizer state after every applied clock after `committed`.
    pub opt_at: BTreeMap<Clock, OptState>,
    /// Last clock the durable copy holds: roll-backs return here.
    pub committed: Option<Clock>,
    /// Optimizer state at `committed`.
    pub committed_opt: OptState,
    /// Last clock sent to the backup.
    pub pushed: Option<Clock>,
}

/// Everything a [`Partition`] holds, to move it to another machine (or send it END-OF-LIFE).
pub type PartitionSnapshot = Partition;

fn check_len(
    partition: PartitionId,
    range: &Range<usize>,
    what: &'static str,
    got: usize,
) -> Result<(), PartitionError> {
    let expected = range.len();
    if got == expected {
        Ok(())
    } else {
        Err(PartitionError::Length {
            partition,
            range: range.clone(),
            what,
            expected,
            got,
        })
    }
}

fn next_clock(c: Option<Clock>) -> Clock {
    c.map_or(0, |c| c + 1)
}

impl Partition {
    /// A partition at its initial value, before clock 0, with fresh optimizer state.
    pub fn new(
        id: PartitionId,
        range: Range<usize>,
        value: Vec<f32>,
        opt: &OptimizerConfig,
    ) -> Result<Self, PartitionError> {
        check_len(id, &range, "value", value.len())?;
        let state = opt.init_state(range.len());
        Ok(Partition {
            id,
            range,
            value,
            opt: state.clone(),
            applied: None,
            deltas: BTreeMap::new(),
            opt_at: BTreeMap::new(),
            committed: None,
            committed_opt: state,
            pushed: None,
        })
    }

    /// Applies clock `clock`'s mean gradient with `opt`; clocks must follow one another (0 first)
    /// and the delta is kept until committed.
    pub fn apply(
        &mut self,
        clock: Clock,
        mean_grad: &[f32],
        opt: &OptimizerConfig,
    ) -> Result<(), PartitionError> {
        let expected = next_clock(self.applied);
        if clock != expected {
            return Err(PartitionError::OutOfOrder {
                partition: self.id,
                expected,
                got: clock,
            });
        }
        check_len(self.id, &self.range, "gradient", mean_grad.len())?;
        let old = self.value.clone();
        opt.step(&mut self.value, mean_grad, &mut self.opt);
        let delta = self.value.iter().zip(&old).map(|(n, o)| n - o).collect();
        self.deltas.insert(clock, delta);
        self.opt_at.insert(clock, self.opt.clone());
        self.applied = Some(clock);
        Ok(())
    }

    fn sum_deltas<'a>(&self, deltas: impl Iterator<Item = &'a Vec<f32>>) -> Vec<f32> {
        let mut acc = vec![0.0f32; self.range.len()];
        for d in deltas {
            for (a, x) in acc.iter_mut().zip(d) {
                *a += *x;
            }
        }
        acc
    }

    /// Σ of every uncommitted delta, in clock order: what a roll-back takes off.
    pub fn pending_delta(&self) -> Vec<f32> {
        self.sum_deltas(self.deltas.values())
    }

    /// The push of every clock after the last pushed one up to `upto` (at most the last applied),
    /// marking them pushed; `None` when there is nothing new.
    pub fn take_push(&mut self, upto: Clock) -> Option<Push> {
        let last = self.applied?.min(upto);
        let from_clock = next_clock(self.pushed);
        if last < from_clock {
            return None;
        }
        let delta = self.sum_deltas(self.deltas.range(from_clock..=last).map(|(_, d)| d));
        let opt = self.opt_at.get(&last)?.clone();
        self.pushed = Some(last);
        Some(Push {
            partition: self.id,
            from_clock,
            upto: last,
            delta,
            opt,
        })
    }

    /// Marks every clock up to `clock` durable: their deltas are dropped and a roll-back can no
    /// longer undo them. Committing past the pushed clock marks those clocks pushed too (a
    /// ParamServ is itself the durable copy and pushes nothing). Older clocks are a no-op.
    pub fn commit(&mut self, clock: Clock) -> Result<(), PartitionError> {
        if self.applied.is_none_or(|a| clock > a) {
            return Err(PartitionError::CommitAhead {
                partition: self.id,
                clock,
                applied: self.applied,
            });
        }
        if self.committed.is_some_and(|c| c >= clock) {
            return Ok(());
        }
        if let Some(opt) = self.opt_at.get(&clock) {
            self.committed_opt = opt.clone();
        }
        self.deltas = self.deltas.split_off(&(clock + 1));
        self.opt_at = self.opt_at.split_off(&(clock + 1));
        self.committed = Some(clock);
        self.pushed = self.pushed.max(Some(clock));
        Ok(())
    }

    /// Returns to the committed clock: the value loses every uncommitted delta (newest first),
    /// the optimizer state is the committed one exactly, and pushes past it are void. Returns the
    /// clock workers redo from.
    pub fn rollback(&mut self) -> Clock {
        for d in self.deltas.values().rev() {
            for (v, x) in self.value.iter_mut().zip(d) {
                *v -= *x;
            }
        }
        self.deltas.clear();
        self.opt_at.clear();
        self.opt = self.committed_opt.clone();
        self.applied = self.committed;
        self.pushed = self.committed;
        next_clock(self.committed)
    }

    /// Everything this partition holds (value, optimizer states, deltas, clocks).
    pub fn export(&self) -> PartitionSnapshot {
        self.clone()
    }

    /// The partition a snapshot describes, after checking its lengths and clocks agree.
    pub fn import(snapshot: PartitionSnapshot) -> Result<Self, PartitionError> {
        let s = snapshot;
        check_len(s.id, &s.range, "value", s.value.len())?;
        for d in s.deltas.values() {
            check_len(s.id, &s.range, "delta", d.len())?;
        }
        let bad = |what: String| PartitionError::Inconsistent {
            partition: s.id,
            what,
        };
        let after_committed: Vec<Clock> = match s.applied {
            Some(a) => (next_clock(s.committed)..=a).collect(),
            None => Vec::new(),
        };
        if s.committed > s.applied || s.pushed > s.applied || s.pushed < s.committed {
            return Err(bad(format!(
                "committed {:?}, pushed {:?}, applied {:?} must satisfy committed ≤ pushed ≤ applied",
                s.committed, s.pushed, s.applied
            )));
        }
        if !s.deltas.keys().copied().eq(after_committed.iter().copied())
            || !s.opt_at.keys().copied().eq(after_committed.iter().copied())
        {
            return Err(bad(format!(
                "deltas and optimizer states must cover exactly clocks {after_committed:?}"
            )));
        }
        Ok(s)
    }
}

/// A BackupPS's copy of one partition: the value at its last consistent clock plus the pushes
/// received but not yet committed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Backup {
    /// The partition's id.
    pub id: PartitionId,
    /// Its elements in the flat parameter vector.
    pub range: Range<usize>,
    /// Parameters as of `consistent`.
    pub value: Vec<f32>,
    /// Optimizer state as of `consistent`.
    pub opt: OptState,
    /// The clock `value` holds every update of, and none later (`None`: before clock 0).
    pub consistent: Option<Clock>,
    /// Pushes received and not yet committed, by last clock.
    pub staged: BTreeMap<Clock, Push>,
}

impl Backup {
    /// A backup of a partition's state as of its last pushed clock, so the partition's push
    /// stream continues it exactly (stage 1→2: a ParamServ hands its partition to an ActivePS
    /// and keeps this copy).
    pub fn from_snapshot(s: &PartitionSnapshot) -> Result<Self, PartitionError> {
        let p = Partition::import(s.clone())?;
        let mut value = p.value.clone();
        for (_, d) in p.deltas.range(next_clock(p.pushed)..).rev() {
            for (v, x) in value.iter_mut().zip(d) {
                *v -= *x;
            }
        }
        let opt = match p.pushed {
            Some(c) if p.pushed > p.committed => p.opt_at.get(&c).cloned(),
            _ => None,
        }
        .unwrap_or_else(|| p.committed_opt.clone());
        Ok(Backup {
            id: p.id,
            range: p.range,
            value,
            opt,
            consistent: p.pushed,
            staged: BTreeMap::new(),
        })
    }

    /// The backup a home keeps of a partition it served itself when it hands the partition to
    /// an ActivePS: consistent at the committed clock, with every clock applied since staged as a
    /// push of its own. A roll-back to the committed clock then drops them, a commit folds them
    /// clock by clock, and the ActivePS pushes only the clocks it applies itself (its snapshot
    /// counts everything applied as pushed).
    pub fn from_served(s: &PartitionSnapshot) -> Result<Self, PartitionError> {
        let p = Partition::import(s.clone())?;
        let mut value = p.value.clone();
        for d in p.deltas.values().rev() {
            for (v, x) in value.iter_mut().zip(d) {
                *v -= *x;
            }
        }
        let staged = p
            .deltas
            .iter()
            .zip(p.opt_at.values())
            .map(|((&clock, delta), opt)| {
                let push = Push {
                    partition: p.id,
                    from_clock: clock,
                    upto: clock,
                    delta: delta.clone(),
                    opt: opt.clone(),
                };
                (clock, push)
            })
            .collect();
        Ok(Backup {
            id: p.id,
            range: p.range,
            value,
            opt: p.committed_opt,
            consistent: p.committed,
            staged,
        })
    }

    /// The clock the next push must start at.
    pub fn next_expected(&self) -> Clock {
        next_clock(self.staged.keys().next_back().copied().or(self.consistent))
    }

    /// Stages a push; pushes must continue one another without gaps.
    pub fn receive(&mut self, push: Push) -> Result<(), PartitionError> {
        if push.partition != self.id {
            return Err(PartitionError::WrongPartition {
                expected: self.id,
                got: push.partition,
            });
        }
        let expected = self.next_expected();
        if push.from_clock != expected || push.upto < push.from_clock {
            return Err(PartitionError::PushOutOfOrder {
                partition: self.id,
                from_clock: push.from_clock,
                upto: push.upto,
                expected,
            });
        }
        check_len(self.id, &self.range, "push delta", push.delta.len())?;
        self.staged.insert(push.upto, push);
        Ok(())
    }

    /// Folds every staged push ending at or before `clock` into the value, in clock order;
    /// returns the clock the backup is now consistent at.
    pub fn commit(&mut self, clock: Clock) -> Option<Clock> {
        let later = self.staged.split_off(&clock.saturating_add(1));
        let ready = std::mem::replace(&mut self.staged, later);
        for (upto, push) in ready {
            for (v, x) in self.value.iter_mut().zip(&push.delta) {
                *v += *x;
            }
            self.opt = push.opt;
            self.consistent = Some(upto);
        }
        self.consistent
    }

    /// Drops pushes not yet committed (after a failure the backup's consistent state is what
    /// survives).
    pub fn discard_staged(&mut self) {
        self.staged.clear();
    }

    /// Takes an END-OF-LIFE snapshot exactly: its value and optimizer state, consistent at its
    /// last applied clock; staged pushes are superseded.
    pub fn adopt_eol(&mut self, snapshot: &PartitionSnapshot) -> Result<(), PartitionError> {
        if snapshot.id != self.id {
            return Err(PartitionError::WrongPartition {
                expected: self.id,
                got: snapshot.id,
            });
        }
        check_len(
            self.id,
            &self.range,
            "END-OF-LIFE value",
            snapshot.value.len(),
        )?;
        self.value = snapshot.value.clone();
        self.opt = snapshot.opt.clone();
        self.consistent = snapshot.applied;
        self.staged.clear();
        Ok(())
    }

    /// The serving partition this backup becomes (a BackupPS turned ParamServ, or the state sent
    /// to a new ActivePS): everything up to `consistent`, committed and pushed; staged pushes are
    /// not included.
    pub fn to_partition(&self) -> Partition {
        Partition {
            id: self.id,
            range: self.range.clone(),
            value: self.value.clone(),
            opt: self.opt.clone(),
            applied: self.consistent,
            deltas: BTreeMap::new(),
            opt_at: BTreeMap::new(),
            committed: self.consistent,
            committed_opt: self.opt.clone(),
            pushed: self.consistent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sgd(momentum: f64) -> OptimizerConfig {
        OptimizerConfig::Sgd {
            lr: 0.1,
            momentum,
            weight_decay: 0.0,
        }
    }

    fn adam() -> OptimizerConfig {
        OptimizerConfig::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }

    /// A deterministic, clock-dependent gradient.
    fn grad(clock: Clock, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((clock as f32 + 1.0) * 0.37 + i as f32 * 1.3).sin())
            .collect()
    }

    fn part(opt: &OptimizerConfig) -> Partition {
        Partition::new(3, 10..14, vec![1.0, -2.0, 0.5, 3.0], opt).unwrap()
    }

    fn close(a: &[f32], b: &[f32], rel: f32) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= rel * x.abs().max(y.abs()).max(1.0))
    }

    #[test]
    fn ranges_are_contiguous_and_balanced() {
        assert_eq!(partition_ranges(10, 3), vec![0..3, 3..6, 6..10]);
        assert_eq!(partition_ranges(2, 4), vec![0..0, 0..1, 1..1, 1..2]);
        assert!(partition_ranges(5, 0).is_empty());
        for len in 0..50 {
            for np in 1..9 {
                let r = partition_ranges(len, np);
                assert_eq!(r[0].start, 0);
                assert_eq!(r[np - 1].end, len);
                assert!(r.windows(2).all(|w| w[0].end == w[1].start));
                let (lo, hi) = (
                    r.iter().map(|x| x.len()).min().unwrap(),
                    r.iter().map(|x| x.len()).max().unwrap(),
                );
                assert!(hi - lo <= 1);
            }
        }
    }

    #[test]
    fn apply_records_deltas_by_hand() {
        let o = sgd(0.5);
        let mut p = Partition::new(0, 0..1, vec![1.0], &o).unwrap();
        p.apply(0, &[2.0], &o).unwrap(); // v = 2, p = 1 − 0.2 = 0.8
        p.apply(1, &[2.0], &o).unwrap(); // v = 3, p = 0.8 − 0.3 = 0.5
        assert!((p.deltas[&0][0] + 0.2).abs() < 1e-6);
        assert!((p.deltas[&1][0] + 0.3).abs() < 1e-6);
        assert!((p.pending_delta()[0] + 0.5).abs() < 1e-6);
        assert_eq!(p.opt_at[&0].slots[0], vec![2.0]);
        assert_eq!(p.opt.slots[0], vec![3.0]);
        assert_eq!(
            p.apply(3, &[0.0], &o),
            Err(PartitionError::OutOfOrder {
                partition: 0,
                expected: 2,
                got: 3
            })
        );
        assert_eq!(
            p.apply(2, &[0.0, 1.0], &o),
            Err(PartitionError::Length {
                partition: 0,
                range: 0..1,
                what: "gradient",
                expected: 1,
                got: 2
            })
        );
    }

    #[test]
    fn rollback_returns_to_the_committed_clock() {
        for o in [sgd(0.0), sgd(0.9), adam()] {
            let mut p = part(&o);
            for c in 0..=2 {
                p.apply(c, &grad(c, 4), &o).unwrap();
            }
            p.commit(2).unwrap();
            let (value2, opt2) = (p.value.clone(), p.opt.clone());
            for c in 3..=5 {
                p.apply(c, &grad(c, 4), &o).unwrap();
            }
            let value5 = p.value.clone();
            assert!(!close(&value5, &value2, 1e-3));
            assert_eq!(p.rollback(), 3);
            assert!(
                close(&p.value, &value2, 1e-6),
                "{o:?}: {:?} vs {value2:?}",
                p.value
            );
            assert_eq!(p.opt, opt2);
            assert_eq!(p.applied, Some(2));
            assert!(p.deltas.is_empty());
            // Redoing the same clocks lands where the run was.
            for c in 3..=5 {
                p.apply(c, &grad(c, 4), &o).unwrap();
            }
            assert!(close(&p.value, &value5, 1e-5));
        }
    }

    #[test]
    fn a_home_backup_of_a_served_partition_stages_its_uncommitted_clocks() {
        let o = sgd(0.9);
        let mut p = part(&o);
        for c in 0..=1 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        p.commit(1).unwrap();
        let (value1, opt1) = (p.value.clone(), p.opt.clone());
        for c in 2..=3 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        let (value3, opt3) = (p.value.clone(), p.opt.clone());
        p.apply(4, &grad(4, 4), &o).unwrap();
        let mut b = Backup::from_served(&p.export()).unwrap();
        assert_eq!(b.consistent, Some(1));
        assert!(close(&b.value, &value1, 1e-6));
        assert_eq!(b.opt, opt1);
        assert_eq!(b.staged.keys().copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        // The ActivePS's own next push continues the staged ones.
        assert_eq!(b.next_expected(), 5);
        // A commit folds the staged clocks up to it, one by one.
        assert_eq!(b.commit(3), Some(3));
        assert!(close(&b.value, &value3, 1e-6));
        assert_eq!(b.opt, opt3);
        // A roll-back to the committed clock drops the rest.
        b.discard_staged();
        assert_eq!(b.next_expected(), 4);
        assert_eq!(b.to_partition().applied, Some(3));
    }

    #[test]
    fn rollback_without_commit_returns_to_the_start() {
        let o = sgd(0.9);
        let mut p = part(&o);
        let start = p.value.clone();
        p.apply(0, &grad(0, 4), &o).unwrap();
        p.apply(1, &grad(1, 4), &o).unwrap();
        assert_eq!(p.rollback(), 0);
        assert!(close(&p.value, &start, 1e-6));
        assert_eq!(p.opt, o.init_state(4));
        assert_eq!(p.applied, None);
    }

    #[test]
    fn commit_rules() {
        let o = sgd(0.9);
        let mut p = part(&o);
        assert_eq!(
            p.commit(0),
            Err(PartitionError::CommitAhead {
                partition: 3,
                clock: 0,
                applied: None
            })
        );
        for c in 0..4 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        p.commit(1).unwrap();
        assert_eq!(p.deltas.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(p.pushed, Some(1));
        p.commit(0).unwrap(); // older: no-op
        assert_eq!(p.committed, Some(1));
        assert!(p.commit(4).is_err());
    }

    #[test]
    fn pushes_committed_at_the_backup_track_the_active() {
        for o in [sgd(0.9), adam()] {
            let mut p = part(&o);
            let mut b = Backup::from_snapshot(&p.export()).unwrap();
            assert_eq!(b.value, p.value);
            assert_eq!(b.consistent, None);
            assert!(p.take_push(0).is_none()); // nothing applied yet
            for c in 0..10 {
                p.apply(c, &grad(c, 4), &o).unwrap();
                // Push every third clock (coalescing), committing one push behind.
                if c % 3 == 2 {
                    let push = p.take_push(c).unwrap();
                    assert_eq!(push.upto, c);
                    b.receive(push).unwrap();
                    assert!(p.take_push(c).is_none());
                    if c >= 5 {
                        assert_eq!(b.commit(c - 3), Some(c - 3));
                        p.commit(c - 3).unwrap();
                    }
                }
            }
            // Clock 9 not pushed yet: a push up to 20 stops at the last applied clock.
            let push = p.take_push(20).unwrap();
            assert_eq!((push.from_clock, push.upto), (9, 9));
            b.receive(push).unwrap();
            assert_eq!(b.commit(9), Some(9));
            p.commit(9).unwrap();
            assert!(
                close(&b.value, &p.value, 1e-5),
                "{:?} vs {:?}",
                b.value,
                p.value
            );
            assert_eq!(b.opt, p.opt);
            assert_eq!(b.to_partition().applied, Some(9));
        }
    }

    #[test]
    fn backup_refuses_out_of_order_pushes() {
        let o = sgd(0.0);
        let mut p = part(&o);
        let mut b = Backup::from_snapshot(&p.export()).unwrap();
        for c in 0..4 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        let first = p.take_push(1).unwrap();
        let second = p.take_push(3).unwrap();
        assert_eq!(
            b.receive(second.clone()),
            Err(PartitionError::PushOutOfOrder {
                partition: 3,
                from_clock: 2,
                upto: 3,
                expected: 0
            })
        );
        b.receive(first).unwrap();
        // Committing before the whole push is staged folds nothing.
        assert_eq!(b.commit(0), None);
        b.receive(second.clone()).unwrap();
        let mut other = second;
        other.partition = 4;
        assert_eq!(
            b.receive(other),
            Err(PartitionError::WrongPartition {
                expected: 3,
                got: 4
            })
        );
        assert_eq!(b.commit(2), Some(1));
        assert_eq!(b.commit(3), Some(3));
    }

    #[test]
    fn backup_from_a_partition_mid_stream_continues_it() {
        let o = sgd(0.9);
        let mut p = part(&o);
        for c in 0..3 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        p.take_push(0).unwrap(); // pushed clock 0, clocks 1 and 2 not yet
        let mut b = Backup::from_snapshot(&p.export()).unwrap();
        assert_eq!(b.consistent, Some(0));
        assert_eq!(b.opt, p.opt_at[&0]);
        b.receive(p.take_push(2).unwrap()).unwrap();
        b.commit(2);
        assert!(close(&b.value, &p.value, 1e-6));
        assert_eq!(b.opt, p.opt);
    }

    #[test]
    fn eol_adoption_is_exact() {
        let o = adam();
        let mut p = part(&o);
        let mut b = Backup::from_snapshot(&p.export()).unwrap();
        for c in 0..5 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        b.receive(p.take_push(2).unwrap()).unwrap();
        b.adopt_eol(&p.export()).unwrap();
        assert_eq!(b.value, p.value);
        assert_eq!(b.opt, p.opt);
        assert_eq!(b.consistent, Some(4));
        assert!(b.staged.is_empty());
        let mut q = b.to_partition();
        assert_eq!(q.value, p.value);
        // The new ParamServ continues at clock 5 exactly as the old owner would.
        q.apply(5, &grad(5, 4), &o).unwrap();
        p.apply(5, &grad(5, 4), &o).unwrap();
        assert_eq!(q.value, p.value);
        assert_eq!(q.opt, p.opt);
        let mut wrong = p.export();
        wrong.id = 9;
        assert!(matches!(
            b.adopt_eol(&wrong),
            Err(PartitionError::WrongPartition {
                expected: 3,
                got: 9
            })
        ));
    }

    #[test]
    fn export_import_is_identity_through_serde() {
        let o = sgd(0.9);
        let mut p = part(&o);
        for c in 0..4 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        p.commit(1).unwrap();
        p.take_push(2).unwrap();
        let json = serde_json::to_string(&p.export()).unwrap();
        let q = Partition::import(serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(q, p);
        // The migrated copy keeps the backup stream: its next push starts at clock 3.
        let mut q = q;
        assert_eq!(q.take_push(3).unwrap().from_clock, 3);
    }

    #[test]
    fn import_rejects_inconsistent_snapshots() {
        let o = sgd(0.9);
        let mut p = part(&o);
        for c in 0..3 {
            p.apply(c, &grad(c, 4), &o).unwrap();
        }
        let mut short = p.export();
        short.value.pop();
        assert!(matches!(
            Partition::import(short),
            Err(PartitionError::Length { what: "value", .. })
        ));
        let mut missing = p.export();
        missing.deltas.remove(&1);
        assert!(matches!(
            Partition::import(missing),
            Err(PartitionError::Inconsistent { partition: 3, .. })
        ));
        let mut ahead = p.export();
        ahead.pushed = Some(7);
        assert!(matches!(
            Partition::import(ahead),
            Err(PartitionError::Inconsistent { .. })
        ));
    }
}
