//! The planner's entry point and its flat dynamic programme.
//!
//! The flat search is the thesis's recurrence over one level of all workers, with the two fixes
//! of the thesis's ambiguities: a range may be one stage replicated on all its workers (plain
//! data parallelism is otherwise unreachable), and a plan may leave workers idle ("use at most
//! m", which "12-1" on 16 workers needs). It runs over suffixes of the layers: the first stage of
//! a suffix on `r` of its `m` workers has a 1F1B warm-up of `⌈m / r⌉` minibatches, which is
//! what the memory limit needs. Stages lie on contiguous workers, input stage first, idle
//! workers last; where links differ (two levels), a stage's weight sync is charged at the
//! slowest link inside its workers and a boundary at the slowest link among its workers and the
//! next stage's (minibatches go round-robin between their replicas), so the search runs once per
//! number of workers used (the layout then fixes every stage's workers).
//!
//! Replicas never grow along the pipeline: every plan has `r_0 ≥ r_1 ≥ … ≥ r_{S−1}`. The
//! thesis leaves this implicit, but its runtime assumes it: the input stage admits NOAM =
//! ⌈workers / r_0⌉ minibatches per replica and a replicated stage syncs its weights in rounds of
//! `r_s` consecutive minibatches, so a stage on more workers than the one before it waits every
//! round for minibatches the stage before cannot yet send (every configuration the thesis
//! reports, "12-1", "15-1", "3-1", "2-1-1", straight pipelines and data parallelism, keeps
//! replicas from growing). The table therefore also indexes a suffix by a cap on its first
//! stage's replicas, so a stage on `r` workers combines with the best rest whose first stage has
//! at most `r`: still exact, in `O(N²·W²)` per table.

use super::costs::{warmup, Costs};
use super::{hierarchical, PipelinePlan, PlanError, PlanOptions, Profile, Search, StagePlan};
use super::{noam, Topology};

/// The plan of `profile` on `topology` that minimises the slowest stage's time (thesis
/// §5.3.1), under `options`' limits. `predicted_s` is that time per minibatch.
///
/// Every search returns a plan whose replicas never grow from one stage to the next
/// (`r_0 ≥ r_1 ≥ … ≥ r_{S−1}`): the runtime admits NOAM = ⌈workers / r_0⌉ minibatches per
/// input-stage replica and syncs a replicated stage in rounds of `r_s` consecutive minibatches,
/// which a stage wider than the one feeding it cannot fill. The thesis leaves the restriction
/// implicit (its NOAM formula assumes it, and every configuration it reports keeps it).
pub fn plan(
    profile: &Profile,
    topology: &Topology,
    options: &PlanOptions,
) -> Result<PipelinePlan, PlanError> {
    topology.validate()?;
    let costs =
        Costs::with_sync(profile, options.sync)?.with_optimizer_slots(options.optimizer_slots);
    if options.max_stages == Some(0) {
        return Err(PlanError::NoStages);
    }
    let (predicted, stages) = match options.search {
        Search::Flat => flat(&costs, topology, options)?,
        Search::Hierarchical => hierarchical::search(&costs, topology, options)?,
    };
    Ok(PipelinePlan {
        noam: noam(&stages),
        stages,
        predicted_s: Some(predicted),
    })
}

/// The flat search with its memory limit: the best plan, or why none fits.
fn flat(
    costs: &Costs,
    topology: &Topology,
    options: &PlanOptions,
) -> Result<(f64, Vec<StagePlan>), PlanError> {
    let memory = options.memory_bytes.map(|b| b as f64);
    if let Some(found) = search(costs, topology, memory, options.max_stages, Objective::Time) {
        return Ok(found);
    }
    let need = search(costs, topology, None, options.max_stages, Objective::Memory);
    Err(PlanError::DoesNotFit {
        memory_bytes: options.memory_bytes.unwrap_or(u64::MAX),
        smallest_need: need.map_or(u64::MAX, |(n, _)| n.ceil() as u64),
    })
}

/// What the search minimises: the slowest stage's time, or the largest stage memory need
/// (for the error that says how much memory any plan needs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Objective {
    /// Seconds per minibatch.
    Time,
    /// Bytes per worker.
    Memory,
}

/// One flat search: for each number of workers used, the best plan over every split of the
/// layers into consecutive stages and every assignment of replicas; the best of them, or `None`
/// when no stage arrangement fits `memory`.
pub(crate) fn search(
    costs: &Costs,
    topology: &Topology,
    memory: Option<f64>,
    max_stages: Option<usize>,
    objective: Objective,
) -> Option<(f64, Vec<StagePlan>)> {
    let n = costs.layers();
    let workers = topology.workers();
    let table = Table {
        costs,
        topology,
        memory,
        objective,
        limited: max_stages.is_some(),
        depth: max_stages.map_or(1, |s| s.min(n)),
    };
    let mut best: Option<(f64, Vec<StagePlan>)> = None;
    if topology.uniform() {
        // Where a stage lies does not change its cost: one table serves every count.
        let t = table.fill(workers);
        for m in 1..=workers {
            t.offer(&mut best, m);
        }
    } else {
        for used in 1..=workers {
            table.fill(used).offer(&mut best, used);
        }
    }
    best
}

/// The search's inputs.
struct Table<'a> {
    costs: &'a Costs,
    topology: &'a Topology,
    memory: Option<f64>,
    objective: Objective,
    /// Whether the number of stages is limited (then `depth` is the limit).
    limited: bool,
    /// Stage-count layers of the table: 1 when unlimited.
    depth: usize,
}

/// A filled table for plans on exactly `used` workers: `value[d][i][m][c]` is the best value of
/// layers `i..` on the last `m` of them whose first stage has at most `c ≤ m` replicas (with at
/// most `d + 1` stages when limited; replicas never growing), `choice` how it was reached: its
/// first stage's end and replicas.
struct Filled<'a> {
    table: &'a Table<'a>,
    used: u32,
    value: Vec<f64>,
    choice: Vec<(usize, u32)>,
}

impl Table<'_> {
    /// Where `value[d][i][m][c]` lies in a table for `used` workers.
    fn at(&self, d: usize, i: usize, m: u32, c: u32, used: u32) -> usize {
        let w = used as usize + 1;
        ((d * (self.costs.layers() + 1) + i) * w + m as usize) * w + c as usize
    }

    /// The value of a stage of layers `i..j` on workers `lo..lo + r` with `downstream` workers
    /// from it to the end; `None` when it does not fit in memory.
    fn stage(&self, i: usize, j: usize, lo: u32, r: u32, downstream: u32) -> Option<f64> {
        let need = self.costs.memory(i, j, warmup(downstream, r, i == 0));
        if self.memory.is_some_and(|cap| need > cap) {
            return None;
        }
        Some(match self.objective {
            Objective::Memory => need,
            Objective::Time => {
                let bw = self.topology.span_bandwidth(lo, lo + r);
                self.costs.replicated(i, j, self.costs.compute(i, j), r, bw)
            }
        })
    }

    /// The value of the boundary before layer `s`, from a stage whose workers start at `lo` to
    /// the next stage, whose workers end before `hi`: at the slowest link among workers
    /// `lo..hi` (minibatches go round-robin from every replica of the one to every replica of
    /// the other).
    fn boundary(&self, s: usize, lo: u32, hi: u32) -> f64 {
        match self.objective {
            Objective::Memory => 0.0,
            Objective::Time => self.costs.boundary(s, self.topology.span_bandwidth(lo, hi)),
        }
    }

    /// The table for plans on exactly `used` workers. For each suffix, the caps `c = 1..=m` are
    /// filled in order, each starting from the one below it (a prefix minimum over the first
    /// stage's replicas), so only first stages on exactly `c` workers are new.
    fn fill(&self, used: u32) -> Filled<'_> {
        let n = self.costs.layers();
        let w = used as usize + 1;
        let size = self.depth * (n + 1) * w * w;
        let mut value = vec![f64::INFINITY; size];
        let mut choice = vec![(0, 0); size];
        for d in 0..self.depth {
            for i in (0..n).rev() {
                for m in 1..=used {
                    let lo = used - m;
                    let mut best = f64::INFINITY;
                    let mut how = (0, 0);
                    for r in 1..=m {
                        if r == m {
                            // Of equal plans, one stage (data parallelism on the suffix) stays.
                            if let Some(v) = self.stage(i, n, lo, m, m) {
                                if v <= best {
                                    (best, how) = (v, (n, m));
                                }
                            }
                        } else if !(self.limited && d == 0) {
                            let q = if self.limited { d - 1 } else { d };
                            // The rest's first stage on at most `r` workers.
                            let cap = r.min(m - r);
                            // The boundary's link widens with the next stage's replicas
                            // r' ≤ cap; for each end at which it may slow, the best rest
                            // whose first stage ends within it (exact: a rest on fewer
                            // replicas is only charged less).
                            let steps = self.topology.span_steps(lo, lo + r + 1, lo + r + cap);
                            for s in i + 1..n {
                                let rest = value[self.at(q, s, m - r, cap, used)];
                                if rest >= best {
                                    continue;
                                }
                                let Some(v) = self.stage(i, s, lo, r, m) else {
                                    continue;
                                };
                                for &hi in &steps {
                                    let rest = value[self.at(q, s, m - r, hi - lo - r, used)];
                                    let t = v.max(self.boundary(s, lo, hi)).max(rest);
                                    if t < best {
                                        (best, how) = (t, (s, r));
                                    }
                                }
                            }
                        }
                        let at = self.at(d, i, m, r, used);
                        value[at] = best;
                        choice[at] = how;
                    }
                }
            }
        }
        Filled {
            table: self,
            used,
            value,
            choice,
        }
    }
}

impl Filled<'_> {
    /// Keeps the plan of all layers on `m` workers in `best` if it is strictly better (so, of
    /// equal plans, the one on fewer workers stays).
    fn offer(&self, best: &mut Option<(f64, Vec<StagePlan>)>, m: u32) {
        let t = self.table;
        let v = self.value[t.at(t.depth - 1, 0, m, m, self.used)];
        if v.is_finite() && best.as_ref().is_none_or(|(b, _)| v < *b) {
            *best = Some((v, self.unfold(m)));
        }
    }

    /// The stages of the best plan of all layers on the last `m` workers.
    fn unfold(&self, mut m: u32) -> Vec<StagePlan> {
        let t = self.table;
        let n = t.costs.layers();
        let (mut d, mut i, mut c) = (t.depth - 1, 0, m);
        let mut stages = Vec::new();
        while i < n {
            let (s, r) = self.choice[t.at(d, i, m, c, self.used)];
            stages.push(StagePlan {
                layers: i..s,
                replicas: r,
            });
            if t.limited {
                d = d.saturating_sub(1);
            }
            (i, m, c) = (s, m - r, r.min(m - r));
        }
        stages
    }
}
