//! Run metrics: per-iteration records, the run summary with the ideal bound, and the files a run
//! folder holds (`metrics.jsonl`, `summary.json`, Chrome-trace timelines).

use crate::error::{EngineError, Result};
use crate::guard::StopReason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One worker's account of one clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationRow {
    /// Iterations completed (1-based).
    pub iteration: u64,
    /// Run time at which the last worker finished this clock (virtual in `sim`).
    pub time_s: f64,
    /// Wall-clock seconds since the start at which the last worker finished this clock.
    pub wall_s: f64,
    /// Sample-weighted mean training loss.
    pub loss: f64,
    /// Samples processed in this clock over the workers that took part.
    pub samples: u64,
    /// Per-worker compute seconds.
    pub compute_s: Vec<f64>,
    /// Per-worker consistency wait seconds.
    pub wait_s: Vec<f64>,
    /// Per-worker communication seconds.
    pub comm_s: Vec<f64>,
    /// Bytes sent by workers in this clock.
    pub bytes_sent: u64,
    /// The workers the per-worker vectors are of, in order, when some worker did not take part
    /// in this clock (joined later or left earlier); absent when every worker did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Test accuracy of the parameters after this iteration, where evaluated (classifiers only;
    /// regression models such as MF have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// Test loss, where evaluated (cross-entropy; MF: the test MSE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_loss: Option<f64>,
    /// Test AUC (area under the ROC curve), where evaluated: DLRM click-through models only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_auc: Option<f64>,
}

/// One row of `evaluations.jsonl`: the model evaluated at a fixed run time (`eval_every_s`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

/// Merges the workers' records into per-iteration rows, matching records by their `clock`; every
/// worker stays to the end of the job (see [`merge_iterations_with`] for workers that leave).
pub fn merge_iterations(per_worker: &[Vec<IterRecord>]) -> Vec<IterationRow> {
    merge_iterations_with(per_worker, &[])
}

/// Merges the workers' records into per-iteration rows, matching records by their `clock`.
///
/// Which clocks get a row — the clocks the job completed:
/// - a worker takes part from its first recorded clock (it may join after others) to its last;
///   a worker with no records takes no part;
/// - after its last recorded clock a worker is still expected, unless `left[w]` says worker `w`
///   left the job then (missing entries: it did not): a worker that stops recording without
///   leaving holds the job's later clocks back, as the slowest worker does;
/// - rows run over consecutive clocks from the first clock any worker recorded, and stop at the
///   first clock that some expected worker did not record, or that no worker is expected at.
///
/// When every worker records the same clocks `0, 1, …` this is one row per clock up to the
/// smallest count. A row merges the workers that recorded its clock; its per-worker vectors hold
/// those workers' values in worker order, and its `workers` field names them when some worker is
/// absent. A worker's second record of a clock is ignored.
pub fn merge_iterations_with(per_worker: &[Vec<IterRecord>], left: &[bool]) -> Vec<IterationRow> {
    let by_clock = records_by_clock(per_worker);
    let firsts = by_clock.iter().filter_map(|m| m.keys().next().copied());
    let lasts = by_clock
        .iter()
        .filter_map(|m| m.keys().next_back().copied());
    let (Some(first), Some(last)) = (firsts.min(), lasts.max()) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for clock in first..=last {
        let mut present: Vec<(u32, &IterRecord)> = Vec::new();
        let mut complete = true;
        for (w, m) in by_clock.iter().enumerate() {
            let (Some(&joined), Some(&until)) = (m.keys().next(), m.keys().next_back()) else {
                continue;
            };
            let gone = clock > until && left.get(w).copied().unwrap_or(false);
            if clock < joined || gone {
                continue;
            }
            match m.get(&clock) {
                Some(r) => present.push((w as u32, r)),
                None => {
                    complete = false;
                    break;
                }
            }
        }
        if !complete || present.is_empty() {
            break;
        }
        let all = present.len() == per_worker.len();
        rows.push(merge_clock(rows.len() as u64 + 1, &present, all));
    }
    rows
}

/// Merges the records of a job whose workers come and go ([`crate::membership`]): a clock's
/// row merges whichever workers recorded it — who works on a clock is the strategy's decision,
/// not a fixed set — and rows run over consecutive clocks from the first recorded one to the
/// first clock that no worker recorded.
pub fn merge_iterations_elastic(per_worker: &[Vec<IterRecord>]) -> Vec<IterationRow> {
    let by_clock = records_by_clock(per_worker);
    let Some(first) = by_clock
        .iter()
        .filter_map(|m| m.keys().next().copied())
        .min()
    else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for clock in first.. {
        let present: Vec<(u32, &IterRecord)> = by_clock
            .iter()
            .enumerate()
            .filter_map(|(w, m)| m.get(&clock).map(|r| (w as u32, *r)))
            .collect();
        if present.is_empty() {
            break;
        }
        let all = present.len() == per_worker.len();
        rows.push(merge_clock(rows.len() as u64 + 1, &present, all));
    }
    rows
}

/// Each worker's records by clock; a worker's second record of a clock is ignored.
fn records_by_clock(per_worker: &[Vec<IterRecord>]) -> Vec<BTreeMap<u64, &IterRecord>> {
    per_worker
        .iter()
        .map(|records| {
            let mut m = BTreeMap::new();
            for r in records {
                m.entry(r.clock).or_insert(r);
            }
            m
        })
        .collect()
}

/// The row of one clock from the records of the workers present (in worker order); `all`: every
/// worker is present.
fn merge_clock(iteration: u64, present: &[(u32, &IterRecord)], all: bool) -> IterationRow {
    let recs: Vec<&IterRecord> = present.iter().map(|(_, r)| *r).collect();
    let samples: u64 = recs.iter().map(|r| r.samples).sum();
    let loss = if samples == 0 {
        f64::NAN
    } else {
        // Records without samples carry no loss of their own (a pipeline's inner stages).
        recs.iter()
            .filter(|r| r.samples > 0)
            .map(|r| r.loss * r.samples as f64)
            .sum::<f64>()
            / samples as f64
    };
    IterationRow {
        iteration,
        time_s: recs.iter().map(|r| r.end_s).fold(0.0, f64::max),
        wall_s: recs.iter().map(|r| r.wall_s).fold(0.0, f64::max),
        loss,
        samples,
        compute_s: recs.iter().map(|r| r.compute_s).collect(),
        wait_s: recs.iter().map(|r| r.wait_s).collect(),
        comm_s: recs.iter().map(|r| r.comm_s).collect(),
        bytes_sent: recs.iter().map(|r| r.bytes_sent).sum(),
        workers: (!all).then(|| present.iter().map(|(w, _)| *w).collect()),
        test_accuracy: None,
        test_loss: None,
        test_auc: None,
    }
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
    /// Test AUC at the end (DLRM click-through models only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_test_auc: Option<f64>,
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
    /// Why the run stopped before completing; absent when it completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopReason>,
}

impl Summary {
    /// The fields only the roles' final reports give (the work they did, their traffic and
    /// memory): a run the divergence guard stopped ended its roles mid-run, so it does not know
    /// them, and `summary.json` holds `null` for them rather than zero.
    pub const UNKNOWN_WHEN_STOPPED: [&'static str; 6] = [
        "ideal_time_s",
        "efficiency",
        "bytes_sent",
        "messages_sent",
        "bytes_sent_by_role",
        "peak_memory",
    ];

    /// The summary as `summary.json` holds it: pretty JSON, with a stopped run's
    /// [`Summary::UNKNOWN_WHEN_STOPPED`] fields `null`.
    pub fn to_json(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let (Some(_), Some(fields)) = (&self.stopped, value.as_object_mut()) {
            for key in Self::UNKNOWN_WHEN_STOPPED {
                fields.insert(key.into(), serde_json::Value::Null);
            }
        }
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }
}

/// One span on a role's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    crate::trace::write_chrome_trace(path, role, events)
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

/// The coefficient of determination of a least-squares line of `y` on `x` (R², the square of
/// their correlation): how linearly a prediction tracks what was measured, as the PipeDream
/// thesis reports its planner's (Fig. 5.15). `NaN` when either side has no spread or the two
/// differ in length or are empty.
pub fn r_squared(x: &[f64], y: &[f64]) -> f64 {
    if x.len() != y.len() || x.is_empty() {
        return f64::NAN;
    }
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let syy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    sxy * sxy / (sxx * syy)
}

/// Mean seconds per iteration between iterations `from` and `to` of a run, given every
/// iteration's end time in order (`ends[i]`: when iteration `i + 1` was done); `None` when the
/// window holds no time.
///
/// A strategy may close several iterations at one instant (a replicated PipeDream input stage
/// applies a round of minibatches at its average; they all end then), and such a group's first
/// iterations were not done before its time: the window's ends therefore stand for the whole
/// group they fall in, counted to its last iteration. Taken at a fixed index instead, a window
/// starting inside a group of ten counts up to nine iterations it does not time (AlexNet with
/// ten input replicas read 15 % fast).
pub fn seconds_per_iteration(ends: &[f64], from: usize, to: usize) -> Option<f64> {
    let group_end = |i: usize| {
        let t = *ends.get(i)?;
        Some(i + ends[i..].iter().take_while(|&&x| x == t).count() - 1)
    };
    let (a, b) = (group_end(from)?, group_end(to)?);
    (b > a).then(|| (ends[b] - ends[a]) / (b - a) as f64)
}

/// The index of the last iteration a run's steady state may count: the run's last, unless its
/// iterations close in groups (GPipe's flushes, a replicated input stage's rounds) and the last
/// group is shorter than the one before it. Such a group is the run's remainder (a flush of the
/// minibatches left when the run stopped), which a pipeline runs at another pace than its whole
/// rounds: a final flush of 4 after rounds of 39 fills the pipeline for 4 minibatches only.
/// `None` for a run with no iterations.
pub fn last_whole_group(ends: &[f64]) -> Option<usize> {
    let last = ends.len().checked_sub(1)?;
    let group_len = |end: usize| {
        ends[..=end]
            .iter()
            .rev()
            .take_while(|&&t| t == ends[end])
            .count()
    };
    let tail = group_len(last);
    match last.checked_sub(tail) {
        Some(before) if group_len(before) > tail => Some(before),
        _ => Some(last),
    }
}

/// Mean seconds per iteration of a run's steady state: after the first fifth of its iterations
/// (the warm-up) and before its last `drain` ones (a pipeline's minibatches still in flight when
/// the input stops, which finish with nothing behind them), read as
/// [`seconds_per_iteration`] reads a window; `None` when nothing lies between.
pub fn steady_seconds_per_iteration(ends: &[f64], drain: usize) -> Option<f64> {
    let from = (ends.len() / 5).max(1) - 1;
    let to = ends.len().checked_sub(drain + 1)?;
    seconds_per_iteration(ends, from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_last_group_shorter_than_the_one_before_is_the_runs_remainder() {
        // Flushes of 3 iterations, then a remainder of 1: the last whole flush ends at index 5.
        let flushes = [3.0, 3.0, 3.0, 6.0, 6.0, 6.0, 7.0];
        assert_eq!(last_whole_group(&flushes), Some(5));
        // A last group as long as the one before, or longer, is whole.
        assert_eq!(last_whole_group(&[3.0, 3.0, 6.0, 6.0]), Some(3));
        assert_eq!(last_whole_group(&[2.0, 2.0, 6.0, 6.0, 6.0, 6.0]), Some(5));
        // Iterations one at a time: the last.
        assert_eq!(last_whole_group(&[1.0, 2.0, 3.0]), Some(2));
        // One group, or none.
        assert_eq!(last_whole_group(&[4.0, 4.0]), Some(1));
        assert_eq!(last_whole_group(&[]), None);
    }

    #[test]
    fn the_steady_state_leaves_out_the_warm_up_and_the_drain() {
        // 4 warm-up iterations of 5 s, 12 of 1 s in rounds of 4 closed at once, then a drain of
        // 4 iterations of 0.25 s: only the rounds are timed.
        let mut ends: Vec<f64> = (1..=4).map(|i| f64::from(i) * 5.0).collect();
        ends.extend((0..12).map(|i| 20.0 + f64::from(i / 4 + 1) * 4.0));
        ends.extend((1..=4).map(|i| 32.0 + f64::from(i) * 0.25));
        assert_eq!(steady_seconds_per_iteration(&ends, 4), Some(1.0));
        // Without the drain left out, it reads faster.
        assert!(steady_seconds_per_iteration(&ends, 0).unwrap() < 1.0);
        // A drain as long as the run leaves nothing.
        assert_eq!(steady_seconds_per_iteration(&ends, ends.len()), None);
    }

    #[test]
    fn seconds_per_iteration_counts_a_group_closed_at_once_whole() {
        // One iteration a second: any window reads 1.
        let even: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(seconds_per_iteration(&even, 2, 9), Some(1.0));
        // Rounds of 4 iterations, each round closed at once every 4 s: a window starting or
        // ending inside a round counts the round to its end, so it still reads 1 s.
        let rounds: Vec<f64> = (0..12).map(|i| f64::from(i / 4 + 1) * 4.0).collect();
        assert_eq!(seconds_per_iteration(&rounds, 1, 11), Some(1.0));
        assert_eq!(seconds_per_iteration(&rounds, 2, 8), Some(1.0));
        // Taken at the indices, the first window would read (12 − 4) / 10 = 0.8.
        // A window inside one group, or past the end, has no time.
        assert_eq!(seconds_per_iteration(&rounds, 4, 6), None);
        assert_eq!(seconds_per_iteration(&rounds, 1, 12), None);
        assert_eq!(seconds_per_iteration(&even, 5, 5), None);
        assert_eq!(seconds_per_iteration(&[], 0, 0), None);
    }

    #[test]
    fn r_squared_is_one_on_a_line_and_falls_with_scatter() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((r_squared(&x, &[3.0, 5.0, 7.0, 9.0]) - 1.0).abs() < 1e-12);
        assert!((r_squared(&x, &[9.0, 7.0, 5.0, 3.0]) - 1.0).abs() < 1e-12);
        // y = x + (1, -1, -1, 1): sxy 5, sxx 5, syy 9, R² = 25 / 45.
        let r2 = r_squared(&x, &[2.0, 1.0, 2.0, 5.0]);
        assert!((r2 - 5.0 / 9.0).abs() < 1e-12, "{r2}");
        assert!(r_squared(&x, &[1.0; 4]).is_nan());
        assert!(r_squared(&x, &[1.0]).is_nan());
        assert!(r_squared(&[], &[]).is_nan());
    }

    #[test]
    fn ideal_time_on_a_hand_checked_case() {
        // Two workers doing 1 GFLOP each; one computes at 1 GFLOP/s, the other at 0.5 GFLOP/s.
        // Together they offer 1.5 GFLOP/s for 2 GFLOP of work: 4/3 s.
        let t = ideal_time(&[(1e9, 1.0), (1e9, 2.0)]);
        assert!((t - 4.0 / 3.0).abs() < 1e-12, "{t}");
        assert_eq!(ideal_time(&[]), 0.0);
    }

    fn rec(clock: u64, end: f64, samples: u64, loss: f64) -> IterRecord {
        IterRecord {
            clock,
            start_s: end - 1.0,
            end_s: end,
            wall_s: end,
            samples,
            compute_s: clock as f64 + 0.5,
            wait_s: end / 10.0,
            comm_s: 0.0,
            loss,
            version_read: clock as i64 - 1,
            bytes_sent: 10,
        }
    }

    #[test]
    fn merge_takes_the_last_worker_and_weights_the_loss() {
        let rows = merge_iterations(&[vec![rec(0, 1.0, 1, 1.0)], vec![rec(0, 3.0, 3, 2.0)]]);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].time_s, 3.0);
        assert!((rows[0].loss - 1.75).abs() < 1e-12);
        assert_eq!(rows[0].bytes_sent, 20);
        assert_eq!(rows[0].workers, None, "every worker took part");
    }

    /// Today's rule, by position: row c merges every worker's c-th record, up to the shortest.
    fn by_position(per_worker: &[Vec<IterRecord>]) -> Vec<(u64, f64, Vec<f64>, Vec<f64>)> {
        let n = per_worker.iter().map(Vec::len).min().unwrap_or(0);
        (0..n)
            .map(|c| {
                let recs: Vec<&IterRecord> = per_worker.iter().map(|r| &r[c]).collect();
                (
                    c as u64 + 1,
                    recs.iter().map(|r| r.end_s).fold(0.0, f64::max),
                    recs.iter().map(|r| r.compute_s).collect(),
                    recs.iter().map(|r| r.wait_s).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn the_same_clocks_everywhere_give_one_row_per_clock_up_to_the_shortest() {
        let worker = |n: u64, speed: f64| -> Vec<IterRecord> {
            (0..n)
                .map(|c| rec(c, (c + 1) as f64 * speed, 2, c as f64))
                .collect()
        };
        let per_worker = vec![worker(5, 1.0), worker(4, 3.0), worker(6, 2.0)];
        let rows = merge_iterations(&per_worker);
        let got: Vec<_> = rows
            .iter()
            .map(|r| (r.iteration, r.time_s, r.compute_s.clone(), r.wait_s.clone()))
            .collect();
        assert_eq!(got, by_position(&per_worker));
        assert!(rows.iter().all(|r| r.workers.is_none()));
    }

    #[test]
    fn records_are_matched_by_clock_not_by_position() {
        let mut late = vec![rec(1, 4.0, 1, 1.0), rec(0, 2.0, 1, 1.0)];
        late.push(rec(1, 9.0, 1, 1.0)); // a second record of clock 1 is ignored
        let rows = merge_iterations(&[vec![rec(0, 1.0, 1, 1.0), rec(1, 3.0, 1, 1.0)], late]);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].time_s, rows[1].time_s), (2.0, 4.0));
    }

    #[test]
    fn a_worker_that_joins_later_is_not_expected_before_its_first_clock() {
        let founder: Vec<IterRecord> = (0..4).map(|c| rec(c, c as f64 + 1.0, 1, 1.0)).collect();
        let joiner: Vec<IterRecord> = (2..4).map(|c| rec(c, c as f64 + 1.5, 3, 2.0)).collect();
        let rows = merge_iterations(&[founder, joiner]);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1].workers, Some(vec![0]));
        assert_eq!(rows[1].compute_s, vec![1.5]);
        assert_eq!(rows[1].samples, 1);
        assert_eq!(rows[2].workers, None);
        assert_eq!(rows[2].compute_s, vec![2.5, 2.5]);
        assert_eq!(rows[2].time_s, 3.5);
        assert!((rows[2].loss - 1.75).abs() < 1e-12);
        let iterations: Vec<u64> = rows.iter().map(|r| r.iteration).collect();
        assert_eq!(iterations, vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_worker_that_stops_holds_the_job_back_unless_it_left() {
        let stays: Vec<IterRecord> = (0..5).map(|c| rec(c, c as f64 + 1.0, 1, 1.0)).collect();
        let stops: Vec<IterRecord> = (0..2).map(|c| rec(c, c as f64 + 1.0, 1, 1.0)).collect();
        let both = [stays, stops];
        assert_eq!(merge_iterations(&both).len(), 2);
        let rows = merge_iterations_with(&both, &[false, true]);
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[1].workers, None);
        assert_eq!(rows[2].workers, Some(vec![0]));
        assert_eq!(rows[4].wait_s, vec![0.5]);
    }

    #[test]
    fn a_clock_an_expected_worker_missed_ends_the_rows() {
        let gap = vec![rec(0, 1.0, 1, 1.0), rec(2, 3.0, 1, 1.0)];
        let full: Vec<IterRecord> = (0..3).map(|c| rec(c, c as f64 + 1.0, 1, 1.0)).collect();
        assert_eq!(merge_iterations(&[full.clone(), gap.clone()]).len(), 1);
        assert_eq!(merge_iterations_with(&[full, gap], &[false, true]).len(), 1);
        assert!(merge_iterations(&[vec![], vec![]]).is_empty());
    }

    #[test]
    fn an_elastic_merge_takes_whoever_recorded_each_clock() {
        // Worker 1 joins at clock 1 and pauses at clock 2; worker 0 leaves after clock 2.
        let w0 = vec![
            rec(0, 1.0, 4, 1.0),
            rec(1, 2.0, 2, 1.0),
            rec(2, 3.0, 4, 1.0),
        ];
        let w1 = vec![rec(1, 2.5, 2, 3.0), rec(3, 4.0, 4, 3.0)];
        let rows = merge_iterations_elastic(&[w0, w1]);
        assert_eq!(rows.len(), 4, "clocks 0..=3 each have a worker");
        assert_eq!(rows[0].workers, Some(vec![0]));
        assert_eq!(rows[1].workers, None, "both took part in clock 1");
        assert_eq!(rows[2].workers, Some(vec![0]));
        assert_eq!(rows[3].workers, Some(vec![1]));
        assert_eq!(rows[1].samples, 4);
        // The row's loss is sample-weighted over whoever took part: (2·1 + 2·3) / 4.
        assert!((rows[1].loss - 2.0).abs() < 1e-12, "{}", rows[1].loss);
        // A clock nobody recorded ends the rows.
        let gap = merge_iterations_elastic(&[vec![rec(0, 1.0, 1, 1.0), rec(2, 2.0, 1, 1.0)]]);
        assert_eq!(gap.len(), 1);
    }

    #[test]
    fn workers_without_records_take_no_part() {
        let one: Vec<IterRecord> = (0..3).map(|c| rec(c, c as f64 + 1.0, 1, 1.0)).collect();
        let rows = merge_iterations(&[vec![], one]);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].workers, Some(vec![1]));
    }
}
