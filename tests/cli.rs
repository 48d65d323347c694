//! The command line: a good run writes its folder; bad input exits non-zero naming what is wrong.

use std::path::Path;
mod common;

use common::{concord, summary_line};
use std::process::Command;

/// Runs a failing command; returns its stderr.
fn fails(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = concord(args, dir.path());
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const FAST: [&str; 4] = ["--set", "iterations=3", "--set", "workers=2"];

fn train(extra: &[&str]) -> String {
    let mut args = vec!["train", "--quiet"];
    args.extend_from_slice(&FAST);
    args.extend_from_slice(extra);
    fails(&args)
}

#[test]
fn a_run_writes_config_metrics_summary_traces_and_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let out = concord(
        &[
            "train",
            "--quiet",
            "--set",
            "iterations=6",
            "--set",
            "eval_every=3",
            "--out",
            out_dir.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("efficiency") && stdout.contains("test accuracy"),
        "{stdout}"
    );
    let metrics = std::fs::read_to_string(out_dir.join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 6);
    assert!(rows[2]["test_accuracy"].is_number() && rows[1].get("test_accuracy").is_none());
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["iterations"], 6);
    assert!(summary["efficiency"].as_f64().unwrap() > 0.0);
    let trace: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("trace/worker-0.json")).unwrap(),
    )
    .unwrap();
    assert!(!trace["traceEvents"].as_array().unwrap().is_empty());
    let resolved = std::fs::read_to_string(out_dir.join("config.toml")).unwrap();
    assert!(resolved.contains("iterations = 6"));
    let ckpt = std::fs::read(out_dir.join("checkpoint.safetensors")).unwrap();
    let n = u64::from_le_bytes(ckpt[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&ckpt[8..8 + n]).unwrap();
    assert!(header.get("s00.weight").is_some() && header.get("s00.weight.opt0").is_some());
}

#[test]
fn config_prints_the_resolved_layers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.toml"),
        "workers = 5\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(["config", "--config", "c.toml", "--set", "servers=3"])
        .env("CONCORD_BATCH", "7")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let cfg: toml::Table = text.parse().unwrap();
    assert_eq!(cfg["workers"].as_integer(), Some(5));
    assert_eq!(cfg["servers"].as_integer(), Some(3));
    assert_eq!(cfg["batch"].as_integer(), Some(7));
    assert_eq!(cfg["optimizer"]["kind"].as_str(), Some("adam"));
    assert_eq!(cfg["optimizer"]["beta1"].as_float(), Some(0.9));
}

/// The printed summary gives the model's test loss: after a classifier's accuracy, and in place
/// of the accuracy a regression model (MF, whose loss is the test MSE) does not have.
#[test]
fn the_summary_prints_the_test_loss_and_an_accuracy_only_where_there_is_one() {
    let mf = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/mf.toml");
    let mf = mf.to_str().unwrap();
    for (config, classifier) in [(None, true), (Some(mf), false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["train", "--quiet", "--set", "iterations=4", "--out", "run"];
        if let Some(file) = config {
            args.extend(["--config", file]);
        }
        let out = concord(&args, dir.path());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let loss = summary_line(&stdout, "test loss").unwrap_or_else(|| panic!("{stdout}"));
        assert!(loss.parse::<f64>().is_ok_and(|l| l > 0.0), "{stdout}");
        assert_eq!(
            summary_line(&stdout, "test accuracy").is_some(),
            classifier,
            "{stdout}"
        );
    }
}

/// `concord config` checks the strategies' options as `train` does: what it prints is a config
/// that runs (it printed a typo'd option before).
#[test]
fn config_names_a_typo_in_a_strategys_options() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "config",
        "--set",
        "strategies=[\"ssp\"]",
        "--set",
        "strategy.ssp.slak=2",
    ];
    let out = concord(&args, dir.path());
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("`strategy.ssp`") && e.contains("slak") && e.contains("--set"),
        "{e}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A key the run refuses at its start (here the cluster, built when the run starts) is named
/// with the layer that set it, as the checks before the run name theirs; under `concord launch`
/// too.
#[test]
fn a_key_refused_at_the_runs_start_names_its_layer() {
    let sets = [
        "--set",
        "workers=8",
        "--set",
        "cluster.machines=[{device=\"cpu\",count=4}]",
    ];
    let mut train_args = vec!["train", "--quiet"];
    train_args.extend(sets);
    let mut launch_args = vec!["launch", "--nproc", "4"];
    launch_args.extend(train_args.iter().copied());
    for args in [train_args, launch_args] {
        let e = fails(&args);
        assert!(
            e.contains("`cluster.machines`") && e.contains("(set by --set)"),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn unknown_key_is_named() {
    let e = train(&["--set", "wrokers=3"]);
    assert!(e.contains("`wrokers`") && e.contains("--set"), "{e}");
}

#[test]
fn unknown_key_in_a_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[model]\nkind = \"mlp\"\nhiden = [3]\n").unwrap();
    let e = fails(&["train", "--config", file.to_str().unwrap()]);
    assert!(e.contains("hiden") && e.contains("bad.toml"), "{e}");
}

#[test]
fn wrong_type_is_named() {
    let e = train(&["--set", "batch=\"big\""]);
    assert!(e.contains("`batch`") && e.contains("expected u64"), "{e}");
}

#[test]
fn out_of_range_values_are_named() {
    let e = train(&["--set", "workers=0"]);
    assert!(
        e.contains("`workers` = 0") && e.contains("at least 1"),
        "{e}"
    );
    let e = train(&["--set", "optimizer.lr=-0.5"]);
    assert!(e.contains("optimizer.lr"), "{e}");
}

#[test]
fn unknown_strategy_lists_the_known_ones() {
    let e = train(&["--set", "strategies=[\"bsp\", \"fastest\"]"]);
    assert!(
        e.contains("\"fastest\"") && e.contains("strategies[1]") && e.contains("ssp"),
        "{e}"
    );
}

#[test]
fn conflicting_strategies_name_both() {
    let e = train(&["--set", "strategies=[\"bsp\", \"asp\"]"]);
    assert!(
        e.contains("`bsp`") && e.contains("`asp`") && e.contains("consistency"),
        "{e}"
    );
}

#[test]
fn options_for_a_strategy_no_one_registered_are_an_error() {
    let e = train(&["--set", "strategy.sspp.slack=2"]);
    assert!(
        e.contains("strategy.sspp") && e.contains("no strategy has that name"),
        "{e}"
    );
}

#[test]
fn missing_data_file_names_the_file() {
    let e = train(&[
        "--set",
        "data={kind=\"idx\", train_images=\"nope-images.idx\", train_labels=\"l\", test_images=\"t\", test_labels=\"u\"}",
    ]);
    assert!(e.contains("nope-images.idx"), "{e}");
}

#[test]
fn corrupt_data_file_names_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("images.idx");
    std::fs::write(&bad, [0u8, 0, 8, 1, 0, 0, 0, 1]).unwrap();
    let data = format!(
        "data={{kind=\"idx\", train_images=\"{b}\", train_labels=\"{b}\", test_images=\"{b}\", test_labels=\"{b}\"}}",
        b = bad.display()
    );
    let e = train(&["--set", &data]);
    assert!(e.contains("images.idx") && e.contains("offset"), "{e}");
}

#[test]
fn missing_config_file_is_named() {
    let e = fails(&["train", "--config", "no-such-config.toml"]);
    assert!(e.contains("no-such-config.toml"), "{e}");
}

#[test]
fn a_market_or_bench_suite_file_is_named_for_what_it_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let market = root.join("configs/market/synthetic-4w.toml");
    let e = fails(&["train", "--config", market.to_str().unwrap()]);
    assert!(
        e.contains("synthetic-4w.toml")
            && e.contains("spot market")
            && e.contains("concord market --market"),
        "{e}"
    );
    let suite = root.join("bench/smoke.toml");
    let e = fails(&["train", "--config", suite.to_str().unwrap()]);
    assert!(
        e.contains("smoke.toml") && e.contains("bench suite") && e.contains("--suite smoke"),
        "{e}"
    );
    // A run config that happens to name a trace file is still read as one.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.toml");
    std::fs::write(&file, "trace = \"off\"\nworkers = 0\n").unwrap();
    let e = fails(&["train", "--config", file.to_str().unwrap()]);
    assert!(e.contains("`workers` = 0"), "{e}");
}

#[test]
fn malformed_set_argument_shows_the_form() {
    let e = train(&["--set", "workers"]);
    assert!(e.contains("key=value"), "{e}");
}

/// A temporary working directory holding a copy of `configs/default.toml`, which the CLI reads
/// when no `--config` is given (as `cargo xtask train` does from the repository root).
fn dir_with_default_config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("configs")).unwrap();
    std::fs::copy(
        "configs/default.toml",
        dir.path().join("configs/default.toml"),
    )
    .unwrap();
    dir
}

/// `concord config` in `dir` with the `env` variables set; the resolved config.
fn resolved(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> toml::Table {
    let out = Command::new(env!("CARGO_BIN_EXE_concord"))
        .arg("config")
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} {env:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).parse().unwrap()
}

#[test]
fn an_environment_variable_switches_a_kind_over_the_file() {
    let dir = dir_with_default_config();
    let cfg = resolved(
        dir.path(),
        &[],
        &[
            ("CONCORD_MODEL__KIND", "profile"),
            ("CONCORD_MODEL__NAME", "vgg16"),
        ],
    );
    let vgg16: toml::Table = "kind = \"profile\"\nname = \"vgg16\"".parse().unwrap();
    assert_eq!(cfg["model"].as_table(), Some(&vgg16));
    // The environment's switch, completed by --set above it.
    let cfg = resolved(
        dir.path(),
        &["--set", "optimizer.lr=0.01"],
        &[("CONCORD_OPTIMIZER__KIND", "adam")],
    );
    let opt = cfg["optimizer"].as_table().unwrap();
    assert_eq!(opt["kind"].as_str(), Some("adam"));
    assert_eq!(opt["lr"].as_float(), Some(0.01));
    assert!(opt.get("momentum").is_none(), "{opt:?}");
}

#[test]
fn an_unknown_key_for_a_kind_switched_in_the_environment_names_the_variable() {
    let dir = dir_with_default_config();
    let out = Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(["config"])
        .env("CONCORD_MODEL__KIND", "profile")
        .env("CONCORD_MODEL__NAME", "vgg16")
        .env("CONCORD_MODEL__HIDEN", "3")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("hiden") && e.contains("CONCORD_"), "{e}");
}

#[test]
fn a_vgg16_throughput_job_runs_from_set_over_the_default_file() {
    for model in [
        &["--set", "model={kind=\"profile\",name=\"vgg16\"}"][..],
        &[
            "--set",
            "model.kind=\"profile\"",
            "--set",
            "model.name=\"vgg16\"",
        ][..],
    ] {
        let dir = dir_with_default_config();
        let out_dir = dir.path().join("run");
        let mut args = vec![
            "train",
            "--quiet",
            "--set",
            "workers=2",
            "--set",
            "iterations=2",
            "--out",
            out_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(model);
        let out = concord(&args, dir.path());
        assert!(
            out.status.success(),
            "{model:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["iterations"], 2, "{model:?}");
        // VGG16's ~138M fp32 parameters cross the network: far more than the default MLP's.
        assert!(
            summary["bytes_sent"].as_u64().unwrap() > 500_000_000,
            "{model:?}: {summary}"
        );
    }
}

#[test]
fn options_of_a_strategy_the_run_does_not_compose_are_named_as_unused() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let out = concord(
        &[
            "train",
            "--quiet",
            "--set",
            "iterations=2",
            "--set",
            "strategy.ssp.slack=3",
            "--out",
            out_dir.to_str().unwrap(),
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`strategy.ssp` (set by --set) is not used"),
        "{stderr}"
    );
}

/// A reader that closes the pipe before the command writes (`concord strategies | head -0`)
/// ends the command quietly: exit 0, and no panic on stderr.
#[cfg(unix)]
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe` writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just opened by `pipe` and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let out = Command::new(env!("CARGO_BIN_EXE_concord"))
        .arg("strategies")
        .stdout(write)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
