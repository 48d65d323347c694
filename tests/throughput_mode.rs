//! Throughput mode: a paper's model as a profile, virtual payloads of the true sizes, no math.

mod common;

use concord::engine::config::RunConfig;
use concord::engine::ids::RoleId;
use concord::engine::message::HEADER_BYTES;
use concord::engine::model::ModelConfig;
use concord::engine::profiles;

#[test]
fn profile_runs_move_the_true_byte_sizes() {
    let cfg = RunConfig {
        workers: 4,
        servers: 2,
        iterations: 3,
        eval_every: 3,
        model: ModelConfig::Profile {
            name: "resnet-32".into(),
        },
        ..RunConfig::default()
    };
    let r = common::run(&cfg);
    assert!(r.params.is_none());
    assert!(r.summary.final_loss.is_nan());
    let param_bytes = profiles::builtin("resnet-32").unwrap().param_bytes();
    for w in 0..4 {
        let to_servers: u64 = (0..2)
            .map(|s| r.traffic[&(RoleId::Worker(w), RoleId::Server(s))].bytes)
            .sum();
        // Per iteration: one push carrying every gradient, plus one pull request, per server.
        assert_eq!(to_servers, 3 * (param_bytes + 2 * 2 * HEADER_BYTES));
        let from_servers: u64 = (0..2)
            .map(|s| r.traffic[&(RoleId::Server(s), RoleId::Worker(w))].bytes)
            .sum();
        assert_eq!(from_servers, 3 * (param_bytes + 2 * HEADER_BYTES));
    }
    assert!(r.summary.run_time_s > 0.0);
}

#[test]
fn a_model_that_does_not_fit_is_a_clear_out_of_memory_error() {
    let mut cfg = RunConfig {
        workers: 2,
        servers: 1,
        iterations: 1,
        batch: 64,
        model: ModelConfig::Profile {
            name: "vgg16".into(),
        },
        ..RunConfig::default()
    };
    cfg.cluster.default_device = "k40c".into();
    cfg.batch = 512;
    let asm = concord::registry().compose(&cfg).unwrap();
    let e = concord::engine::run(&cfg, &asm, Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("out of memory") && e.contains("k40c") && e.contains("activations"),
        "{e}"
    );
}
