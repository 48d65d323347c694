//! `concord train --resume RUN_DIR`: continues a run folder from its checkpoint; refuses what
//! would change the job. An interrupted run (Ctrl-C, SIGTERM) leaves its folder as a failed one
//! does: removed, or with its last checkpoint to resume from.

mod common;

use common::concord;
use std::path::Path;
use std::process::Output;

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `train --resume run` with `sets` (`--set` pairs) in `dir`, expected to fail: its stderr.
fn resume_refused(run: &str, sets: &[&str], dir: &Path) -> String {
    let mut args = vec!["train", "--quiet", "--resume", run];
    args.extend_from_slice(sets);
    let out = concord(&args, dir);
    assert!(
        !out.status.success(),
        "resuming {run} with {sets:?} should fail"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn rows(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The rows without their wall-clock readings.
fn sim_rows(dir: &Path) -> Vec<serde_json::Value> {
    let mut rows = rows(dir);
    for r in &mut rows {
        r.as_object_mut().unwrap().remove("wall_s");
    }
    rows
}

const JOB: [&str; 6] = [
    "--set",
    "workers=3",
    "--set",
    "eval_every=4",
    "--set",
    "strategies=[\"ssp\"]",
];

#[test]
fn resume_continues_the_run_folder_to_more_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    let mut first = vec!["train", "--quiet", "--set", "iterations=8", "--out", run_s];
    first.extend_from_slice(&JOB);
    ok(&concord(&first, dir.path()));
    assert_eq!(rows(&run).len(), 8);

    let more = [
        "train",
        "--quiet",
        "--resume",
        run_s,
        "--set",
        "iterations=16",
    ];
    ok(&concord(&more, dir.path()));
    assert_eq!(rows(&run).len(), 16);
    // The timelines of both stretches are kept.
    assert!(run.join("trace/worker-0.json").exists());
    assert!(run.join("trace/worker-0.from-8.json").exists());

    // The same job in one go, with a checkpoint where the first run stopped.
    let whole = dir.path().join("whole");
    let mut one = vec![
        "train",
        "--quiet",
        "--set",
        "iterations=16",
        "--set",
        "checkpoint_every=8",
        "--out",
        whole.to_str().unwrap(),
    ];
    one.extend_from_slice(&JOB);
    ok(&concord(&one, dir.path()));
    assert_eq!(sim_rows(&run), sim_rows(&whole));
}

#[test]
fn resume_refuses_a_change_to_the_job_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    let mut first = vec!["train", "--quiet", "--set", "iterations=4", "--out", run_s];
    first.extend_from_slice(&JOB);
    ok(&concord(&first, dir.path()));
    let err = resume_refused(
        run_s,
        &["--set", "iterations=8", "--set", "batch=7"],
        dir.path(),
    );
    assert!(
        err.contains("`batch`") && err.contains("iterations"),
        "{err}"
    );
    assert_eq!(rows(&run).len(), 4, "the run folder is untouched");
}

#[test]
fn resume_of_a_folder_without_a_checkpoint_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let err = resume_refused(dir.path().to_str().unwrap(), &[], dir.path());
    assert!(err.contains("checkpoint.safetensors"), "{err}");
}

#[test]
fn resume_of_a_strategy_that_cannot_resume_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    let first = [
        "train",
        "--quiet",
        "--set",
        "strategies=[\"agileml\"]",
        "--set",
        "workers=4",
        "--set",
        "servers=4",
        "--set",
        "iterations=3",
        "--out",
        run_s,
    ];
    ok(&concord(&first, dir.path()));
    let err = resume_refused(run_s, &["--set", "iterations=6"], dir.path());
    assert!(err.contains("`agileml` cannot resume"), "{err}");
}

/// Runs `concord train` in `dir` with `args` (its output captured) and sends it `signal` once
/// `wait_for` exists: what it printed and how it exited.
#[cfg(unix)]
fn interrupted(args: &[&str], dir: &Path, wait_for: &Path, signal: &str) -> Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(args)
        .current_dir(dir)
        .env_remove("CONCORD_WORKERS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_path(wait_for);
    common::send(signal, child.id());
    child.wait_with_output().unwrap()
}

/// Ctrl-C (SIGINT) in the middle of a run that has cut no checkpoint: the run ends as a failed
/// one does, its half-written folder removed, and the process exits with 130, as a shell expects
/// of an interrupted program.
#[cfg(unix)]
#[test]
fn an_interrupted_run_leaves_no_half_written_folder() {
    let dir = tempfile::tempdir().unwrap();
    // Once the roles stream their timelines, the run is under way.
    let out = interrupted(
        &[
            "train",
            "--quiet",
            "--set",
            "iterations=10000000",
            "--out",
            "run",
        ],
        dir.path(),
        &dir.path().join("run/trace"),
        "-INT",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted (SIGINT)") && stderr.contains("was removed"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("run").exists(),
        "a half-written folder is left"
    );
}

/// SIGTERM after the run cut checkpoints: the folder keeps the last one (without half-written
/// timelines), the process says how to continue and exits with 143, and `--resume` continues it
/// to the end.
#[cfg(unix)]
#[test]
fn an_interrupted_run_keeps_its_last_checkpoint_and_resumes_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "train",
        "--quiet",
        "--set",
        "iterations=10000000",
        "--set",
        "checkpoint_every=10",
        "--out",
        "run",
    ];
    args.extend_from_slice(&JOB);
    let run = dir.path().join("run");
    let out = interrupted(
        &args,
        dir.path(),
        &run.join("checkpoint.safetensors"),
        "-TERM",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains("interrupted (SIGTERM)") && stderr.contains("--resume"),
        "{stderr}"
    );
    let half_written: Vec<_> = std::fs::read_dir(run.join("trace"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "tmp"))
        .collect();
    assert!(half_written.is_empty(), "{half_written:?}");
    let clock = concord::engine::checkpoint::read(&run.join("checkpoint.safetensors"))
        .unwrap()
        .point
        .clock;
    let total = format!("iterations={}", clock + 5);
    ok(&concord(
        &["train", "--quiet", "--resume", "run", "--set", &total],
        dir.path(),
    ));
    assert_eq!(rows(&run).len() as u64, clock + 5);
}
