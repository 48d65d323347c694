//! Membership that changes while a job runs (`[[membership]]`): roles of a machine that joins
//! late start at its join, roles of a machine that fails or is evicted stop there and their
//! messages vanish, the coordinator hears of every change at its time, the rows merge whoever
//! recorded each clock, and a strategy that does not handle membership is refused at the door.

use concord::engine::cluster::MachineGroup;
use concord::engine::config::RunConfig;
use concord::engine::membership::{EventKind, MembershipEntry, MembershipEvent};
use concord::engine::prelude::*;
use concord::engine::run::RunOptions;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Seconds each clock of a probe worker takes.
const CLOCK_S: f64 = 1.0;

/// What the coordinator heard, with the run time it heard it at.
type Heard = Arc<Mutex<Vec<(f64, MembershipEvent)>>>;

/// Works `CLOCK_S` per clock and sends worker 0 a note after each (worker 0 ignores them), so a
/// stopped role's messages are in flight when its machine goes.
struct ProbeWorker {
    id: WorkerId,
    job: Arc<Job>,
}

#[async_trait]
impl Worker for ProbeWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let mut iterations = Vec::new();
        for clock in self.job.clocks() {
            let start = ctx.now();
            ctx.sleep(CLOCK_S).await;
            if self.id != 0 {
                ctx.send(RoleId::Worker(0), Message::custom("probe.note", &clock)?);
            }
            let tally = ClockTally {
                samples: 1,
                compute_s: CLOCK_S,
                wait_s: 0.0,
                comm_s: 0.0,
                loss: f64::NAN,
                version_read: 0,
                bytes_sent: 0,
            };
            iterations.push(close_clock(ctx, &self.job, clock, start, tally));
        }
        Ok(WorkerReport {
            iterations,
            ..WorkerReport::default()
        })
    }
}

/// Records every membership event with its arrival time.
struct ProbeCoordinator {
    heard: Heard,
}

#[async_trait]
impl Coordinator for ProbeCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        loop {
            let env = ctx.recv().await?;
            match env.msg {
                Message::Shutdown => return Ok(CoordinatorReport::default()),
                Message::Membership(e) => {
                    let now = ctx.now();
                    self.heard.lock().expect("log").push((now, e));
                }
                _ => {}
            }
        }
    }
}

/// Fills the worker and coordinator slots with the probes; `elastic`: whether it says its roles
/// handle membership changes.
struct MembershipProbe {
    heard: Heard,
    elastic: bool,
}

impl Strategy for MembershipProbe {
    fn name(&self) -> &'static str {
        "membership-probe"
    }
    fn summary(&self) -> &'static str {
        "test: workers that clock on their own and a coordinator that logs membership"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Worker, Slot::Coordinator]
    }
    fn install(&self, _: Option<&toml::Value>, _: &RunConfig, asm: &mut Assembly) -> Result<()> {
        let heard = self.heard.clone();
        asm.set_worker(|job, id| Ok(ProbeWorker { id, job }));
        asm.set_coordinator(move |_| {
            Ok(ProbeCoordinator {
                heard: heard.clone(),
            })
        });
        asm.elastic_membership = self.elastic;
        Ok(())
    }
}

/// Four one-slot machines: 0 and 1 reliable, 2 and 3 transient; throughput mode.
fn config(membership: Vec<MembershipEntry>) -> RunConfig {
    let group = |count, tier: &str| MachineGroup {
        device: "cpu".into(),
        count,
        slots: 1,
        labels: BTreeMap::from([("tier".to_string(), tier.to_string())]),
    };
    let mut cfg = RunConfig {
        workers: 4,
        servers: 1,
        iterations: 10,
        eval_every: 10,
        strategies: vec!["asp".into(), "membership-probe".into()],
        membership,
        ..RunConfig::default()
    };
    cfg.model = toml::from_str("kind = \"profile\"\nname = \"resnet-32\"").expect("model");
    cfg.cluster.machines = vec![group(2, "reliable"), group(2, "transient")];
    cfg
}

fn entry(at_s: f64, event: EventKind, machines: &[u32]) -> MembershipEntry {
    MembershipEntry::on_machines(at_s, event, machines)
}

fn run(
    cfg: &RunConfig,
    elastic: bool,
) -> Result<(concord::engine::RunResult, Vec<(f64, MembershipEvent)>)> {
    let heard: Heard = Arc::default();
    let mut registry = concord::registry();
    registry.register(Arc::new(MembershipProbe {
        heard: heard.clone(),
        elastic,
    }))?;
    let asm = registry.compose(cfg)?;
    let result = concord::engine::run(cfg, &asm, RunOptions::default())?;
    let heard = std::mem::take(&mut *heard.lock().expect("log"));
    Ok((result, heard))
}

#[test]
fn machines_join_fail_and_are_evicted_on_time() {
    let mut warn = entry(3.5, EventKind::Warn, &[]);
    warn.labels = BTreeMap::from([("tier".to_string(), "transient".to_string())]);
    warn.deadline_s = Some(6.7);
    // Machine 3 joins at 2.5 s; machine 1 fails at 4.5 s; both transient machines (2, 3) are
    // warned at 3.5 s and evicted at 6.7 s.
    let cfg = config(vec![
        entry(2.5, EventKind::Add, &[3]),
        warn,
        entry(4.5, EventKind::Fail, &[1]),
    ]);
    let (result, heard) = run(&cfg, true).expect("runs");
    let events: Vec<(f64, &str, Vec<u32>)> = heard
        .iter()
        .map(|(t, e)| {
            let kind = match e {
                MembershipEvent::Added { .. } => "added",
                MembershipEvent::Warned { deadline_s, .. } => {
                    assert_eq!(*deadline_s, 6.7);
                    "warned"
                }
                MembershipEvent::Evicted { .. } => "evicted",
                MembershipEvent::Failed { .. } => "failed",
            };
            (*t, kind, e.machines().to_vec())
        })
        .collect();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(close(events[0].0, 2.5) && events[0].1 == "added" && events[0].2 == vec![3]);
    assert!(close(events[1].0, 3.5) && events[1].1 == "warned" && events[1].2 == vec![2, 3]);
    assert!(close(events[2].0, 4.5) && events[2].1 == "failed" && events[2].2 == vec![1]);
    assert!(close(events[3].0, 6.7) && events[3].1 == "evicted" && events[3].2 == vec![2, 3]);

    let clocks = |w: usize| -> Vec<(u64, f64, f64)> {
        result.worker_records[w]
            .iter()
            .map(|r| (r.clock, r.start_s, r.end_s))
            .collect()
    };
    // Worker 0 (reliable, never touched) runs all ten clocks.
    assert_eq!(clocks(0).len(), 10);
    // Worker 1 failed at 4.5 s: clocks 0..4 closed (the fifth was under way).
    assert_eq!(
        clocks(1).iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    // Worker 2 was evicted at 6.7 s: six clocks closed.
    assert_eq!(clocks(2).len(), 6);
    // Worker 3 started at its join (2.5 s) and was evicted at 6.7 s: four clocks (its own
    // clocks 0..4, run from 2.5 s on).
    let w3 = clocks(3);
    assert_eq!(w3.len(), 4, "{w3:?}");
    assert!(close(w3[0].1, 2.5), "{w3:?}");
    assert!(w3.iter().all(|c| c.2 <= 6.7));
    // Rows: whoever recorded each clock, ten clocks in all: clock 0 by all four workers, clocks
    // 4 and 5 by workers 0 and 2, clocks 6..10 by worker 0 alone.
    assert_eq!(result.rows.len(), 10);
    let samples: Vec<u64> = result.rows.iter().map(|r| r.samples).collect();
    assert_eq!(samples, vec![4, 4, 4, 4, 2, 2, 1, 1, 1, 1]);
}

#[test]
fn a_membership_trace_needs_a_strategy_that_handles_it() {
    let cfg = config(vec![entry(1.0, EventKind::Fail, &[2])]);
    let Err(err) = run(&cfg, false) else {
        panic!("a strategy without elastic membership must be refused")
    };
    let err = err.to_string();
    assert!(
        err.contains("membership") && err.contains("fixed set of machines"),
        "{err}"
    );
}

#[test]
fn a_machine_that_never_joins_before_the_end_leaves_no_trace() {
    // Machine 3 would join at 100 s; every other worker is done at 10 s.
    let cfg = config(vec![entry(100.0, EventKind::Add, &[3])]);
    let (result, heard) = run(&cfg, true).expect("runs");
    assert!(heard.is_empty(), "{heard:?}");
    assert!(result.worker_records[3].is_empty());
    assert_eq!(result.rows.len(), 10);
    assert!(result.rows.iter().all(|r| r.samples == 3));
    assert_eq!(result.rows[0].workers, Some(vec![0, 1, 2]));
}
