//! FlexRR (Harlap thesis ch. 3): exactly-once processing of every (clock, unit) under heavy
//! reassignment (spec §4.5 claim 10), the SSP bound under RapidReassignment (claim 11), the
//! equivalence of BSP RR and BSP, determinism, partial replication, uneven work, and start-up
//! errors.

mod common;

use common::{max_diff, run, straggler};
use concord::engine::config::RunConfig;
use concord::engine::context::RuntimeKind;
use concord::engine::optim::OptimizerConfig;
use concord::engine::run::RunResult;

/// 8 workers on 4 machines of 2 cores, MLR on the teacher task, 20 units of 2 samples per
/// clock, on slow simulated cores so a unit costs about 10 ms.
fn base(options: &str) -> RunConfig {
    let units = if options.contains("units") {
        ""
    } else {
        "units = 20"
    };
    let text = format!(
        r#"
        seed = 7
        workers = 8
        servers = 2
        batch = 40
        iterations = 12
        eval_every = 4
        strategies = ["flexrr"]
        [strategy.flexrr]
        {units}
        {options}
        [model]
        kind = "mlr"
        [data]
        kind = "teacher"
        train = 2048
        test = 256
        [optimizer]
        kind = "sgd"
        lr = 1.6
        momentum = 0.0
        [cluster]
        default_device = "core"
        machines = [{{ device = "core", count = 4, slots = 2 }}]
        [cluster.devices.core]
        peak_tflops = 0.0000004
        efficiency = 1.0
        memory_gib = 1.0
        nic_gbps = 1.0
        latency_us = 50.0
        "#
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("flexrr.toml");
    std::fs::write(&path, text).expect("write config");
    concord::config::load(Some(&path), &[]).expect("valid test config")
}

/// Heavy, frequent slowdowns so that work moves all the time.
fn straggling(mut cfg: RunConfig) -> RunConfig {
    cfg.stragglers = vec![
        straggler("pattern = \"slow-worker\"\ndelay = 3.0\nprobability = 0.1"),
        straggler("pattern = \"jitter\"\nsigma = 0.2\nper_iteration = true"),
    ];
    cfg
}

fn figure(r: &RunResult, name: &str) -> f64 {
    r.summary
        .figures
        .get(&format!("flexrr.{name}"))
        .copied()
        .unwrap_or_else(|| panic!("figure {name} missing: {:?}", r.summary.figures))
}

fn params(r: &RunResult) -> &[(String, Vec<f32>)] {
    r.params.as_deref().expect("real model")
}

/// Claim 10: every unit of every worker's every clock is processed exactly once, however much
/// work moves, in virtual and in wall-clock time. (The coordinator's ledger fails the run on a
/// doubled or missing unit; its own tests show that it does.)
#[test]
fn every_unit_is_processed_exactly_once_under_heavy_reassignment() {
    for runtime in [RuntimeKind::Sim, RuntimeKind::Wall] {
        let mut cfg = straggling(base(""));
        cfg.runtime = runtime;
        if runtime == RuntimeKind::Wall {
            cfg.iterations = 4;
        }
        let r = run(&cfg);
        let units = 8.0 * 20.0 * cfg.iterations as f64;
        assert_eq!(figure(&r, "units_verified"), units, "{runtime:?}");
        if runtime == RuntimeKind::Sim {
            let share = figure(&r, "reassigned_share");
            assert!(share > 0.05, "work must really move: {share}");
            assert!(figure(&r, "follow_ups") > 0.0);
            // What moving a unit costs: the protocol's messages, the helper's flush and its
            // acknowledgement, each at least once per range.
            assert!(figure(&r, "messages_per_reassigned_unit") > 0.0);
            assert!(figure(&r, "bytes_per_reassigned_unit") > 0.0);
            assert!(
                figure(&r, "cancelled") > 0.0,
                "the cancel path must be exercised"
            );
        }
    }
}

/// Claim 11: with RapidReassignment no worker ever works more than `s` clocks ahead of the
/// slowest: when a worker starts the work of clock `c` (its read has returned), every worker
/// has finished clock `c − s − 1`, helped ranges included; and every read is as fresh as SSP
/// asks.
#[test]
fn the_ssp_bound_holds_under_rapid_reassignment() {
    for slack in [0u64, 1, 2] {
        let r = run(&straggling(base(&format!("slack = {slack}"))));
        for (w, records) in r.worker_records.iter().enumerate() {
            for rec in records {
                // The read: the consistency wait, then the transfer.
                let work_start = rec.start_s + rec.wait_s + rec.comm_s;
                assert!(rec.version_read >= rec.clock as i64 - slack as i64 - 1);
                let Ok(need) = usize::try_from(rec.clock as i64 - slack as i64 - 1) else {
                    continue;
                };
                for (v, others) in r.worker_records.iter().enumerate() {
                    let done: &concord::engine::metrics::IterRecord = &others[need];
                    assert!(
                        done.end_s <= work_start,
                        "s = {slack}: worker {w} started clock {} at {work_start} before worker {v} finished clock {need} at {}",
                        rec.clock,
                        done.end_s
                    );
                }
            }
        }
        for read in &r.reads {
            assert!(read.min_version.is_none_or(|m| read.version >= m));
        }
        assert!(figure(&r, "reassigned_share") > 0.0, "s = {slack}");
    }
}

/// Without read-my-writes every unit of a clock is computed on the values read at its start, so
/// BSP RR is synchronous SGD whatever moves: it equals BSP in the same system, and the engine's
/// BSP at the same rate (a clock moves lr times the mean gradient of all units). A lost or doubled
/// unit would show.
#[test]
fn bsp_rr_without_read_my_writes_is_exactly_bsp() {
    let opts = |rr: bool| format!("slack = 0\nread_my_writes = false\nreassignment = {rr}");
    let rr = run(&straggling(base(&opts(true))));
    assert!(figure(&rr, "reassigned_share") > 0.05);
    let plain = run(&straggling(base(&opts(false))));
    assert_eq!(figure(&plain, "reassigned_share"), 0.0);
    let d = max_diff(params(&rr), params(&plain));
    assert!(d < 1e-5, "BSP RR vs BSP: {d}");
    assert!(
        rr.summary.time_per_iteration_s < plain.summary.time_per_iteration_s,
        "reassignment shortens BSP's iterations"
    );

    let mut engine = base("");
    engine.strategies = vec!["bsp".into()];
    engine.strategy.clear();
    let reference = run(&engine);
    let d = max_diff(params(&plain), params(&reference));
    assert!(d < 1e-5, "flexrr BSP vs engine BSP: {d}");
}

/// Same seed, same bits: parameters, losses, timings and figures.
#[test]
fn runs_are_deterministic() {
    let a = run(&straggling(base("")));
    let b = run(&straggling(base("")));
    assert_eq!(params(&a), params(&b));
    assert_eq!(
        a.summary.run_time_s.to_bits(),
        b.summary.run_time_s.to_bits()
    );
    assert_eq!(a.summary.figures, b.summary.figures);
    let losses = |r: &RunResult| r.rows.iter().map(|x| x.loss.to_bits()).collect::<Vec<_>>();
    assert_eq!(losses(&a), losses(&b));
}

/// Partial replication: helpers only take units from the prefetched tail (a helper rejects any
/// other range as a protocol error), and help still happens at ρ = 25 %.
#[test]
fn partial_replication_limits_help_to_the_prefetched_tail() {
    let r = run(&straggling(base("replication = 0.25")));
    let share = figure(&r, "reassigned_share");
    assert!(share > 0.0 && share <= 0.25, "{share}");
    assert_eq!(figure(&r, "units_verified"), 8.0 * 20.0 * 12.0);
}

/// The uneven workload moves data items, not speed: heavy machines get 75 % of the units, and
/// help evens out the iteration times.
#[test]
fn uneven_workload_is_a_data_skew_that_help_evens_out() {
    let uneven = "uneven = { fraction_machines = 0.5, share = 0.75 }";
    let with = run(&base(uneven));
    // Heavy machines 0 and 2 (workers 0, 1, 4, 5) have 30 units, light ones 10.
    assert_eq!(
        figure(&with, "units_verified"),
        (4.0 * 30.0 + 4.0 * 10.0) * 12.0
    );
    assert!(figure(&with, "reassigned_share") > 0.1);
    let without = run(&base(&format!("{uneven}\nreassignment = false")));
    let even = run(&base(""));
    let (t_rr, t_ssp, t_even) = (
        with.summary.time_per_iteration_s,
        without.summary.time_per_iteration_s,
        even.summary.time_per_iteration_s,
    );
    assert!(
        t_ssp > 1.3 * t_even,
        "SSP suffers the skew: {t_ssp} vs {t_even}"
    );
    assert!(t_rr < 1.15 * t_even, "FlexRR ≈ even: {t_rr} vs {t_even}");
}

/// `base` on cores `speedup` times faster (a unit takes about 10 ms / `speedup`).
fn on_fast_cores(mut cfg: RunConfig, speedup: f64) -> RunConfig {
    for device in cfg.cluster.devices.values_mut() {
        device.peak_tflops *= speedup;
    }
    cfg
}

/// One learning-rate rule for every strategy: a clock moves the model by `lr` times the mean
/// gradient of its global batch. The same config (an MLP, no momentum) trains under FlexRR, with
/// work moving, and under the engine's BSP, to about the same loss; under the former rule
/// (every unit's delta at the full rate) FlexRR would take 160 times BSP's step and diverge.
#[test]
fn the_same_config_trains_under_flexrr_and_bsp() {
    let mut flexrr = straggling(base(""));
    flexrr.model = concord::engine::model::ModelConfig::Mlp { hidden: vec![32] };
    flexrr.iterations = 40;
    flexrr.eval_every = 40;
    flexrr.optimizer = OptimizerConfig::Sgd {
        lr: 0.5,
        momentum: 0.0,
        weight_decay: 0.0,
    };
    let mut bsp = flexrr.clone();
    bsp.strategies = vec!["bsp".into()];
    bsp.strategy.clear();
    let (f, b) = (run(&flexrr), run(&bsp));
    assert!(figure(&f, "reassigned_share") > 0.05);
    let first = |r: &RunResult| r.rows.first().expect("rows").loss;
    // The training loss of the last five clocks (one clock's mini-batches are noisy).
    let last = |r: &RunResult| {
        r.rows[r.rows.len() - 5..]
            .iter()
            .map(|x| x.loss)
            .sum::<f64>()
            / 5.0
    };
    for (name, r) in [("flexrr", &f), ("bsp", &b)] {
        assert!(
            last(r) < 0.6 * first(r),
            "{name} trains: {} → {}",
            first(r),
            last(r)
        );
    }
    let gap = (last(&f) - last(&b)).abs() / last(&b);
    assert!(gap < 0.1, "flexrr {} vs bsp {}", last(&f), last(&b));
}

/// Message checks cost at most `max_check_share` of a worker's compute: on cores where a unit
/// takes about as long as a check, a clock makes fewer checks than its units; with the share
/// at 1, one per unit (the default: the thesis's 100, at most one per unit).
#[test]
fn message_checks_stay_within_their_share_of_compute() {
    let fast = |options: &str| on_fast_cores(base(options), 100.0);
    let capped = run(&fast(""));
    let checks = figure(&capped, "checks_per_worker_clock");
    let cost = 20e-6;
    for records in &capped.worker_records {
        for pair in records.windows(2) {
            // Each clock's checks are paid for by the previous clock's compute.
            let affordable = (0.1 * pair[0].compute_s / cost).floor();
            assert!(affordable < 20.0, "the cap must bind: {affordable}");
        }
    }
    assert!(checks < 20.0, "{checks} checks per clock of 20 units");
    let mean_compute: f64 = capped
        .worker_records
        .iter()
        .flatten()
        .map(|r| r.compute_s)
        .sum::<f64>()
        / (8.0 * 12.0);
    assert!(
        checks * cost <= 0.1 * mean_compute * 1.05 + 20.0 * cost / 12.0,
        "checks {checks} × {cost} s against {mean_compute} s of compute"
    );
    let uncapped = run(&fast("max_check_share = 1.0"));
    assert_eq!(figure(&uncapped, "checks_per_worker_clock"), 20.0);
    let slow = run(&base(""));
    assert_eq!(figure(&slow, "checks_per_worker_clock"), 20.0);
}

/// Help is offered only where it pays: where a unit takes about a microsecond (a few under the
/// stragglers) and each of the reassignment's messages 50 µs, moving work would only add waiting, so none moves and FlexRR
/// is no slower than the same system without reassignment; on slow cores, under the same
/// stragglers, work moves.
#[test]
fn help_that_would_not_pay_is_not_offered() {
    let fast = |options: &str| on_fast_cores(straggling(base(options)), 10_000.0);
    let rr = run(&fast(""));
    assert_eq!(figure(&rr, "reassigned_share"), 0.0);
    assert_eq!(figure(&rr, "messages_per_reassigned_unit"), 0.0);
    // Within 1 % of SSP in the same system (the progress reports still go out, and cost their
    // send time), and faster than its BSP.
    let t = |r: &RunResult| r.summary.time_per_iteration_s;
    let ssp = run(&fast("reassignment = false"));
    assert!(t(&rr) <= 1.01 * t(&ssp), "{} vs SSP {}", t(&rr), t(&ssp));
    let bsp = run(&fast("reassignment = false\nslack = 0"));
    assert!(t(&rr) < t(&bsp), "{} vs BSP {}", t(&rr), t(&bsp));
    let slow = run(&straggling(base("")));
    assert!(figure(&slow, "reassigned_share") > 0.05);
}

fn compose_error(cfg: &RunConfig) -> String {
    match concord::registry().compose(cfg) {
        Ok(_) => panic!("composed, but should not"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_options_are_start_up_errors_naming_the_key() {
    for (options, key) in [
        ("units = 7", "strategy.flexrr.units"),
        ("units = 0", "strategy.flexrr.units"),
        ("group_size = 8", "strategy.flexrr.group_size"),
        ("replication = 0.0", "strategy.flexrr.replication"),
        ("initial = 1.5", "strategy.flexrr.initial"),
        ("checks = 0", "strategy.flexrr.checks"),
        ("max_check_share = 0.0", "strategy.flexrr.max_check_share"),
        ("trigger = -0.1", "strategy.flexrr.trigger"),
        ("uneven = { share = 1.0 }", "strategy.flexrr.uneven.share"),
        ("helpers = 3", "strategy.flexrr"),
    ] {
        let e = compose_error(&base(options));
        assert!(e.contains(key), "{options}: {e}");
    }
    let mut cfg = base("");
    cfg.optimizer = OptimizerConfig::Sgd {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.0,
    };
    let e = compose_error(&cfg);
    assert!(e.contains("optimizer.momentum"), "{e}");
    let mut cfg = base("");
    cfg.strategies = vec!["ssp".into(), "flexrr".into()];
    let e = compose_error(&cfg);
    assert!(e.contains("ssp") && e.contains("flexrr"), "{e}");
}

/// Matrix factorization, the thesis's convergence workload (sparse: a unit touches only its
/// entries' rows), trains under FlexRR with work moving between workers.
#[test]
fn matrix_factorization_trains_under_flexrr() {
    let sets: Vec<String> = [
        "iterations=40",
        "eval_every=40",
        "stragglers=[{pattern=\"slow-worker\",delay=2.0,probability=0.05,length=\"work\"}]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cfg = concord::config::load(Some(std::path::Path::new("configs/flexrr/mf.toml")), &sets)
        .expect("valid config");
    let r = run(&cfg);
    assert!(figure(&r, "reassigned_share") > 0.02);
    assert_eq!(figure(&r, "units_verified"), 8.0 * 100.0 * 40.0);
    let mse = r.summary.final_test_loss.expect("evaluated");
    // From about 1.1 at the start (values of variance 1); the noise floor is 0.01.
    assert!(mse < 0.4, "test MSE {mse}");
    assert!(
        r.summary.final_test_accuracy.is_none(),
        "regression has no accuracy"
    );
}
