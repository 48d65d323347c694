//! Running cells: the code version, the cache key, the cache, and the parallel runner.
//!
//! A cell's result is cached in `bench/out/<suite>/cache/<key>.json`, where the key is a stable
//! hash (FNV-1a, 64 bit) of the code version and the resolved config serialized as JSON. Runs are
//! in `sim`, so the same key always means the same numbers; changing the code or any config
//! value changes the key.

use super::suite::{Cell, Scenario, Suite};
use super::BenchError;
use concord_engine::prelude::*;
use concord_engine::run::{RunOptions, RunResult};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// FNV-1a, 64 bit: a stable hash (unlike std's `DefaultHasher`, it is the same on every build).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The code version results are made from: the git `HEAD` commit, plus `-dirty-<hash>` with a
/// hash of the uncommitted changes (diff and untracked files) when the tree is dirty, so that
/// editing code invalidates the cache; `unknown` outside git.
pub fn code_version(root: &Path) -> String {
    let git = |args: &[&str]| -> Option<Vec<u8>> {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    };
    let Some(head) = git(&["rev-parse", "HEAD"]) else {
        return "unknown".into();
    };
    let head = String::from_utf8_lossy(&head).trim().to_string();
    let Some(status) = git(&["status", "--porcelain"]) else {
        return head;
    };
    if status.is_empty() {
        return head;
    }
    let mut changes = status;
    changes.extend(git(&["diff", "HEAD", "--binary"]).unwrap_or_default());
    if let Some(untracked) = git(&["ls-files", "--others", "--exclude-standard", "-z"]) {
        for name in untracked.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            changes.extend_from_slice(name);
            let path = root.join(String::from_utf8_lossy(name).as_ref());
            changes.extend(std::fs::read(path).unwrap_or_default());
        }
    }
    format!("{head}-dirty-{:016x}", fnv1a(&changes))
}

/// The cache key of a config under a code version.
pub fn cache_key(code_version: &str, config: &RunConfig) -> String {
    let json = serde_json::to_string(config).unwrap_or_default();
    let mut bytes = code_version.as_bytes().to_vec();
    bytes.push(b'\n');
    bytes.extend_from_slice(json.as_bytes());
    format!("{:016x}", fnv1a(&bytes))
}

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

/// Runs one cell's config to completion (in `sim`, as the suite resolved it).
pub fn run_cell(config: &RunConfig) -> anyhow::Result<CellResult> {
    let asm = concord::registry().compose(config)?;
    let result = concord_engine::run(config, &asm, RunOptions::default())?;
    Ok(CellResult::from_run(&result))
}

/// A cache file: the key's inputs (for checking and for humans) and the result.
#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    key: String,
    code_version: String,
    config: serde_json::Value,
    result: CellResult,
}

/// How to run a suite.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Threads running cells at once.
    pub jobs: usize,
    /// Rerun cells even if cached.
    pub force: bool,
    /// Show a progress bar.
    pub progress: bool,
}

/// What a suite run did, and each cell's result (`None` where a cell was filtered out and not
/// cached, or failed).
#[derive(Debug)]
pub struct Outcome {
    /// One entry per cell, in cell order.
    pub results: Vec<Option<CellResult>>,
    /// Cells run now.
    pub ran: usize,
    /// Cells taken from the cache.
    pub cached: usize,
    /// Cells that failed: id and error.
    pub failed: Vec<(String, String)>,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
}

/// Runs the `selected` cells of a suite that are not cached (all of them with `force`), in
/// parallel, and gathers every cell's result that is available (cached cells outside the
/// selection too, so that filtered runs add up to the whole report).
pub fn run_suite(
    suite: &Suite,
    scenarios: &[Scenario],
    cells: &[Cell],
    selected: &[bool],
    code_version: &str,
    out_dir: &Path,
    settings: &RunSettings,
) -> Result<Outcome, BenchError> {
    let start = Instant::now();
    let cache_dir = out_dir.join("cache");
    std::fs::create_dir_all(&cache_dir).map_err(|source| BenchError::Io {
        path: cache_dir.clone(),
        source,
    })?;
    let keys: Vec<String> = cells
        .iter()
        .map(|c| cache_key(code_version, &c.config))
        .collect();
    let mut results: Vec<Option<CellResult>> = vec![None; cells.len()];
    let mut todo = Vec::new();
    let mut cached = 0;
    for (i, key) in keys.iter().enumerate() {
        let path = cache_dir.join(format!("{key}.json"));
        let hit = if settings.force && selected[i] {
            None
        } else {
            read_cache(&path, key, code_version)
        };
        match hit {
            Some(r) => {
                results[i] = Some(r);
                cached += 1;
            }
            // Two cells with the same key (the same resolved config) run once.
            None if selected[i] && !todo.iter().any(|&t: &usize| keys[t] == *key) => todo.push(i),
            None => {}
        }
    }

    let bar = if settings.progress && !todo.is_empty() {
        let bar = ProgressBar::new(todo.len() as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} cells, {elapsed} (eta {eta}) {wide_msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(format!("bench {}", suite.name));
        bar
    } else {
        ProgressBar::hidden()
    };
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let jobs = settings.jobs.max(1).min(todo.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let Some(&i) = todo.get(n) else { break };
                let cell = &cells[i];
                let id = cell.id(suite, scenarios);
                bar.set_message(id.clone());
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_cell(&cell.config)
                }))
                .unwrap_or_else(|p| {
                    let what = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panic".into());
                    Err(anyhow::anyhow!("panicked: {what}"))
                });
                let outcome = outcome.and_then(|r| {
                    write_cache(&cache_dir, &keys[i], code_version, &cell.config, &r)?;
                    Ok(r)
                });
                if let Err(e) = &outcome {
                    bar.println(format!("FAILED {id}: {e:#}"));
                }
                bar.inc(1);
                if let Ok(mut d) = done.lock() {
                    d.push((i, id, outcome.map_err(|e| format!("{e:#}"))));
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut failed = Vec::new();
    let mut ran = 0;
    let done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    for (i, id, outcome) in done {
        match outcome {
            Ok(r) => {
                for (j, key) in keys.iter().enumerate() {
                    if *key == keys[i] && selected[j] && results[j].is_none() {
                        results[j] = Some(r.clone());
                        ran += 1;
                    }
                }
            }
            Err(e) => failed.push((id, e)),
        }
    }
    failed.sort();
    Ok(Outcome {
        results,
        ran,
        cached,
        failed,
        wall_s: start.elapsed().as_secs_f64(),
    })
}

fn read_cache(path: &Path, key: &str, code_version: &str) -> Option<CellResult> {
    let text = std::fs::read_to_string(path).ok()?;
    let entry: CacheEntry = serde_json::from_str(&text).ok()?;
    (entry.key == key && entry.code_version == code_version).then_some(entry.result)
}

fn write_cache(
    dir: &Path,
    key: &str,
    code_version: &str,
    config: &RunConfig,
    result: &CellResult,
) -> anyhow::Result<()> {
    let entry = CacheEntry {
        key: key.into(),
        code_version: code_version.into(),
        config: serde_json::to_value(config)?,
        result: result.clone(),
    };
    let path: PathBuf = dir.join(format!("{key}.json"));
    concord_engine::metrics::write_atomic(&path, serde_json::to_string(&entry)?.as_bytes())?;
    Ok(())
}
