//! `cargo xtask bench --suite fidelity`: how well `sim` predicts `--runtime process` on this
//! machine. `concord calibrate --host --processes 2` measures the machine (training steps of the
//! suite's models, timed while another thread steps beside them as the job's other worker does; a
//! server's update; the role-to-role latency and bandwidth of the process runtime's transport,
//! and what a message adds when its receiver has waited for it)
//! into a device profile; then each job runs as two processes (`concord launch`), the machine is
//! calibrated again, and the job runs in `sim` on both profiles: the suite prints the steady-state
//! time per iteration of the process runs and the mean of the two predictions, and the error of
//! that prediction, against the goal of 15 % for BSP, SSP and allreduce (`bench/out/fidelity/`:
//! the profiles, every run folder, results.csv). The machine's speed drifts by several percent
//! within minutes, so profiles taken before and after the runs bracket the machine they met.
//! Each process job runs five times, the runs taken in turns over the strategies, and counts by
//! its median run, so that a spell of the machine slowed by a neighbour's load does not decide a
//! case; the slowest and fastest runs are printed beside it, and the error against the fastest
//! (the run the machine's other load disturbed least), and the counted run's tenth percentile and
//! median iteration with the error against the tenth percentile (its undisturbed iterations: a
//! synchronous iteration waits for whichever role the machine's other work delayed, which `sim`
//! does not predict). Beside each case, the share of the processors' time a hypervisor took
//! (`/proc/stat`'s steal) while the machine was calibrated and during the counted run: on a
//! virtual machine it moves from nothing to half within minutes, and a calibration and a run
//! that lost different shares do not compare. A second table says where each case's iterations
//! go, in the counted process run and in both `sim` runs: the slower worker's step, and a
//! worker's time communicating and waiting (medians a clock), so that a miss shows whether the
//! machine's steps or its transfers moved.

use anyhow::Context;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use concord_engine::calibrate::host::CpuTime;

/// The goal: |sim − process| / process at most this.
const GOAL: f64 = 0.15;
/// Processes (one worker each): as many as a 2-core machine has cores.
const PROCESSES: u32 = 2;
/// Leading iterations left out of the steady state (start-up, first allocations).
const WARM_UP_SHARE: f64 = 0.1;
/// Runs of each process job; the median counts.
const PROCESS_RUNS: usize = 5;

/// One model of the suite: a name and its config keys.
struct Model {
    name: &'static str,
    keys: &'static str,
    iterations: u64,
}

const MODELS: [Model; 2] = [
    Model {
        name: "MLP 32-64-10 (default)",
        keys: "[model]\nkind = \"mlp\"\nhidden = [64]\n[data]\nkind = \"teacher\"\n",
        iterations: 300,
    },
    Model {
        name: "MLP 784-1024-1024-10",
        keys: "[model]\nkind = \"mlp\"\nhidden = [1024, 1024]\n[data]\nkind = \"teacher\"\ndim = 784\n",
        iterations: 40,
    },
];

const STRATEGIES: [&str; 3] = ["bsp", "ssp", "allreduce"];

/// The job file of `model` (without the device profile).
fn job(model: &Model) -> String {
    format!(
        "seed = 42\nworkers = {PROCESSES}\nservers = {PROCESSES}\nbatch = 32\niterations = {it}\n\
         eval_every = {it}\nstrategies = [\"bsp\"]\ntrace = \"off\"\n{keys}\
         [optimizer]\nkind = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n[cluster]\ndefault_device = \"host\"\n",
        it = model.iterations,
        keys = model.keys
    )
}

/// The durations of the iterations after the warm-up, seconds, from a run folder's
/// `metrics.jsonl` (the time between consecutive rows' ends).
fn steady_iterations(run: &Path) -> anyhow::Result<Vec<f64>> {
    let ends: Vec<f64> = metrics_rows(run)?
        .iter()
        .filter_map(|row| row["time_s"].as_f64())
        .collect();
    let skip = warm_up(ends.len());
    anyhow::ensure!(
        ends.len() > skip + 1,
        "too few iterations in {}",
        run.display()
    );
    Ok(ends[skip - 1..].windows(2).map(|w| w[1] - w[0]).collect())
}

/// The rows of a run folder's `metrics.jsonl`, one per iteration.
fn metrics_rows(run: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl"))
        .with_context(|| format!("reading {}", run.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// How many of a run's `iterations` are its warm-up (at least one).
fn warm_up(iterations: usize) -> usize {
    ((iterations as f64 * WARM_UP_SHARE) as usize).max(1)
}

/// Seconds per iteration after the warm-up: the steady state's mean.
fn mean(iterations: &[f64]) -> f64 {
    iterations.iter().sum::<f64>() / iterations.len() as f64
}

/// Where a job's iterations go, milliseconds a clock: medians over the steady-state iterations
/// of the slower worker's step (what a synchronous iteration waits for), and a worker's (mean)
/// time communicating and waiting. Printed beside each case so that a miss says which side
/// moved: the machine's steps, or its transfers.
#[derive(Clone, Copy)]
struct Breakdown {
    step_ms: f64,
    comm_ms: f64,
    wait_ms: f64,
}

impl Breakdown {
    /// The breakdown of the run in `run` (its `metrics.jsonl`), after the warm-up.
    fn of(run: &Path) -> anyhow::Result<Breakdown> {
        let rows = metrics_rows(run)?;
        let steady = rows.get(warm_up(rows.len())..).unwrap_or_default();
        anyhow::ensure!(
            !steady.is_empty(),
            "too few iterations in {}",
            run.display()
        );
        let per_worker = |row: &serde_json::Value, key: &str| -> Vec<f64> {
            row[key]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        };
        let median_of = |f: &dyn Fn(&[f64]) -> f64, key: &str| {
            let values: Vec<f64> = steady.iter().map(|r| f(&per_worker(r, key))).collect();
            quantile(&values, 0.5) * 1e3
        };
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let average = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        Ok(Breakdown {
            step_ms: median_of(&max, "compute_s"),
            comm_ms: median_of(&average, "comm_s"),
            wait_ms: median_of(&average, "wait_s"),
        })
    }
}

/// `process / before, after` of one part of three breakdowns, milliseconds.
fn parts(process: f64, before: f64, after: f64) -> String {
    format!("{process:.2} / {before:.2}, {after:.2}")
}

/// The `q` quantile (0–1) of `values`, by the nearest rank below.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

/// Runs `cmd` as [`run_ok`] does, and returns the share of the machine's processor time a
/// hypervisor took meanwhile (`None` where the system does not say).
fn run_ok_stolen(cmd: &mut Command, what: &str) -> anyhow::Result<Option<f64>> {
    let before = CpuTime::now();
    run_ok(cmd, what)?;
    Ok(before.and_then(|b| b.stolen_share_until_now()))
}

/// A stolen share as a percentage, or a dash where the system does not say.
fn pct(share: Option<f64>) -> String {
    share.map_or_else(|| "–".into(), |s| format!("{:.0}%", s * 100.0))
}

fn run_ok(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("starting {what}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `concord calibrate --host` of `job_file`'s model for [`PROCESSES`] processes, written to
/// `profile`; returns the share of the processors' time a hypervisor took meanwhile.
fn calibrate(
    concord: &Path,
    root: &Path,
    job_file: &Path,
    profile: &Path,
) -> anyhow::Result<Option<f64>> {
    run_ok_stolen(
        Command::new(concord)
            .current_dir(root)
            .args(["calibrate", "--host", "--processes", &PROCESSES.to_string()])
            .arg("--config")
            .arg(job_file)
            .arg("--out")
            .arg(profile),
        "concord calibrate --host",
    )
}

/// Writes `model`'s job with `profile` appended as `config`, the file the runs read.
fn write_config(model: &Model, profile: &Path, config: &Path) -> anyhow::Result<()> {
    std::fs::write(
        config,
        format!("{}{}", job(model), std::fs::read_to_string(profile)?),
    )?;
    Ok(())
}

/// The steady-state seconds per iteration `sim` predicts for `strategy` on `config`, its run
/// folder at `folder`.
fn predict(
    concord: &Path,
    root: &Path,
    config: &Path,
    strategy: &str,
    folder: &Path,
) -> anyhow::Result<f64> {
    run_ok(
        Command::new(concord)
            .current_dir(root)
            .args(["train", "--quiet", "--runtime", "sim", "--config"])
            .arg(config)
            .args(["--set", &format!("strategies=[\"{strategy}\"]"), "--out"])
            .arg(folder),
        "the sim run",
    )?;
    Ok(mean(&steady_iterations(folder)?))
}

/// One process run of a job.
struct ProcessRun {
    /// Its steady-state mean, seconds per iteration.
    mean: f64,
    /// The share of the processors' time stolen during it.
    stolen: Option<f64>,
    /// Its steady-state iterations, seconds.
    iterations: Vec<f64>,
    /// Its run folder.
    folder: std::path::PathBuf,
}

/// Run `run` of `strategy` on `config` as [`PROCESSES`] processes, its folder
/// `<strategy>-process-<run>` in `dir`.
fn process_run(
    concord: &Path,
    root: &Path,
    config: &Path,
    strategy: &str,
    dir: &Path,
    run: usize,
) -> anyhow::Result<ProcessRun> {
    let set = format!("strategies=[\"{strategy}\"]");
    let p = dir.join(format!("{strategy}-process-{run}"));
    let stolen = run_ok_stolen(
        Command::new(concord)
            .current_dir(root)
            .args([
                "launch",
                "--nproc",
                &PROCESSES.to_string(),
                "train",
                "--quiet",
            ])
            .arg("--config")
            .arg(config)
            .args(["--set", &set, "--out"])
            .arg(&p),
        "the process run",
    )?;
    let iterations = steady_iterations(&p)?;
    Ok(ProcessRun {
        mean: mean(&iterations),
        stolen,
        iterations,
        folder: p,
    })
}

/// [`PROCESS_RUNS`] runs of every strategy on `config`, taken in turns over the strategies (so
/// that a slow spell of the machine falls on one run of several cases, which their medians
/// outvote, rather than on every run of one case); each strategy's runs fastest first.
fn process_runs_in_turns(
    concord: &Path,
    root: &Path,
    config: &Path,
    dir: &Path,
) -> anyhow::Result<Vec<Vec<ProcessRun>>> {
    let mut runs: Vec<Vec<ProcessRun>> = STRATEGIES
        .iter()
        .map(|_| Vec::with_capacity(PROCESS_RUNS))
        .collect();
    for run in 0..PROCESS_RUNS {
        for (strategy, done) in STRATEGIES.iter().zip(&mut runs) {
            done.push(process_run(concord, root, config, strategy, dir, run)?);
        }
    }
    for done in &mut runs {
        done.sort_by(|a, b| a.mean.total_cmp(&b.mean));
    }
    Ok(runs)
}

/// Runs the suite and prints its table.
pub fn run() -> anyhow::Result<()> {
    let root = crate::bench::suite::load::workspace_root();
    let out = root.join("bench").join("out").join("fidelity");
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(&out)?;
    let concord = crate::bench_process::concord_binary()?;
    let mut csv = String::from(
        "model,strategy,process_ms,process_min_ms,process_max_ms,sim_ms,sim_before_ms,sim_after_ms,error_pct,fastest_error_pct,process_p10_ms,process_median_ms,p10_error_pct,goal_met,calibrate_stolen_pct,calibrate_after_stolen_pct,process_stolen_pct,step_ms,comm_ms,wait_ms,sim_before_step_ms,sim_before_comm_ms,sim_before_wait_ms,sim_after_step_ms,sim_after_comm_ms,sim_after_wait_ms\n",
    );
    println!(
        "sim vs --runtime process on this machine: {PROCESSES} processes, one worker each (steady state, after the first {:.0} % of iterations; the median of {PROCESS_RUNS} process runs; sim: the mean of its predictions on the profiles calibrated before and after them)",
        WARM_UP_SHARE * 100.0
    );
    println!(
        "{:<24} {:<10} {:>12} {:>17} {:>10} {:>17} {:>9} {:>9}  {:>18} {:>9}  {:>19}  goal: within {:.0} %",
        "model",
        "strategy",
        "process ms",
        "(runs: min, max)",
        "sim ms",
        "(before, after)",
        "error",
        "(fastest)",
        "iterations p10, p50",
        "(vs p10)",
        "stolen (cal.)",
        GOAL * 100.0
    );
    let mut missed = 0;
    let mut breakdowns = Vec::new();
    for (m, model) in MODELS.iter().enumerate() {
        let dir = out.join(format!("model-{m}"));
        std::fs::create_dir_all(&dir)?;
        let job_file = dir.join("job.toml");
        std::fs::write(&job_file, job(model))?;
        // The machine's speed drifts by several percent within minutes: calibrated before the
        // process runs and again after them, the two profiles bracket what the runs met.
        let (before, after) = (dir.join("host.toml"), dir.join("host-after.toml"));
        let stolen_before = calibrate(&concord, &root, &job_file, &before)?;
        let config = dir.join("config.toml");
        write_config(model, &before, &config)?;
        let measured_runs = process_runs_in_turns(&concord, &root, &config, &dir)?;
        let stolen_after = calibrate(&concord, &root, &job_file, &after)?;
        let config_after = dir.join("config-after.toml");
        write_config(model, &after, &config_after)?;
        for (strategy, runs) in STRATEGIES.iter().zip(&measured_runs) {
            let sim_on = |config: &Path, folder: &str| {
                predict(&concord, &root, config, strategy, &dir.join(folder))
            };
            let predicted_before = sim_on(&config, &format!("{strategy}-sim"))?;
            let predicted_after = sim_on(&config_after, &format!("{strategy}-sim-after"))?;
            let predicted = 0.5 * (predicted_before + predicted_after);
            let counted_run = &runs[runs.len() / 2];
            let (measured, stolen, counted) = (
                counted_run.mean,
                counted_run.stolen,
                &counted_run.iterations,
            );
            let (fastest, slowest) = (runs[0].mean, runs[runs.len() - 1].mean);
            let (went, went_before, went_after) = (
                Breakdown::of(&counted_run.folder)?,
                Breakdown::of(&dir.join(format!("{strategy}-sim")))?,
                Breakdown::of(&dir.join(format!("{strategy}-sim-after")))?,
            );
            breakdowns.push((model.name, *strategy, went, went_before, went_after));
            let error = predicted / measured - 1.0;
            // Beside the verdict: against the run the machine's other load disturbed least, and
            // against the counted run's undisturbed iterations (its tenth percentile): a
            // synchronous iteration waits for whichever role the machine's other work delayed,
            // which `sim`, charging every step and transfer its measured cost, does not predict.
            let fastest_error = predicted / fastest - 1.0;
            let (p10, median) = (quantile(counted, 0.1), quantile(counted, 0.5));
            let p10_error = predicted / p10 - 1.0;
            let met = error.abs() <= GOAL;
            missed += usize::from(!met);
            println!(
                "{:<24} {:<10} {:>12.3} {:>17} {:>10.3} {:>17} {:>+8.1}% {:>+8.1}%  {:>18} {:>+8.1}%  {:>19}  {}",
                model.name,
                strategy,
                measured * 1e3,
                format!("({:.3}, {:.3})", fastest * 1e3, slowest * 1e3),
                predicted * 1e3,
                format!("({:.3}, {:.3})", predicted_before * 1e3, predicted_after * 1e3),
                error * 100.0,
                fastest_error * 100.0,
                format!("{:.3}, {:.3}", p10 * 1e3, median * 1e3),
                p10_error * 100.0,
                format!(
                    "{} ({}, {})",
                    pct(stolen),
                    pct(stolen_before),
                    pct(stolen_after)
                ),
                if met { "✓" } else { "✗" }
            );
            let csv_pct =
                |s: Option<f64>| s.map_or_else(String::new, |s| format!("{:.2}", s * 100.0));
            writeln!(
                csv,
                "{},{strategy},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.2},{:.2},{:.6},{:.6},{:.2},{met},{},{},{},{}",
                model.name,
                measured * 1e3,
                fastest * 1e3,
                slowest * 1e3,
                predicted * 1e3,
                predicted_before * 1e3,
                predicted_after * 1e3,
                error * 100.0,
                fastest_error * 100.0,
                p10 * 1e3,
                median * 1e3,
                p10_error * 100.0,
                csv_pct(stolen_before),
                csv_pct(stolen_after),
                csv_pct(stolen),
                [went, went_before, went_after]
                    .iter()
                    .flat_map(|b| [b.step_ms, b.comm_ms, b.wait_ms])
                    .map(|ms| format!("{ms:.6}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )?;
        }
    }
    println!(
        "\nwhere the iterations go, ms a clock (medians over the steady iterations; the counted process run / sim on the profiles before, after):"
    );
    println!(
        "{:<24} {:<10} {:>26} {:>26} {:>26}",
        "model", "strategy", "slower worker's step", "communicating", "waiting"
    );
    for (model, strategy, process, before, after) in &breakdowns {
        println!(
            "{:<24} {:<10} {:>26} {:>26} {:>26}",
            model,
            strategy,
            parts(process.step_ms, before.step_ms, after.step_ms),
            parts(process.comm_ms, before.comm_ms, after.comm_ms),
            parts(process.wait_ms, before.wait_ms, after.wait_ms),
        );
    }
    std::fs::write(out.join("results.csv"), csv)?;
    println!(
        "{missed} of {} cases outside the goal; profiles, run folders and results.csv in {}",
        MODELS.len() * STRATEGIES.len(),
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_breakdown_takes_the_slower_step_and_the_mean_transfer_after_the_warm_up() {
        let dir = tempfile::tempdir().unwrap();
        // 20 iterations of two workers: the first two (warm-up) slow, then steps of 10 and
        // 12 ms (the slower counts), 3 and 5 ms communicating, 1 and 0 waiting.
        let rows: String = (1..=20)
            .map(|i| {
                let slow = if i <= 2 { 10.0 } else { 1.0 };
                format!(
                    "{{\"iteration\":{i},\"time_s\":{},\"compute_s\":[{},{}],\"comm_s\":[{},{}],\"wait_s\":[{},0.0]}}\n",
                    f64::from(i) * 0.02,
                    0.010 * slow,
                    0.012 * slow,
                    0.003 * slow,
                    0.005 * slow,
                    0.001 * slow
                )
            })
            .collect();
        std::fs::write(dir.path().join("metrics.jsonl"), rows).unwrap();
        let b = Breakdown::of(dir.path()).unwrap();
        assert!((b.step_ms - 12.0).abs() < 1e-9, "{}", b.step_ms);
        assert!((b.comm_ms - 4.0).abs() < 1e-9, "{}", b.comm_ms);
        assert!((b.wait_ms - 0.5).abs() < 1e-9, "{}", b.wait_ms);
        assert_eq!(parts(12.0, 11.44, 13.2), "12.00 / 11.44, 13.20");
        // A folder without a metrics file is named.
        let empty = tempfile::tempdir().unwrap();
        let e = Breakdown::of(empty.path()).err().unwrap();
        assert!(format!("{e:#}").contains("reading"), "{e:#}");
    }
}
