//! Brute force over every plan: each split of the layers into consecutive stages, with each
//! assignment of replicas (at least one per stage, never more than the stage before it, at most
//! the topology's workers in all, the rest idle), priced by [`evaluate_under`] with the options' sync charge. Exponential; it exists to check the dynamic programmes
//! on small profiles and topologies.

use super::{evaluate_under, stage_memory_bytes, PlanOptions, Profile, StagePlan, Topology};

/// The best plan of `profile` on `topology` under `options`' memory and stage limits (the
/// search option is ignored), and its predicted time; `None` when no plan fits. Of equal
/// plans, one on the fewest workers stays.
pub fn search(
    profile: &Profile,
    topology: &Topology,
    options: &PlanOptions,
) -> Option<(f64, Vec<StagePlan>)> {
    let n = profile.layers.len();
    let workers = topology.workers();
    let max_stages = options.max_stages.unwrap_or(n).min(n);
    let mut best: Option<(f64, Vec<StagePlan>)> = None;
    for used in 1..=workers {
        for cuts in 0..(1u64 << n.saturating_sub(1)) {
            let ranges = ranges_of(n, cuts);
            if ranges.is_empty() || ranges.len() > max_stages {
                continue;
            }
            for replicas in non_increasing(used, ranges.len(), used) {
                let stages: Vec<StagePlan> = ranges
                    .iter()
                    .zip(&replicas)
                    .map(|(r, &m)| StagePlan {
                        layers: r.clone(),
                        replicas: m,
                    })
                    .collect();
                if let Some(cap) = options.memory_bytes {
                    if stage_memory_bytes(profile, &stages, options.optimizer_slots)
                        .iter()
                        .any(|&b| b > cap)
                    {
                        continue;
                    }
                }
                let t = evaluate_under(profile, topology, &stages, options.sync);
                if best.as_ref().is_none_or(|(b, _)| t < *b) {
                    best = Some((t, stages));
                }
            }
        }
    }
    best
}

/// The stage ranges of `n` layers cut after layer `k` for each bit `k` set in `cuts`.
fn ranges_of(n: usize, cuts: u64) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for k in 0..n {
        if k + 1 == n || cuts & (1 << k) != 0 {
            ranges.push(start..k + 1);
            start = k + 1;
        }
    }
    ranges
}

/// Every way to write `total` as `parts` positive integers, in order, none above `max` nor
/// above the one before it (the replicas of a plan, which never grow along the pipeline).
fn non_increasing(total: u32, parts: usize, max: u32) -> Vec<Vec<u32>> {
    if parts == 0 {
        return if total == 0 { vec![vec![]] } else { vec![] };
    }
    let mut out = Vec::new();
    let rest = parts as u32 - 1;
    for first in 1..=total.saturating_sub(rest).min(max) {
        for mut tail in non_increasing(total - first, parts - 1, first) {
            tail.insert(0, first);
            out.push(tail);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumerates_splits_and_replicas() {
        assert_eq!(ranges_of(3, 0), vec![0..3]);
        assert_eq!(ranges_of(3, 0b01), vec![0..1, 1..3]);
        assert_eq!(ranges_of(3, 0b11), vec![0..1, 1..2, 2..3]);
        assert_eq!(non_increasing(4, 2, 4), vec![vec![2, 2], vec![3, 1]]);
        assert_eq!(non_increasing(5, 3, 5), vec![vec![2, 2, 1], vec![3, 1, 1]]);
        assert_eq!(non_increasing(4, 1, 3), Vec::<Vec<u32>>::new());
        assert!(non_increasing(1, 2, 1).is_empty());
    }
}
