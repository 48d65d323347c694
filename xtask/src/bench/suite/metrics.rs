//! The metrics a claim or trend can name: the columns of `results.csv`, and strategy figures.
//!
//! Part of the suite-file vocabulary (a claim's `metric`), so suite validation can reject an
//! unknown name before any cell runs; the report reads the same names back from its rows.

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
    (
        "per_iteration_delay_s",
        "steady time per iteration less the same strategy's in the scenario's `calm` twin (Fela's PID)",
    ),
    ("run_time_s", "virtual seconds of the whole run"),
    ("final_loss", "training loss of the last iteration"),
    ("final_accuracy", "test accuracy at the end"),
    ("final_auc", "test AUC at the end (click-through models)"),
    ("efficiency", "ideal time / achieved time"),
    ("wait_share", "share of worker time waiting for parameters"),
    ("bytes_sent", "bytes moved over the transport"),
    (
        "bytes_per_sample",
        "bytes moved over the transport per training sample (PipeDream's Fig. 5.17 measure)",
    ),
    (
        "samples_to_target",
        "training samples until the scenario's target (epochs × data-set size; comparable across strategies whose iterations hold different batches)",
    ),
    ("throughput_samples_per_s", "samples per virtual second"),
    (
        "peak_worker_memory_bytes",
        "largest peak memory of a worker",
    ),
    (
        "cost_relative",
        "market scenarios: mean job cost over all on-demand's",
    ),
    ("runtime_h", "market scenarios: mean job runtime, hours"),
    (
        "free_share",
        "market scenarios: share of instance-hours refunded by evictions (free computing)",
    ),
    ("evictions", "market scenarios: mean evictions per job"),
];

/// The metrics of a market scenario, each also a strategy figure `market.<name>` of its rows.
pub const MARKET_METRICS: &[&str] = &[
    "cost_relative",
    "runtime_h",
    "free_share",
    "evictions",
    "on_demand_h",
    "spot_h",
    "free_h",
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
