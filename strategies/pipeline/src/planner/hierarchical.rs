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
//! Replicas never grow along the collapsed pipeline (see [`super::plan`]): a level's table
//! also indexes a plan by a floor on its last collapsed stage's replicas, so a split puts a
//! stage behind a sub-pipeline only where the sub-pipeline's last stage has at least as many
//! workers as the stage's first (collapsed) one. On one level that is exact, as the flat search
//! is; above it, a unit's inner plan is the level below's best one, as in the thesis, and the
//! compositions it makes grow are rejected rather than traded for a slower inner plan. The floor
//! multiplies a level's table by the devices under it.
//!
//! Memory and the stage limit are not part of this search: its plan is checked against them
//! and refused with [`PlanError::HierarchicalLimit`] when it breaks one.

use super::costs::{warmup, Costs};
use super::{config_string, PlanError, PlanOptions, StagePlan, Topology};

/// How a level's best value of a range on `m` units was reached.
#[derive(Clone, Copy, Debug)]
enum Choice {
    /// One unit: the level below's best plan of the range (under the same floor).
    Inner,
    /// Fewer units (one idle).
    AtMost,
    /// The whole range as one stage replicated on every unit.
    Single,
    /// A sub-pipeline of layers `..s` on `m − r` units whose last stage has at least `floor`
    /// workers, then one stage `s..` on `r`.
    Split(usize, u32, u32),
}

/// One entry of a level's table: a plan's value, how it was reached, and the (collapsed)
/// replicas of its first and last stages.
#[derive(Clone, Copy, Debug)]
struct Entry {
    value: f64,
    choice: Choice,
    first: u32,
    last: u32,
}

/// No plan.
const NONE: Entry = Entry {
    value: f64::INFINITY,
    choice: Choice::Inner,
    first: 0,
    last: 0,
};

/// One level's table: `entries[(i, j, m, l)]` = the best plan of layers `i..j` on `m` units
/// whose last collapsed stage has at least `l` workers (`l = 1`: `A^k(i..j, m)`).
struct Level {
    units: u32,
    /// The most workers a collapsed stage of this level can have: the devices of all its units.
    cap: u32,
    entries: Vec<Entry>,
}

impl Level {
    fn at(&self, n: usize, i: usize, j: usize, m: u32, l: u32) -> usize {
        let w = self.cap as usize + 1;
        ((i * (n + 1) + j) * (self.units as usize + 1) + m as usize) * w + l as usize
    }

    /// The entry of `i..j` on `m` units with floor `l`; no plan past the level's cap.
    fn get(&self, n: usize, i: usize, j: usize, m: u32, l: u32) -> Entry {
        if l > self.cap {
            NONE
        } else {
            self.entries[self.at(n, i, j, m, l)]
        }
    }
}

/// The best plan of `i..j` on one unit of the level above `below` (`None`: one device), under
/// the floor `l` on its last stage.
fn unit_plan(costs: &Costs, below: Option<&Level>, i: usize, j: usize, l: u32) -> Entry {
    match below {
        None if l <= 1 => Entry {
            value: costs.compute(i, j),
            choice: Choice::Inner,
            first: 1,
            last: 1,
        },
        None => NONE,
        Some(b) => Entry {
            choice: Choice::Inner,
            ..b.get(costs.layers(), i, j, b.units, l)
        },
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
        let cap = units * below.map_or(1, |b| b.cap);
        let size = (n + 1) * (n + 1) * (units as usize + 1) * (cap as usize + 1);
        let mut level = Level {
            units,
            cap,
            entries: vec![NONE; size],
        };
        // The best plan with its last stage on exactly `l` workers, per `l`.
        let mut exact = vec![NONE; cap as usize + 1];
        for len in 1..=n {
            for i in 0..=n - len {
                let j = i + len;
                for l in 1..=cap {
                    let at = level.at(n, i, j, 1, l);
                    level.entries[at] = unit_plan(costs, below, i, j, l);
                }
                let whole = unit_plan(costs, below, i, j, 1);
                for m in 2..=units {
                    exact.fill(NONE);
                    let mut offer = |e: Entry| {
                        let slot = &mut exact[e.last as usize];
                        if e.value < slot.value {
                            *slot = e;
                        }
                    };
                    if whole.value.is_finite() {
                        offer(Entry {
                            value: costs.replicated(i, j, whole.value, m, bw),
                            choice: Choice::Single,
                            first: m * whole.first,
                            last: m * whole.last,
                        });
                    }
                    for s in i + 1..j {
                        let cut = costs.boundary(s, bw);
                        let inner = unit_plan(costs, below, s, j, 1);
                        if !inner.value.is_finite() {
                            continue;
                        }
                        for r in 1..m {
                            let floor = r * inner.first;
                            let left = level.get(n, i, s, m - r, floor);
                            if !left.value.is_finite() {
                                continue;
                            }
                            let right = costs.replicated(s, j, inner.value, r, bw);
                            offer(Entry {
                                value: left.value.max(cut).max(right),
                                choice: Choice::Split(s, r, floor),
                                first: left.first,
                                last: r * inner.last,
                            });
                        }
                    }
                    // Floors from the top down: the best with its last stage on at least `l`,
                    // fewer units (one idle) where that is no worse.
                    let mut running = NONE;
                    for l in (1..=cap).rev() {
                        if exact[l as usize].value < running.value {
                            running = exact[l as usize];
                        }
                        let fewer = level.get(n, i, j, m - 1, l);
                        let at = level.at(n, i, j, m, l);
                        level.entries[at] = if running.value < fewer.value {
                            running
                        } else {
                            Entry {
                                choice: Choice::AtMost,
                                ..fewer
                            }
                        };
                    }
                }
            }
        }
        levels.push(level);
    }
    let Some(top) = levels.last() else {
        return Err(PlanError::NoWorkers);
    };
    let time = top.get(n, 0, n, top.units, 1).value;
    let stages = unfold(&levels, n, levels.len(), 0, n, top.units, 1);
    check_limits(costs, options, &stages)?;
    Ok((time, stages))
}

/// The collapsed stages of level `k`'s best plan of layers `i..j` on `m` units whose last stage
/// has at least `l` workers (`k` = 0: one device running them all).
fn unfold(
    levels: &[Level],
    n: usize,
    k: usize,
    i: usize,
    j: usize,
    m: u32,
    l: u32,
) -> Vec<StagePlan> {
    if k == 0 {
        return vec![StagePlan {
            layers: i..j,
            replicas: 1,
        }];
    }
    let level = &levels[k - 1];
    let below = if k >= 2 { levels[k - 2].units } else { 1 };
    let inner = |i: usize, j: usize, l: u32, times: u32| {
        let mut stages = unfold(levels, n, k - 1, i, j, below, l);
        for s in &mut stages {
            s.replicas *= times;
        }
        stages
    };
    match level.get(n, i, j, m, l).choice {
        Choice::Inner => inner(i, j, l, 1),
        Choice::AtMost => unfold(levels, n, k, i, j, m - 1, l),
        Choice::Single => inner(i, j, 1, m),
        Choice::Split(s, r, floor) => {
            let mut stages = unfold(levels, n, k, i, s, m - r, floor);
            stages.extend(inner(s, j, 1, r));
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
            let need = costs.memory(
                s.layers.start,
                s.layers.end,
                warmup(downstream, s.replicas, s.layers.start == 0),
            );
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
