//! Run metrics: per-iteration records, the run summary with the ideal bound, and the files a run
//! folder holds (`metrics.jsonl`, `summary.json`, Chrome-trace timelines).

use crate::error::{EngineError, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One worker's account of one clock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IterRecord {
    /// The clock.
    pub clock: u64,
    /// Run time the clock started (before reading parameters).
    pub start_s: f64,
    /// Run time the clock ended (gradients sent).
    pub end_s: f64,
    /// Wall-clock seconds since the run started when the clock ended (not deterministic).
    pub wall_s: f64,
    /// Samples processed.
    pub samples: u64,
    /// Seconds computing.
    pub compute_s: f64,
    /// Seconds waiting for fresh-enough parameters (consistency wait).
    pub wait_s: f64,
    /// Seconds moving parameters (transfer part of the read).
    pub comm_s: f64,
    /// Mean training loss of the batch (NaN in throughput mode).
    pub loss: f64,
    /// Lowest parameter version read this clock.
    pub version_read: i64,
    /// Bytes this worker sent this clock.
    pub bytes_sent: u64,
}

/// One row of `metrics.jsonl`: the job's state after an iteration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IterationRow {
    /// Iterations completed (1-based).
    pub iteration: u64,
    /// Run time at which the last worker finished this clock (virtual in `sim`).
    pub time_s: f64,
    /// Wall-clock seconds since the start at which the last worker finished this clock.
    pub wall_s: f64,
    /// Sample-weighted mean training loss.
    pub loss: f64,
    /// Samples processed in this clock over all workers.
    pub samples: u64,
    /// Per-worker compute seconds.
    pub compute_s: Vec<f64>,
    /// Per-worker consistency wait seconds.
    pub wait_s: Vec<f64>,
    /// Per-worker communication seconds.
    pub comm_s: Vec<f64>,
    /// Bytes sent by workers in this clock.
    pub bytes_sent: u64,
    /// Test accuracy of the parameters after this iteration, where evaluated (classifiers only;
    /// regression models such as MF have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// Test loss, where evaluated (cross-entropy; MF: the test MSE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_loss: Option<f64>,
}

/// One row of `evaluations.jsonl`: the model evaluated at a fixed run time (`eval_every_s`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimedEvaluation {
    /// Run time (virtual in `sim`) the model is taken at: k · `eval_every_s`.
    pub time_s: f64,
    /// Iterations every worker had completed by then.
    pub iterations: u64,
    /// Test accuracy (classifiers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// Test loss (cross-entropy; MF: the test MSE).
    pub test_loss: f64,
}

/// Merges the workers' records into per-iteration rows (clocks every worker completed).
pub fn merge_iterations(per_worker: &[Vec<IterRecord>]) -> Vec<IterationRow> {
    let clocks = per_worker.iter().map(|r| r.len()).min().unwrap_or(0);
    (0..clocks)
        .map(|c| {
            let recs: Vec<&IterRecord> = per_worker.iter().map(|r| &r[c]).collect();
            let samples: u64 = recs.iter().map(|r| r.samples).sum();
            let loss = if samples == 0 {
                f64::NAN
            } else {
                recs.iter().map(|r| r.loss * r.samples as f64).sum::<f64>() / samples as f64
            };
            IterationRow {
                iteration: c as u64 + 1,
                time_s: recs.iter().map(|r| r.end_s).fold(0.0, f64::max),
                wall_s: recs.iter().map(|r| r.wall_s).fold(0.0, f64::max),
                loss,
                samples,
                compute_s: recs.iter().map(|r| r.compute_s).collect(),
                wait_s: recs.iter().map(|r| r.wait_s).collect(),
                comm_s: recs.iter().map(|r| r.comm_s).collect(),
                bytes_sent: recs.iter().map(|r| r.bytes_sent).sum(),
                test_accuracy: None,
                test_loss: None,
            }
        })
        .collect()
}

/// The ideal time of a run: all the work the workers did, spread perfectly over the cluster's
/// capacity with no communication and no waiting.
///
/// Each worker's capacity is its measured speed while computing (FLOPs per second of compute,
/// slowdowns included); ideal = total FLOPs / sum of capacities.
pub fn ideal_time(workers: &[(f64, f64)]) -> f64 {
    let total: f64 = workers.iter().map(|(flops, _)| flops).sum();
    let capacity: f64 = workers
        .iter()
        .filter(|(_, secs)| *secs > 0.0)
        .map(|(flops, secs)| flops / secs)
        .sum();
    if capacity > 0.0 {
        total / capacity
    } else {
        0.0
    }
}

/// The run's summary (`summary.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// `sim` or `wall`.
    pub runtime: String,
    /// Strategies composed, in config order.
    pub strategies: Vec<String>,
    /// The strategy filling each slot.
    pub slots: BTreeMap<String, String>,
    /// Workers.
    pub workers: u32,
    /// Servers.
    pub servers: u32,
    /// Iterations completed.
    pub iterations: u64,
    /// Run time (virtual in `sim`) at the end of the last iteration.
    pub run_time_s: f64,
    /// Wall-clock seconds the run took.
    pub wall_time_s: f64,
    /// Mean run time per iteration.
    pub time_per_iteration_s: f64,
    /// Samples per second of run time.
    pub throughput_samples_per_s: f64,
    /// Ideal time for the same work (see [`ideal_time`]).
    pub ideal_time_s: f64,
    /// ideal / achieved.
    pub efficiency: f64,
    /// Fraction of worker time spent waiting for parameters.
    pub wait_share: f64,
    /// Training loss of the last iteration.
    pub final_loss: f64,
    /// Test accuracy at the end (classifiers; `None` for regression models such as MF).
    pub final_test_accuracy: Option<f64>,
    /// Test loss at the end (real models: cross-entropy; MF: the test MSE).
    pub final_test_loss: Option<f64>,
    /// Bytes sent over the transport, all roles.
    pub bytes_sent: u64,
    /// Messages sent over the transport, all roles.
    pub messages_sent: u64,
    /// Bytes each role sent.
    pub bytes_sent_by_role: BTreeMap<String, u64>,
    /// Peak memory per role, bytes.
    pub peak_memory: BTreeMap<String, u64>,
    /// Strategy-specific figures.
    pub figures: BTreeMap<String, f64>,
}

/// One span on a role's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceEvent {
    /// What happened.
    pub name: String,
    /// Kind (compute, wait, comm, serve).
    pub category: String,
    /// Start, run seconds.
    pub start_s: f64,
    /// End, run seconds.
    pub end_s: f64,
}

/// Writes a Chrome trace (open in Perfetto or chrome://tracing) of one role's timeline.
pub fn write_chrome_trace(path: &Path, role: &str, events: &[TraceEvent]) -> Result<()> {
    let events: Vec<serde_json::Value> = events
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": e.name, "cat": e.category, "ph": "X", "pid": 1, "tid": role,
                "ts": e.start_s * 1e6, "dur": (e.end_s - e.start_s).max(0.0) * 1e6,
            })
        })
        .collect();
    let doc = serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" });
    write_atomic(
        path,
        serde_json::to_string(&doc).unwrap_or_default().as_bytes(),
    )
}

/// Writes `rows` as JSON lines.
pub fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut out = String::new();
    for r in rows {
        out.push_str(&serde_json::to_string(r).unwrap_or_default());
        out.push('\n');
    }
    write_atomic(path, out.as_bytes())
}

/// Writes a file atomically: a temporary sibling, then a rename, so a crash never leaves a torn file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| EngineError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ideal_time_on_a_hand_checked_case() {
        // Two workers doing 1 GFLOP each; one computes at 1 GFLOP/s, the other at 0.5 GFLOP/s.
        // Together they offer 1.5 GFLOP/s for 2 GFLOP of work: 4/3 s.
        let t = ideal_time(&[(1e9, 1.0), (1e9, 2.0)]);
        assert!((t - 4.0 / 3.0).abs() < 1e-12, "{t}");
        assert_eq!(ideal_time(&[]), 0.0);
    }

    #[test]
    fn merge_takes_the_last_worker_and_weights_the_loss() {
        let rec = |end, samples, loss| IterRecord {
            clock: 0,
            start_s: 0.0,
            end_s: end,
            wall_s: end,
            samples,
            compute_s: 1.0,
            wait_s: 0.0,
            comm_s: 0.0,
            loss,
            version_read: -1,
            bytes_sent: 10,
        };
        let rows = merge_iterations(&[vec![rec(1.0, 1, 1.0)], vec![rec(3.0, 3, 2.0)]]);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].time_s, 3.0);
        assert!((rows[0].loss - 1.75).abs() < 1e-12);
        assert_eq!(rows[0].bytes_sent, 20);
    }
}
