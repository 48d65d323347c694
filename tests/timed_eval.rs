//! Time-indexed evaluation (`eval_every_s`): the model evaluated at run times 0, Δ, 2Δ, … is the
//! exact model some iteration left (never a mix or an interpolation), on parameter servers and
//! on worker-held models alike.

mod common;

use common::*;
use concord::engine::config::RunConfig;
use concord::engine::run::RunResult;

/// Checks every timed evaluation against the per-iteration ones (`eval_every = 1`): each is the
/// initial model's (before the first update) or bit-equal to an iteration's, the iteration it
/// matches is within one of those completed by then, and it never goes back in time. Holders
/// that apply an iteration block by block at different times may be caught mid-iteration: at
/// most `mixed` of the evaluations may then be neither.
fn assert_exact_models(r: &RunResult, period: f64, mixed: f64) {
    let end = r.rows.last().expect("rows").time_s;
    let evals = &r.evaluations;
    assert_eq!(
        evals.len() as u64,
        (end / period).floor() as u64 + 1,
        "one evaluation per Δ from time 0 to the end ({end} s)"
    );
    let initial = evals[0].test_loss;
    assert_eq!((evals[0].time_s, evals[0].iterations), (0.0, 0));
    let mut last_match = 0usize;
    let mut matched = 0;
    let mut neither = 0;
    for (k, e) in evals.iter().enumerate() {
        assert_eq!(e.time_s, k as f64 * period);
        assert_eq!(
            e.iterations as usize,
            r.rows.iter().filter(|row| row.time_s <= e.time_s).count()
        );
        let hit = r
            .rows
            .iter()
            .enumerate()
            .skip(last_match)
            .find(|(_, row)| row.test_loss == Some(e.test_loss));
        match hit {
            Some((j, _)) => {
                last_match = j;
                // Rows close when the last worker finishes; a server applies that clock a
                // transfer later, a worker-held model as soon as its own ring ends.
                assert!(
                    (j as i64 + 1 - e.iterations as i64).abs() <= 1,
                    "at {} s: the model of iteration {} after {} iterations",
                    e.time_s,
                    j + 1,
                    e.iterations
                );
                matched += 1;
            }
            None if e.test_loss == initial => {}
            None => neither += 1,
        }
    }
    assert!(
        neither as f64 <= mixed * evals.len() as f64,
        "{neither} of {} evaluations are neither an iteration's model nor the initial one",
        evals.len()
    );
    assert!(
        matched * 2 > evals.len(),
        "most times fall after updates: {matched} of {}; rows {:?}; evals {:?}",
        evals.len(),
        r.rows
            .iter()
            .map(|r| (r.time_s, r.test_loss))
            .collect::<Vec<_>>(),
        evals
    );
    assert!(evals.last().unwrap().test_loss < initial, "training shows");
}

fn timed(mut cfg: RunConfig, period: f64) -> RunConfig {
    cfg.eval_every = 1;
    cfg.eval_every_s = Some(period);
    on_slow_devices(cfg)
}

#[test]
fn parameter_server_models_at_fixed_times_are_exact_iterations() {
    // Two servers: each time's model is put together from both servers' parts.
    let cfg = timed(small(4, 8, 30), 0.0011);
    let r = run(&cfg);
    assert_exact_models(&r, 0.0011, 0.0);
}

#[test]
fn worker_held_models_at_fixed_times_are_exact_iterations() {
    let mut cfg = timed(small(4, 8, 30), 0.0011);
    cfg.strategies = vec!["allreduce".into()];
    let r = run(&cfg);
    assert_exact_models(&r, 0.0011, 0.0);
}

#[test]
fn timed_evaluation_changes_nothing_else_and_is_deterministic() {
    let base = on_slow_devices(small(4, 8, 20));
    let mut with = base.clone();
    with.eval_every_s = Some(0.001);
    let (a, b, c) = (run(&base), run(&with), run(&with));
    assert_eq!(a.params, b.params, "measuring must not perturb the run");
    assert_eq!(a.summary.run_time_s, b.summary.run_time_s);
    assert!(a.evaluations.is_empty() && !b.evaluations.is_empty());
    assert_eq!(b.evaluations, c.evaluations);
}

#[test]
fn a_period_that_is_not_a_positive_number_is_rejected() {
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut cfg = small(2, 4, 2);
        cfg.eval_every_s = Some(bad);
        let err = cfg.validate().expect_err("rejected").to_string();
        assert!(err.contains("eval_every_s"), "{err}");
    }
}

#[test]
fn elastic_servers_moving_blocks_mid_run_give_exact_models_too() {
    // PSLD reassigning every report, a server added and one removed: blocks change hands while
    // training, and each time's model must still be one iteration's, block by block.
    let mut cfg = small(4, 16, 40);
    cfg.servers = 3;
    cfg.block_bytes = 256;
    cfg.strategies = vec!["elastic-ps".into()];
    cfg.strategy.insert(
        "elastic-ps".into(),
        toml::from_str(
            "policy = \"psld\"\nreport_every = 2\nforce_reassign_every = 1\nepsilon = 0.5\n\
             add_server_at = [10]\nremove_servers = [{ server = 0, at_iteration = 20 }]\n\
             server_start_s = 0.0",
        )
        .expect("options"),
    );
    let end = run(&cfg).summary.run_time_s;
    let period = end / 37.0;
    let r = run(&timed_only(cfg, period));
    assert!(
        r.summary.figures["elastic-ps.blocks_moved"] > 50.0,
        "blocks moved"
    );
    assert_exact_models(&r, period, 0.1);
}

/// `cfg` with per-iteration and timed evaluations, on its own devices.
fn timed_only(mut cfg: RunConfig, period: f64) -> RunConfig {
    cfg.eval_every = 1;
    cfg.eval_every_s = Some(period);
    cfg
}
