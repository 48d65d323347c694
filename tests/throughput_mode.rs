//! Throughput mode: a paper's model as a profile, virtual payloads of the true sizes, no math.

mod common;

use concord::engine::config::{RunConfig, RuntimeKind};
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

/// A profile has no math to time, so a real-time run charges its compute by the cost model, as
/// `sim` does: every worker's compute in every clock lasts at least what `sim` charges for it (a
/// sleep of that length), the ideal time is `sim`'s, and the run lasts at least the compute it
/// slept. (Before, such a run's steps cost nothing in `wall` or
/// `--runtime process`.)
#[test]
fn a_real_time_run_of_a_profile_sleeps_its_modeled_compute() {
    let sim_cfg = RunConfig {
        workers: 2,
        servers: 1,
        iterations: 4,
        eval_every: 4,
        model: ModelConfig::Profile {
            name: "resnet-32".into(),
        },
        ..RunConfig::default()
    };
    let wall_cfg = RunConfig {
        runtime: RuntimeKind::Wall,
        ..sim_cfg.clone()
    };
    let sim = common::run(&sim_cfg);
    let wall = common::run(&wall_cfg);
    let compute = |r: &concord::engine::run::RunResult| -> Vec<Vec<f64>> {
        r.rows.iter().map(|row| row.compute_s.clone()).collect()
    };
    for (clock, (w, s)) in compute(&wall).iter().zip(compute(&sim)).enumerate() {
        for (worker, (w, s)) in w.iter().zip(s).enumerate() {
            assert!(
                *w >= s,
                "clock {clock}, worker {worker}: {w} s, sim charges {s} s"
            );
        }
    }
    let slept: f64 = sim.rows.iter().map(|row| row.compute_s[0]).sum();
    assert!(slept > 0.01, "each step is modeled to take time: {slept} s");
    assert!(
        wall.summary.run_time_s >= slept,
        "the run took {} s, its worker 0 computed {slept} s",
        wall.summary.run_time_s
    );
    assert_eq!(wall.summary.ideal_time_s, sim.summary.ideal_time_s);
}
