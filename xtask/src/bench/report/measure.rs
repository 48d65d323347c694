//! Measurements read off a cell's curve and evaluations: when it reached the scenario's target,
//! its steady-state iteration time, and the disturbed/undisturbed phase ratio.

use crate::bench::runner::result::{CellResult, CurvePoint, EvalPoint};
use crate::bench::suite::schema::{Phases, Target};
use concord_engine::metrics::{last_whole_group, seconds_per_iteration};

/// Where a cell first reaches its target, and how finely that is known: the target was crossed
/// somewhere after the check before the one that found it, so a result is exact only where the
/// checks see every change of the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reached {
    /// Virtual time of the check that found the target reached.
    pub time_s: f64,
    /// Iterations completed at that check.
    pub iteration: u64,
    /// How much earlier the target may have been crossed, virtual seconds: 0 where the checks
    /// follow every iteration (the model changes only at an iteration's end, so the reaching
    /// iteration's end is the time), else the time since the previous check.
    pub resolution_s: f64,
    /// How many iterations earlier it may have been crossed: the iterations completed between
    /// the previous check and this one, less the one this check follows.
    pub resolution_iterations: u64,
}

/// Where a sequence of checks is taken: at every iteration's end (the curve), or at times of
/// their own (time-indexed evaluations), which may fall anywhere between iterations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checks {
    AtIterations,
    AtTimes,
}

/// The first of a sequence of checks `(time, iteration, value)` whose value meets `hit`, with
/// how finely that is known; points without a value were not checks.
fn first_check<T>(
    checks: impl Iterator<Item = (f64, u64, Option<T>)>,
    kind: Checks,
    hit: impl Fn(T) -> bool,
) -> Option<Reached> {
    let mut before = (0.0, 0);
    for (time_s, iteration, value) in checks {
        let Some(v) = value else { continue };
        if hit(v) {
            let gap = iteration.saturating_sub(before.1);
            let exact = kind == Checks::AtIterations && gap <= 1;
            return Some(Reached {
                time_s,
                iteration,
                resolution_s: if exact { 0.0 } else { time_s - before.0 },
                resolution_iterations: gap.saturating_sub(1),
            });
        }
        before = (time_s, iteration);
    }
    None
}

/// When a cell first reaches `target`: test accuracy ≥ the target accuracy (at a time-indexed
/// evaluation where the scenario has them, else at an iteration's), test loss ≤ the target test
/// loss (time-indexed evaluations), training loss ≤ the target loss, or a training loss within
/// the convergence criterion's relative change of the loss `over` iterations before.
pub fn first_at_target(result: &CellResult, target: &Target) -> Option<Reached> {
    let curve = |value: fn(&CurvePoint) -> Option<f64>| {
        result
            .curve
            .iter()
            .map(move |p| (p.time_s, p.iteration, value(p)))
    };
    let evals = |value: fn(&EvalPoint) -> Option<f64>| {
        result
            .evals
            .iter()
            .map(move |p| (p.time_s, p.iteration, value(p)))
    };
    if let Some(c) = target.converged {
        let over = c.over as usize;
        // The objective: test loss where both points were evaluated, else training loss.
        let objective = |a: &CurvePoint, b: &CurvePoint| match (a.test_loss, b.test_loss) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => Some((a.loss?, b.loss?)),
        };
        let first = over.max(c.after as usize);
        // Every iteration from `first` on is a check: whether the objective moved less than
        // `change` (relative) over the last `over` iterations.
        let changes = result.curve.iter().enumerate().map(|(i, p)| {
            let settled = (i >= first).then(|| {
                objective(p, &result.curve[i - over])
                    .is_some_and(|(now, before)| (now - before).abs() <= c.change * before.abs())
            });
            (p.time_s, p.iteration, settled)
        });
        return first_check(changes, Checks::AtIterations, |settled| settled);
    }
    if let Some(l) = target.test_loss {
        return first_check(evals(|p| p.test_loss), Checks::AtTimes, |x| x <= l);
    }
    if let Some(a) = target.accuracy {
        if !result.evals.is_empty() {
            return first_check(evals(|p| p.test_accuracy), Checks::AtTimes, |x| x >= a);
        }
        return first_check(curve(|p| p.test_accuracy), Checks::AtIterations, |x| x >= a);
    }
    let l = target.loss?;
    first_check(curve(|p| p.loss), Checks::AtIterations, |x| x <= l)
}

/// Mean iteration time in phases ≥ 1 over phase 0, each iteration attributed to the phase its
/// end falls in; `None` if a side has no iteration.
pub fn phase_ratio(result: &CellResult, phases: &Phases) -> Option<f64> {
    let mut sums = [(0.0f64, 0u64); 2];
    let points = result.curve.iter().skip(phases.skip as usize);
    for (a, b) in points.clone().zip(points.skip(1)) {
        let slot = (b.time_s / phases.period_s).floor() as u64 % phases.count as u64;
        let side = &mut sums[usize::from(slot != 0)];
        side.0 += b.time_s - a.time_s;
        side.1 += 1;
    }
    let [(calm, n0), (busy, n1)] = sums;
    (n0 > 0 && n1 > 0 && calm > 0.0).then(|| (busy / n1 as f64) / (calm / n0 as f64))
}

/// Mean iteration time over the second half of a curve (`None` with fewer than 2 iterations).
/// Iterations a strategy closes at one instant count as one group
/// ([`concord_engine::metrics::seconds_per_iteration`]); where the whole second half is one
/// group, the window starts at the group before it. A last group shorter than the one before
/// (a final partial flush) is the run's remainder and is left out where a window remains
/// without it ([`concord_engine::metrics::last_whole_group`]).
pub fn steady_time_per_iteration(result: &CellResult) -> Option<f64> {
    let ends: Vec<f64> = result.curve.iter().map(|p| p.time_s).collect();
    let whole = last_whole_group(&ends)?;
    let last = ends.len() - 1;
    (whole < last)
        .then(|| second_half_rate(&ends[..=whole]))
        .flatten()
        .or_else(|| second_half_rate(&ends))
}

/// Seconds per iteration from the middle of `ends` to its end, as [`steady_time_per_iteration`]
/// reads a run.
fn second_half_rate(ends: &[f64]) -> Option<f64> {
    let last = ends.len().checked_sub(1)?;
    let from = (ends.len() / 2).max(1) - 1;
    let from = if ends.get(from) == ends.get(last) {
        ends.iter().rposition(|&t| t < ends[last])?
    } else {
        from
    };
    seconds_per_iteration(ends, from, last)
}
