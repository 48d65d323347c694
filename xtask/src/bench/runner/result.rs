//! What a cell's run produced, kept for the report and the cache: its deterministic metrics,
//! its training curve and its time-indexed evaluations (no wall-clock figures).

use concord_engine::run::RunResult;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A finite number, or `None` (JSON has no NaN).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// What a cell's run measured: the summary's deterministic figures (no wall time).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Iterations completed.
    pub iterations: u64,
    /// Virtual run time, seconds.
    pub run_time_s: f64,
    /// Mean virtual time per iteration, seconds.
    pub time_per_iteration_s: f64,
    /// Samples per virtual second.
    pub throughput_samples_per_s: f64,
    /// Ideal time for the same work, seconds.
    pub ideal_time_s: f64,
    /// Ideal / achieved time.
    pub efficiency: f64,
    /// Share of worker time spent waiting for parameters.
    pub wait_share: f64,
    /// Training loss of the last iteration (`None` if not finite, e.g. throughput mode).
    pub final_loss: Option<f64>,
    /// Test accuracy at the end, where evaluated.
    pub final_accuracy: Option<f64>,
    /// Test loss at the end, where evaluated.
    pub final_test_loss: Option<f64>,
    /// Test AUC at the end (click-through models).
    #[serde(default)]
    pub final_auc: Option<f64>,
    /// Bytes sent over the transport, all roles.
    pub bytes_sent: u64,
    /// Messages sent over the transport, all roles.
    pub messages_sent: u64,
    /// Largest peak memory of any worker, bytes.
    pub peak_worker_memory_bytes: u64,
    /// Largest peak memory of any server, bytes.
    pub peak_server_memory_bytes: u64,
    /// Strategy-specific figures.
    pub figures: BTreeMap<String, f64>,
}

/// One point of a cell's training curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Iterations completed.
    pub iteration: u64,
    /// Virtual time at the end of the iteration, seconds.
    pub time_s: f64,
    /// Training loss (`None` if not finite).
    pub loss: Option<f64>,
    /// Test accuracy, where evaluated.
    pub test_accuracy: Option<f64>,
    /// Test loss, where evaluated (the objective of convergence targets).
    #[serde(default)]
    pub test_loss: Option<f64>,
}

/// The model evaluated at a fixed run time (scenarios with `eval_every_s`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    /// Virtual run time of the evaluation, seconds.
    pub time_s: f64,
    /// Iterations every worker had completed by then.
    pub iteration: u64,
    /// Test loss (`None` if not finite).
    pub test_loss: Option<f64>,
    /// Test accuracy (classifiers only).
    pub test_accuracy: Option<f64>,
}

/// A cell's result: its metrics and its curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// The metrics.
    pub metrics: Metrics,
    /// Per-iteration loss and accuracy against virtual time.
    pub curve: Vec<CurvePoint>,
    /// The model evaluated at fixed run times (empty without `eval_every_s`).
    #[serde(default)]
    pub evals: Vec<EvalPoint>,
}

impl CellResult {
    /// A market cell's result: the scheme's means as `market.*` figures, its mean runtime as
    /// the run time; no iterations, no curve.
    pub fn from_market(s: &concord_elastic_ps::proteus::SchemeSummary) -> CellResult {
        let figures: BTreeMap<String, f64> = [
            ("cost_relative", s.cost_relative),
            ("runtime_h", s.runtime_h),
            ("free_share", s.free_share),
            ("evictions", s.evictions),
            ("on_demand_h", s.on_demand_h),
            ("spot_h", s.spot_h),
            ("free_h", s.free_h),
        ]
        .into_iter()
        .map(|(k, v)| (format!("market.{k}"), v))
        .collect();
        CellResult {
            metrics: Metrics {
                iterations: 0,
                run_time_s: s.runtime_h * 3600.0,
                time_per_iteration_s: 0.0,
                throughput_samples_per_s: 0.0,
                ideal_time_s: 0.0,
                efficiency: 0.0,
                wait_share: 0.0,
                final_loss: None,
                final_accuracy: None,
                final_test_loss: None,
                final_auc: None,
                bytes_sent: 0,
                messages_sent: 0,
                peak_worker_memory_bytes: 0,
                peak_server_memory_bytes: 0,
                figures,
            },
            curve: Vec::new(),
            evals: Vec::new(),
        }
    }

    /// Extracts the deterministic parts of a run's result.
    pub fn from_run(result: &RunResult) -> CellResult {
        let s = &result.summary;
        let peak = |prefix: &str| {
            s.peak_memory
                .iter()
                .filter(|(role, _)| role.starts_with(prefix))
                .map(|(_, b)| *b)
                .max()
                .unwrap_or(0)
        };
        CellResult {
            metrics: Metrics {
                iterations: s.iterations,
                run_time_s: s.run_time_s,
                time_per_iteration_s: s.time_per_iteration_s,
                throughput_samples_per_s: s.throughput_samples_per_s,
                ideal_time_s: s.ideal_time_s,
                efficiency: s.efficiency,
                wait_share: s.wait_share,
                final_loss: finite(s.final_loss),
                final_accuracy: s.final_test_accuracy.and_then(finite),
                final_test_loss: s.final_test_loss.and_then(finite),
                final_auc: s.final_test_auc.and_then(finite),
                bytes_sent: s.bytes_sent,
                messages_sent: s.messages_sent,
                peak_worker_memory_bytes: peak("worker"),
                peak_server_memory_bytes: peak("server"),
                figures: s.figures.clone(),
            },
            curve: result
                .rows
                .iter()
                .map(|r| CurvePoint {
                    iteration: r.iteration,
                    time_s: r.time_s,
                    loss: finite(r.loss),
                    test_accuracy: r.test_accuracy.and_then(finite),
                    test_loss: r.test_loss.and_then(finite),
                })
                .collect(),
            evals: result
                .evaluations
                .iter()
                .map(|e| EvalPoint {
                    time_s: e.time_s,
                    iteration: e.iterations,
                    test_loss: finite(e.test_loss),
                    test_accuracy: e.test_accuracy.and_then(finite),
                })
                .collect(),
        }
    }
}
