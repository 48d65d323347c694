//! FlexRR needs no central arbiter (thesis §3.3: every decision is peer to peer). The
//! coordinator role only ends the run — workers that have finished keep serving their helpees
//! until everyone has — and gathers the workers' statistics: the reassigned share of the work and
//! the exactly-once check of every (clock, unit) (spec §4.5 claim 10).

use crate::protocol::{Processed, RrMsg, WorkerStats};
use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;

/// How many times each unit of each (owner, clock) was processed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    counts: BTreeMap<(u32, u64), Vec<u8>>,
}

impl Ledger {
    /// Records a processed range.
    pub fn record(&mut self, p: &Processed) {
        let row = self.counts.entry((p.owner, p.clock)).or_default();
        if row.len() < p.end as usize {
            row.resize(p.end as usize, 0);
        }
        for c in &mut row[p.start as usize..p.end as usize] {
            *c = c.saturating_add(1);
        }
    }

    /// Checks that every unit of `units[w]` units of every clock in `clocks` was processed
    /// exactly once, and nothing else; returns the number of units checked, or what went wrong,
    /// naming the unit.
    pub fn verify(&self, units: &[u32], clocks: Range<u64>) -> std::result::Result<u64, String> {
        let mut checked = 0;
        for (w, &n) in units.iter().enumerate() {
            for c in clocks.clone() {
                let row = self.counts.get(&(w as u32, c));
                for u in 0..n {
                    match row.and_then(|r| r.get(u as usize)).copied().unwrap_or(0) {
                        1 => checked += 1,
                        0 => {
                            return Err(format!(
                                "unit {u} of worker {w}'s clock {c} was never processed"
                            ))
                        }
                        k => {
                            return Err(format!(
                                "unit {u} of worker {w}'s clock {c} was processed {k} times"
                            ))
                        }
                    }
                }
            }
        }
        if let Some(((w, c), _)) = self.counts.iter().find(|((w, c), row)| {
            !clocks.contains(c) || row.len() > units.get(*w as usize).copied().unwrap_or(0) as usize
        }) {
            return Err(format!("worker {w}'s clock {c} has units beyond its work"));
        }
        Ok(checked)
    }
}

/// What the workers did over the clocks run so far: carried across checkpoints, so the figures
/// of a resumed run cover all of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Totals {
    /// Units processed by a worker other than their owner.
    helped: u64,
    /// Units processed.
    total: u64,
    /// Units the exactly-once check verified.
    checked: u64,
    /// The workers' counters, summed (their ranges are checked per stretch, not kept).
    sum: WorkerStats,
}

/// The coordinator of a FlexRR run.
pub struct FlexCoordinator {
    units: Vec<u32>,
    clocks: Range<u64>,
    totals: Totals,
}

impl FlexCoordinator {
    /// For workers with `units[w]` units per clock, running `clocks` (those before them counted
    /// in `job`'s checkpoint when it resumes).
    pub fn new(units: Vec<u32>, clocks: Range<u64>, job: &Job) -> Result<FlexCoordinator> {
        let totals = job.resumed_state(RoleId::Coordinator, "FlexRR totals")?;
        Ok(FlexCoordinator {
            units,
            clocks,
            totals,
        })
    }
}

#[async_trait]
impl Coordinator for FlexCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let workers = self.units.len() as u32;
        let mut finished = 0u32;
        let mut stats: BTreeMap<u32, WorkerStats> = BTreeMap::new();
        loop {
            let env = ctx.recv().await?;
            if matches!(env.msg, Message::Shutdown) {
                break;
            }
            let RoleId::Worker(w) = env.from else {
                continue;
            };
            match RrMsg::decode(ctx.id(), env.from, &env.msg)? {
                Some(RrMsg::Finished) => {
                    finished += 1;
                    if finished == workers {
                        let release = RrMsg::Release.encode()?;
                        for v in 0..workers {
                            ctx.send(RoleId::Worker(v), release.clone());
                        }
                    }
                }
                Some(RrMsg::Stats(s)) => {
                    stats.insert(w, s);
                }
                _ => {}
            }
        }
        let mut ledger = Ledger::default();
        let t = &mut self.totals;
        for (&w, s) in &stats {
            for p in &s.processed {
                ledger.record(p);
                let n = u64::from(p.end - p.start);
                t.total += n;
                if p.owner != w {
                    t.helped += n;
                }
            }
            t.sum.offers += s.offers;
            t.sum.follow_ups += s.follow_ups;
            t.sum.accepted += s.accepted;
            t.sum.cancelled += s.cancelled;
            t.sum.discarded += s.discarded;
            t.sum.polls += s.polls;
            t.sum.checks += s.checks;
            t.sum.rr_messages += s.rr_messages;
            t.sum.rr_bytes += s.rr_bytes;
        }
        if stats.len() as u32 == workers {
            t.checked += ledger
                .verify(&self.units, self.clocks.clone())
                .map_err(|e| {
                    EngineError::protocol(ctx.id(), format!("exactly-once violated: {e}"))
                })?;
        }
        let (helped, total, checked, sum) = (t.helped, t.total, t.checked, t.sum.clone());
        let share = if total > 0 {
            helped as f64 / total as f64
        } else {
            0.0
        };
        let iters = (self.clocks.end.max(1) * u64::from(workers.max(1))) as f64;
        // Traffic per unit that moved; none moved, none to share out.
        let per_helped = |x: u64| {
            if helped > 0 {
                x as f64 / helped as f64
            } else {
                0.0
            }
        };
        Ok(CoordinatorReport {
            state: Some(RoleState::encode(&self.totals)?),
            reports: Vec::new(),
            figures: vec![
                ("flexrr.reassigned_share".into(), share),
                ("flexrr.units_verified".into(), checked as f64),
                (
                    "flexrr.offers_per_worker_clock".into(),
                    sum.offers as f64 / iters,
                ),
                ("flexrr.follow_ups".into(), sum.follow_ups as f64),
                ("flexrr.accepted".into(), sum.accepted as f64),
                ("flexrr.cancelled".into(), sum.cancelled as f64),
                ("flexrr.discarded".into(), sum.discarded as f64),
                (
                    "flexrr.polls_per_worker_clock".into(),
                    sum.polls as f64 / iters,
                ),
                (
                    "flexrr.checks_per_worker_clock".into(),
                    sum.checks as f64 / iters,
                ),
                ("flexrr.rr_messages".into(), sum.rr_messages as f64),
                (
                    "flexrr.messages_per_reassigned_unit".into(),
                    per_helped(sum.rr_messages),
                ),
                (
                    "flexrr.bytes_per_reassigned_unit".into(),
                    per_helped(sum.rr_bytes),
                ),
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(owner: u32, clock: u64, start: u32, end: u32) -> Processed {
        Processed {
            owner,
            clock,
            start,
            end,
        }
    }

    #[test]
    fn every_unit_once_passes() {
        let mut l = Ledger::default();
        for c in 0..2 {
            l.record(&p(0, c, 0, 7));
            l.record(&p(0, c, 7, 10));
            l.record(&p(1, c, 0, 5));
        }
        assert_eq!(l.verify(&[10, 5], 0..2), Ok(30));
    }

    #[test]
    fn a_doubled_a_missing_and_a_stray_unit_are_named() {
        let mut l = Ledger::default();
        l.record(&p(0, 0, 0, 6));
        l.record(&p(0, 0, 5, 10));
        let e = l.verify(&[10], 0..1).unwrap_err();
        assert!(
            e.contains("unit 5 of worker 0's clock 0 was processed 2 times"),
            "{e}"
        );

        let mut l = Ledger::default();
        l.record(&p(0, 0, 0, 4));
        l.record(&p(0, 0, 5, 10));
        let e = l.verify(&[10], 0..1).unwrap_err();
        assert!(e.contains("unit 4") && e.contains("never"), "{e}");

        let mut l = Ledger::default();
        l.record(&p(0, 0, 0, 10));
        l.record(&p(0, 1, 0, 1));
        assert!(l.verify(&[10], 0..1).unwrap_err().contains("beyond"));
    }
}
