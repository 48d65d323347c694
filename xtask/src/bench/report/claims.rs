//! Verdicts on a scenario's claims: a strategy's metric against a baseline strategy's or a
//! constant, in the claimed direction and by the claimed size, seed by seed.
//!
//! The rules (written into every report by [`RULES`]):
//! - each seed is judged on its own: the strategy's value against the baseline's in the same
//!   seed (or the constant);
//! - a seed without a value on either side (target never reached, figure not defined) fails;
//! - the difference counts only beyond the metric's resolution (a time or iteration count to
//!   target read at checks coarser than every iteration may lie up to the distance to the check
//!   before; other metrics are exact);
//! - a direction claim (no size) needs a difference beyond [`TIE_BAND`] of the reference too:
//!   a closer result is a tie, and a tie is not a reproduced result;
//! - the claim holds when it holds in every seed of the suite.

use super::row::Row;
use super::stats::{cell_rows, Stat};
use crate::bench::suite::schema::{Claim, Direction};

/// The verdict rules in words, for the report.
pub const RULES: &str = "A claim holds only if it holds in every seed. Each seed compares the \
     strategy with the baseline in the same seed (or with the constant); a seed with no value on \
     either side (target never reached, figure undefined) fails. A difference counts only beyond \
     the metric's resolution: a time or iteration count to target read at checks coarser than \
     every iteration (evaluations every so many seconds or iterations) may lie anywhere after the \
     check before, so results closer than that are a tie; other metrics are exact. A direction \
     claim (\"less\" or \"greater\" with no size) also needs the difference to exceed 0.1 % of the \
     reference: a closer result is a tie, which fails it, since a deterministic simulation can \
     order two equal designs by a rounding-sized margin. A size threshold is met, exactly at its \
     value too, by the difference less the resolution; a range's upper end is checked on the \
     plain difference.";

/// The relative difference at or below which a direction claim (no size) reads two results as
/// a tie: 0.1 % of the reference, finer than any of the papers' figures resolves, so a
/// deterministic near-tie (two designs bound by the same stage, say) cannot pass as one beating
/// the other.
pub const TIE_BAND: f64 = 1e-3;

/// One seed's measurement of a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedCheck {
    /// The seed.
    pub seed: u64,
    /// The measurement, or why there is none.
    pub measured: Result<Measured, Missing>,
}

impl SeedCheck {
    /// Whether this seed upholds the claim (a seed without a value does not).
    pub fn holds(&self) -> bool {
        self.measured.as_ref().is_ok_and(|m| m.holds)
    }
}

/// Why a seed has no measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The named strategy has no row for the seed (not run, or the cell failed).
    NoRun(String),
    /// The named strategy's row has no value for the metric (a target never reached, a figure
    /// the strategy leaves undefined).
    NoValue(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::NoRun(s) => write!(f, "{s} not run"),
            Missing::NoValue(s) => write!(f, "{s} n/a"),
        }
    }
}

/// A claim measured in one seed (or on the means over seeds, for display).
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The strategy's value.
    pub value: f64,
    /// The baseline's value, or the `than` constant.
    pub reference: f64,
    /// (reference − value)/|reference| for `less`, (value − reference)/|reference| for
    /// `greater`: positive in the claimed direction.
    pub relative: f64,
    /// `relative` less the metric's resolution (relative to the reference): what a size
    /// threshold is checked on.
    pub margin: f64,
    /// Whether the measurement upholds the claim (direction and size).
    pub holds: bool,
}

/// A claim's verdict: every seed's measurement, the measurement on the means over seeds (shown
/// beside the per-seed verdict), and whether every seed holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimCheck {
    /// One entry per seed of the suite, in suite order.
    pub seeds: Vec<SeedCheck>,
    /// The claim measured on the means over the seeds that have values (`None` when a side has
    /// none).
    pub mean: Option<Measured>,
    /// Whether the claim holds: every seed holds (and there is at least one seed).
    pub holds: bool,
}

impl ClaimCheck {
    /// Seeds that uphold the claim.
    pub fn held(&self) -> usize {
        self.seeds.iter().filter(|s| s.holds()).count()
    }

    /// Seeds with a measurement.
    pub fn measured(&self) -> usize {
        self.seeds.iter().filter(|s| s.measured.is_ok()).count()
    }
}

/// Judges `value` against `reference` (each with its resolution) in the claimed direction.
fn judge(claim: &Claim, value: f64, reference: f64, resolution: f64) -> Measured {
    let scale = reference.abs();
    let diff = match claim.expect {
        Direction::Less => reference - value,
        Direction::Greater => value - reference,
    };
    let relative_of = |d: f64| {
        if scale > 0.0 {
            d / scale
        } else if d == 0.0 {
            0.0
        } else {
            d.signum() * f64::INFINITY
        }
    };
    let relative = relative_of(diff);
    // A direction claim needs a difference beyond the tie band as well; a size threshold is met
    // exactly at its value.
    let big_enough = if claim.by_at_least == 0.0 {
        relative_of(diff - resolution.max(TIE_BAND * scale)) > 0.0
    } else {
        relative_of(diff - resolution) >= claim.by_at_least
    };
    let margin = relative_of(diff - resolution);
    let holds = big_enough && claim.by_at_most.is_none_or(|m| relative <= m);
    Measured {
        value,
        reference,
        relative,
        margin,
        holds,
    }
}

/// A strategy's value of `metric` and its resolution in one seed.
fn seed_value(
    rows: &[Row],
    scenario: &str,
    strategy: &str,
    metric: &str,
    seed: u64,
) -> Result<(f64, f64), Missing> {
    let row = cell_rows(rows, scenario, strategy)
        .into_iter()
        .find(|r| r.seed == seed)
        .ok_or_else(|| Missing::NoRun(strategy.to_string()))?;
    let v = row
        .metric(metric)
        .filter(|v| v.is_finite())
        .ok_or_else(|| Missing::NoValue(strategy.to_string()))?;
    Ok((v, row.resolution(metric)))
}

/// Measures a claim in a scenario, in every one of `seeds`.
pub fn check_claim(rows: &[Row], scenario: &str, claim: &Claim, seeds: &[u64]) -> ClaimCheck {
    // Each side's value and resolution in every seed, read once: the constant `than` is the
    // same exact value in every seed.
    let side = |strategy: &str| -> Vec<Result<(f64, f64), Missing>> {
        seeds
            .iter()
            .map(|&seed| seed_value(rows, scenario, strategy, &claim.metric, seed))
            .collect()
    };
    let values = side(&claim.strategy);
    let references = match (&claim.baseline, claim.than) {
        (Some(b), _) => side(b),
        (None, Some(t)) => vec![Ok((t, 0.0)); seeds.len()],
        (None, None) => vec![Err(Missing::NoValue("reference".into())); seeds.len()],
    };
    let seed_checks: Vec<SeedCheck> = seeds
        .iter()
        .zip(values.iter().zip(&references))
        .map(|(&seed, (value, reference))| {
            let measured = match (value, reference) {
                (Ok((v, res)), Ok((r, ref_res))) => Ok(judge(claim, *v, *r, res.max(*ref_res))),
                (Err(missing), _) | (_, Err(missing)) => Err(missing.clone()),
            };
            SeedCheck { seed, measured }
        })
        .collect();
    let mean_of = |side: &[Result<(f64, f64), Missing>]| {
        Stat::of(side.iter().map(|v| v.as_ref().ok().map(|(v, _)| *v))).map(|s| s.mean)
    };
    let mean = mean_of(&values)
        .zip(mean_of(&references))
        .map(|(value, reference)| judge(claim, value, reference, 0.0));
    let holds = !seed_checks.is_empty() && seed_checks.iter().all(SeedCheck::holds);
    ClaimCheck {
        seeds: seed_checks,
        mean,
        holds,
    }
}
