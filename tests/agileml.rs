//! AgileML (`agileml`): tiered elastic parameter servers on reliable and transient machines.
//!
//! - Claim 1: after a warned eviction of some transient machines, or of all of them, the final
//!   parameters are bit-identical to a run without the eviction (the stage changes, partitions
//!   move, data moves to the workers that have it loaded, and nothing is lost or doubled).
//! - Stages change where parameters live, never the math: stages 1 and 2 give the same bits
//!   (stage 3, whose data is cut over the transient workers only, the same model up to rounding).
//! - Claim 2: after a failure of all transient machines, or of one ActivePS, every partition rolls
//!   back to the committed clock and the workers redo from the next one.
//! - Claim 6: the controller's ledger covers every item of every clock.
//! - Start-up errors name what is wrong.

mod common;

use common::{run, small};
use concord::engine::cluster::MachineGroup;
use concord::engine::config::RunConfig;
use concord::engine::membership::{EventKind, MembershipEntry};
use concord::engine::run::RunResult;
use std::collections::BTreeMap;

const ITERATIONS: u64 = 24;

/// `reliable` reliable and `transient` transient one-slot machines of 1 GFLOP/s (so a clock
/// takes longer than loading the small data set), one server each, a small real MLP cut into
/// many blocks.
fn cluster(reliable: u32, transient: u32, options: &str) -> RunConfig {
    let group = |count, tier: &str| MachineGroup {
        device: "slow".into(),
        count,
        slots: 1,
        labels: BTreeMap::from([("tier".to_string(), tier.to_string())]),
    };
    let machines = reliable + transient;
    let mut cfg = small(machines, 8, ITERATIONS);
    cfg.servers = machines;
    cfg.block_bytes = 512;
    cfg.eval_every = 8;
    cfg.cluster.machines = vec![group(reliable, "reliable"), group(transient, "transient")];
    cfg.cluster
        .devices
        .insert("slow".into(), concord_test_support::slow_device(1.0));
    cfg.strategies = vec!["agileml".into()];
    cfg.strategy
        .insert("agileml".into(), toml::from_str(options).expect("options"));
    cfg
}

fn bits(r: &RunResult) -> Vec<Vec<u32>> {
    concord_test_support::param_bits(r)
}

fn figure(r: &RunResult, name: &str) -> f64 {
    concord_test_support::figure(r, &format!("agileml.{name}"))
}

/// Run time at which iteration `k` (1-based) ended.
fn time_of(r: &RunResult, k: usize) -> f64 {
    r.rows[k - 1].time_s
}

fn warn(at_s: f64, deadline_s: f64, machines: &[u32]) -> MembershipEntry {
    MembershipEntry {
        deadline_s: Some(deadline_s),
        ..MembershipEntry::on_machines(at_s, EventKind::Warn, machines)
    }
}

fn event(at_s: f64, event: EventKind, machines: &[u32]) -> MembershipEntry {
    MembershipEntry::on_machines(at_s, event, machines)
}

/// Stages 1 and 2 differ only in where partitions are served: the same bits.
#[test]
fn stages_place_parameters_but_never_change_the_math() {
    let one = run(&cluster(2, 4, "stage = \"one\""));
    let two = run(&cluster(2, 4, "stage = \"two\""));
    let three = run(&cluster(2, 4, "stage = \"three\""));
    assert_eq!(one.rows.len(), ITERATIONS as usize);
    assert_eq!(bits(&one), bits(&two), "stage 1 vs stage 2");
    // Stage 3 cuts the data over the transient workers only: the same global batch each clock,
    // summed in another grouping.
    let diff = common::max_diff(
        one.params.as_ref().expect("real"),
        three.params.as_ref().expect("real"),
    );
    assert!(diff < 1e-4, "stage 1 vs stage 3: {diff}");
    assert!(one.summary.final_test_accuracy.is_some());
    assert_eq!(figure(&two, "final_stage"), 2.0);
    assert_eq!(figure(&three, "final_stage"), 3.0);
    assert_eq!(figure(&one, "ledger_clocks"), ITERATIONS as f64);
}

/// Claim 1: a warned eviction of two of six transient machines, both running ActivePSs (their
/// partitions move to the surviving transient machines; stage 2 stays), and of all six (the
/// ActivePSs push END-OF-LIFE to their homes; stage 1) leaves the final parameters
/// bit-identical to the run without it.
#[test]
fn a_warned_eviction_loses_no_progress() {
    let base = cluster(2, 6, "");
    let reference = run(&base);
    assert_eq!(figure(&reference, "final_stage"), 2.0);
    let step = time_of(&reference, 2) - time_of(&reference, 1);
    let at = time_of(&reference, 6) + 0.3 * step;
    for (machines, stage) in [(vec![4, 5], 2.0), (vec![2, 3, 4, 5, 6, 7], 1.0)] {
        let mut cfg = base.clone();
        cfg.membership = vec![warn(at, at + 20.0 * step, &machines)];
        let evicted = run(&cfg);
        assert_eq!(evicted.rows.len(), ITERATIONS as usize, "{machines:?}");
        assert_eq!(bits(&evicted), bits(&reference), "eviction of {machines:?}");
        assert_eq!(figure(&evicted, "final_stage"), stage, "{machines:?}");
        assert!(figure(&evicted, "handoffs") >= 2.0, "{machines:?}");
        assert_eq!(figure(&evicted, "rollbacks"), 0.0);
        assert_eq!(figure(&evicted, "ledger_clocks"), ITERATIONS as f64);
    }
}

/// Claim 2: when every transient machine fails, the model returns to the backups' committed
/// state and the workers redo the clocks after it; when one ActivePS fails, every partition
/// rolls back. Either way the job ends with every clock applied once and a model close to the
/// undisturbed one (the roll-back subtracts deltas in floating point).
#[test]
fn a_failure_rolls_back_to_the_committed_clock_and_redoes_the_rest() {
    let base = cluster(2, 6, "");
    let reference = run(&base);
    let step = time_of(&reference, 2) - time_of(&reference, 1);
    let at = time_of(&reference, 10) + 0.5 * step;
    for machines in [vec![2, 3, 4, 5, 6, 7], vec![3]] {
        let mut cfg = base.clone();
        cfg.membership = vec![event(at, EventKind::Fail, &machines)];
        let failed = run(&cfg);
        assert_eq!(figure(&failed, "rollbacks"), 1.0, "{machines:?}");
        assert_eq!(failed.rows.len(), ITERATIONS as usize, "{machines:?}");
        // Some clock was worked on twice by a surviving worker: the redo after the roll-back.
        let redone = failed.worker_records.iter().any(|recs| {
            let mut clocks: Vec<u64> = recs.iter().map(|r| r.clock).collect();
            let n = clocks.len();
            clocks.sort_unstable();
            clocks.dedup();
            clocks.len() < n
        });
        assert!(redone, "{machines:?}: no clock was redone");
        let diff = common::max_diff(
            failed.params.as_ref().expect("real"),
            reference.params.as_ref().expect("real"),
        );
        assert!(diff < 1e-3, "{machines:?}: {diff}");
        assert_eq!(figure(&failed, "ledger_clocks"), ITERATIONS as f64);
    }
}

/// Membership events closer together than a clock, in orders a cluster of spot machines
/// produces: machines joining after a failure's roll-back, a warning with less than a clock's
/// notice while a newcomer's partner is among the warned, a failure while newcomers load, a
/// warning and a failure at once, a newcomer failing before it took any work. Every ordering ends
/// with every clock applied once and a model close to the undisturbed one.
#[test]
fn membership_events_within_a_clock_of_each_other_lose_nothing() {
    // Data that loads within a clock, so that newcomers start work while the events go on.
    let base = cluster(2, 6, "data_gb = 0.0001");
    let reference = run(&base);
    let step = time_of(&reference, 2) - time_of(&reference, 1);
    let start = time_of(&reference, 4);
    // Times in clocks after `start`.
    let at = |clocks: f64| start + clocks * step;
    let add = |clocks: f64, machines: &[u32]| event(at(clocks), EventKind::Add, machines);
    let fail = |clocks: f64, machines: &[u32]| event(at(clocks), EventKind::Fail, machines);
    let warned = |clocks: f64, notice: f64, machines: &[u32]| {
        warn(at(clocks), at(clocks + notice), machines)
    };
    let cases = [
        // A newcomer's partner is warned as the newcomer joins, with little notice.
        vec![add(0.0, &[6, 7]), warned(0.0, 0.2, &[2, 3])],
        vec![add(0.5, &[6, 7]), warned(0.5, 2.0, &[2, 3])],
        // ... where the warned machines serve partitions.
        vec![add(0.2, &[7]), warned(0.2, 0.2, &[4, 5])],
        // Newcomers join after a roll-back (they missed its epoch), then a warning.
        vec![
            fail(0.2, &[4]),
            add(4.0, &[6, 7]),
            warned(8.0, 4.0, &[2, 3]),
        ],
        vec![
            fail(0.2, &[4]),
            add(0.2, &[6, 7]),
            warned(4.0, 0.2, &[2, 3]),
        ],
        // A failure while the newcomers' partners hand over to them.
        vec![
            warned(2.0, 1.0, &[2, 3]),
            add(4.0, &[6, 7]),
            fail(8.0, &[4]),
        ],
        // A warning and a failure at once, newcomers after.
        vec![
            warned(0.2, 4.0, &[2, 3]),
            fail(0.2, &[4]),
            add(2.0, &[6, 7]),
        ],
        // A newcomer fails before it took any work; its partner is warned after.
        vec![add(0.2, &[6]), fail(0.6, &[5, 6]), warned(1.2, 1.0, &[3])],
        // Newcomers (and a partner) fail while their partners are to hand over to them.
        vec![add(0.2, &[6, 7]), fail(1.1, &[6, 7])],
        vec![add(0.2, &[6, 7]), fail(1.1, &[5, 6])],
        // Partitions sent on again before they arrive (a warning, then a join and a failure
        // that each move them), while the server first handing them over goes.
        vec![warned(0.1, 0.5, &[4, 5]), add(0.3, &[6]), fail(0.5, &[6])],
        vec![fail(0.3, &[5, 6]), add(2.0, &[7]), warned(4.0, 0.1, &[4])],
    ];
    let mut duplicates = Vec::new();
    for (i, membership) in cases.into_iter().enumerate() {
        let mut cfg = base.clone();
        cfg.membership = membership;
        let r = run(&cfg);
        duplicates.push(figure(&r, "duplicate_sums"));
        assert_eq!(r.rows.len(), ITERATIONS as usize, "case {i}");
        assert_eq!(figure(&r, "ledger_clocks"), ITERATIONS as f64, "case {i}");
        let diff = common::max_diff(
            r.params.as_ref().expect("real"),
            reference.params.as_ref().expect("real"),
        );
        assert!(diff < 1e-3, "case {i}: {diff}");
    }
    // Updates sent again after servers were lost reached servers that had summed them already,
    // and were dropped there: the servers' count of such sums says so.
    assert!(
        duplicates.iter().any(|&d| d > 0.0),
        "no server dropped a sum twice: {duplicates:?}"
    );
}

/// Machines that join mid-run take half of a worker's data after loading it and speed the
/// clocks up; the stage moves from 1 to 2 as the ratio grows.
#[test]
fn machines_that_join_take_work_and_the_stage_follows_the_ratio() {
    // 100 kB of data: a joining worker loads its share in well under a clock.
    let base = cluster(2, 4, "data_gb = 0.0001");
    let reference = run(&base);
    // Machines 2..6 absent at the start, joining early in the run.
    let at = time_of(&reference, 4);
    let mut cfg = base.clone();
    cfg.membership = vec![event(at, EventKind::Add, &[2, 3, 4, 5])];
    let joined = run(&cfg);
    assert_eq!(joined.rows.len(), ITERATIONS as usize);
    assert_eq!(figure(&joined, "joins"), 4.0);
    assert_eq!(figure(&joined, "final_stage"), 2.0);
    assert!(figure(&joined, "stage_changes") >= 1.0);
    // The late workers recorded clocks, and none before they joined.
    for w in 2..6 {
        let recs = &joined.worker_records[w];
        assert!(!recs.is_empty(), "worker {w} never worked");
        assert!(recs.iter().all(|r| r.start_s >= at), "worker {w}");
    }
    assert_eq!(figure(&joined, "ledger_clocks"), ITERATIONS as f64);
}

/// More machines join than there are workers to split with: the newcomers split their halves on
/// with the later ones (a newcomer's partner may be a newcomer whose own half has not arrived
/// yet), so once the splits are done every worker of the eight works on an eighth of the batch.
#[test]
fn newcomers_hand_work_on_to_later_newcomers_until_every_worker_has_a_share() {
    let base = cluster(2, 6, "data_gb = 0.0001");
    let reference = run(&base);
    let mut cfg = base.clone();
    cfg.membership = vec![event(
        time_of(&reference, 3),
        EventKind::Add,
        &[2, 3, 4, 5, 6, 7],
    )];
    let joined = run(&cfg);
    assert_eq!(joined.rows.len(), ITERATIONS as usize);
    let last = ITERATIONS - 1;
    let shares: Vec<u64> = (0..8)
        .map(|w| {
            joined.worker_records[w]
                .iter()
                .find(|r| r.clock == last)
                .map_or(0, |r| r.samples)
        })
        .collect();
    let batch = cfg.batch * u64::from(cfg.workers);
    assert!(
        shares.iter().all(|&s| s == batch / 8),
        "every worker's share of the last clock should be an eighth of {batch}: {shares:?}"
    );
    assert_eq!(figure(&joined, "ledger_clocks"), ITERATIONS as f64);
}

/// A warned eviction with time to hand everything over sends no update twice: the servers the
/// partitions leave forward what reaches them, and workers send updates again only when servers
/// are lost with updates possibly on their way. The parameters are the undisturbed run's.
#[test]
fn a_warned_eviction_with_time_to_spare_sends_no_update_twice() {
    let base = cluster(2, 6, "data_gb = 0.0001");
    let reference = run(&base);
    let clock_s = time_of(&reference, 2) - time_of(&reference, 1);
    let at = time_of(&reference, 8);
    let mut cfg = base.clone();
    cfg.membership = vec![warn(at, at + 10.0 * clock_s, &[2, 3, 4, 5, 6, 7])];
    let warned = run(&cfg);
    assert_eq!(bits(&warned), bits(&reference));
    assert_eq!(figure(&warned, "departures"), 6.0);
    assert_eq!(figure(&warned, "duplicate_sums"), 0.0);
    // What the workers sent: the same updates as in the undisturbed run, by other routes, and a
    // few more read requests (a read out when the route changed asks the new servers again).
    let by_workers = |r: &RunResult| -> u64 {
        r.summary
            .bytes_sent_by_role
            .iter()
            .filter(|(role, _)| role.starts_with("worker"))
            .map(|(_, &b)| b)
            .sum()
    };
    let (sent, undisturbed) = (by_workers(&warned), by_workers(&reference));
    assert!(
        sent as f64 <= undisturbed as f64 * 1.01,
        "the workers sent {sent} bytes against {undisturbed} undisturbed"
    );
}

#[test]
fn start_up_errors_name_the_cause() {
    let mut cfg = cluster(2, 2, "");
    cfg.servers = 2;
    let e = concord_test_support::compose_err(&concord::registry(), &cfg);
    assert!(
        e.contains("`servers` = 2")
            && e.contains("one server role per machine")
            && e.contains("set servers = 4"),
        "{e}"
    );
    // Four servers on four machines, but two workers leave machines 2 and 3 without one.
    let mut cfg = cluster(2, 2, "");
    cfg.workers = 2;
    let e = concord_test_support::compose_err(&concord::registry(), &cfg);
    assert!(
        e.contains("`workers` = 2") && e.contains("machines 2, 3 hold none"),
        "{e}"
    );
    let mut cfg = cluster(2, 2, "");
    cfg.cluster.dedicated_servers = true;
    let e = concord_test_support::compose_err(&concord::registry(), &cfg);
    assert!(
        e.contains("cluster.dedicated_servers") && !e.contains("set servers"),
        "{e}"
    );
    let mut cfg = cluster(2, 2, "");
    cfg.cluster.server_machines = Some(vec![1, 0, 2, 3]);
    let e = concord_test_support::compose_err(&concord::registry(), &cfg);
    assert!(e.contains("cluster.server_machines"), "{e}");
    let mut cfg = cluster(2, 2, "");
    cfg.cluster.machines.reverse();
    let e = concord_test_support::compose_err(&concord::registry(), &cfg);
    assert!(e.contains("machine 0") && e.contains("reliable"), "{e}");
    let e = concord_test_support::compose_err(
        &concord::registry(),
        &cluster(2, 2, "three_above = 0.5"),
    );
    assert!(e.contains("strategy.agileml.three_above"), "{e}");
}

/// Membership works in real time too: under `wall`, a warned eviction during the run leaves the
/// parameters bit-identical to the undisturbed simulated run (the tree-ordered sums make the
/// arrival order irrelevant).
#[test]
fn under_wall_time_a_warned_eviction_also_loses_no_progress() {
    let base = cluster(2, 6, "");
    let reference = run(&base);
    let mut cfg = common::with_runtime(base, concord::engine::context::RuntimeKind::Wall);
    cfg.membership = vec![warn(0.02, 5.0, &[4, 5])];
    let wall = run(&cfg);
    assert_eq!(wall.rows.len(), ITERATIONS as usize);
    assert_eq!(bits(&wall), bits(&reference));
}

/// A failure while partitions are on their way between servers (a warning moved them a
/// microsecond earlier): the hand-offs still land, the partitions roll back with the rest, and
/// the job ends with every clock covered once.
#[test]
fn a_failure_during_a_hand_off_loses_no_partition() {
    let base = cluster(2, 6, "");
    let reference = run(&base);
    let step = time_of(&reference, 2) - time_of(&reference, 1);
    let at = time_of(&reference, 8) + 0.4 * step;
    let mut cfg = base;
    cfg.membership = vec![
        warn(at, at + 20.0 * step, &[4, 5]),
        event(at + 1e-6, EventKind::Fail, &[3]),
    ];
    let r = run(&cfg);
    assert_eq!(r.rows.len(), ITERATIONS as usize);
    assert_eq!(figure(&r, "rollbacks"), 1.0);
    assert_eq!(figure(&r, "ledger_clocks"), ITERATIONS as f64);
    let diff = common::max_diff(
        r.params.as_ref().expect("real"),
        reference.params.as_ref().expect("real"),
    );
    assert!(diff < 1e-3, "{diff}");
}
