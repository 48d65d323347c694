//! The divergence guard: a run whose loss explodes (or is not finite) stops early, naming the
//! role, the iteration and the strategy, and keeps the rows it completed; a healthy run is not
//! touched by it.

use concord::engine::guard::Cause;
use concord::engine::metrics::Summary;
use concord::engine::run::{RunResult, StoppedRun};
use concord::engine::{EngineError, RunConfig};
use std::path::Path;
use std::process::Command;

mod common;
use common::{config_with, summary_line, SMALL_CNN};

/// `configs/default.toml` (MLP on the teacher data, BSP) with `sets`.
fn default_with(sets: &[&str]) -> RunConfig {
    config_with("default.toml", sets)
}

fn run(cfg: &RunConfig) -> Result<RunResult, EngineError> {
    let asm = concord::registry().compose(cfg).unwrap();
    concord::engine::run(cfg, &asm, Default::default())
}

fn stopped(cfg: &RunConfig) -> StoppedRun {
    match run(cfg) {
        Err(EngineError::Stopped(s)) => *s,
        Err(e) => panic!("expected a stopped run, got {e}"),
        Ok(r) => panic!("expected a stopped run, it completed {} rows", r.rows.len()),
    }
}

/// The folder a stopped run leaves: its rows so far and the reason in the summary.
fn written(s: &StoppedRun) -> (Vec<serde_json::Value>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    concord::engine::output::write_run_folder(dir.path(), &s.result).unwrap();
    read_folder(dir.path())
}

fn read_folder(dir: &Path) -> (Vec<serde_json::Value>, serde_json::Value) {
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let rows = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    (rows, summary)
}

/// MLR at lr 1e3: its loss grows to tens of times the starting loss and stays finite.
const EXPLODING: [&str; 2] = ["optimizer.lr=1000", "model.kind=\"mlr\""];

#[test]
fn an_exploding_loss_stops_after_patience_checks_with_its_rows_kept() {
    let s = stopped(&default_with(&EXPLODING));
    let r = &s.reason;
    // Checks at iterations 25, 50, 75; patience 3.
    assert_eq!((r.reason.as_str(), r.iteration), ("diverged", 75));
    assert!(r.role.starts_with("worker-"), "{}", r.role);
    assert_eq!(r.strategy, "bsp");
    let Cause::LossRatio {
        starting_loss,
        ratio,
        checks,
    } = r.cause
    else {
        panic!("{:?}", r.cause)
    };
    assert_eq!((ratio, checks), (10.0, 3));
    assert!(r.loss.is_finite() && r.loss > 10.0 * starting_loss, "{r:?}");
    let msg = EngineError::Stopped(Box::new(s.clone())).to_string();
    for part in [
        "training diverged",
        &r.role,
        "iteration 75",
        "strategy bsp",
        "guard.loss_ratio",
    ] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
    // Every clock every worker completed before the trip is a row.
    assert_eq!(s.result.rows.len(), 74);
    let (rows, summary) = written(&s);
    assert_eq!(rows.len(), 74);
    assert_eq!(rows[73]["iteration"], 74);
    assert_eq!(summary["iterations"], 74);
    let stop = &summary["stopped"];
    assert_eq!(stop["reason"], "diverged");
    assert_eq!(stop["iteration"], 75);
    assert_eq!(stop["role"], r.role.as_str());
    assert_eq!(stop["strategy"], "bsp");
    assert_eq!(stop["cause"], "loss-ratio");
}

#[test]
fn a_non_finite_loss_stops_gracefully_with_its_rows_kept() {
    // The MLP at lr 1e3 overflows within a few iterations.
    let s = stopped(&default_with(&["optimizer.lr=1000"]));
    assert_eq!(s.reason.cause, Cause::NonFinite);
    assert!(!s.reason.loss.is_finite());
    let done = s.reason.iteration - 1;
    assert!(done >= 1, "{:?}", s.reason);
    assert_eq!(s.result.rows.len() as u64, done);
    let (rows, summary) = written(&s);
    assert_eq!(rows.len() as u64, done);
    assert_eq!(summary["stopped"]["cause"], "non-finite");
    assert_eq!(summary["stopped"]["iteration"], s.reason.iteration);
    assert!(summary["stopped"]["loss"].is_null(), "{summary}");
    // What only the roles' final reports tell is unknown, not zero.
    for key in Summary::UNKNOWN_WHEN_STOPPED {
        assert!(summary[key].is_null(), "{key}: {summary}");
    }
    assert!(summary["wait_share"].as_f64().is_some_and(|w| w > 0.0));
}

/// Strategies that compute their loss outside the engine's training step (a pipeline's output
/// stage, Fela's last-level tokens and its baselines, Sven's DLRM) stop on a non-finite one as
/// BSP does. They trained on NaN to their last iteration before, reporting no final loss.
#[test]
fn a_non_finite_loss_stops_every_strategy_that_computes_its_own() {
    // (config, strategy, learning rate, more settings): Sven's DLRM needs more to overflow.
    let mut cases: Vec<(&str, &str, &str, Vec<&str>)> = Vec::new();
    for strategy in ["pipedream", "gpipe", "pipedream-mp", "fela"] {
        cases.push(("default.toml", strategy, "50", vec!["workers=4"]));
    }
    for strategy in ["fela-mp", "fela-hp"] {
        cases.push(("default.toml", strategy, "50", SMALL_CNN.to_vec()));
    }
    cases.push(("sven.toml", "sven", "1e6", Vec::new()));
    for (file, strategy, lr, more) in cases {
        let (list, lr) = (
            format!("strategies=[\"{strategy}\"]"),
            format!("optimizer.lr={lr}"),
        );
        let mut sets = vec![
            list.as_str(),
            lr.as_str(),
            "iterations=100",
            "optimizer.momentum=0",
        ];
        sets.extend(more);
        let s = stopped(&config_with(file, &sets));
        assert_eq!(
            s.reason.cause,
            Cause::NonFinite,
            "{strategy}: {:?}",
            s.reason
        );
        assert_eq!(s.reason.strategy, strategy);
        assert!(s.reason.iteration < 100, "{strategy}: {:?}", s.reason);
        assert!(
            (s.result.rows.len() as u64) < s.reason.iteration,
            "{strategy}: {} rows",
            s.result.rows.len()
        );
    }
}

/// An RNA worker's local steps run ahead of or behind the job's rounds (a straggler takes fewer
/// than there are rounds): a divergence names the round in progress, the iteration the run's
/// rows count, not the worker's local step (it named step 13 after 26 complete rounds).
#[test]
fn rnas_divergence_names_the_round_in_progress() {
    for lr in ["1000", "50"] {
        let lr = format!("optimizer.lr={lr}");
        let s = stopped(&config_with("rna.toml", &[lr.as_str()]));
        let done = s.result.rows.len() as u64;
        assert_eq!(s.reason.cause, Cause::NonFinite, "{lr}: {:?}", s.reason);
        assert!(
            (done + 1..=done + 2).contains(&s.reason.iteration),
            "{lr}: named iteration {} after {done} complete ones",
            s.reason.iteration
        );
    }
}

#[test]
fn with_the_guard_off_the_exploding_run_completes() {
    let mut sets = EXPLODING.to_vec();
    sets.push("guard.enabled=false");
    let r = run(&default_with(&sets)).expect("completes");
    assert_eq!(r.rows.len(), 300);
    assert!(r.summary.stopped.is_none());
    assert!(
        r.rows[299].loss > 10.0 * r.rows[0].loss,
        "{}",
        r.rows[299].loss
    );
}

/// Parameters and rows (wall-clock readings aside) as bits.
fn bits(r: &RunResult) -> (Vec<Vec<u32>>, String) {
    let params = r
        .params
        .as_ref()
        .unwrap()
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect();
    let mut rows = r.rows.clone();
    rows.iter_mut().for_each(|row| row.wall_s = 0.0);
    (params, serde_json::to_string(&rows).unwrap())
}

#[test]
fn a_healthy_run_is_bit_identical_with_the_guard_on_or_off() {
    let sets = ["iterations=60", "eval_every=5", "guard.patience=1"];
    let on = run(&default_with(&sets)).expect("healthy");
    let off = run(&default_with(
        &[&sets[..], &["guard.enabled=false"]].concat(),
    ))
    .unwrap();
    assert_eq!(on.rows.len(), 60);
    assert!(on.summary.stopped.is_none());
    assert_eq!(bits(&on), bits(&off));
    // A completed run's summary has no `stopped` key.
    let dir = tempfile::tempdir().unwrap();
    concord::engine::output::write_run_folder(dir.path(), &on).unwrap();
    let (_, summary) = read_folder(dir.path());
    assert!(summary.get("stopped").is_none(), "{summary}");
}

#[test]
fn out_of_range_guard_settings_are_named() {
    for (set, key) in [
        ("guard.loss_ratio=0.5", "guard.loss_ratio"),
        ("guard.patience=0", "guard.patience"),
        ("guard.stall_s=0", "guard.stall_s"),
        ("guard.stall_s=-5", "guard.stall_s"),
    ] {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/default.toml");
        let err = concord::config::load(Some(&file), &[set.to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{err}");
    }
}

#[test]
fn the_cli_writes_the_stopped_run_and_exits_non_zero_naming_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(["train", "--quiet", "--set", "optimizer.lr=1000", "--out"])
        .arg(&out_dir)
        .current_dir(dir.path())
        .env_remove("CONCORD_WORKERS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: training diverged on worker-") && stderr.contains("strategy bsp"),
        "{stderr}"
    );
    let (rows, summary) = read_folder(&out_dir);
    assert!(!rows.is_empty());
    assert_eq!(summary["stopped"]["reason"], "diverged");
    assert_eq!(summary["iterations"], rows.len());
    assert!(out_dir.join("config.toml").exists());
    assert!(!out_dir.join("checkpoint.safetensors").exists());
    // The printed summary says what the stopped run does not know rather than printing zeros.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        summary_line(&stdout, name).unwrap_or_else(|| panic!("no `{name}` line: {stdout}"))
    };
    for name in ["ideal time", "efficiency", "bytes sent", "peak memory"] {
        assert!(
            line(name).ends_with("n/a (the run was stopped)"),
            "{stdout}"
        );
    }
    // A diverging loss is printed by its magnitude.
    let loss = line("final train loss");
    assert!(
        loss.len() < 60 && (loss.contains('e') || loss.ends_with("n/a")),
        "{loss}"
    );
}

/// `wall` with worker 0 asleep for an hour in its first iteration (Fela's round-robin sleep):
/// no worker can close an iteration past the first, so after `guard.stall_s` the run ends with
/// an error that says where every worker stands, instead of hanging.
#[test]
fn a_stalled_wall_run_ends_after_stall_s_naming_where_each_worker_stands() {
    let mut cfg = default_with(&[
        "runtime=\"wall\"",
        "workers=3",
        "iterations=50",
        "guard.stall_s=1.5",
    ]);
    cfg.stragglers =
        vec![toml::from_str("pattern = \"round-robin-sleep\"\ndelay_s = 3600.0").unwrap()];
    let started = std::time::Instant::now();
    let err = match run(&cfg) {
        Err(e @ EngineError::Stalled(_)) => e,
        Err(e) => panic!("expected a stall, got {e}"),
        Ok(r) => panic!("expected a stall, the run completed {} rows", r.rows.len()),
    };
    let took = started.elapsed().as_secs_f64();
    assert!((1.5..60.0).contains(&took), "stopped after {took} s");
    let text = err.to_string();
    assert!(
        text.contains("no worker closed an iteration for 1.5 s (guard.stall_s)"),
        "{text}"
    );
    assert!(text.contains("worker 0 at iteration 0 of 50"), "{text}");
    assert!(text.contains("raise guard.stall_s"), "{text}");
}

/// The watchdog only watches: a `wall` run whose iterations keep closing within `stall_s`
/// completes.
#[test]
fn a_wall_run_that_progresses_is_not_stopped_by_the_watchdog() {
    let cfg = default_with(&[
        "runtime=\"wall\"",
        "workers=2",
        "iterations=20",
        "guard.stall_s=5",
    ]);
    let r = run(&cfg).unwrap();
    assert_eq!(r.rows.len(), 20);
}
