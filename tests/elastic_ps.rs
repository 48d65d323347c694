//! Elastic parameter servers (PSLD): consistency of live reassignment and scaling (E9), and
//! start-up errors.

mod common;

use common::{max_diff, run, small};
use concord::engine::config::RunConfig;
use concord::engine::context::RuntimeKind;
use concord::engine::ids::RoleId;
use concord::engine::run::RunResult;

/// A training run whose parameters are cut into many small blocks (so reassignments move many).
fn base() -> RunConfig {
    let mut cfg = small(4, 16, 40);
    cfg.servers = 3;
    cfg.block_bytes = 256;
    cfg.eval_every = 10;
    cfg
}

fn elastic(mut cfg: RunConfig, options: &str) -> RunConfig {
    cfg.strategies = vec!["elastic-ps".into()];
    cfg.strategy.insert(
        "elastic-ps".into(),
        toml::from_str(options).expect("valid options"),
    );
    cfg
}

fn figure(r: &RunResult, name: &str) -> f64 {
    r.summary
        .figures
        .get(&format!("elastic-ps.{name}"))
        .copied()
        .unwrap_or_else(|| panic!("figure {name} missing: {:?}", r.summary.figures))
}

fn bits(r: &RunResult) -> Vec<(String, Vec<u32>)> {
    r.params
        .as_ref()
        .expect("real model")
        .iter()
        .map(|(n, v)| (n.clone(), v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// E9: reassignments every period, a server added and one removed, in both migration modes:
/// the final parameters, every loss and every evaluated snapshot are bit-identical to a static
/// placement and to the engine's own BSP parameter servers. A lost, doubled or reordered update,
/// or optimizer state (momentum) left behind, would change them.
#[test]
fn live_reassignment_and_scaling_are_bit_identical_to_static_placement() {
    let reference = run(&base());
    let fixed = run(&elastic(base(), "policy = \"round-robin\""));
    assert_eq!(
        bits(&fixed),
        bits(&reference),
        "static elastic vs engine BSP"
    );
    for mode in ["overlapped", "after-barrier"] {
        let options = format!(
            "policy = \"psld\"\nreport_every = 2\nforce_reassign_every = 1\nepsilon = 0.5\n\
             migration = \"{mode}\"\nadd_server_at = [10]\n\
             remove_servers = [{{ server = 0, at_iteration = 20 }}]\n\
             server_start_s = 0.0"
        );
        let moving = run(&elastic(base(), &options));
        assert!(figure(&moving, "epochs") >= 8.0, "{mode}: epochs");
        assert!(figure(&moving, "blocks_moved") > 50.0, "{mode}: moves");
        assert_eq!(figure(&moving, "removals"), 1.0, "{mode}");
        assert_eq!(figure(&moving, "servers_final"), 3.0, "{mode}: 3 + 1 − 1");
        assert_eq!(
            figure(&moving, "load_mb_s0"),
            0.0,
            "{mode}: the removed server is empty"
        );
        assert!(
            figure(&moving, "load_mb_s3") > 0.0,
            "{mode}: the added server holds blocks"
        );
        assert_eq!(bits(&moving), bits(&fixed), "{mode}: parameters");
        // Blocks travel over the modeled links, server to server, with their momentum: at least
        // their values and optimizer state, twice the block bytes for SGD with momentum.
        let between_servers: u64 = moving
            .traffic
            .iter()
            .filter(|((from, to), _)| matches!((from, to), (RoleId::Server(_), RoleId::Server(_))))
            .map(|(_, t)| t.bytes)
            .sum();
        let migrated = figure(&moving, "migrated_mb") * 1e6;
        assert!(
            between_servers as f64 >= 2.0 * migrated - 1.0,
            "{mode}: {between_servers} bytes between servers for {migrated} migrated"
        );
        let losses = |r: &RunResult| r.rows.iter().map(|x| x.loss.to_bits()).collect::<Vec<_>>();
        assert_eq!(losses(&moving), losses(&fixed), "{mode}: losses");
        let acc = |r: &RunResult| {
            r.rows
                .iter()
                .map(|x| x.test_accuracy.map(f64::to_bits))
                .collect::<Vec<_>>()
        };
        assert_eq!(acc(&moving), acc(&fixed), "{mode}: snapshot evaluations");
        assert_eq!(
            acc(&moving).iter().filter(|a| a.is_some()).count(),
            4,
            "{mode}: every 10th iteration evaluated"
        );
    }
}

/// The static baselines place the same model differently but train it identically (their
/// aggregation is the same per element).
#[test]
fn every_static_placement_trains_the_same_parameters() {
    let reference = run(&base());
    for policy in ["mxnet", "tf"] {
        let r = run(&elastic(base(), &format!("policy = \"{policy}\"")));
        assert_eq!(
            max_diff(
                r.params.as_ref().unwrap(),
                reference.params.as_ref().unwrap()
            ),
            0.0,
            "{policy}"
        );
    }
}

/// The suspension figures exist only where a reassignment happened: a static placement
/// reports none (not a suspension of 0, which a "suspends less than" claim would take as a
/// result), while live reassignment reports them.
#[test]
fn suspension_figures_are_undefined_without_a_reassignment() {
    let fixed = run(&elastic(base(), "policy = \"round-robin\""));
    for name in [
        "suspension_s_mean",
        "suspension_s_max",
        "suspension_vs_restart",
    ] {
        assert!(
            !fixed
                .summary
                .figures
                .contains_key(&format!("elastic-ps.{name}")),
            "{name}: {:?}",
            fixed.summary.figures
        );
    }
    assert_eq!(figure(&fixed, "epochs"), 0.0);
    let moving = run(&elastic(
        base(),
        "policy = \"psld\"\nreport_every = 2\nforce_reassign_every = 1",
    ));
    assert!(figure(&moving, "epochs") >= 1.0);
    assert!(figure(&moving, "suspension_vs_restart") >= 0.0);
    assert!(figure(&moving, "suspension_s_max") >= figure(&moving, "suspension_s_mean"));
}

/// The same roles run on real threads in real time and train the same parameters.
#[test]
fn wall_runtime_trains_the_same_parameters() {
    let options =
        "policy = \"psld\"\nreport_every = 2\nforce_reassign_every = 2\nserver_start_s = 0.0";
    let mut sim = elastic(base(), options);
    sim.iterations = 20;
    let mut wall = sim.clone();
    wall.runtime = RuntimeKind::Wall;
    let (sim, wall) = (run(&sim), run(&wall));
    assert!(
        figure(&wall, "epochs") >= 1.0,
        "reassigned in wall time too"
    );
    assert_eq!(bits(&wall), bits(&sim));
}

fn compose_error(cfg: &RunConfig) -> String {
    match concord::registry().compose(cfg) {
        Ok(_) => panic!("expected a start-up error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_options_are_start_up_errors_naming_the_key() {
    let e = compose_error(&elastic(base(), "epsilon = 1.5"));
    assert!(
        e.contains("strategy.elastic-ps.epsilon") && e.contains("[0, 1]"),
        "{e}"
    );
    let e = compose_error(&elastic(base(), "epsilon = -0.1"));
    assert!(e.contains("strategy.elastic-ps.epsilon"), "{e}");
    let e = compose_error(&elastic(base(), "policy = \"greedy\""));
    assert!(e.contains("policy") && e.contains("psld"), "{e}");
    // Removing every server, one after the other: the last removal is refused.
    let e = compose_error(&elastic(
        base(),
        "remove_servers = [{ server = 0, at_iteration = 5 }, { server = 1, at_iteration = 6 }, { server = 2, at_iteration = 7 }]",
    ));
    assert!(e.contains("last server"), "{e}");
    let e = compose_error(&elastic(
        base(),
        "remove_servers = [{ server = 9, at_iteration = 5 }]",
    ));
    assert!(e.contains("no such server"), "{e}");
    let e = compose_error(&elastic(
        base(),
        "remove_servers = [{ server = 3, at_iteration = 5 }]",
    ));
    assert!(e.contains("not been launched"), "{e}");
    let e = compose_error(&elastic(base(), "policy = \"mxnet\"\nadd_server_at = [5]"));
    assert!(e.contains("static placement"), "{e}");
    let mut ssp = elastic(base(), "");
    ssp.strategies.insert(0, "ssp".into());
    let e = compose_error(&ssp);
    assert!(
        e.contains("ssp") && e.contains("elastic-ps") && e.contains("consistency"),
        "{e}"
    );
}

#[test]
fn a_zero_partition_unit_is_refused() {
    let mut cfg = elastic(base(), "");
    cfg.block_bytes = 0;
    let e = cfg.validate().expect_err("U = 0").to_string();
    assert!(e.contains("block_bytes"), "{e}");
}
