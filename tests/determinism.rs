//! Same seed and config: the same parameters and metrics, bit for bit. Another seed: different.

mod common;

use common::*;

fn config(seed: u64) -> concord::engine::RunConfig {
    let mut cfg = on_slow_devices(small(6, 16, 30));
    cfg.seed = seed;
    cfg.eval_every = 10;
    cfg.strategies = vec!["ssp".into()];
    cfg.stragglers = vec![
        straggler("pattern = \"slow-worker\"\ndelay = 2.0\nprobability = 0.1"),
        straggler("pattern = \"jitter\"\nsigma = 0.2"),
    ];
    cfg
}

fn bits(r: &concord::engine::RunResult) -> (Vec<Vec<u32>>, String, String) {
    let params = r
        .params
        .as_ref()
        .unwrap()
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect();
    // Wall-clock readings are the one part of the metrics that cannot be deterministic.
    let mut rows = r.rows.clone();
    rows.iter_mut().for_each(|row| row.wall_s = 0.0);
    let rows = serde_json::to_string(&rows).unwrap();
    let reads = format!("{:?}", r.reads);
    (params, rows, reads)
}

#[test]
fn same_seed_gives_identical_parameters_and_metrics() {
    let a = run(&config(7));
    let b = run(&config(7));
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(
        a.summary.run_time_s.to_bits(),
        b.summary.run_time_s.to_bits()
    );
    assert_eq!(a.summary.final_test_accuracy, b.summary.final_test_accuracy);
}

#[test]
fn different_seed_gives_different_parameters_and_metrics() {
    let a = run(&config(7));
    let c = run(&config(8));
    let (pa, ra, _) = bits(&a);
    let (pc, rc, _) = bits(&c);
    assert_ne!(pa, pc);
    assert_ne!(ra, rc);
}
