//! The allreduce baseline: the same SGD as BSP over parameter servers, deterministic, and a ring
//! that moves 2(P−1)/P of the fused gradients per worker and iteration.

mod common;

use common::*;
use concord::engine::message::HEADER_BYTES;

fn allreduce(workers: u32, batch: u64, iterations: u64) -> concord::engine::RunConfig {
    let mut cfg = small(workers, batch, iterations);
    cfg.strategies = vec!["allreduce".into()];
    cfg
}

/// Elements of a run's fused buffer: every parameter plus the weight w.
fn fused_elems(r: &concord::engine::RunResult) -> u64 {
    let params: u64 = r
        .params
        .as_ref()
        .expect("a real model")
        .iter()
        .map(|(_, v)| v.len() as u64)
        .sum();
    params + 1
}

#[test]
fn allreduce_equals_bsp_over_parameter_servers() {
    let ar = run(&allreduce(4, 8, 20));
    let bsp = run(&small(4, 8, 20));
    let one = run(&small(1, 32, 20));
    let (a, b, c) = (ar.params.unwrap(), bsp.params.unwrap(), one.params.unwrap());
    assert!(
        max_diff(&a, &b) <= 1e-5,
        "allreduce vs BSP: {}",
        max_diff(&a, &b)
    );
    assert!(
        max_diff(&a, &c) <= 1e-5,
        "4 x 8 vs 1 x 32: {}",
        max_diff(&a, &c)
    );
    let init = run(&small(1, 32, 1)).params.unwrap();
    assert!(max_diff(&a, &init) > 1e-3, "training moved the parameters");
    assert!(ar.summary.final_test_accuracy.unwrap() > 0.3);
}

#[test]
fn allreduce_is_deterministic_and_moves_two_p_minus_one_over_p() {
    let cfg = on_slow_devices(allreduce(4, 8, 10));
    let a = run(&cfg);
    let b = run(&cfg);
    assert_eq!(
        max_diff(a.params.as_ref().unwrap(), b.params.as_ref().unwrap()),
        0.0
    );
    assert_eq!(a.summary.run_time_s, b.summary.run_time_s);
    // The fused buffer: every parameter plus the weight w; one bucket, 4 chunks.
    let elems = fused_elems(&a);
    let (p, iters) = (4u64, 10u64);
    for w in 0..p {
        let sent = a.summary.bytes_sent_by_role[&format!("worker-{w}")];
        let messages = 2 * (p - 1) * iters;
        let payload = sent - messages * HEADER_BYTES;
        // Each worker sends every chunk but its own in each phase: 2(P−1)/P of the buffer, ±
        // one element per chunk for uneven chunking.
        let ideal = 2.0 * (p - 1) as f64 / p as f64 * (4 * elems) as f64 * iters as f64;
        assert!(
            (payload as f64 - ideal).abs() <= (4 * messages) as f64,
            "worker {w}: {payload} vs {ideal}"
        );
    }
    assert!(
        !a.summary.bytes_sent_by_role.contains_key("server-0"),
        "no parameter server traffic"
    );
}

#[test]
fn allreduce_rejects_what_it_cannot_combine_with() {
    let registry = concord::registry();
    let mut cfg = allreduce(4, 8, 5);
    cfg.strategies = vec!["ssp".into(), "allreduce".into()];
    let e = registry.compose(&cfg).err().unwrap().to_string();
    assert!(e.contains("`ssp`") && e.contains("`allreduce`"), "{e}");
    cfg.strategies = vec!["allreduce".into(), "lb-bsp".into()];
    let e = registry.compose(&cfg).err().unwrap().to_string();
    assert!(e.contains("`lb-bsp`"), "{e}");
}

#[test]
fn allreduce_runs_in_throughput_mode() {
    let mut cfg = allreduce(8, 32, 5);
    cfg.model = toml::from_str("kind = \"profile\"\nname = \"resnet-32\"").unwrap();
    let r = run(&cfg);
    assert_eq!(r.summary.iterations, 5);
    assert!(r.summary.bytes_sent > 0 && r.params.is_none());
}

#[test]
fn fusing_the_gradients_costs_a_copy_at_the_devices_copy_rate() {
    let plain = on_slow_devices(allreduce(2, 8, 3));
    let mut copying = plain.clone();
    for device in copying.cluster.devices.values_mut() {
        device.message_copy_gbps = Some(0.8); // 0.1 GB/s
    }
    let (a, b) = (run(&plain), run(&copying));
    // The fused buffer: every parameter plus the weight w, 4 bytes each.
    let elems = fused_elems(&a);
    let fuse_s = (elems * 4) as f64 / 1e8;
    for (without, with) in a.worker_records.iter().zip(&b.worker_records) {
        for (x, y) in without.iter().zip(with) {
            let added = y.compute_s - x.compute_s;
            // Run time is kept at the resolution of the runtime's timer.
            assert!((added - fuse_s).abs() < 1e-6, "{added} s vs {fuse_s} s");
        }
    }
    // Copies change the time, never the math.
    assert_eq!(a.params, b.params);
}

/// An allreduce worker keeps its parameters and optimizer state in its replica's tensors and
/// updates them there; the update is the servers' host optimizer operation for operation, so one
/// worker of each ends with the same bits, for momentum SGD and for Adam with weight decay.
#[test]
fn parameters_kept_in_the_replica_update_to_the_servers_bits() {
    for optimizer in [
        "kind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\nweight_decay = 0.001",
        "kind = \"adam\"\nlr = 0.01\nweight_decay = 0.01",
    ] {
        let mut ar = allreduce(1, 32, 12);
        ar.optimizer = toml::from_str(optimizer).expect("optimizer");
        let mut bsp = small(1, 32, 12);
        bsp.optimizer = ar.optimizer.clone();
        let (a, b) = (run(&ar).params.unwrap(), run(&bsp).params.unwrap());
        assert_eq!(max_diff(&a, &b), 0.0, "{optimizer}");
        let init = run(&small(1, 32, 1)).params.unwrap();
        assert!(max_diff(&a, &init) > 1e-3, "training moved the parameters");
    }
}
