//! Verdicts on trend claims: a metric's shape (linear rise, or flat) across a sweep's values.

use super::format::{metric_value, pct};
use super::row::Row;
use super::stats::stat;
use crate::bench::suite::expand::Scenario;
use crate::bench::suite::schema::{Shape, Trend};

/// A trend claim's measurement: the points (swept value, mean) and whether they hold the shape,
/// with what was computed (slope and R², or the largest relative change).
#[derive(Clone, Debug, PartialEq)]
pub struct TrendCheck {
    /// (swept value, strategy mean), by swept value.
    pub points: Vec<(f64, f64)>,
    /// What was measured, in words.
    pub measured: String,
    /// Whether the shape holds.
    pub holds: bool,
}

/// Measures a trend claim over a sweep group's scenarios; `None` with fewer than two numeric
/// points with data.
pub fn check_trend(rows: &[Row], group: &[&Scenario], trend: &Trend) -> Option<TrendCheck> {
    let mut points: Vec<(f64, f64)> = group
        .iter()
        .filter_map(|sc| {
            let x = sc
                .swept
                .as_ref()?
                .1
                .as_float()
                .or_else(|| sc.swept.as_ref()?.1.as_integer().map(|i| i as f64))?;
            Some((
                x,
                stat(rows, &sc.label, &trend.strategy, &trend.metric)?.mean,
            ))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
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
    Some(TrendCheck {
        points,
        measured,
        holds,
    })
}
