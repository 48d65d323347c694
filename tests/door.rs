//! Bad input stops `concord train` before any work: nothing is written, and the error names the
//! cause. And `--overwrite` leaves nothing of an earlier run.

mod common;

use common::{concord_with_env as concord, nothing_written, rejected, FAST};
use std::path::Path;

fn idx_data(dir: &Path, train_labels: &[u8], test_labels: &[u8], classes: Option<u32>) -> String {
    use concord::engine::data::{write_idx_images, write_idx_labels};
    let px = |n: usize| vec![7u8; n * 4];
    write_idx_images(dir.join("tri"), 2, 2, &px(train_labels.len())).unwrap();
    write_idx_labels(dir.join("trl"), train_labels).unwrap();
    write_idx_images(dir.join("tei"), 2, 2, &px(test_labels.len())).unwrap();
    write_idx_labels(dir.join("tel"), test_labels).unwrap();
    let classes = classes.map_or(String::new(), |n| format!(", classes={n}"));
    format!(
        "data={{kind=\"idx\", train_images=\"tri\", train_labels=\"trl\", test_images=\"tei\", test_labels=\"tel\"{classes}}}"
    )
}

const IDX_FILES: [&str; 4] = ["tri", "trl", "tei", "tel"];

#[test]
fn a_training_label_beyond_the_declared_classes_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = idx_data(dir.path(), &[0, 1, 200, 3], &[1, 2], Some(10));
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--set", &data, "--out", "run"]);
    let out = concord(&args, dir.path(), &[]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("trl") && e.contains("label 200 at index 2") && e.contains("0..10"),
        "{e}"
    );
    nothing_written(dir.path(), &IDX_FILES);
}

#[test]
fn a_test_label_beyond_the_training_classes_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = idx_data(dir.path(), &[0, 1, 2, 1], &[1, 3], None);
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--set", &data]);
    let out = concord(&args, dir.path(), &[]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("tel") && e.contains("label 3 at index 1") && e.contains("0..3"),
        "{e}"
    );
    nothing_written(dir.path(), &IDX_FILES);
}

#[test]
fn a_trace_row_for_a_worker_outside_the_job_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("trace.csv"),
        "time,role,factor\n0,worker:1,2\n1,worker:99,3\n",
    )
    .unwrap();
    let mut args = FAST.to_vec();
    args.extend_from_slice(&[
        "--set",
        "stragglers=[{pattern=\"csv-trace\", path=\"trace.csv\"}]",
        "--out",
        "run",
    ]);
    let out = concord(&args, dir.path(), &[]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("trace.csv")
            && e.contains("line 3")
            && e.contains("worker:99 is not in this job")
            && e.contains("2 workers"),
        "{e}"
    );
    nothing_written(dir.path(), &["trace.csv"]);
}

#[test]
fn an_out_that_is_a_file_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("taken"), "mine").unwrap();
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--out", "taken", "--overwrite"]);
    let out = concord(&args, dir.path(), &[]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--out taken") && e.contains("is a file"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("taken")).unwrap(),
        "mine"
    );
    nothing_written(dir.path(), &["taken"]);
}

#[test]
fn an_out_that_cannot_be_created_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--out", "file/run"]);
    let out = concord(&args, dir.path(), &[]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--out file/run") && e.contains("cannot create the folder"),
        "{e}"
    );
    nothing_written(dir.path(), &["file"]);
}

fn stale_run(dir: &Path) {
    std::fs::create_dir_all(dir.join("run/trace")).unwrap();
    std::fs::write(dir.join("run/trace/worker-15.json"), "{}").unwrap();
    std::fs::write(dir.join("run/evaluations.jsonl"), "{}\n").unwrap();
}

#[test]
fn an_existing_run_folder_stops_the_run_unless_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    stale_run(dir.path());
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--out", "run"]);
    let out = concord(&args, dir.path(), &[]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--out run") && e.contains("already holds") && e.contains("--overwrite"),
        "{e}"
    );
    // Untouched, and no metrics of a new run.
    assert!(dir.path().join("run/trace/worker-15.json").exists());
    assert!(!dir.path().join("run/metrics.jsonl").exists());
}

#[test]
fn overwrite_leaves_nothing_of_the_earlier_run() {
    let dir = tempfile::tempdir().unwrap();
    stale_run(dir.path());
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--out", "run", "--overwrite"]);
    let out = concord(&args, dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = dir.path().join("run");
    assert!(!run.join("trace/worker-15.json").exists());
    assert!(!run.join("evaluations.jsonl").exists());
    assert!(run.join("metrics.jsonl").exists() && run.join("trace/worker-1.json").exists());
    assert!(!run.join("trace/worker-2.json").exists());
}

#[test]
fn the_default_run_folder_is_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let out = concord(&FAST, dir.path(), &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in runs {
        assert!(run.join("metrics.jsonl").exists(), "{}", run.display());
    }
}

#[test]
fn range_errors_name_the_layer_that_set_the_value() {
    let (e, _) = rejected(&["--set", "batch=0"], &[]);
    assert!(
        e.contains("`batch` = 0") && e.contains("at least 1") && e.contains("(set by --set)"),
        "{e}"
    );
    let (e, _) = rejected(&[], &[("CONCORD_OPTIMIZER__LR", "-1")]);
    assert!(
        e.contains("optimizer.lr")
            && e.contains("set by the environment variable CONCORD_OPTIMIZER__LR"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[data]\nkind = \"blobs\"\nclasses = 1\n").unwrap();
    let (e, _) = rejected(&["--config", file.to_str().unwrap()], &[]);
    assert!(
        e.contains("`classes`") && e.contains(&format!("set by the file {}", file.display())),
        "{e}"
    );
    let (e, _) = rejected(
        &["--set", "stragglers=[{pattern=\"jitter\", sigma=-1}]"],
        &[],
    );
    assert!(e.contains("sigma") && e.contains("(set by --set)"), "{e}");
}

/// A strategy's options are checked when the strategies are composed, after the layers are
/// merged; their errors name the layer too.
#[test]
fn strategy_option_errors_name_the_layer_that_set_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "strategies = [\"ssp\"]\n[strategy.ssp]\nslack = -1\n",
    )
    .unwrap();
    let (e, _) = rejected(&["--config", file.to_str().unwrap()], &[]);
    assert!(
        e.contains("strategy.ssp") && e.contains(&format!("set by the file {}", file.display())),
        "{e}"
    );
}

#[test]
fn throughput_mode_prints_no_loss_as_n_a() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = FAST.to_vec();
    args.extend_from_slice(&[
        "--set",
        "model={kind=\"profile\",name=\"vgg16\"}",
        "--out",
        "run",
    ]);
    let out = concord(&args, dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("final train loss"))
        .unwrap();
    assert!(line.ends_with("n/a"), "{line}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run/summary.json")).unwrap(),
    )
    .unwrap();
    assert!(summary["final_loss"].is_null(), "{summary}");
}
