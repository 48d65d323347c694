//! The bus between the devices of one machine (`bus_gbps`) in whole runs: it costs time between
//! roles that share a machine and changes nothing of the math; a checkpoint file keeps the bus
//! queues, and a run resumed from it equals one run bit for bit.

mod common;

use common::*;
use concord::engine::checkpoint;
use concord::engine::cluster::MachineGroup;
use concord::engine::config::RunConfig;
use concord::engine::ids::RoleId;
use concord::engine::output::write_run_folder;
use concord::engine::run::{RunOptions, RunResult};
use concord_test_support::{param_bits, slow_device};
use std::sync::Arc;

/// Four workers on two machines of two slots (each machine also holds a server), BSP, momentum
/// SGD; the machines' bus at `bus_gbps`.
fn config(bus_gbps: Option<f64>, iterations: u64) -> RunConfig {
    let mut cfg = small(4, 16, iterations);
    let mut device = slow_device(1.0);
    device.bus_gbps = bus_gbps;
    cfg.cluster.devices.insert("box".into(), device);
    cfg.cluster.machines = vec![MachineGroup {
        device: "box".into(),
        count: 2,
        slots: 2,
        labels: Default::default(),
    }];
    cfg
}

fn run_opts(cfg: &RunConfig, options: RunOptions) -> RunResult {
    let asm = concord::registry().compose(cfg).expect("composes");
    concord::engine::run(cfg, &asm, options).expect("runs")
}

#[test]
fn a_bus_costs_time_between_roles_of_one_machine_and_leaves_the_math_alone() {
    let free = run(&config(None, 20));
    // 0.08 Gbit/s = 10 MB/s: slow enough to show against the slow devices' compute.
    let slow = run(&config(Some(0.08), 20));
    assert_eq!(
        param_bits(&free),
        param_bits(&slow),
        "BSP's math is timing-free"
    );
    assert_eq!(free.summary.bytes_sent, slow.summary.bytes_sent);
    assert!(
        slow.summary.run_time_s > free.summary.run_time_s,
        "with the bus {} s, without {} s",
        slow.summary.run_time_s,
        free.summary.run_time_s
    );
    // Worker 0 shares machine 0 with server 0: that pair is what the bus carried.
    let traffic = &slow.traffic;
    assert!(traffic[&(RoleId::Worker(0), RoleId::Server(0))].bytes > 0);
}

#[test]
fn a_run_on_a_bus_resumes_bit_for_bit() {
    let mut whole = config(Some(0.08), 40);
    whole.checkpoint_every = Some(20);
    let one = run_opts(&whole, RunOptions::default());

    let dir = tempfile::tempdir().unwrap();
    let first = run_opts(&config(Some(0.08), 20), RunOptions::default());
    write_run_folder(dir.path(), &first).unwrap();
    let cp = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).expect("reads");
    let held = &first
        .resume
        .as_ref()
        .expect("bsp resumes")
        .history
        .network
        .bus;
    assert!(!held.is_empty(), "the run kept its bus queues");
    assert_eq!(
        &cp.point.history.network.bus, held,
        "the checkpoint file keeps them"
    );
    let options = RunOptions {
        resume: Some(Arc::new(cp.point)),
        ..RunOptions::default()
    };
    let resumed = run_opts(&config(Some(0.08), 40), options);
    assert_eq!(param_bits(&one), param_bits(&resumed));
    assert_eq!(
        one.summary.run_time_s.to_bits(),
        resumed.summary.run_time_s.to_bits(),
        "{} vs {}",
        one.summary.run_time_s,
        resumed.summary.run_time_s
    );
    let times = |r: &RunResult| {
        r.rows
            .iter()
            .map(|x| x.time_s.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(times(&one), times(&resumed));
}
