//! Measurements read off a cell's curve and evaluations: when it reached the scenario's target,
//! its steady-state iteration time, and the disturbed/undisturbed phase ratio.

use crate::bench::runner::result::{CellResult, CurvePoint, EvalPoint};
use crate::bench::suite::schema::{Phases, Target};

/// When a cell first reaches `target`, as (virtual time, iterations completed): test accuracy ≥
/// the target accuracy (at a time-indexed evaluation where the scenario has them, else at an
/// iteration's), test loss ≤ the target test loss (time-indexed evaluations), training loss ≤ the
/// target loss, or a training loss within the convergence criterion's relative change of the
/// loss `over` iterations before.
fn first_at_target(result: &CellResult, target: &Target) -> Option<(f64, u64)> {
    let at = |p: &CurvePoint| (p.time_s, p.iteration);
    let at_eval = |p: &EvalPoint| (p.time_s, p.iteration);
    if let Some(c) = target.converged {
        let over = c.over as usize;
        // The objective: test loss where both points were evaluated, else training loss.
        let objective = |a: &CurvePoint, b: &CurvePoint| match (a.test_loss, b.test_loss) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => Some((a.loss?, b.loss?)),
        };
        let first = over.max(c.after as usize);
        return result
            .curve
            .iter()
            .enumerate()
            .skip(first)
            .find_map(|(i, p)| {
                let (now, before) = objective(p, &result.curve[i - over])?;
                ((now - before).abs() <= c.change * before.abs()).then_some(p)
            })
            .map(at);
    }
    if let Some(l) = target.test_loss {
        return result
            .evals
            .iter()
            .find(|p| p.test_loss.is_some_and(|x| x <= l))
            .map(at_eval);
    }
    if let Some(a) = target.accuracy {
        if !result.evals.is_empty() {
            return result
                .evals
                .iter()
                .find(|p| p.test_accuracy.is_some_and(|x| x >= a))
                .map(at_eval);
        }
        return result
            .curve
            .iter()
            .find(|p| p.test_accuracy.is_some_and(|x| x >= a))
            .map(at);
    }
    let l = target.loss?;
    result
        .curve
        .iter()
        .find(|p| p.loss.is_some_and(|x| x <= l))
        .map(at)
}

/// The first virtual time a cell reaches `target`.
pub fn time_to_target(result: &CellResult, target: &Target) -> Option<f64> {
    first_at_target(result, target).map(|(t, _)| t)
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

/// Iterations completed when a cell first reaches `target`.
pub fn iterations_to_target(result: &CellResult, target: &Target) -> Option<u64> {
    first_at_target(result, target).map(|(_, i)| i)
}
