//! The bus between the devices of one machine (`bus_gbps`) in whole runs: it costs time between
//! roles that share a machine and changes nothing of the math; a checkpoint file keeps the bus
//! queues, and a run resumed from it equals one run bit for bit.

mod common;

use common::*;
use concord::engine::cluster::MachineGroup;
use concord::engine::config::RunConfig;
use concord::engine::ids::RoleId;
use concord_test_support::{param_bits, slow_device};

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
    let r = resumed_through_a_file(|iterations| config(Some(0.08), iterations), 20);
    let held = &r
        .first
        .resume
        .as_ref()
        .expect("bsp resumes")
        .history
        .network
        .bus;
    assert!(!held.is_empty(), "the run kept its bus queues");
    assert_eq!(
        &r.file.point.history.network.bus, held,
        "the checkpoint file keeps them"
    );
    assert_eq!(param_bits(&r.one), param_bits(&r.resumed));
    assert_eq!(
        r.one.summary.run_time_s.to_bits(),
        r.resumed.summary.run_time_s.to_bits(),
        "{} vs {}",
        r.one.summary.run_time_s,
        r.resumed.summary.run_time_s
    );
    assert_eq!(row_times(&r.one), row_times(&r.resumed));
}
