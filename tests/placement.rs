//! The `balanced` block placement: the same training as round-robin, with the servers' bytes
//! spread, and the start-up errors of a placement that cannot apply.

mod common;

use common::*;
use concord::engine::config::RunConfig;
use concord::engine::ids::RoleId;
use concord::engine::model::ModelConfig;
use concord::engine::run::RunResult;

/// BSP on an MLP whose weights dwarf its biases: 4 workers, 2 servers.
fn mlp(strategies: &[&str]) -> RunConfig {
    RunConfig {
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        model: ModelConfig::Mlp {
            hidden: vec![128, 128],
        },
        ..small(4, 16, 12)
    }
}

/// Bytes every worker sent each server over the run.
fn bytes_to_servers(r: &RunResult) -> Vec<u64> {
    (0..r.config.servers)
        .map(|s| {
            r.traffic
                .iter()
                .filter(|((from, to), _)| {
                    matches!(from, RoleId::Worker(_)) && *to == RoleId::Server(s)
                })
                .map(|(_, t)| t.bytes)
                .sum()
        })
        .collect()
}

#[test]
fn a_balanced_placement_trains_the_same_parameters_with_the_servers_bytes_spread() {
    let round_robin = run(&mlp(&["bsp"]));
    let balanced = run(&mlp(&["bsp", "balanced"]));
    // The same sums in the same order: placement moves blocks, not arithmetic.
    assert_eq!(
        max_diff(
            round_robin.params.as_ref().unwrap(),
            balanced.params.as_ref().unwrap()
        ),
        0.0
    );
    assert_eq!(
        balanced.summary.slots.get("placement").map(String::as_str),
        Some("balanced")
    );
    // Round-robin deals each layer's bias to server 0 and its weight to server 1.
    let rr = bytes_to_servers(&round_robin);
    assert!(rr[1] > 20 * rr[0], "round-robin: {rr:?}");
    // Balanced: the 128×128 weight alone on one server, every other tensor on the other, so the
    // busier server carries less and the other far more than under round-robin.
    let b = bytes_to_servers(&balanced);
    let busiest = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    let idlest = |v: &[u64]| v.iter().copied().min().unwrap_or(0);
    assert!(
        busiest(&b) < busiest(&rr),
        "balanced {b:?}, round-robin {rr:?}"
    );
    assert!(
        idlest(&b) > 10 * idlest(&rr),
        "balanced {b:?}, round-robin {rr:?}"
    );
    assert_eq!(rr.iter().sum::<u64>(), b.iter().sum::<u64>());
    // One server no longer carries every push and reply: the clocks are shorter.
    assert!(
        balanced.summary.run_time_s < round_robin.summary.run_time_s,
        "balanced {} s, round-robin {} s",
        balanced.summary.run_time_s,
        round_robin.summary.run_time_s
    );
}

#[test]
fn a_placement_without_the_engines_parameter_server_is_refused_at_start_up() {
    // AgileML replaces the server role; elastic-ps also places blocks, its own way.
    for (strategies, other) in [
        (["agileml", "balanced"], "agileml"),
        (["elastic-ps", "balanced"], "elastic-ps"),
    ] {
        let cfg = RunConfig {
            strategies: strategies.iter().map(|s| s.to_string()).collect(),
            ..small(2, 8, 2)
        };
        let e = concord::registry()
            .compose(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("balanced") && e.contains(other),
            "{strategies:?}: {e}"
        );
    }
}
