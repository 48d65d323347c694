//! The thesis's level-by-level search (§5.3.1): the best pipeline of every layer range inside a
//! level-1 unit (a machine's devices), then the best pipeline of such units at level 2, and so
//! on; with the single-replicated-stage option and idle units ("at most m") at every level.
//! Boundaries at a level above 1 fall on that level's unit boundaries, and a unit's inner plan
//! is the same on each of its replicas. The result is collapsed into one list of stages, an
//! inner stage replicated `r` times inside a unit replicated `m` times becoming one stage on
//! `r·m` workers; its predicted time is the search's `A^L`. That time is for the search's own
//! layout (each upper-level unit running its inner plan, idle devices where the inner plan
//! leaves them); laid out on contiguous workers, as a [`super::PipelinePlan`] is, the stages of
//! a plan with idle devices inside a machine, or with a replicated multi-stage unit, sit on
//! other links, and [`super::evaluate`] of them may differ.
//!
//! Memory and the stage limit are not part of this search: its plan is checked against them
//! and refused with [`PlanError::HierarchicalLimit`] when it breaks one.

use super::costs::{warmup, Costs};
use super::{config_string, PlanError, PlanOptions, StagePlan, Topology};

/// How a level's best value of a range on `m` units was reached.
#[derive(Clone, Copy, Debug)]
enum Choice {
    /// One unit: the level below's best plan of the range.
    Inner,
    /// Fewer units (one idle).
    AtMost,
    /// The whole range as one stage replicated on every unit.
    Single,
    /// A sub-pipeline of layers `..s` on `m − r` units, then one stage `s..` on `r`.
    Split(usize, u32),
}

/// One level's table: `value[(i, j, m)]` = `A^k(i..j, m)`.
struct Level {
    units: u32,
    value: Vec<f64>,
    choice: Vec<Choice>,
}

impl Level {
    fn at(&self, n: usize, i: usize, j: usize, m: u32) -> usize {
        (i * (n + 1) + j) * (self.units as usize + 1) + m as usize
    }
}

/// The hierarchical search: the best time and its collapsed stages.
pub(crate) fn search(
    costs: &Costs,
    topology: &Topology,
    options: &PlanOptions,
) -> Result<(f64, Vec<StagePlan>), PlanError> {
    let n = costs.layers();
    let mut levels: Vec<Level> = Vec::new();
    for spec in &topology.levels {
        let units = spec.components.max(1);
        let bw = spec.bandwidth;
        let below = levels.last();
        let prev = |i: usize, j: usize| match below {
            None => costs.compute(i, j),
            Some(l) => l.value[l.at(n, i, j, l.units)],
        };
        let size = (n + 1) * (n + 1) * (units as usize + 1);
        let mut level = Level {
            units,
            value: vec![f64::INFINITY; size],
            choice: vec![Choice::Inner; size],
        };
        for len in 1..=n {
            for i in 0..=n - len {
                let j = i + len;
                let at = level.at(n, i, j, 1);
                level.value[at] = prev(i, j);
                for m in 2..=units {
                    let mut best = level.value[level.at(n, i, j, m - 1)];
                    let mut how = Choice::AtMost;
                    let single = costs.replicated(i, j, prev(i, j), m, bw);
                    if single < best {
                        (best, how) = (single, Choice::Single);
                    }
                    for s in i + 1..j {
                        let cut = costs.boundary(s, bw);
                        for r in 1..m {
                            let left = level.value[level.at(n, i, s, m - r)];
                            let right = costs.replicated(s, j, prev(s, j), r, bw);
                            let t = left.max(cut).max(right);
                            if t < best {
                                (best, how) = (t, Choice::Split(s, r));
                            }
                        }
                    }
                    let at = level.at(n, i, j, m);
                    level.value[at] = best;
                    level.choice[at] = how;
                }
            }
        }
        levels.push(level);
    }
    let Some(top) = levels.last() else {
        return Err(PlanError::NoWorkers);
    };
    let time = top.value[top.at(n, 0, n, top.units)];
    let stages = unfold(&levels, n, levels.len(), 0, n, top.units);
    check_limits(costs, options, &stages)?;
    Ok((time, stages))
}

/// The collapsed stages of level `k`'s best plan of layers `i..j` on `m` units (`k` = 0: one
/// device running them all).
fn unfold(levels: &[Level], n: usize, k: usize, i: usize, j: usize, m: u32) -> Vec<StagePlan> {
    if k == 0 {
        return vec![StagePlan {
            layers: i..j,
            replicas: 1,
        }];
    }
    let level = &levels[k - 1];
    let inner = |i: usize, j: usize, times: u32| {
        let below = if k >= 2 { levels[k - 2].units } else { 1 };
        let mut stages = unfold(levels, n, k - 1, i, j, below);
        for s in &mut stages {
            s.replicas *= times;
        }
        stages
    };
    match level.choice[level.at(n, i, j, m)] {
        _ if m <= 1 => inner(i, j, 1),
        Choice::Inner => inner(i, j, 1),
        Choice::AtMost => unfold(levels, n, k, i, j, m - 1),
        Choice::Single => inner(i, j, m),
        Choice::Split(s, r) => {
            let mut stages = unfold(levels, n, k, i, s, m - r);
            stages.extend(inner(s, j, r));
            stages
        }
    }
}

/// Refuses a plan over `options`' memory or stage limit.
fn check_limits(
    costs: &Costs,
    options: &PlanOptions,
    stages: &[StagePlan],
) -> Result<(), PlanError> {
    let refuse = |reason: String| PlanError::HierarchicalLimit {
        config: config_string(stages),
        reason,
    };
    if let Some(max) = options.max_stages {
        if stages.len() > max {
            return Err(refuse(format!(
                "has {} stages, over `max_stages` = {max}",
                stages.len()
            )));
        }
    }
    if let Some(cap) = options.memory_bytes {
        let mut downstream: u32 = stages.iter().map(|s| s.replicas).sum();
        for (k, s) in stages.iter().enumerate() {
            let need = costs.memory(s.layers.start, s.layers.end, warmup(downstream, s.replicas));
            if need > cap as f64 {
                return Err(refuse(format!(
                    "needs {} bytes per worker in stage {k}, over the device memory of {cap}",
                    need.ceil() as u64
                )));
            }
            downstream -= s.replicas;
        }
    }
    Ok(())
}
