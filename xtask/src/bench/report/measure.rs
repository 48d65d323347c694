//! Measurements read off a cell's curve and evaluations: when it reached the scenario's target,
//! its steady-state iteration time, and the disturbed/undisturbed phase ratio.

use crate::bench::runner::result::{CellResult, CurvePoint, EvalPoint};
use crate::bench::suite::schema::{Phases, Target};

/// Where a cell first reaches its target, and the check before it: the target was crossed
/// somewhere between the two, so their distance is how finely the reaching is measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reached {
    /// Virtual time of the check that found the target reached.
    pub time_s: f64,
    /// Iterations completed at that check.
    pub iteration: u64,
    /// Virtual seconds since the previous check (or since the start, for the first).
    pub step_s: f64,
    /// Iterations since the previous check (or since the start).
    pub step_iterations: u64,
}

/// The first of a sequence of checks `(time, iteration, value)` whose value meets `hit`, with
/// its distance to the check before it (or to the start); points without a value were not
/// checks.
fn first_check<T>(
    checks: impl Iterator<Item = (f64, u64, Option<T>)>,
    hit: impl Fn(T) -> bool,
) -> Option<Reached> {
    let mut before = (0.0, 0);
    for (time_s, iteration, value) in checks {
        let Some(v) = value else { continue };
        if hit(v) {
            return Some(Reached {
                time_s,
                iteration,
                step_s: time_s - before.0,
                step_iterations: iteration.saturating_sub(before.1),
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
        return first_check(changes, |settled| settled);
    }
    if let Some(l) = target.test_loss {
        return first_check(evals(|p| p.test_loss), |x| x <= l);
    }
    if let Some(a) = target.accuracy {
        if !result.evals.is_empty() {
            return first_check(evals(|p| p.test_accuracy), |x| x >= a);
        }
        return first_check(curve(|p| p.test_accuracy), |x| x >= a);
    }
    let l = target.loss?;
    first_check(curve(|p| p.loss), |x| x <= l)
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
pub fn steady_time_per_iteration(result: &CellResult) -> Option<f64> {
    let n = result.curve.len();
    let half = n / 2;
    let (Some(a), Some(b)) = (result.curve.get(half.max(1) - 1), result.curve.last()) else {
        return None;
    };
    let count = n - half.max(1);
    (count > 0).then(|| (b.time_s - a.time_s) / count as f64)
}
