//! Verdicts on trend claims: a metric's shape (linear rise, or flat) across a sweep's values,
//! checked on each seed's points (the trend holds when it holds in every seed).

use super::format::{metric_value, pct};
use super::row::Row;
use super::stats::{cell_rows, stat};
use crate::bench::suite::expand::Scenario;
use crate::bench::suite::schema::{Shape, Trend};

/// A trend's shape measured on one set of points: what was computed (slope and R², or the
/// largest relative change) and whether it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeCheck {
    /// (swept value, metric), by swept value.
    pub points: Vec<(f64, f64)>,
    /// What was measured, in words.
    pub measured: String,
    /// Whether the shape holds.
    pub holds: bool,
}

/// A trend claim's verdict: the shape on each seed's points (`None` for a seed with fewer than
/// two points), the shape on the means over seeds (shown), and whether every seed holds.
#[derive(Clone, Debug, PartialEq)]
pub struct TrendCheck {
    /// One entry per seed of the suite, in suite order.
    pub seeds: Vec<(u64, Option<ShapeCheck>)>,
    /// The shape on the means over seeds (`None` with fewer than two points with data).
    pub mean: Option<ShapeCheck>,
    /// Whether the trend holds in every seed (and there is at least one).
    pub holds: bool,
}

impl TrendCheck {
    /// Seeds whose points hold the shape.
    pub fn held(&self) -> usize {
        self.seeds
            .iter()
            .filter(|(_, c)| c.as_ref().is_some_and(|c| c.holds))
            .count()
    }
}

/// The (swept value, metric) points of a sweep group: one seed's values, or the means over
/// seeds (`seed = None`); values that are not numbers and points without data are left out.
fn points(rows: &[Row], group: &[&Scenario], trend: &Trend, seed: Option<u64>) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = group
        .iter()
        .filter_map(|sc| {
            let x = sc
                .swept
                .as_ref()?
                .1
                .as_float()
                .or_else(|| sc.swept.as_ref()?.1.as_integer().map(|i| i as f64))?;
            let y = match seed {
                None => stat(rows, &sc.label, &trend.strategy, &trend.metric)?.mean,
                Some(seed) => cell_rows(rows, &sc.label, &trend.strategy)
                    .into_iter()
                    .find(|r| r.seed == seed)?
                    .metric(&trend.metric)
                    .filter(|y| y.is_finite())?,
            };
            Some((x, y))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// Measures a trend claim over a sweep group's scenarios, in every one of `seeds`.
pub fn check_trend(rows: &[Row], group: &[&Scenario], trend: &Trend, seeds: &[u64]) -> TrendCheck {
    let per_seed: Vec<(u64, Option<ShapeCheck>)> = seeds
        .iter()
        .map(|&seed| {
            (
                seed,
                check_shape(points(rows, group, trend, Some(seed)), trend),
            )
        })
        .collect();
    let holds = !per_seed.is_empty()
        && per_seed
            .iter()
            .all(|(_, c)| c.as_ref().is_some_and(|c| c.holds));
    TrendCheck {
        mean: check_shape(points(rows, group, trend, None), trend),
        seeds: per_seed,
        holds,
    }
}

/// Whether `points` hold the trend's shape; `None` with fewer than two points.
fn check_shape(points: Vec<(f64, f64)>, trend: &Trend) -> Option<ShapeCheck> {
    if points.len() < 2 {
        return None;
    }
    let (measured, holds) = match trend.shape {
        Shape::Linear { min_r2 } => {
            let n = points.len() as f64;
            let (mx, my) = (
                points.iter().map(|p| p.0).sum::<f64>() / n,
                points.iter().map(|p| p.1).sum::<f64>() / n,
            );
            let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
            let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
            let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
            let r2 = if sxx > 0.0 && syy > 0.0 {
                sxy * sxy / (sxx * syy)
            } else {
                0.0
            };
            (
                format!(
                    "slope {} per unit, R² {r2:.3}",
                    metric_value(&trend.metric, slope)
                ),
                slope > 0.0 && r2 >= min_r2,
            )
        }
        Shape::Flat { up_to, within } => {
            let y0 = points[0].1;
            let change = points
                .iter()
                .filter(|p| p.0 <= up_to)
                .map(|p| (p.1 - y0).abs() / y0.abs().max(f64::MIN_POSITIVE))
                .fold(0.0, f64::max);
            (
                format!("largest change up to {up_to}: {}", pct(change)),
                change <= within,
            )
        }
    };
    Some(ShapeCheck {
        points,
        measured,
        holds,
    })
}
