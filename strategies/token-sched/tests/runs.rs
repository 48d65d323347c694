//! End-to-end Fela runs: exactness against SGD over the global batch (F-T1), tuning, stragglers
//! absorbed by fast workers, throughput mode, determinism and bad input.

use concord_engine::config::RunConfig;
use concord_test_support::{max_diff, param_bits, slow_device, small, straggler};

mod common;
use common::{compose_err, figure, run, with};

fn fela(cfg: RunConfig, options: &str) -> RunConfig {
    with(cfg, "fela", options)
}

/// An MLP of three stages, one sub-model each.
const SPLIT: &str = "boundaries = [1, 2]\nthreshold_batch = 4\n";

/// `small` with a three-stage MLP.
fn base(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    let mut cfg = small(workers, batch, iterations);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16]").unwrap();
    cfg
}

#[test]
fn every_schedule_trains_sgd_over_the_global_batch() {
    let base = base(4, 8, 6);
    let dp = run(&base);
    let dp_params = dp.params.as_ref().expect("real model");
    for opts in [
        "weights = [1, 1, 1]",
        "weights = [1, 2, 4]",
        "weights = [1, 1, 2]\nctd_size = 1",
        "weights = [1, 2, 2]\nctd_size = 2\nctd_submodel = 2",
        "weights = [1, 2, 4]\nads = false\nhf = false",
    ] {
        let r = run(&fela(base.clone(), &format!("{SPLIT}{opts}")));
        let d = max_diff(dp_params, r.params.as_ref().expect("real model"));
        assert!(d < 1e-5, "{opts}: max |Δ| = {d}");
        assert_eq!(r.summary.iterations, 6);
    }
}

#[test]
fn a_cnn_split_between_convolutions_and_dense_layers_trains_sgd() {
    // Two conv stages and a dense one (the data's 32 features as 2 × 4 × 4): gradients cross
    // conv → conv and conv → dense cuts.
    let mut base = small(4, 8, 4);
    base.model = toml::from_str("kind = \"cnn\"\nchannels = [4, 4]\nimage = [2, 4, 4]").unwrap();
    let dp = run(&base);
    for opts in [
        "boundaries = [1]",
        "boundaries = [2]",
        "boundaries = [1, 2]",
    ] {
        let cfg = fela(base.clone(), &format!("{opts}\nthreshold_batch = 4\n"));
        let r = run(&cfg);
        let d = max_diff(dp.params.as_ref().unwrap(), r.params.as_ref().unwrap());
        assert!(d < 1e-5, "{opts}: max |Δ| = {d}");
    }
}

#[test]
fn one_worker_equals_single_process_sgd() {
    let base = base(1, 32, 4);
    let dp = run(&base);
    let r = run(&fela(base, &format!("{SPLIT}weights = [1, 1, 1]")));
    let d = max_diff(dp.params.as_ref().unwrap(), r.params.as_ref().unwrap());
    assert!(d < 1e-5, "max |Δ| = {d}");
}

/// The tuning cases a run measured (`fela.case.<k>.w<weights>.s<subset>_s` figures).
fn tuning_cases(r: &concord_engine::RunResult) -> Vec<&String> {
    r.summary
        .figures
        .keys()
        .filter(|k| k.starts_with("fela.case."))
        .collect()
}

#[test]
fn tuning_tries_every_case_and_keeps_sgd() {
    // 4 workers, 3 sub-models: six weight cases, then subsets 2 and 1: 8 cases.
    let base = base(4, 8, 18);
    let dp = run(&base);
    let r = run(&fela(base, &format!("{SPLIT}tune_iters = 2")));
    let d = max_diff(dp.params.as_ref().unwrap(), r.params.as_ref().unwrap());
    assert!(d < 1e-5, "max |Δ| = {d}");
    assert_eq!(tuning_cases(&r).len(), 8, "{:?}", r.summary.figures);
}

#[test]
fn tuning_skips_weights_that_do_not_divide_the_tokens() {
    // 6 workers, X = 12 samples, threshold 4: n_1 = max(12 / 4, 6) = 6 level-1 tokens. Weight 4
    // does not divide them, so of the six weight cases only {1, 1, 1}, {1, 1, 2} and {1, 2, 2}
    // run; then the best weights with CTD subsets of 3 and 1 workers: five cases.
    let base = base(6, 2, 12);
    let dp = run(&base);
    let r = run(&fela(base, &format!("{SPLIT}tune_iters = 2")));
    let d = max_diff(dp.params.as_ref().unwrap(), r.params.as_ref().unwrap());
    assert!(d < 1e-5, "max |Δ| = {d}");
    let cases = tuning_cases(&r);
    assert!(cases.iter().all(|k| !k.contains("-4")), "{cases:?}");
    assert_eq!(cases.len(), 5, "{cases:?}");
}

#[test]
fn a_slow_worker_takes_fewer_tokens() {
    // Compute-bound cores, so token times dwarf the messages' latency.
    let mut cfg = base(4, 64, 3);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [256, 256]").unwrap();
    let cores = concord_test_support::on_device(cfg, "core", slow_device(4.0));
    let mut cfg = fela(cores, &format!("{SPLIT}weights = [1, 1, 1]"));
    cfg.stragglers = vec![straggler(
        "pattern = \"persistent\"\nspeeds = [0.25, 1.0, 1.0, 1.0]",
    )];
    let r = run(&cfg);
    let slow = figure(&r, "fela.tokens.worker-0");
    let fast = (1..4)
        .map(|w| figure(&r, &format!("fela.tokens.worker-{w}")))
        .fold(f64::INFINITY, f64::min);
    assert!(slow < fast, "slow {slow} vs fast {fast}");
    assert!(figure(&r, "fela.steals") > 0.0);
}

#[test]
fn same_seed_same_bits() {
    let cfg = fela(base(4, 8, 3), &format!("{SPLIT}weights = [1, 2, 2]"));
    assert_eq!(param_bits(&run(&cfg)), param_bits(&run(&cfg)));
}

#[test]
fn throughput_mode_runs_a_profile() {
    let mut cfg = fela(
        base(8, 8, 3),
        "boundaries = [8, 16]\nthreshold_batch = 16\nweights = [1, 2, 8]",
    );
    cfg.model = toml::from_str("kind = \"profile\"\nname = \"vgg19\"").unwrap();
    cfg.cluster.default_device = "k40c".into();
    let r = run(&cfg);
    assert_eq!(r.summary.iterations, 3);
    assert!(figure(&r, "fela.remote_fetch_bytes") > 0.0);
    assert_eq!(figure(&r, "fela.tokens"), 3.0 * (8.0 + 4.0 + 1.0));
}

#[test]
fn bad_input_names_the_key() {
    let e = compose_err(&fela(base(4, 8, 2), &format!("{SPLIT}weights = [1, 3, 4]")));
    assert!(e.contains("strategy.fela.weights"), "{e}");
    let e = compose_err(&fela(
        base(8, 12, 2),
        "boundaries = [1, 2]\nthreshold_batch = 8\nweights = [1, 8, 8]\n",
    ));
    assert!(e.contains("does not divide"), "{e}");
    let e = compose_err(&fela(base(4, 8, 2), "boundaries = [1, 2, 3]"));
    assert!(
        e.contains("strategy.fela.boundaries") && e.contains("only 3 stages"),
        "{e}"
    );
    let e = compose_err(&fela(base(4, 8, 2), &format!("{SPLIT}weights = [1, 1]")));
    assert!(e.contains("one weight per sub-model"), "{e}");
    let mut cfg = fela(base(4, 8, 2), SPLIT);
    cfg.strategies.push("ssp".into());
    let e = compose_err(&cfg);
    assert!(e.contains("fela") && e.contains("ssp"), "{e}");
}
