//! Verdicts on a scenario's claims: a strategy's metric against a baseline strategy's or a
//! constant, in the claimed direction and by the claimed size.

use super::row::Row;
use super::stats::stat;
use crate::bench::suite::schema::{Claim, Direction};

/// A claim's measurement: the strategy's mean, the reference (the baseline's mean, or the
/// claim's `than` constant) and the relative difference in the claimed direction (positive =
/// the claimed direction).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimCheck {
    /// Strategy mean.
    pub value: f64,
    /// Baseline mean, or the `than` constant.
    pub reference: f64,
    /// (reference − value)/|reference| for `less`, (value − reference)/|reference| for
    /// `greater`.
    pub relative: f64,
    /// Whether the measurement upholds the claim (direction and size).
    pub holds: bool,
}

/// Measures a claim in a scenario; `None` without data for the strategy (or the baseline).
pub fn check_claim(rows: &[Row], scenario: &str, claim: &Claim) -> Option<ClaimCheck> {
    let value = stat(rows, scenario, &claim.strategy, &claim.metric)?.mean;
    let reference = match (&claim.baseline, claim.than) {
        (Some(b), _) => stat(rows, scenario, b, &claim.metric)?.mean,
        (None, Some(t)) => t,
        (None, None) => return None,
    };
    let scale = reference.abs();
    let diff = match claim.expect {
        Direction::Less => reference - value,
        Direction::Greater => value - reference,
    };
    let relative = if scale > 0.0 {
        diff / scale
    } else if diff == 0.0 {
        0.0
    } else {
        diff.signum() * f64::INFINITY
    };
    let holds = relative >= claim.by_at_least && claim.by_at_most.is_none_or(|m| relative <= m);
    Some(ClaimCheck {
        value,
        reference,
        relative,
        holds,
    })
}
