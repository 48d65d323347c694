//! Statistics over seeds: a metric's mean, min and max for one strategy in one scenario.

use super::row::Row;

/// Mean, min and max of a metric over seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Seeds that have a value.
    pub n: usize,
}

impl Stat {
    /// The stat of the values present, or `None` if none is.
    pub fn of(values: impl Iterator<Item = Option<f64>>) -> Option<Stat> {
        let v: Vec<f64> = values.flatten().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        Some(Stat {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: v.len(),
        })
    }

    /// (mean, min, max), as a plot's bar with its range.
    pub fn triple(&self) -> (f64, f64, f64) {
        (self.mean, self.min, self.max)
    }
}

/// The rows of one strategy in one scenario.
pub fn cell_rows<'a>(rows: &'a [Row], scenario: &str, strategy: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.scenario == scenario && r.strategy == strategy)
        .collect()
}

/// A metric's stat over seeds for one strategy in one scenario.
pub fn stat(rows: &[Row], scenario: &str, strategy: &str, metric: &str) -> Option<Stat> {
    Stat::of(
        cell_rows(rows, scenario, strategy)
            .into_iter()
            .map(|r| r.metric(metric)),
    )
}
