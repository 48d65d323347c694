//! Matrix factorization (MF) on synthetic ratings: trains through the generic engine paths.

mod common;

use common::*;
use concord::engine::config::RunConfig;
use concord::engine::model::{ModelSpec, Replica};

/// `configs/mf.toml` with `workers`, `batch`, `iterations` and `lr` set.
fn mf_full(workers: u32, batch: u64, iterations: u64, lr: f64) -> RunConfig {
    let sets: Vec<String> = vec![
        format!("workers={workers}"),
        format!("batch={batch}"),
        format!("iterations={iterations}"),
        format!("eval_every={iterations}"),
        format!("optimizer.lr={lr}"),
    ];
    concord::config::load(Some("configs/mf.toml".as_ref()), &sets).expect("valid MF config")
}

/// A small MF run from `configs/mf.toml`: a 400 × 200 rank-5 matrix, 10 % observed.
fn mf(workers: u32, batch: u64, iterations: u64, lr: f64) -> RunConfig {
    let sets: Vec<String> = [
        format!("workers={workers}"),
        format!("batch={batch}"),
        format!("iterations={iterations}"),
        format!("eval_every={iterations}"),
        format!("optimizer.lr={lr}"),
        "data.rows=400".into(),
        "data.cols=200".into(),
        "data.rank=5".into(),
        "data.observed=0.1".into(),
        "model.rank=5".into(),
    ]
    .into();
    concord::config::load(Some("configs/mf.toml".as_ref()), &sets).expect("valid MF config")
}

/// Test MSE of the run's initial parameters.
fn initial_mse(cfg: &RunConfig) -> f64 {
    let split = cfg.data.load(cfg.seed).unwrap();
    let spec = ModelSpec::resolve_for_data(&cfg.model, &cfg.data, &split.train).unwrap();
    let replica = Replica::cpu(&spec).unwrap().unwrap();
    replica
        .set_params(&spec.init_values(cfg.seed).unwrap())
        .unwrap();
    let (acc, mse) = replica
        .evaluate(&split.test.features, &split.test.labels)
        .unwrap();
    assert_eq!(acc, None, "MF has no accuracy");
    mse
}

#[test]
fn bsp_training_lowers_the_test_mse() {
    // The shipped config's data and step size on 4 workers, half its iterations.
    let cfg = mf_full(4, 1024, 150, 40.0);
    let before = initial_mse(&cfg);
    let r = run(&cfg);
    let after = r.summary.final_test_loss.expect("evaluated");
    assert!(before > 0.5, "initial test MSE {before}");
    assert!(
        after < 0.5 * before,
        "test MSE {before} -> {after}: not halved"
    );
    assert_eq!(r.summary.final_test_accuracy, None);
    assert!(r.rows.iter().all(|row| row.test_accuracy.is_none()));
    let names: Vec<&str> = r
        .params
        .as_ref()
        .unwrap()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["mf.L", "mf.R"]);
}

#[test]
fn four_workers_equal_one_worker_with_four_times_the_batch() {
    let four = run(&mf(4, 8, 20, 0.5)).params.unwrap();
    let one = run(&mf(1, 32, 20, 0.5)).params.unwrap();
    let diff = max_diff(&four, &one);
    assert!(diff <= 1e-5, "4 x 8 and 1 x 32 differ by {diff}");
    let init = run(&mf(1, 32, 1, 0.5)).params.unwrap();
    assert!(max_diff(&four, &init) > 1e-3, "training moved nothing");
}

/// The error of running `configs/mf.toml` (or the defaults, when `file` is `None`) with `sets`.
fn error_of(file: Option<&str>, sets: &[&str]) -> String {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let cfg = match concord::config::load(file.map(AsRef::as_ref), &sets) {
        Ok(cfg) => cfg,
        Err(e) => return e.to_string(),
    };
    let asm = concord::registry().compose(&cfg).expect("composes");
    match concord::engine::run(&cfg, &asm, Default::default()) {
        Ok(_) => panic!("{sets:?} ran"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_mf_configs_name_the_key() {
    // MF on the default teacher data; the default MLP on ratings data.
    let e = error_of(None, &["model.kind=mf"]);
    assert!(e.contains("model.kind") && e.contains("teacher"), "{e}");
    let e = error_of(None, &["data.kind=ratings"]);
    assert!(e.contains("data.kind") && e.contains("mlp"), "{e}");
    for (sets, key) in [
        (&["model.rank=0"][..], "model.rank"),
        (&["model.l2=-0.5"][..], "model.l2"),
        (&["data.observed=0"][..], "observed"),
        (&["data.observed=1.5"][..], "observed"),
        (&["data.test_fraction=1"][..], "test_fraction"),
        (&["data.noise=-1"][..], "noise"),
        (&["data.rank=0"][..], "rank"),
    ] {
        let e = error_of(Some("configs/mf.toml"), sets);
        assert!(e.contains(key), "{sets:?}: {e}");
    }
}
