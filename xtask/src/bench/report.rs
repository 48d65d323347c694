//! The report of a suite: `results.csv`, `REPORT.md` and the SVG plots in `plots/`.
//!
//! Everything here is a pure function of the cells' results, the suite and the code version, so
//! a re-run writes the same files (no wall-clock figures go into them).

use super::plot::{self, Bars, Labels, Line, Reference};
use super::runner::CellResult;
use super::suite::{
    show_value, Cell, Claim, Direction, Phases, Scenario, Shape, StrategySpec, Suite, Target, Trend,
};
use super::BenchError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// One plotted point: virtual time, value.
type Xy = (f64, f64);

/// Metrics a claim can name (the CSV columns), with what they measure. A claim can also name
/// `figure:<name>`, a strategy figure of the run summary (the CSV's `figures` column).
pub const METRICS: &[(&str, &str)] = &[
    ("time_per_iteration_s", "virtual seconds per iteration"),
    (
        "steady_time_per_iteration_s",
        "virtual seconds per iteration over the second half of the run (after adaptation)",
    ),
    (
        "time_to_target_s",
        "virtual seconds until the scenario's target",
    ),
    (
        "iterations_to_target",
        "iterations until the scenario's target",
    ),
    (
        "phase_ratio",
        "mean iteration time in disturbed phases / undisturbed phase",
    ),
    ("run_time_s", "virtual seconds of the whole run"),
    ("final_loss", "training loss of the last iteration"),
    ("final_accuracy", "test accuracy at the end"),
    ("efficiency", "ideal time / achieved time"),
    ("wait_share", "share of worker time waiting for parameters"),
    ("bytes_sent", "bytes moved over the transport"),
    ("throughput_samples_per_s", "samples per virtual second"),
    (
        "peak_worker_memory_bytes",
        "largest peak memory of a worker",
    ),
];

/// The prefix of a metric that names a strategy figure (`figure:lb-bsp.rmse_relative`).
pub const FIGURE_PREFIX: &str = "figure:";

/// Whether a claim can name `metric`: one of [`METRICS`], or `figure:<name>`.
pub fn known_metric(metric: &str) -> bool {
    match metric.strip_prefix(FIGURE_PREFIX) {
        Some(name) => !name.trim().is_empty(),
        None => METRICS.iter().any(|(m, _)| *m == metric),
    }
}

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
    /// Mean iteration time in the disturbed phases over the undisturbed phase (scenarios with
    /// `phases`).
    pub phase_ratio: Option<f64>,
    /// Virtual seconds of the whole run.
    pub run_time_s: f64,
    /// Training loss of the last iteration.
    pub final_loss: Option<f64>,
    /// Test accuracy at the end.
    pub final_accuracy: Option<f64>,
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
    /// The value of a metric named in [`METRICS`], or of a strategy figure
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
            "run_time_s" => Some(self.run_time_s),
            "final_loss" => self.final_loss,
            "final_accuracy" => self.final_accuracy,
            "efficiency" => Some(self.efficiency),
            "wait_share" => Some(self.wait_share),
            "bytes_sent" => Some(self.bytes_sent as f64),
            "throughput_samples_per_s" => Some(self.throughput_samples_per_s),
            "peak_worker_memory_bytes" => Some(self.peak_worker_memory_bytes as f64),
            _ => None,
        }
    }

    /// A strategy figure by name, from the `figures` column.
    pub fn figure(&self, name: &str) -> Option<f64> {
        parse_figures(&self.figures).get(name).copied()
    }
}

/// When a cell first reaches `target`, as (virtual time, iterations completed): test accuracy ≥
/// the target accuracy (at a time-indexed evaluation where the scenario has them, else at an
/// iteration's), test loss ≤ the target test loss (time-indexed evaluations), training loss ≤ the
/// target loss, or a training loss within the convergence criterion's relative change of the
/// loss `over` iterations before.
fn first_at_target(result: &CellResult, target: &Target) -> Option<(f64, u64)> {
    let at = |p: &super::runner::CurvePoint| (p.time_s, p.iteration);
    let at_eval = |p: &super::runner::EvalPoint| (p.time_s, p.iteration);
    if let Some(c) = target.converged {
        let over = c.over as usize;
        // The objective: test loss where both points were evaluated, else training loss.
        let objective = |a: &super::runner::CurvePoint, b: &super::runner::CurvePoint| match (
            a.test_loss,
            b.test_loss,
        ) {
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

/// One CSV row per cell that has a result, in cell order.
pub fn rows(
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
                time_to_target_s: sc.spec.target.as_ref().and_then(|t| time_to_target(r, t)),
                phase_ratio: sc.spec.phases.as_ref().and_then(|p| phase_ratio(r, p)),
                iterations_to_target: sc
                    .spec
                    .target
                    .as_ref()
                    .and_then(|t| iterations_to_target(r, t)),
                run_time_s: m.run_time_s,
                final_loss: m.final_loss,
                final_accuracy: m.final_accuracy,
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

/// Writes `rows` as CSV with a header.
pub fn write_csv(path: &Path, rows: &[Row]) -> Result<(), BenchError> {
    let bad = |e: csv::Error| BenchError::Output {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut w = csv::Writer::from_path(path).map_err(bad)?;
    for r in rows {
        w.serialize(r).map_err(bad)?;
    }
    w.flush().map_err(|e| bad(e.into()))?;
    Ok(())
}

/// Reads `results.csv` back.
pub fn read_csv(path: &Path) -> Result<Vec<Row>, BenchError> {
    let bad = |e: csv::Error| BenchError::Output {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut r = csv::Reader::from_path(path).map_err(bad)?;
    r.deserialize().map(|row| row.map_err(bad)).collect()
}

/// The (scenario, strategy, seed) triples a suite expects in its CSV.
pub fn expected_cells(
    suite: &Suite,
    scenarios: &[Scenario],
    cells: &[Cell],
) -> BTreeSet<(String, String, u64)> {
    cells
        .iter()
        .map(|c| {
            (
                scenarios[c.scenario].label.clone(),
                suite.strategies[c.strategy].label.clone(),
                c.seed,
            )
        })
        .collect()
}

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

    fn triple(&self) -> (f64, f64, f64) {
        (self.mean, self.min, self.max)
    }
}

/// The rows of one strategy in one scenario.
fn cell_rows<'a>(rows: &'a [Row], scenario: &str, strategy: &str) -> Vec<&'a Row> {
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

/// A file-name-safe form of a label.
pub fn slug(label: &str) -> String {
    let mut s = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').to_string()
}

fn ms(x: f64) -> String {
    format!("{:.4}", x * 1e3)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn plain(x: f64) -> String {
    format!("{x:.4}")
}

fn mb(x: f64) -> String {
    format!("{:.2}", x / 1e6)
}

fn kib(x: f64) -> String {
    format!("{:.1}", x / 1024.0)
}

/// `mean (min–max)`, or `mean` for a single seed, or `–`.
fn show(s: Option<Stat>, f: fn(f64) -> String) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.n == 1 || s.min == s.max => f(s.mean),
        Some(s) => format!("{} ({}–{})", f(s.mean), f(s.min), f(s.max)),
    }
}

/// A metric's value with its unit, for claim lines.
fn metric_value(metric: &str, v: f64) -> String {
    match metric {
        m if m.starts_with(FIGURE_PREFIX) => plain(v),
        "bytes_sent" => format!("{} MB", mb(v)),
        "peak_worker_memory_bytes" => format!("{} KiB", kib(v)),
        "wait_share" => pct(v),
        m if m.ends_with("_s") => format!("{} ms", ms(v)),
        _ => plain(v),
    }
}

/// What a claim is compared with, as shown: the baseline's label, or the constant.
fn reference_name(c: &Claim) -> String {
    match (&c.baseline, c.than) {
        (Some(b), _) => b.clone(),
        (None, Some(t)) => metric_value(&c.metric, t),
        (None, None) => "?".into(),
    }
}

fn direction(c: &Claim) -> &'static str {
    match c.expect {
        Direction::Less => "less",
        Direction::Greater => "greater",
    }
}

fn describe_claim(c: &Claim) -> String {
    let dir = direction(c);
    let size = match c.by_at_most {
        Some(m) => format!("by {}–{}", pct(c.by_at_least), pct(m)),
        None if c.by_at_least > 0.0 => format!("by ≥ {}", pct(c.by_at_least)),
        None if c.by_at_least < 0.0 => {
            format!("(or at most {} the other way)", pct(-c.by_at_least))
        }
        None => String::new(),
    };
    format!(
        "`{}`: {} {dir} than {} {size}",
        c.metric,
        c.strategy,
        reference_name(c)
    )
    .trim_end()
    .to_string()
}

fn describe_check(c: &Claim, check: Option<&ClaimCheck>) -> (String, String) {
    match check {
        None => ("no data".into(), "–".into()),
        Some(k) => {
            let reference = match &c.baseline {
                Some(b) => format!("{b} {}", metric_value(&c.metric, k.reference)),
                None => metric_value(&c.metric, k.reference),
            };
            (
                format!(
                    "{} {} vs {reference}: {} {}",
                    c.strategy,
                    metric_value(&c.metric, k.value),
                    pct(k.relative),
                    direction(c)
                ),
                if k.holds { "✓" } else { "✗" }.into(),
            )
        }
    }
}

/// The inputs of a report.
pub struct ReportInput<'a> {
    /// The suite.
    pub suite: &'a Suite,
    /// Its scenarios, expanded.
    pub scenarios: &'a [Scenario],
    /// Its cells.
    pub cells: &'a [Cell],
    /// Each cell's result, where available.
    pub results: &'a [Option<CellResult>],
    /// The code version the results were made from.
    pub code_version: &'a str,
}

/// Writes `results.csv`, `REPORT.md` and `plots/*.svg` into `dir`; returns the rows.
pub fn write_all(dir: &Path, input: &ReportInput<'_>) -> Result<Vec<Row>, BenchError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BenchError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let rows = rows(input.suite, input.scenarios, input.cells, input.results);
    write_csv(&dir.join("results.csv"), &rows)?;
    let plots_dir = dir.join("plots");
    if plots_dir.exists() {
        std::fs::remove_dir_all(&plots_dir).map_err(io(&plots_dir))?;
    }
    std::fs::create_dir_all(&plots_dir).map_err(io(&plots_dir))?;
    let plots = write_plots(&plots_dir, input, &rows).map_err(|e| BenchError::Output {
        path: plots_dir.clone(),
        reason: format!("{e:#}"),
    })?;
    let md = markdown(input, &rows, &plots);
    let path = dir.join("REPORT.md");
    std::fs::write(&path, md).map_err(io(&path))?;
    Ok(rows)
}

/// The plot files written, by what they show.
#[derive(Debug, Default)]
struct Plots {
    /// Per scenario label: loss plot file, accuracy plot file.
    curves: Vec<(String, String, Option<String>)>,
    /// Suite-wide bar charts.
    overview: Vec<String>,
    /// Per sweep group: plot files.
    sweeps: Vec<(String, Vec<String>)>,
}

fn write_plots(dir: &Path, input: &ReportInput<'_>, rows: &[Row]) -> anyhow::Result<Plots> {
    let suite = input.suite;
    let mut plots = Plots::default();
    let labels: Vec<&str> = suite.strategies.iter().map(|s| s.label.as_str()).collect();
    let first_seed = suite.seeds[0];
    for (si, sc) in input.scenarios.iter().enumerate() {
        let curve = |strategy: usize| {
            input
                .cells
                .iter()
                .zip(input.results)
                .find(|(c, _)| c.scenario == si && c.strategy == strategy && c.seed == first_seed)
                .and_then(|(_, r)| r.as_ref())
        };
        let mut loss = Vec::new();
        let mut acc = Vec::new();
        // Scenarios with time-indexed evaluations plot the model's test loss and accuracy at
        // fixed times; others the per-iteration training loss and evaluations.
        let timed = suite
            .scenario_strategies(&sc.spec)
            .into_iter()
            .any(|ti| curve(ti).is_some_and(|r| !r.evals.is_empty()));
        for ti in suite.scenario_strategies(&sc.spec) {
            let label = labels[ti];
            let Some(r) = curve(ti) else { continue };
            // (time, loss, accuracy): the test set's at fixed times, else the training curve's.
            let series: Vec<(f64, Option<f64>, Option<f64>)> = if timed {
                r.evals
                    .iter()
                    .map(|p| (p.time_s, p.test_loss, p.test_accuracy))
                    .collect()
            } else {
                r.curve
                    .iter()
                    .map(|p| (p.time_s, p.loss, p.test_accuracy))
                    .collect()
            };
            let points: Vec<Xy> = series
                .iter()
                .filter_map(|&(t, l, _)| l.map(|l| (t, l)))
                .collect();
            let a: Vec<Xy> = series
                .iter()
                .filter_map(|&(t, _, a)| a.map(|a| (t, a)))
                .collect();
            loss.push(Line {
                label: label.to_string(),
                points,
                color: Some(ti),
            });
            if !a.is_empty() {
                acc.push(Line {
                    label: label.to_string(),
                    points: a,
                    color: Some(ti),
                });
            }
        }
        if loss.iter().all(|l| l.points.is_empty()) {
            continue;
        }
        let slug = slug(&sc.label);
        let loss_file = format!("loss-{slug}.svg");
        let (what, target) = if timed {
            let target = sc.spec.target.and_then(|t| t.test_loss).map(|l| Reference {
                y: l,
                label: format!("target {l}"),
            });
            ("Test loss", target)
        } else {
            ("Training loss", None)
        };
        plot::lines(
            &dir.join(&loss_file),
            &Labels {
                title: format!("{what} vs virtual time: {} (seed {first_seed})", sc.label),
                x: "virtual time (s)".into(),
                y: what.to_lowercase(),
            },
            &loss,
            false,
            target.as_ref(),
            plotters::prelude::SeriesLabelPosition::UpperRight,
        )?;
        let acc_file = if acc.is_empty() {
            None
        } else {
            let f = format!("accuracy-{slug}.svg");
            let target = sc.spec.target.and_then(|t| t.accuracy).map(|a| Reference {
                y: a,
                label: format!("target {a}"),
            });
            plot::lines(
                &dir.join(&f),
                &Labels {
                    title: format!(
                        "Test accuracy vs virtual time: {} (seed {first_seed})",
                        sc.label
                    ),
                    x: "virtual time (s)".into(),
                    y: "test accuracy".into(),
                },
                &acc,
                true,
                target.as_ref(),
                plotters::prelude::SeriesLabelPosition::LowerRight,
            )?;
            Some(f)
        };
        plots.curves.push((sc.label.clone(), loss_file, acc_file));
    }

    let groups: Vec<String> = input.scenarios.iter().map(|s| s.label.clone()).collect();
    let bars = |metric: &str| -> Vec<Bars> {
        labels
            .iter()
            .map(|l| Bars {
                label: l.to_string(),
                values: groups
                    .iter()
                    .map(|g| stat(rows, g, l, metric).map(|s| s.triple()))
                    .collect(),
            })
            .collect()
    };
    if !groups.is_empty() && !rows.is_empty() {
        let mut t = bars("time_per_iteration_s");
        for b in &mut t {
            for (m, lo, hi) in b.values.iter_mut().flatten() {
                *m *= 1e3;
                *lo *= 1e3;
                *hi *= 1e3;
            }
        }
        plot::grouped_bars(
            &dir.join("time-per-iteration.svg"),
            &Labels {
                title: format!("Time per iteration by strategy: suite {}", suite.name),
                x: "scenario".into(),
                y: "virtual time per iteration (ms)".into(),
            },
            &groups,
            &t,
            None,
        )?;
        plot::grouped_bars(
            &dir.join("efficiency.svg"),
            &Labels {
                title: format!("Efficiency vs ideal by strategy: suite {}", suite.name),
                x: "scenario".into(),
                y: "efficiency (ideal time / achieved time)".into(),
            },
            &groups,
            &bars("efficiency"),
            Some(&Reference {
                y: 1.0,
                label: "ideal".into(),
            }),
        )?;
        plots.overview = vec!["time-per-iteration.svg".into(), "efficiency.svg".into()];
    }

    for (group, members) in sweep_groups(input.scenarios) {
        let key = members[0].swept.as_ref().map_or("", |(k, _)| k.as_str());
        let xs: Vec<Option<f64>> = members
            .iter()
            .map(|s| s.swept.as_ref().and_then(|(_, v)| numeric(v)))
            .collect();
        let numeric_x = xs.iter().all(Option::is_some);
        let x_of = |i: usize| {
            if numeric_x {
                xs[i].unwrap_or(i as f64)
            } else {
                i as f64
            }
        };
        let mut files = Vec::new();
        for (metric, name, scale, unit) in [
            (
                "time_per_iteration_s",
                "time per iteration",
                1e3,
                "virtual ms per iteration",
            ),
            (
                "efficiency",
                "efficiency",
                1.0,
                "efficiency (ideal / achieved)",
            ),
        ] {
            let lines: Vec<Line> = suite
                .scenario_strategies(&members[0].spec)
                .into_iter()
                .map(|ti| Line {
                    label: labels[ti].to_string(),
                    points: members
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| {
                            stat(rows, &s.label, labels[ti], metric)
                                .map(|st| (x_of(i), st.mean * scale))
                        })
                        .collect(),
                    color: Some(ti),
                })
                .filter(|l| !l.points.is_empty())
                .collect();
            if lines.is_empty() {
                continue;
            }
            let f = format!("sweep-{}-{}.svg", slug(group), slug(name));
            plot::lines(
                &dir.join(&f),
                &Labels {
                    title: format!("{name} vs {key}: {group} (mean over seeds)"),
                    x: if numeric_x {
                        key.to_string()
                    } else {
                        format!("{key} (value index)")
                    },
                    y: unit.into(),
                },
                &lines,
                true,
                None,
                plotters::prelude::SeriesLabelPosition::UpperRight,
            )?;
            files.push(f);
        }
        plots.sweeps.push((group.to_string(), files));
    }
    Ok(plots)
}

fn numeric(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    }
}

/// Swept scenarios grouped by the scenario they came from, in suite order.
fn sweep_groups(scenarios: &[Scenario]) -> Vec<(&str, Vec<&Scenario>)> {
    let mut out: Vec<(&str, Vec<&Scenario>)> = Vec::new();
    for s in scenarios.iter().filter(|s| s.swept.is_some()) {
        match out.iter_mut().find(|(g, _)| *g == s.group) {
            Some((_, v)) => v.push(s),
            None => out.push((s.group.as_str(), vec![s])),
        }
    }
    out
}

/// The strategy marked best in a scenario: lowest mean time to target where the scenario has a
/// target (among strategies that reached it with every seed), else lowest mean time per
/// iteration.
fn best(rows: &[Row], suite: &Suite, scenario: &Scenario) -> Option<String> {
    let seeds = suite.seeds.len();
    let pick = |metric: &str, need_all: bool| {
        suite
            .scenario_strategies(&scenario.spec)
            .into_iter()
            .map(|t| &suite.strategies[t])
            .filter_map(|s| {
                let st = stat(rows, &scenario.label, &s.label, metric)?;
                (!need_all || st.n == seeds).then_some((st.mean, s.label.clone()))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, l)| l)
    };
    if scenario.spec.target.is_some() {
        if let Some(b) = pick("time_to_target_s", true) {
            return Some(b);
        }
    }
    pick("time_per_iteration_s", false)
}

fn markdown(input: &ReportInput<'_>, rows: &[Row], plots: &Plots) -> String {
    let suite = input.suite;
    let mut md = String::new();
    let seeds: Vec<String> = suite.seeds.iter().map(u64::to_string).collect();
    let expected = input.cells.len();
    let _ = writeln!(md, "# Bench report: suite `{}`\n", suite.name);
    if !suite.description.is_empty() {
        let _ = writeln!(md, "{}\n", suite.description.trim());
    }
    let _ = writeln!(md, "- **Code version:** `{}`", input.code_version);
    let _ = writeln!(md, "- **Seeds:** {}", seeds.join(", "));
    let matrix = if suite.full_matrix() {
        format!(
            "{} scenarios × {} strategies × {} seeds",
            input.scenarios.len(),
            suite.strategies.len(),
            suite.seeds.len()
        )
    } else {
        format!(
            "{} scenarios, each with its strategies (of {}), × {} seeds",
            input.scenarios.len(),
            suite.strategies.len(),
            suite.seeds.len()
        )
    };
    let _ = writeln!(
        md,
        "- **Cells:** {matrix} = {expected} runs; {} with results{}",
        rows.len(),
        if rows.len() < expected {
            " (the rest were filtered out, or failed: rerun without `--filter`)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "- **Runtime:** `sim`: every time is virtual seconds, and the same code version and \
         config give the same numbers bit for bit."
    );
    let _ = writeln!(
        md,
        "- **Suite file:** `bench/{}.toml`; per-run numbers in `results.csv`.",
        suite.name
    );
    let _ = writeln!(
        md,
        "- **Columns:** mean over seeds, with (min–max) when seeds differ. ★ marks the best \
         strategy (lowest time to target where the scenario has one, else lowest time per \
         iteration); speed-up is `{}`'s time per iteration over the strategy's (shown where the \
         scenario runs `{0}`).\n",
        suite.baseline
    );
    let strategies: Vec<String> = suite
        .strategies
        .iter()
        .map(|s| {
            let opts = if s.options.is_empty() {
                String::new()
            } else {
                format!(" with `{}`", inline(&s.options))
            };
            format!("`{}` = [{}]{opts}", s.label, s.strategies.join(", "))
        })
        .collect();
    let _ = writeln!(md, "Strategies: {}.\n", strategies.join("; "));

    let claims: Vec<(&Scenario, &Claim)> = input
        .scenarios
        .iter()
        .flat_map(|s| s.spec.all_claims().into_iter().map(move |(_, c)| (s, c)))
        .collect();
    if !claims.is_empty() {
        let checks: Vec<Option<ClaimCheck>> = claims
            .iter()
            .map(|(s, c)| check_claim(rows, &s.label, c))
            .collect();
        let held = checks.iter().flatten().filter(|k| k.holds).count();
        let measured = checks.iter().flatten().count();
        let _ = writeln!(md, "## Claims\n");
        let _ = writeln!(
            md,
            "{held} of {} claims hold ({measured} measured{}).\n",
            claims.len(),
            if measured < claims.len() {
                format!(", {} without data", claims.len() - measured)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            md,
            "| scenario | claim | source | claimed | measured | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for ((s, c), check) in claims.iter().zip(&checks) {
            let (measured, verdict) = describe_check(c, check.as_ref());
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                cell_text(&s.label),
                cell_text(&c.text),
                cell_text(&c.source),
                cell_text(&describe_claim(c)),
                cell_text(&measured),
                verdict
            );
        }
        md.push('\n');
    }

    let trends: Vec<(&str, Vec<&Scenario>, &Trend)> = sweep_groups(input.scenarios)
        .into_iter()
        .flat_map(|(g, members)| {
            let spec = &members[0].spec;
            spec.trends
                .iter()
                .map(move |t| (g, members.clone(), t))
                .collect::<Vec<_>>()
        })
        .collect();
    if !trends.is_empty() {
        let checks: Vec<Option<TrendCheck>> = trends
            .iter()
            .map(|(_, members, t)| check_trend(rows, members, t))
            .collect();
        let held = checks.iter().flatten().filter(|k| k.holds).count();
        let _ = writeln!(md, "## Trends across sweeps\n");
        let _ = writeln!(md, "{held} of {} trend claims hold.\n", trends.len());
        let _ = writeln!(
            md,
            "| sweep | claim | source | claimed | measured | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for ((g, _, t), check) in trends.iter().zip(&checks) {
            let claimed = match t.shape {
                Shape::Linear { min_r2 } => {
                    format!(
                        "`{}` of {} rises linearly (R² ≥ {min_r2})",
                        t.metric, t.strategy
                    )
                }
                Shape::Flat { up_to, within } => format!(
                    "`{}` of {} within {} up to {up_to}",
                    t.metric,
                    t.strategy,
                    pct(within)
                ),
            };
            let (measured, verdict) = match check {
                Some(k) => (k.measured.clone(), if k.holds { "✓" } else { "✗" }),
                None => ("no data".to_string(), "–"),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                cell_text(g),
                cell_text(&t.text),
                cell_text(&t.source),
                cell_text(&claimed),
                cell_text(&measured),
                verdict
            );
        }
        md.push('\n');
    }

    if !plots.overview.is_empty() {
        let _ = writeln!(md, "## Overview\n");
        for f in &plots.overview {
            let _ = writeln!(md, "![{f}](plots/{f})\n");
        }
    }

    let groups = sweep_groups(input.scenarios);
    if !groups.is_empty() {
        let _ = writeln!(md, "## Sweeps\n");
        for (group, members) in &groups {
            let key = members[0].swept.as_ref().map_or("", |(k, _)| k.as_str());
            let _ = writeln!(md, "### `{group}`: time per iteration (ms) vs `{key}`\n");
            let shown: Vec<&StrategySpec> = suite
                .scenario_strategies(&members[0].spec)
                .into_iter()
                .map(|t| &suite.strategies[t])
                .collect();
            let mut header = format!("| {key} |");
            let mut rule = "|---|".to_string();
            for s in &shown {
                let _ = write!(header, " {} |", s.label);
                rule.push_str("---|");
            }
            let _ = writeln!(md, "{header}\n{rule}");
            for m in members {
                let v = m
                    .swept
                    .as_ref()
                    .map_or(String::new(), |(_, v)| show_value(v));
                let mut line = format!("| {v} |");
                for s in &shown {
                    let st = stat(rows, &m.label, &s.label, "time_per_iteration_s");
                    let _ = write!(line, " {} |", show(st, ms));
                }
                let _ = writeln!(md, "{line}");
            }
            md.push('\n');
            if let Some((_, files)) = plots.sweeps.iter().find(|(g, _)| g == group) {
                for f in files {
                    let _ = writeln!(md, "![{f}](plots/{f})\n");
                }
            }
        }
    }

    let _ = writeln!(md, "## Scenarios\n");
    for sc in input.scenarios {
        let _ = writeln!(md, "### {}\n", sc.label);
        if !sc.spec.description.is_empty() {
            let _ = writeln!(md, "{}\n", sc.spec.description.trim());
        }
        let mut setup = Vec::new();
        if let Some(f) = &sc.spec.file {
            setup.push(format!("from `{f}`"));
        }
        if !sc.spec.config.is_empty() {
            setup.push(format!("overrides `{}`", inline(&sc.spec.config)));
        }
        if let Some((k, v)) = &sc.swept {
            setup.push(format!("swept `{k} = {}`", show_value(v)));
        }
        if let Some(t) = &sc.spec.target {
            setup.push(match (t.accuracy, t.loss) {
                (Some(a), _) => format!("target test accuracy ≥ {a}"),
                (_, Some(l)) => format!("target training loss ≤ {l}"),
                _ => String::new(),
            });
        }
        if let Some(cfg) = input
            .cells
            .iter()
            .find(|c| input.scenarios[c.scenario].label == sc.label)
            .map(|c| &c.config)
        {
            setup.push(format!(
                "{} workers, {} servers, {} iterations, batch {}",
                cfg.workers, cfg.servers, cfg.iterations, cfg.batch
            ));
        }
        if !setup.is_empty() {
            let _ = writeln!(md, "Setup: {}.\n", setup.join("; "));
        }
        let best = best(rows, suite, sc);
        let has_target = sc.spec.target.is_some();
        let shown: Vec<&StrategySpec> = suite
            .scenario_strategies(&sc.spec)
            .into_iter()
            .map(|t| &suite.strategies[t])
            .collect();
        // Speed-ups only where the scenario runs the suite's baseline.
        let has_base = shown.iter().any(|s| s.label == suite.baseline);
        let base_tpi = stat(rows, &sc.label, &suite.baseline, "time_per_iteration_s");
        let base_ttt = stat(rows, &sc.label, &suite.baseline, "time_to_target_s");
        let _ = write!(md, "| strategy | time/iter (ms) |");
        if has_base {
            let _ = write!(md, " speed-up vs {} |", suite.baseline);
        }
        if has_target {
            let _ = write!(md, " time to target (s) |");
            if has_base {
                let _ = write!(md, " speed-up to target |");
            }
        }
        let _ = writeln!(
            md,
            " efficiency | wait share | final loss | final accuracy | MB moved | peak worker mem (KiB) |"
        );
        let cols =
            8 + usize::from(has_base) + usize::from(has_target) * (1 + usize::from(has_base));
        let _ = writeln!(md, "|{}", "---|".repeat(cols));
        for s in shown {
            let st = |m: &str| stat(rows, &sc.label, &s.label, m);
            let tpi = st("time_per_iteration_s");
            let mark = if best.as_deref() == Some(s.label.as_str()) {
                format!("**{}** ★", s.label)
            } else {
                s.label.clone()
            };
            let _ = write!(md, "| {mark} | {} |", show(tpi, ms));
            if has_base {
                let speedup = match (base_tpi, tpi) {
                    (Some(b), Some(t)) if t.mean > 0.0 => format!("{:.2}×", b.mean / t.mean),
                    _ => "–".into(),
                };
                let _ = write!(md, " {speedup} |");
            }
            if has_target {
                let ttt = st("time_to_target_s");
                let n = cell_rows(rows, &sc.label, &s.label).len();
                let reached = ttt.map_or(0, |t| t.n);
                let shown = if reached < n {
                    format!("{} [{reached}/{n} seeds reached]", show(ttt, plain))
                } else {
                    show(ttt, plain)
                };
                let _ = write!(md, " {shown} |");
                if has_base {
                    let sp = match (base_ttt, ttt) {
                        (Some(b), Some(t)) if t.mean > 0.0 => format!("{:.2}×", b.mean / t.mean),
                        _ => "–".into(),
                    };
                    let _ = write!(md, " {sp} |");
                }
            }
            let _ = writeln!(
                md,
                " {} | {} | {} | {} | {} | {} |",
                show(st("efficiency"), plain),
                show(st("wait_share"), pct),
                show(st("final_loss"), plain),
                show(st("final_accuracy"), plain),
                show(st("bytes_sent"), mb),
                show(st("peak_worker_memory_bytes"), kib),
            );
        }
        md.push('\n');
        for (_, c) in sc.spec.all_claims() {
            let check = check_claim(rows, &sc.label, c);
            let (measured, verdict) = describe_check(c, check.as_ref());
            let source = if c.source.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.source)
            };
            let _ = writeln!(
                md,
                "**Claim{source}:** {} — checked as {}. **Measured:** {measured} {verdict}\n",
                c.text,
                describe_claim(c)
            );
        }
        if let Some((_, loss, acc)) = plots.curves.iter().find(|(l, _, _)| *l == sc.label) {
            let _ = writeln!(md, "![loss](plots/{loss})");
            if let Some(a) = acc {
                let _ = writeln!(md, "![accuracy](plots/{a})");
            }
            md.push('\n');
        }
    }
    md
}

/// Text fit for a Markdown table cell (no `|`, no line breaks).
fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A table as one line of inline TOML (`a = 1, b.c = 2`).
fn inline(t: &toml::Table) -> String {
    let mut parts = Vec::new();
    flatten("", t, &mut parts);
    parts.join(", ")
}

fn flatten(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => flatten(&key, inner, out),
            other => out.push(format!("{key} = {other}")),
        }
    }
}
