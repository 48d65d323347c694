//! Machines that share a host's processors (`[cluster.hosts]`) in whole `sim` runs: their roles'
//! work takes turns on the host's processors, which costs time when there are fewer processors
//! than roles working at once and changes nothing of the math; a checkpoint file keeps what the
//! processors are busy with, and a run resumed from it equals one run bit for bit.

mod common;

use common::*;
use concord::engine::cluster::HostConfig;
use concord::engine::config::RunConfig;
use concord::engine::run::{RunOptions, RunResult};
use concord_test_support::param_bits;

/// Four workers on four slow machines (1 GFLOP/s, so compute dominates), BSP or SSP; the
/// workers' machines on one host of `processors` processors, or each on its own. The two servers
/// have machines of their own, off the host, so that what the host's processors run is the
/// workers' steps (and the handling of their messages, which these devices do not charge).
fn config(strategy: &str, processors: Option<u32>, iterations: u64) -> RunConfig {
    let mut cfg = on_slow_devices(small(4, 16, iterations));
    cfg.strategies = vec![strategy.to_string()];
    cfg.cluster.dedicated_servers = true;
    if let Some(processors) = processors {
        put_workers_on_one_host(&mut cfg, processors);
    }
    cfg
}

/// Puts the machines of the four workers (0 to 3) on one host of `processors` processors.
fn put_workers_on_one_host(cfg: &mut RunConfig, processors: u32) {
    cfg.cluster.hosts.insert(
        "box".into(),
        HostConfig {
            processors,
            machines: Some(vec![0, 1, 2, 3]),
        },
    );
}

/// The total compute the workers charged, seconds.
fn compute(r: &RunResult) -> f64 {
    r.rows.iter().flat_map(|row| row.compute_s.iter()).sum()
}

#[test]
fn workers_on_too_few_processors_take_turns_and_the_math_is_unchanged() {
    let own = run(&config("bsp", None, 10));
    let plenty = run(&config("bsp", Some(8), 10));
    let two = run(&config("bsp", Some(2), 10));
    let one = run(&config("bsp", Some(1), 10));
    assert_eq!(
        param_bits(&own),
        param_bits(&one),
        "BSP's math is timing-free"
    );
    // With a processor for every role, nothing waits: the same run to the bit.
    assert_eq!(
        own.summary.run_time_s.to_bits(),
        plenty.summary.run_time_s.to_bits()
    );
    // The host runs a clock's four steps in two turns on two processors and in four on one, so a
    // clock takes one or three steps longer (a little less: a step that waits for its turn
    // overlaps what the clock spends on messages and the servers' update).
    let iterations = own.rows.len() as f64;
    let step = compute(&own) / (4.0 * iterations);
    let extra_turns =
        |r: &RunResult| (r.summary.run_time_s - own.summary.run_time_s) / (step * iterations);
    let (two_turns, four_turns) = (extra_turns(&two), extra_turns(&one));
    assert!(
        two_turns > 0.8 && two_turns < 1.05,
        "two processors: {two_turns} steps more a clock"
    );
    assert!(
        four_turns > 2.6 && four_turns < 3.1,
        "one processor: {four_turns} steps more a clock"
    );
    // A worker's compute includes its wait for a processor, as a step timed in a real run does:
    // on one processor the four steps of a clock wait at most 0, 1, 2 and 3 steps (2.5 steps on
    // average with the step itself), less where a worker's parameters came later than others'.
    let ratio = compute(&one) / compute(&own);
    assert!(
        ratio > 1.5 && ratio <= 2.5 + 1e-9,
        "compute on one processor {ratio}× its own"
    );
}

/// Allreduce over four workers whose machines are on one host of `processors` processors, their
/// devices' transfers keeping `share` of a processor busy at each end (`loopback_share`).
fn ring_on_host(processors: u32, share: Option<f64>) -> RunConfig {
    let mut cfg = on_slow_devices(small(4, 16, 10));
    cfg.strategies = vec!["allreduce".to_string()];
    for device in cfg.cluster.devices.values_mut() {
        device.loopback_share = share;
    }
    put_workers_on_one_host(&mut cfg, processors);
    cfg
}

#[test]
fn transfers_between_a_hosts_machines_copy_on_its_processors() {
    let wire_free = run(&ring_on_host(2, None));
    let copied = run(&ring_on_host(2, Some(1.0)));
    assert_eq!(
        param_bits(&wire_free),
        param_bits(&copied),
        "the ring's math is timing-free"
    );
    // On two processors the ring's copies take turns with each other and with the steps.
    assert!(
        copied.summary.run_time_s > wire_free.summary.run_time_s,
        "{} against {}",
        copied.summary.run_time_s,
        wire_free.summary.run_time_s
    );
    // With a processor for every end of every transfer and every step, nothing waits for the
    // copies: the same run to the bit as without them.
    let plenty = run(&ring_on_host(16, Some(1.0)));
    let plenty_free = run(&ring_on_host(16, None));
    assert_eq!(
        plenty.summary.run_time_s.to_bits(),
        plenty_free.summary.run_time_s.to_bits()
    );
}

#[test]
fn a_run_on_a_shared_host_resumes_bit_for_bit() {
    // SSP: its workers' reads depend on timing, so a resumed run that forgot what the processors
    // were busy with would read other versions.
    let r = resumed_through_a_file(|iterations| config("ssp", Some(3), iterations), 20);
    let held = &r
        .first
        .resume
        .as_ref()
        .expect("ssp resumes")
        .history
        .network
        .processors;
    assert!(!held.is_empty(), "the run kept its processors' work");
    assert_eq!(
        &r.file.point.history.network.processors, held,
        "the checkpoint file keeps it"
    );
    assert_eq!(param_bits(&r.one), param_bits(&r.resumed));
    assert_eq!(row_times(&r.one), row_times(&r.resumed));
}

#[test]
fn a_host_that_names_a_machine_the_cluster_lacks_is_refused_by_key() {
    let mut cfg = config("bsp", Some(2), 5);
    cfg.cluster.hosts.get_mut("box").unwrap().machines = Some(vec![0, 9]);
    // The cluster has machines 0..6: four workers' and two servers'.
    let Err(err) = concord::registry()
        .compose(&cfg)
        .and_then(|asm| concord::engine::run(&cfg, &asm, RunOptions::default()))
    else {
        panic!("a host naming machine 9 of 6 ran");
    };
    let text = err.to_string();
    assert!(
        text.contains("cluster.hosts.box.machines[1]") && text.contains("0..6"),
        "{text}"
    );
}
