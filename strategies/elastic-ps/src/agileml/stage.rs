//! Stage policy and parameter-server placement (spec §5.1.3, §5.1.4).
//!
//! AgileML's stage follows the ratio r = transient / reliable machines: stage 1 (ParamServs on
//! reliable machines only) up to 1:1, stage 2 (ActivePSs on transient machines backed by BackupPSs)
//! up to 15:1, stage 3 (as 2, with no workers on reliable machines) beyond. ActivePSs run on half
//! the machines, at most one per machine and at most `Np`, on the longest-running transient
//! machines; partitions are dealt over them evenly with as few moves as possible, and every
//! partition has a home on a reliable machine (its ParamServ or BackupPS).

use super::ids::{MachineId, PartitionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

/// What is wrong with a stage decision's inputs.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum StageError {
    /// AgileML keeps its durable state on reliable machines and needs at least one.
    #[error(
        "AgileML needs at least one reliable machine; have 0 reliable and {transient} transient"
    )]
    NoReliable {
        /// Transient machines present.
        transient: usize,
    },
    /// Thresholds must be finite, non-negative and ordered.
    #[error(
        "stage thresholds two_above = {two_above} and three_above = {three_above} must be finite with 0 ≤ two_above ≤ three_above"
    )]
    Thresholds {
        /// The stage-2 threshold.
        two_above: f64,
        /// The stage-3 threshold.
        three_above: f64,
    },
}

/// AgileML's three stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// ParamServs on reliable machines only; workers everywhere.
    One,
    /// ActivePSs on transient machines, BackupPSs on reliable ones; workers everywhere.
    Two,
    /// As stage 2, with no workers on reliable machines.
    Three,
}

/// The transient:reliable ratios above which stages 2 and 3 start.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StageThresholds {
    /// r above this gives stage 2 (the thesis: 1:1).
    pub two_above: f64,
    /// r above this gives stage 3 (the thesis: 15:1).
    pub three_above: f64,
}

impl Default for StageThresholds {
    fn default() -> Self {
        StageThresholds {
            two_above: 1.0,
            three_above: 15.0,
        }
    }
}

/// The stage for `transient` and `reliable` machines: r ≤ `two_above` → One, r ≤ `three_above`
/// → Two, else Three.
pub fn stage_for(
    transient: usize,
    reliable: usize,
    th: StageThresholds,
) -> Result<Stage, StageError> {
    let ok = th.two_above.is_finite()
        && th.three_above.is_finite()
        && th.two_above >= 0.0
        && th.two_above <= th.three_above;
    if !ok {
        return Err(StageError::Thresholds {
            two_above: th.two_above,
            three_above: th.three_above,
        });
    }
    if reliable == 0 {
        return Err(StageError::NoReliable { transient });
    }
    let r = transient as f64 / reliable as f64;
    Ok(if r <= th.two_above {
        Stage::One
    } else if r <= th.three_above {
        Stage::Two
    } else {
        Stage::Three
    })
}

/// A machine as the elasticity controller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// The machine.
    pub id: MachineId,
    /// Whether it can be revoked (spot / preemptible).
    pub transient: bool,
    /// Run time at which it joined (earlier = longer-running).
    pub joined: f64,
}

/// The machines that should host ActivePSs (for stages 2 and 3; the caller decides the stage),
/// sorted by id. The target is `min(np, machines/2)`, at least 1 when a transient machine exists
/// and `np ≥ 1`, and never more than the transient machines. Current ActivePS machines still
/// present and transient are kept (the longest-running first if there are too many); the rest are
/// the longest-running transient machines without one (ties: lowest id).
pub fn active_ps_machines(
    machines: &[MachineInfo],
    current: &[MachineId],
    np: usize,
) -> Vec<MachineId> {
    let mut transient: Vec<&MachineInfo> = machines.iter().filter(|m| m.transient).collect();
    transient.sort_by(|a, b| a.joined.total_cmp(&b.joined).then(a.id.cmp(&b.id)));
    transient.dedup_by_key(|m| m.id);
    let mut target = np.min(machines.len() / 2);
    if target == 0 && np >= 1 && !transient.is_empty() {
        target = 1;
    }
    let target = target.min(transient.len());
    let current: BTreeSet<MachineId> = current.iter().copied().collect();
    let kept = transient.iter().filter(|m| current.contains(&m.id));
    let fresh = transient.iter().filter(|m| !current.contains(&m.id));
    let mut out: Vec<MachineId> = kept.chain(fresh).take(target).map(|m| m.id).collect();
    out.sort_unstable();
    out
}

/// Deals partitions `0..np` over `owners` so counts differ by at most one, moving as few as
/// possible from `current`: a partition stays where it is while its owner is listed and under
/// its share. The owners already holding the most partitions get the larger shares. Empty when
/// there are no owners.
pub fn assign_partitions(
    np: usize,
    owners: &[MachineId],
    current: &BTreeMap<PartitionId, MachineId>,
) -> BTreeMap<PartitionId, MachineId> {
    let owners: BTreeSet<MachineId> = owners.iter().copied().collect();
    let mut out = BTreeMap::new();
    if owners.is_empty() {
        return out;
    }
    let partitions = 0..np as PartitionId;
    let mut held: BTreeMap<MachineId, Vec<PartitionId>> =
        owners.iter().map(|&o| (o, Vec::new())).collect();
    for (&p, m) in current {
        if let Some(list) = held.get_mut(m).filter(|_| partitions.contains(&p)) {
            list.push(p);
        }
    }
    let (base, extra) = (np / owners.len(), np % owners.len());
    let mut by_load: Vec<MachineId> = owners.iter().copied().collect();
    by_load.sort_by_key(|o| (std::cmp::Reverse(held[o].len()), *o));
    let share: BTreeMap<MachineId, usize> = by_load
        .iter()
        .enumerate()
        .map(|(i, &o)| (o, base + usize::from(i < extra)))
        .collect();
    for (&o, list) in &held {
        for &p in list.iter().take(share[&o]) {
            out.insert(p, o);
        }
    }
    let mut room: Vec<(MachineId, usize)> = owners
        .iter()
        .map(|o| (*o, share[o] - held[o].len().min(share[o])))
        .collect();
    let mut slot = 0;
    for p in partitions {
        if out.contains_key(&p) {
            continue;
        }
        while room[slot].1 == 0 {
            slot += 1;
        }
        room[slot].1 -= 1;
        out.insert(p, room[slot].0);
    }
    out
}

/// The reliable machine that is partition `p`'s home (its ParamServ or BackupPS): partitions dealt
/// round-robin over the reliable machines in id order; `None` when there are none.
pub fn home_of(p: PartitionId, reliable: &[MachineId]) -> Option<MachineId> {
    let sorted: BTreeSet<MachineId> = reliable.iter().copied().collect();
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    sorted.into_iter().nth(p as usize % n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: MachineId, transient: bool, joined: f64) -> MachineInfo {
        MachineInfo {
            id,
            transient,
            joined,
        }
    }

    #[test]
    fn stages_follow_the_thesis_thresholds() {
        let th = StageThresholds::default();
        assert_eq!(stage_for(0, 4, th), Ok(Stage::One));
        assert_eq!(stage_for(4, 4, th), Ok(Stage::One)); // 1:1
        assert_eq!(stage_for(5, 4, th), Ok(Stage::Two));
        assert_eq!(stage_for(60, 4, th), Ok(Stage::Two)); // 15:1
        assert_eq!(stage_for(61, 4, th), Ok(Stage::Three));
        assert_eq!(stage_for(63, 1, th), Ok(Stage::Three));
        assert_eq!(stage_for(8, 8, th), Ok(Stage::One));
        assert_eq!(
            stage_for(3, 0, th),
            Err(StageError::NoReliable { transient: 3 })
        );
        let bad = StageThresholds {
            two_above: 5.0,
            three_above: 2.0,
        };
        assert!(matches!(
            stage_for(3, 1, bad),
            Err(StageError::Thresholds { .. })
        ));
        let custom = StageThresholds {
            two_above: 0.5,
            three_above: 2.0,
        };
        assert_eq!(stage_for(1, 1, custom), Ok(Stage::Two));
        assert_eq!(stage_for(3, 1, custom), Ok(Stage::Three));
    }

    #[test]
    fn thresholds_parse_with_defaults() {
        let th: StageThresholds = toml::from_str("three_above = 7.0").unwrap();
        assert_eq!(th.two_above, 1.0);
        assert_eq!(th.three_above, 7.0);
    }

    #[test]
    fn active_ps_on_half_the_machines_longest_running_first() {
        // 2 reliable + 6 transient: target min(np, 8/2 = 4).
        let ms = vec![
            m(0, false, 0.0),
            m(1, false, 0.0),
            m(10, true, 5.0),
            m(11, true, 1.0),
            m(12, true, 3.0),
            m(13, true, 1.0),
            m(14, true, 9.0),
            m(15, true, 2.0),
        ];
        assert_eq!(active_ps_machines(&ms, &[], 16), vec![11, 12, 13, 15]);
        assert_eq!(active_ps_machines(&ms, &[], 2), vec![11, 13]);
        // Current ones are kept even if younger; reliable or missing ids in `current` are not.
        assert_eq!(
            active_ps_machines(&ms, &[14, 0, 99], 16),
            vec![11, 13, 14, 15]
        );
        // Too many current: the longest-running current ones stay.
        assert_eq!(active_ps_machines(&ms, &[10, 12, 14], 2), vec![10, 12]);
        // 1 reliable + 1 transient: half of 2 is 1.
        assert_eq!(
            active_ps_machines(&[m(0, false, 0.0), m(5, true, 1.0)], &[], 8),
            vec![5]
        );
        // 3 reliable + 1 transient: half is 2 but only one transient machine.
        let few = [
            m(0, false, 0.0),
            m(1, false, 0.0),
            m(2, false, 0.0),
            m(5, true, 1.0),
        ];
        assert_eq!(active_ps_machines(&few, &[], 8), vec![5]);
        assert!(active_ps_machines(&few[..3], &[], 8).is_empty());
        assert!(active_ps_machines(&few, &[], 0).is_empty());
    }

    fn counts(a: &BTreeMap<PartitionId, MachineId>) -> BTreeMap<MachineId, usize> {
        let mut c = BTreeMap::new();
        for m in a.values() {
            *c.entry(*m).or_insert(0) += 1;
        }
        c
    }

    fn moves(
        before: &BTreeMap<PartitionId, MachineId>,
        after: &BTreeMap<PartitionId, MachineId>,
    ) -> usize {
        after
            .iter()
            .filter(|(p, m)| before.get(p) != Some(m))
            .count()
    }

    #[test]
    fn partitions_balance_with_fewest_moves() {
        let fresh = assign_partitions(7, &[3, 1, 2], &BTreeMap::new());
        assert_eq!(fresh.len(), 7);
        assert_eq!(counts(&fresh), BTreeMap::from([(1, 3), (2, 2), (3, 2)]));
        // Same owners: nothing moves.
        assert_eq!(assign_partitions(7, &[1, 2, 3], &fresh), fresh);
        // Owner 3 leaves: only its 2 partitions move, owners 1 and 2 end with 4 and 3.
        let after = assign_partitions(7, &[1, 2], &fresh);
        assert_eq!(moves(&fresh, &after), 2);
        assert_eq!(
            counts(&after).values().copied().collect::<Vec<_>>(),
            vec![4, 3]
        );
        // A fourth owner joins: 7 = 2+2+2+1, so owner 1 gives up one partition and nothing else moves.
        let joined = assign_partitions(7, &[1, 2, 3, 4], &fresh);
        assert_eq!(moves(&fresh, &joined), 1);
        let c = counts(&joined);
        assert_eq!(c[&4], 1);
        assert!(c.values().all(|&n| n == 1 || n == 2));
        // Over-share owners give up their highest partitions.
        let lopsided: BTreeMap<PartitionId, MachineId> = (0..6).map(|p| (p, 9)).collect();
        let fixed = assign_partitions(6, &[9, 8], &lopsided);
        assert_eq!(
            fixed,
            BTreeMap::from([(0, 9), (1, 9), (2, 9), (3, 8), (4, 8), (5, 8)])
        );
        assert!(assign_partitions(4, &[], &fresh).is_empty());
        assert!(assign_partitions(0, &[1], &fresh).is_empty());
    }

    #[test]
    fn homes_are_round_robin_over_reliable_machines() {
        let homes: Vec<_> = (0..5).map(|p| home_of(p, &[7, 3])).collect();
        assert_eq!(homes, vec![Some(3), Some(7), Some(3), Some(7), Some(3)]);
        assert_eq!(home_of(0, &[]), None);
    }
}
