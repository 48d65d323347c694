//! `concord train --resume RUN_DIR`: continues a run folder from its checkpoint; refuses what
//! would change the job.

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
        "strategies=[\"rna\"]",
        "--set",
        "workers=4",
        "--set",
        "iterations=3",
        "--out",
        run_s,
    ];
    ok(&concord(&first, dir.path()));
    let err = resume_refused(run_s, &["--set", "iterations=6"], dir.path());
    assert!(err.contains("`rna` cannot resume"), "{err}");
}
