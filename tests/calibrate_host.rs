//! `concord calibrate --host`: which of `--from` and `--host` it takes, and a quick measurement
//! whose profile a simulated run of the default config accepts.

mod common;

use common::concord;
use std::path::Path;

fn stderr_of(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = concord(args, dir.path());
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The output of `args`, which must succeed, run in `dir`.
fn calibrated(args: &[&str], dir: &Path) -> String {
    let out = concord(args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn calibrate_needs_exactly_one_of_from_and_host() {
    let e = stderr_of(&["calibrate"]);
    assert!(e.contains("--from") && e.contains("--host"), "{e}");
    let e = stderr_of(&["calibrate", "--host", "--from", "m.json"]);
    assert!(
        e.contains("--from") && e.contains("--host") && e.contains("cannot be used with"),
        "{e}"
    );
}

#[test]
fn host_options_and_from_options_do_not_mix() {
    for host_only in [
        &["--quick"][..],
        &["--name", "cpu2"],
        &["--config", "c.toml"],
        &["--processes", "2"],
    ] {
        let mut args = vec!["calibrate", "--from", "m.json"];
        args.extend_from_slice(host_only);
        let e = stderr_of(&args);
        assert!(
            e.contains(host_only[0]) && e.contains("--from") && e.contains("cannot be used with"),
            "{e}"
        );
    }
    let e = stderr_of(&["calibrate", "--host", "--device", "h100"]);
    assert!(e.contains("--device") && e.contains("--host"), "{e}");
    let e = stderr_of(&["calibrate", "--host", "--quick", "--name", "my host"]);
    assert!(e.contains("--name") && e.contains("my host"), "{e}");
    let e = stderr_of(&["calibrate", "--host", "--quick", "--processes", "0"]);
    assert!(e.contains("--processes") && e.contains("0"), "{e}");
}

#[test]
fn a_config_without_layers_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("vgg.toml");
    std::fs::write(&cfg, "[model]\nkind = \"profile\"\nname = \"vgg16\"\n").unwrap();
    let out = concord(
        &["calibrate", "--host", "--quick", "--config", "vgg.toml"],
        dir.path(),
    );
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("vgg.toml") && e.contains("throughput-mode"),
        "{e}"
    );
}

#[test]
fn a_quick_host_profile_runs_the_default_config_in_sim() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = calibrated(
        &["calibrate", "--host", "--quick", "--out", "host.toml"],
        dir.path(),
    );
    // One compute thread unless the test's environment says otherwise; the default model and
    // the larger reference MLP measured (the small one is the default model's shape).
    assert!(stdout.contains("compute threads:"), "{stdout}");
    assert!(stdout.contains("mlp-784-1024-1024-10"), "{stdout}");
    assert!(!stdout.contains("mlp-32-64-10"), "{stdout}");
    assert!(stdout.contains("loopback TCP"), "{stdout}");
    // Everything printed is TOML (the figures as comments): the same profile as the file.
    let printed: toml::Table = stdout.parse().unwrap();
    let profile = std::fs::read_to_string(dir.path().join("host.toml")).unwrap();
    let written: toml::Table = profile.parse().unwrap();
    assert_eq!(printed, written);
    let device = &written["cluster"]["devices"]["host"];
    assert_eq!(device["backend"].as_str(), Some("cpu"));
    assert!(
        device["layers"]["fp32"]["matmul_tflops"]
            .as_float()
            .unwrap()
            > 0.0
    );
    // What a message adds to a receiver that waited: one figure per wait, none negative.
    let wake = &device["wake"];
    let idle = wake["idle_us"].as_array().unwrap();
    let extra = wake["extra_us"].as_array().unwrap();
    assert_eq!(idle.len(), extra.len());
    assert!(!idle.is_empty());
    assert!(extra.iter().all(|e| e.as_float().unwrap() >= 0.0), "{wake}");
    // The default config with the profile appended, run on it.
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/default.toml");
    let combined = std::fs::read_to_string(default).unwrap() + "\n" + &profile;
    std::fs::write(dir.path().join("on-host.toml"), combined).unwrap();
    let run = concord(
        &[
            "train",
            "--quiet",
            "--config",
            "on-host.toml",
            "--set",
            "cluster.default_device=\"host\"",
            "--set",
            "iterations=2",
            "--out",
            "run",
        ],
        dir.path(),
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let resolved = std::fs::read_to_string(dir.path().join("run/config.toml")).unwrap();
    assert!(resolved.contains("default_device = \"host\""), "{resolved}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["iterations"], 2);
}

/// The rows of the printed fit (`# model mode batch measured_ms predicted_ms error`).
fn fitted_rows(stdout: &str) -> Vec<&str> {
    let table = stdout
        .split("points, fitted:")
        .nth(1)
        .expect("the fit's table");
    table
        .lines()
        .skip(2)
        .take_while(|l| l.contains("fp32"))
        .collect()
}

/// The model a row of the fit is of.
fn model_of(row: &str) -> &str {
    row.trim_start_matches('#')
        .split_whitespace()
        .next()
        .unwrap_or_default()
}

#[test]
fn a_large_model_is_measured_beside_the_small_reference_and_once() {
    // Fitted on one size alone, the step's split between its fixed cost per operation and its
    // arithmetic is free: the small MLP is measured beside a large config's model, and the
    // larger reference MLP, which is that model's shape, is not measured twice.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("large.toml"),
        "workers = 2\nservers = 2\n[model]\nkind = \"mlp\"\nhidden = [1024, 1024]\n\
         [data]\nkind = \"teacher\"\ndim = 784\n",
    )
    .unwrap();
    let stdout = calibrated(
        &["calibrate", "--host", "--quick", "--config", "large.toml"],
        dir.path(),
    );
    let rows = fitted_rows(&stdout);
    let count = |name: &str| rows.iter().filter(|r| model_of(r) == name).count();
    // --quick measures batches 8, 32 and 128.
    assert_eq!(count("large.toml"), 3, "{stdout}");
    assert_eq!(count("mlp-32-64-10"), 3, "{stdout}");
    assert_eq!(rows.len(), 6, "{stdout}");
    // The profile charges the small model's steps what they took, within noise (fitted on the
    // large one alone, it charged them some fifty times as much).
    for row in rows.iter().filter(|r| model_of(r) == "mlp-32-64-10") {
        let cols: Vec<f64> = row
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        let (measured, predicted) = (cols[1], cols[2]);
        assert!(
            predicted < 2.0 * measured && measured < 2.0 * predicted,
            "{row}\n{stdout}"
        );
    }
}
