//! End-to-end runs of Fela's baselines: `fela-mp` (pipeline) and `fela-hp` (hybrid) train
//! exactly the SGD step of BSP data parallelism over the global batch, in `sim` and `wall`; they
//! run the paper's VGG19 in throughput mode, where the pipeline is slower than data
//! parallelism; same seed, same bits; bad input names its cause.

use concord_engine::config::RunConfig;
use concord_engine::context::RuntimeKind;
use concord_test_support::{max_diff, param_bits, small, with_runtime};

mod common;
use common::{compose_err, figure, run, with};

/// `small` with a three-stage MLP.
fn mlp(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    let mut cfg = small(workers, batch, iterations);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16]").unwrap();
    cfg
}

/// `small` with a CNN: two conv stages, then a dense one (the data's 32 features as 2×4×4).
fn cnn(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    let mut cfg = small(workers, batch, iterations);
    cfg.model = toml::from_str("kind = \"cnn\"\nchannels = [4, 4]\nimage = [2, 4, 4]").unwrap();
    cfg
}

/// Runs `strategy` with each of `options` and the default BSP data parallelism on `base`, and
/// checks the final parameters agree.
fn equals_bsp(base: RunConfig, strategy: &str, options: &[&str]) {
    let dp = run(&base);
    let dp_params = dp.params.as_ref().expect("real model");
    for opts in options {
        let r = run(&with(base.clone(), strategy, opts));
        let d = max_diff(dp_params, r.params.as_ref().expect("real model"));
        assert!(d < 1e-5, "{strategy} {opts}: max |Δ| = {d}");
        assert_eq!(r.summary.iterations, base.iterations);
        // Every worker reports the iteration's loss: the merged rows have the DP loss.
        let (a, b) = (dp.summary.final_loss, r.summary.final_loss);
        assert!((a - b).abs() < 1e-4, "{strategy} {opts}: loss {b} vs {a}");
    }
}

#[test]
fn mp_trains_sgd_over_the_global_batch() {
    // X = 24: micro-batches of 8 divide it, 5 leaves a last one of 4, 64 is one micro-batch.
    equals_bsp(
        mlp(3, 8, 5),
        "fela-mp",
        &["micro_batch = 8", "micro_batch = 5", "micro_batch = 64"],
    );
    // Two stages over three layers, balanced or set by hand.
    equals_bsp(
        mlp(2, 8, 4),
        "fela-mp",
        &["micro_batch = 3", "boundaries = [2]"],
    );
    // Conv activations between stages.
    equals_bsp(cnn(3, 4, 4), "fela-mp", &["micro_batch = 4"]);
    // One worker: the whole model, micro-batched.
    equals_bsp(mlp(1, 16, 3), "fela-mp", &["micro_batch = 6"]);
}

#[test]
fn hp_trains_sgd_over_the_global_batch() {
    // Three conv workers sharing X = 20 unevenly (7, 7, 6), the dense stage on worker 3.
    equals_bsp(cnn(4, 5, 4), "fela-hp", &["", "fc_from = 1"]);
    // An MLP with the FC block set by hand; one conv worker (no allreduce).
    equals_bsp(mlp(2, 8, 4), "fela-hp", &["fc_from = 1", "fc_from = 2"]);
    equals_bsp(mlp(3, 8, 4), "fela-hp", &["fc_from = 2"]);
}

#[test]
fn both_are_exact_in_wall_time() {
    let base = with_runtime(cnn(3, 4, 3), RuntimeKind::Wall);
    equals_bsp(base.clone(), "fela-mp", &["micro_batch = 4"]);
    equals_bsp(base, "fela-hp", &[""]);
}

#[test]
fn same_seed_same_bits() {
    for (strategy, opts) in [("fela-mp", "micro_batch = 5"), ("fela-hp", "")] {
        let cfg = with(cnn(3, 8, 3), strategy, opts);
        assert_eq!(param_bits(&run(&cfg)), param_bits(&run(&cfg)), "{strategy}");
    }
}

/// VGG19 on 8 K40c-class workers in throughput mode.
fn vgg19(batch: u64) -> RunConfig {
    let mut cfg = small(8, batch, 3);
    cfg.model = toml::from_str("kind = \"profile\"\nname = \"vgg19\"").unwrap();
    cfg.cluster.default_device = "k40c".into();
    cfg
}

#[test]
fn throughput_mode_runs_vgg19_and_the_pipeline_is_slower_than_dp() {
    let dp = run(&vgg19(32));
    let mp = run(&with(vgg19(32), "fela-mp", ""));
    let hp = run(&with(vgg19(32), "fela-hp", ""));
    for r in [&dp, &mp, &hp] {
        assert_eq!(r.summary.iterations, 3);
        assert!(r.summary.time_per_iteration_s > 0.0);
    }
    // 16 micro-batches of 16 through 8 stages: most workers idle much of the iteration.
    assert_eq!(figure(&mp, "fela-mp.micro_batches"), 16.0);
    assert!(
        figure(&mp, "fela-mp.bubble_share") > 0.3,
        "{:?}",
        mp.summary.figures
    );
    let (t_dp, t_mp) = (
        dp.summary.time_per_iteration_s,
        mp.summary.time_per_iteration_s,
    );
    assert!(t_mp > t_dp, "MP {t_mp} s vs DP {t_dp} s per iteration");
    // HP's FC block starts at VGG19's fc6 (layer 16).
    assert_eq!(figure(&hp, "fela-hp.fc_from"), 16.0);
}

#[test]
fn bad_input_names_the_cause() {
    let e = compose_err(&with(mlp(4, 8, 2), "fela-mp", ""));
    assert!(e.contains("workers") && e.contains("only 3 stages"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "fela-mp", "micro_batch = 0"));
    assert!(e.contains("strategy.fela-mp.micro_batch"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "fela-mp", "boundaries = [1]"));
    assert!(e.contains("strategy.fela-mp.boundaries"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "fela-mp", "boundaries = [2, 1]"));
    assert!(e.contains("strategy.fela-mp.boundaries"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "fela-mp", "micro_batches = 4"));
    assert!(e.contains("micro_batches"), "{e}");
    let e = compose_err(&with(mlp(1, 8, 2), "fela-hp", "fc_from = 1"));
    assert!(e.contains("workers") && e.contains("at least 2"), "{e}");
    // An MLP is all dense: no conv part unless fc_from says where the FC block starts.
    let e = compose_err(&with(mlp(3, 8, 2), "fela-hp", ""));
    assert!(e.contains("strategy.fela-hp.fc_from"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "fela-hp", "fc_from = 0"));
    assert!(e.contains("strategy.fela-hp.fc_from"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "fela-hp", "fc_from = 3"));
    assert!(e.contains("strategy.fela-hp.fc_from"), "{e}");
    for (strategy, opts) in [("fela-mp", ""), ("fela-hp", "fc_from = 1")] {
        let mut cfg = with(small(2, 8, 2), strategy, opts);
        cfg.data = toml::from_str("kind = \"ratings\"").unwrap();
        cfg.model = toml::from_str("kind = \"mf\"").unwrap();
        let e = compose_err(&cfg);
        assert!(e.contains("model.kind") && e.contains(strategy), "{e}");
        let mut cfg = with(mlp(2, 8, 2), strategy, opts);
        cfg.strategies.push("ssp".into());
        let e = compose_err(&cfg);
        assert!(e.contains(strategy) && e.contains("ssp"), "{e}");
    }
}
