//! One row of `results.csv` per cell: the row type, its metrics by name, the `figures` field,
//! and building the rows from the cells' results.

use super::measure::{first_at_target, phase_ratio, steady_time_per_iteration};
use crate::bench::runner::result::CellResult;
use crate::bench::suite::expand::{Cell, Scenario};
use crate::bench::suite::metrics::{FIGURE_PREFIX, MARKET_METRICS};
use crate::bench::suite::schema::Suite;
use crate::bench::suite::toml_tables::show_value;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Strategy figures as one CSV field: `name=value;name=value`, sorted by name, each value as
/// Rust prints an `f64` (the shortest text that reads back to the same number).
pub fn format_figures(figures: &BTreeMap<String, f64>) -> String {
    figures
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// Reads a `figures` field back (entries that do not parse are skipped).
pub fn parse_figures(field: &str) -> BTreeMap<String, f64> {
    field
        .split(';')
        .filter_map(|entry| {
            let (k, v) = entry.rsplit_once('=')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// One row of `results.csv`: one cell with one seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Suite name.
    pub suite: String,
    /// Scenario label (with ` key=value` when swept).
    pub scenario: String,
    /// Strategy label.
    pub strategy: String,
    /// Seed.
    pub seed: u64,
    /// Swept key, if the scenario is swept.
    pub sweep_key: Option<String>,
    /// Swept value, if the scenario is swept.
    pub sweep_value: Option<String>,
    /// Iterations completed.
    pub iterations: u64,
    /// Mean virtual seconds per iteration.
    pub time_per_iteration_s: f64,
    /// Mean virtual seconds per iteration over the second half of the run: the steady state of
    /// strategies that adapt (the papers report training speed once settled).
    pub steady_time_per_iteration_s: Option<f64>,
    /// First virtual time the scenario's target was reached (empty: no target, or never).
    pub time_to_target_s: Option<f64>,
    /// Iterations completed when the target was first reached (statistical efficiency).
    pub iterations_to_target: Option<u64>,
    /// How much earlier than `time_to_target_s` the target may have been crossed (0 where the
    /// checks follow every iteration; else the time since the previous check): two times to
    /// target closer than this are a tie.
    #[serde(default)]
    pub time_to_target_resolution_s: Option<f64>,
    /// How many iterations earlier than `iterations_to_target` it may have been crossed (0
    /// where every iteration was checked).
    #[serde(default)]
    pub iterations_to_target_resolution: Option<u64>,
    /// Mean iteration time in the disturbed phases over the undisturbed phase (scenarios with
    /// `phases`).
    pub phase_ratio: Option<f64>,
    /// Steady time per iteration less that of the same strategy and seed in the scenario's
    /// `calm` twin (scenarios with `calm`): the delay stragglers add per iteration once
    /// adaptive strategies have settled.
    #[serde(default)]
    pub per_iteration_delay_s: Option<f64>,
    /// Virtual seconds of the whole run.
    pub run_time_s: f64,
    /// Training loss of the last iteration.
    pub final_loss: Option<f64>,
    /// Test accuracy at the end.
    pub final_accuracy: Option<f64>,
    /// Test AUC at the end (click-through models).
    #[serde(default)]
    pub final_auc: Option<f64>,
    /// Ideal / achieved time.
    pub efficiency: f64,
    /// Share of worker time waiting for parameters.
    pub wait_share: f64,
    /// Bytes moved over the transport.
    pub bytes_sent: u64,
    /// Largest peak memory of a worker, bytes.
    pub peak_worker_memory_bytes: u64,
    /// Largest peak memory of a server, bytes.
    pub peak_server_memory_bytes: u64,
    /// Samples per virtual second.
    pub throughput_samples_per_s: f64,
    /// Strategy figures of the run summary, `name=value;name=value` (see [`format_figures`]).
    #[serde(default)]
    pub figures: String,
}

impl Row {
    /// How finely `metric` is measured in this row: how far below the reported value the true
    /// one may lie (a target crossed between two checks), or 0 for a metric known exactly.
    pub fn resolution(&self, metric: &str) -> f64 {
        match metric {
            "time_to_target_s" => self.time_to_target_resolution_s.unwrap_or(0.0),
            "iterations_to_target" => self
                .iterations_to_target_resolution
                .map_or(0.0, |i| i as f64),
            "samples_to_target" => self.iterations_to_target_resolution.map_or(0.0, |i| {
                i as f64 * self.samples() / self.iterations.max(1) as f64
            }),
            _ => 0.0,
        }
    }

    /// The value of a metric named in [`METRICS`](crate::bench::suite::metrics::METRICS), or of a strategy figure
    /// (`figure:<name>`).
    pub fn metric(&self, name: &str) -> Option<f64> {
        if let Some(figure) = name.strip_prefix(FIGURE_PREFIX) {
            return self.figure(figure);
        }
        match name {
            "time_per_iteration_s" => Some(self.time_per_iteration_s),
            "steady_time_per_iteration_s" => self.steady_time_per_iteration_s,
            "time_to_target_s" => self.time_to_target_s,
            "iterations_to_target" => self.iterations_to_target.map(|i| i as f64),
            "phase_ratio" => self.phase_ratio,
            "per_iteration_delay_s" => self.per_iteration_delay_s,
            "run_time_s" => Some(self.run_time_s),
            "final_loss" => self.final_loss,
            "final_accuracy" => self.final_accuracy,
            "final_auc" => self.final_auc,
            "efficiency" => Some(self.efficiency),
            "wait_share" => Some(self.wait_share),
            "bytes_sent" => Some(self.bytes_sent as f64),
            "bytes_per_sample" => {
                let samples = self.samples();
                (samples > 0.0).then(|| self.bytes_sent as f64 / samples)
            }
            "samples_to_target" => {
                let per_iteration = self.samples() / self.iterations.max(1) as f64;
                self.iterations_to_target.map(|i| i as f64 * per_iteration)
            }
            "throughput_samples_per_s" => Some(self.throughput_samples_per_s),
            "peak_worker_memory_bytes" => Some(self.peak_worker_memory_bytes as f64),
            m if MARKET_METRICS.contains(&m) => self.figure(&format!("market.{m}")),
            _ => None,
        }
    }

    /// Training samples of the run (throughput × run time).
    fn samples(&self) -> f64 {
        (self.throughput_samples_per_s * self.run_time_s).round()
    }

    /// A strategy figure by name, from the `figures` column.
    pub fn figure(&self, name: &str) -> Option<f64> {
        parse_figures(&self.figures).get(name).copied()
    }
}

/// One CSV row per cell that has a result, in cell order.
pub fn rows(
    suite: &Suite,
    scenarios: &[Scenario],
    cells: &[Cell],
    results: &[Option<CellResult>],
) -> Vec<Row> {
    let mut rows = cell_rows(suite, scenarios, cells, results);
    // Per-iteration delays against each scenario's calm twin (same strategy and seed).
    let calm_time: BTreeMap<(String, String, u64), f64> = rows
        .iter()
        .map(|r| {
            let key = (r.scenario.clone(), r.strategy.clone(), r.seed);
            (key, steady_or_mean(r))
        })
        .collect();
    let calm_of: BTreeMap<&str, &str> = scenarios
        .iter()
        .filter_map(|sc| Some((sc.label.as_str(), sc.spec.calm.as_deref()?)))
        .collect();
    for row in &mut rows {
        let Some(calm) = calm_of.get(row.scenario.as_str()) else {
            continue;
        };
        let key = (calm.to_string(), row.strategy.clone(), row.seed);
        row.per_iteration_delay_s = calm_time.get(&key).map(|t| steady_or_mean(row) - t);
    }
    rows
}

/// A row's steady time per iteration, or its mean where the run is too short for one.
fn steady_or_mean(r: &Row) -> f64 {
    r.steady_time_per_iteration_s
        .unwrap_or(r.time_per_iteration_s)
}

/// The rows of the cells that have a result, without cross-scenario measures.
fn cell_rows(
    suite: &Suite,
    scenarios: &[Scenario],
    cells: &[Cell],
    results: &[Option<CellResult>],
) -> Vec<Row> {
    cells
        .iter()
        .zip(results)
        .filter_map(|(cell, r)| {
            let r = r.as_ref()?;
            let sc = &scenarios[cell.scenario];
            let m = &r.metrics;
            let reached = sc.spec.target.as_ref().and_then(|t| first_at_target(r, t));
            Some(Row {
                suite: suite.name.clone(),
                scenario: sc.label.clone(),
                strategy: suite.strategies[cell.strategy].label.clone(),
                seed: cell.seed,
                sweep_key: sc.swept.as_ref().map(|(k, _)| k.clone()),
                sweep_value: sc.swept.as_ref().map(|(_, v)| show_value(v)),
                iterations: m.iterations,
                time_per_iteration_s: m.time_per_iteration_s,
                steady_time_per_iteration_s: steady_time_per_iteration(r),
                time_to_target_s: reached.map(|t| t.time_s),
                iterations_to_target: reached.map(|t| t.iteration),
                time_to_target_resolution_s: reached.map(|t| t.resolution_s),
                iterations_to_target_resolution: reached.map(|t| t.resolution_iterations),
                phase_ratio: sc.spec.phases.as_ref().and_then(|p| phase_ratio(r, p)),
                per_iteration_delay_s: None,
                run_time_s: m.run_time_s,
                final_loss: m.final_loss,
                final_accuracy: m.final_accuracy,
                final_auc: m.final_auc,
                efficiency: m.efficiency,
                wait_share: m.wait_share,
                bytes_sent: m.bytes_sent,
                peak_worker_memory_bytes: m.peak_worker_memory_bytes,
                peak_server_memory_bytes: m.peak_server_memory_bytes,
                throughput_samples_per_s: m.throughput_samples_per_s,
                figures: format_figures(&m.figures),
            })
        })
        .collect()
}
