//! Calibrated devices end to end: a run charges a training step by the per-layer model, and
//! `concord calibrate` prints a profile a config can use, or fails without writing anything.

mod common;

use common::*;
use concord::engine::cluster::DeviceProfile;
use concord::engine::config::RunConfig;
use concord::engine::layer_model::Precision;
use concord::engine::model::ModelConfig;
use std::process::ExitCode;

fn one_step(device: DeviceProfile, batch: u64) -> f64 {
    let mut cfg = RunConfig {
        workers: 1,
        servers: 1,
        batch,
        iterations: 1,
        eval_every: 1,
        strategies: vec!["bsp".into()],
        model: ModelConfig::Profile {
            name: "vgg16".into(),
        },
        stragglers: Vec::new(),
        ..RunConfig::default()
    };
    cfg.cluster.devices.insert("g".into(), device);
    cfg.cluster.default_device = "g".into();
    run(&cfg).worker_records[0][0].compute_s
}

#[test]
fn a_run_charges_a_training_step_by_the_layer_model() {
    let vgg: Vec<_> = concord::engine::profiles::vgg16()
        .layers
        .iter()
        .map(|l| l.cost)
        .collect();
    for p in Precision::ALL {
        let d = DeviceProfile {
            precision: Some(p),
            ..DeviceProfile::builtins()["h200"].clone()
        };
        let want = d.layer_rates().unwrap().step_seconds(&vgg, 32.0);
        let flops = d.compute_seconds(
            3.0 * concord::engine::profiles::vgg16().forward_flops(),
            32.0,
        );
        assert!(
            (want - flops).abs() > 1e-3,
            "{p}: the layer model is not the FLOP model"
        );
        // The clock record is read off the virtual clock, which ticks in 0.1 µs.
        let got = one_step(d, 32);
        assert!(
            (got - want).abs() < 1e-6,
            "{p}: charged {got}, model {want}"
        );
    }
}

#[test]
fn calibrate_prints_a_usable_profile_and_writes_nothing_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dev.toml");
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"[{"model": "vgg16", "mode": "fp32", "batch": 8, "ms_per_step": 22.1},
            {"model": "lenet", "mode": "fp32", "batch": 8, "ms_per_step": 1.0}]"#,
    )
    .unwrap();
    let argv = |from: &std::path::Path| {
        [
            "concord",
            "calibrate",
            "--from",
            from.to_str().unwrap(),
            "--device",
            "mine",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(std::ffi::OsString::from)
    };
    assert_eq!(concord::cli::main_with(argv(&bad)), ExitCode::FAILURE);
    assert!(!out.exists());

    let good = concord_root().join("bench/calibration/h200-torch-sweep.json");
    assert_eq!(concord::cli::main_with(argv(&good)), ExitCode::SUCCESS);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("[cluster.devices.mine]"), "{text}");
    let cfg: toml::Value = toml::from_str(&text).unwrap();
    let device: DeviceProfile = cfg["cluster"]["devices"]["mine"]
        .clone()
        .try_into()
        .unwrap();
    assert_eq!(device.precision, Some(Precision::Fp32));
    assert_eq!(device.layers.unwrap().modes(), Precision::ALL.to_vec());
}

fn concord_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_device_based_on_a_builtin_runs_as_the_builtin_with_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.toml");
    std::fs::write(
        &path,
        "[cluster.devices.h200-bf16]\nbase = \"h200\"\nprecision = \"bf16\"\n",
    )
    .unwrap();
    let sets = ["cluster.devices.h200-bf16.nic_gbps=100".to_string()];
    let cfg = concord::config::load(Some(&path), &sets).unwrap();
    let want = DeviceProfile {
        precision: Some(Precision::Bf16),
        nic_gbps: 100.0,
        ..DeviceProfile::builtins()["h200"].clone()
    };
    let got = &cfg.cluster.devices["h200-bf16"];
    assert_eq!(got, &want);
    assert_eq!(one_step(got.clone(), 32), one_step(want, 32));
    // What a run folder keeps is the whole profile, which reads back the same without the base.
    let written = toml::to_string(&cfg).unwrap();
    assert!(!written.contains("base"), "{written}");
    let again = concord::config::load_resumed(&written, &[]).unwrap().config;
    assert_eq!(again.cluster.devices, cfg.cluster.devices);
}
