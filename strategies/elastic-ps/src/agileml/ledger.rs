//! The coordinator's account of which items workers report having processed per clock, to check
//! that every item of every clock is processed exactly once across membership changes (spec
//! §5.5, claim 6).
//!
//! This is independent of the servers' tiling check ([`tree_sum`](super::tree_sum)): servers
//! check what they apply, the ledger checks what workers say they did.

use super::ids::{Clock, WorkerId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use thiserror::Error;

/// A clock whose reported items are not exactly `0..total` once each.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LedgerError {
    /// Items processed more than once.
    #[error("clock {clock}: items {range:?} processed more than once (reported by {workers:?})")]
    Doubled {
        /// The clock.
        clock: Clock,
        /// The doubled items (the first overlap found).
        range: Range<u64>,
        /// Who reported them, where known.
        workers: Vec<WorkerId>,
    },
    /// Items nobody reported.
    #[error("clock {clock}: items {range:?} were not processed")]
    Missing {
        /// The clock.
        clock: Clock,
        /// The first uncovered run of items.
        range: Range<u64>,
    },
    /// Items past the end of the clock's batch.
    #[error("clock {clock}: items {range:?} lie beyond the batch of {total} items")]
    Beyond {
        /// The clock.
        clock: Clock,
        /// The offending report.
        range: Range<u64>,
        /// Items per clock.
        total: u64,
    },
}

/// One reported range and its reporter, where known.
type Report = (Range<u64>, Option<WorkerId>);

/// Per-clock record of processed item ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    records: BTreeMap<Clock, Vec<Report>>,
    verified: BTreeSet<Clock>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records item ranges processed at `clock` (reporter unknown).
    pub fn record(&mut self, clock: Clock, ranges: impl IntoIterator<Item = Range<u64>>) {
        let entry = self.records.entry(clock).or_default();
        entry.extend(ranges.into_iter().map(|r| (r, None)));
    }

    /// Records item ranges `worker` reports processing at `clock`, so a doubling names it.
    pub fn record_from(
        &mut self,
        clock: Clock,
        worker: WorkerId,
        ranges: impl IntoIterator<Item = Range<u64>>,
    ) {
        let entry = self.records.entry(clock).or_default();
        entry.extend(ranges.into_iter().map(|r| (r, Some(worker))));
    }

    /// Checks that `clock`'s reports cover `0..total` exactly once; on success the clock is
    /// listed in [`verified_clocks`](Self::verified_clocks). Errors name the first wrong range.
    pub fn verify(&mut self, clock: Clock, total: u64) -> Result<(), LedgerError> {
        let mut entries: Vec<Report> = self
            .records
            .get(&clock)
            .map(|e| e.iter().filter(|(r, _)| r.start < r.end).cloned().collect())
            .unwrap_or_default();
        entries.sort_by_key(|(r, w)| (r.start, r.end, *w));
        if let Some((r, _)) = entries.iter().find(|(r, _)| r.end > total) {
            return Err(LedgerError::Beyond {
                clock,
                range: r.clone(),
                total,
            });
        }
        // `reach`: items 0..reach are covered so far, last by `owner`.
        let mut reach = 0;
        let mut owner: Option<WorkerId> = None;
        for (r, w) in entries {
            if r.start > reach {
                return Err(LedgerError::Missing {
                    clock,
                    range: reach..r.start,
                });
            }
            if r.start < reach {
                return Err(LedgerError::Doubled {
                    clock,
                    range: r.start..r.end.min(reach),
                    workers: owner.into_iter().chain(w).collect(),
                });
            }
            reach = r.end;
            owner = w;
        }
        if reach < total {
            return Err(LedgerError::Missing {
                clock,
                range: reach..total,
            });
        }
        self.verified.insert(clock);
        Ok(())
    }

    /// Clocks that passed [`verify`](Self::verify).
    pub fn verified_clocks(&self) -> &BTreeSet<Clock> {
        &self.verified
    }

    /// Forgets everything about clocks `clock` and later (their work is redone after a
    /// roll-back).
    pub fn discard_from(&mut self, clock: Clock) {
        self.records.split_off(&clock);
        self.verified.split_off(&clock);
    }

    /// Drops the reports of clocks up to `clock` (keeping their verified mark), to bound memory.
    pub fn prune_upto(&mut self, clock: Clock) {
        self.records = self.records.split_off(&clock.saturating_add(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::iter::once;

    #[test]
    fn exact_cover_verifies() {
        let mut l = Ledger::new();
        l.record_from(0, 2, once(5..10));
        l.record_from(0, 1, [0..3, 3..5]);
        l.record(0, once(4..4)); // empty ranges are ignored
        assert_eq!(l.verify(0, 10), Ok(()));
        assert_eq!(l.verified_clocks(), &BTreeSet::from([0]));
    }

    #[test]
    fn doubled_and_missing_items_are_named() {
        let mut l = Ledger::new();
        l.record_from(3, 1, once(0..6));
        l.record_from(3, 2, once(4..10));
        assert_eq!(
            l.verify(3, 10),
            Err(LedgerError::Doubled {
                clock: 3,
                range: 4..6,
                workers: vec![1, 2]
            })
        );
        l.record_from(4, 1, [0..4, 7..10]);
        assert_eq!(
            l.verify(4, 10),
            Err(LedgerError::Missing {
                clock: 4,
                range: 4..7
            })
        );
        l.record_from(5, 1, once(0..8));
        assert_eq!(
            l.verify(5, 10),
            Err(LedgerError::Missing {
                clock: 5,
                range: 8..10
            })
        );
        assert_eq!(
            l.verify(6, 10),
            Err(LedgerError::Missing {
                clock: 6,
                range: 0..10
            })
        );
        l.record(7, [0..5, 0..5, 5..10]);
        assert_eq!(
            l.verify(7, 10),
            Err(LedgerError::Doubled {
                clock: 7,
                range: 0..5,
                workers: vec![]
            })
        );
        l.record(8, once(0..12));
        assert_eq!(
            l.verify(8, 10),
            Err(LedgerError::Beyond {
                clock: 8,
                range: 0..12,
                total: 10
            })
        );
        assert!(l.verified_clocks().is_empty());
        assert_eq!(l.verify(9, 0), Ok(()));
    }

    #[test]
    fn discard_and_prune() {
        let mut l = Ledger::new();
        for c in 0..4 {
            l.record(c, once(0..4));
            l.verify(c, 4).unwrap();
        }
        l.discard_from(2);
        assert_eq!(l.verified_clocks(), &BTreeSet::from([0, 1]));
        assert!(l.verify(2, 4).is_err());
        l.prune_upto(0);
        assert!(l.verify(0, 4).is_err());
        assert_eq!(l.verified_clocks(), &BTreeSet::from([0, 1]));
        l.verify(1, 4).unwrap();
    }
}
