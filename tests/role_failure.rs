//! A server or coordinator that fails mid-run ends the run at once with its own error, in every
//! runtime; the workers waiting for it do not hold the run until the time limit (`sim`, which
//! would report a deadlock instead) or the stall watchdog (real time). The process runtime's
//! ranks run here as threads of the test, each with its own world, on loopback.

use concord::engine::cluster::MachineGroup;
use concord::engine::collective::NoServer;
use concord::engine::config::{RunConfig, RuntimeKind};
use concord::engine::prelude::*;
use concord::engine::process::World;
use concord::engine::run::{run_process, RunOptions};
use std::sync::Arc;
use std::time::Instant;

/// The clock at which the probe's server or coordinator gives up.
const FAILS_AT: u64 = 2;

/// Which role of the probe fails.
#[derive(Clone, Copy)]
enum Failing {
    Server,
    Coordinator,
}

impl Failing {
    fn role(self) -> RoleId {
        match self {
            Failing::Server => RoleId::Server(0),
            Failing::Coordinator => RoleId::Coordinator,
        }
    }
}

/// Sends the failing role a note each clock and waits for its answer before the next.
struct AskingWorker {
    job: Arc<Job>,
    ask: RoleId,
}

#[async_trait]
impl Worker for AskingWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let mut iterations = Vec::new();
        for clock in self.job.clocks() {
            let start = ctx.now();
            ctx.sleep(0.01).await;
            ctx.send(self.ask, Message::custom("probe.ask", &clock)?);
            ctx.recv_matching(|e| e.from == self.ask).await?;
            let tally = ClockTally {
                samples: 1,
                compute_s: 0.01,
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

/// Answers every note until one of clock `FAILS_AT` comes, then fails; a role the workers never
/// ask waits for the shutdown.
async fn answer_until_failing(ctx: &mut RoleContext) -> Result<()> {
    loop {
        let env = ctx.recv().await?;
        if matches!(env.msg, Message::Shutdown) {
            return Ok(());
        }
        let Some(clock) = env.msg.decode_custom::<u64>("probe.ask")? else {
            continue;
        };
        if clock >= FAILS_AT {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("the probe gives up at clock {clock}"),
            ));
        }
        ctx.send(env.from, Message::custom("probe.answer", &clock)?);
    }
}

struct ProbeServer;

#[async_trait]
impl Server for ProbeServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        answer_until_failing(ctx).await?;
        Ok(ServerReport::default())
    }
}

struct ProbeCoordinator;

#[async_trait]
impl Coordinator for ProbeCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        answer_until_failing(ctx).await?;
        Ok(CoordinatorReport::default())
    }
}

/// Workers that ask `failing`'s role each clock, and a server and coordinator that answer until
/// `FAILS_AT` (the one not asked idles).
struct FailureProbe(Failing);

impl Strategy for FailureProbe {
    fn name(&self) -> &'static str {
        "failure-probe"
    }
    fn summary(&self) -> &'static str {
        "test: workers waiting on a server or coordinator that fails mid-run"
    }
    fn slots(&self) -> &'static [Slot] {
        &[
            Slot::Worker,
            Slot::Server,
            Slot::Coordinator,
            Slot::Consistency,
        ]
    }
    fn install(&self, _: Option<&toml::Value>, _: &RunConfig, asm: &mut Assembly) -> Result<()> {
        let ask = self.0.role();
        asm.consistency = Some(Arc::new(NoServer));
        asm.set_worker(move |job, _| Ok(AskingWorker { job, ask }));
        asm.set_server(|_, _| Ok(ProbeServer));
        asm.set_coordinator(|_| Ok(ProbeCoordinator));
        Ok(())
    }
}

/// The probe's job: 3 workers, one server, `iterations` 10, throughput mode.
fn config(runtime: RuntimeKind) -> RunConfig {
    let mut cfg = RunConfig {
        workers: 3,
        servers: 1,
        iterations: 10,
        eval_every: 10,
        strategies: vec!["failure-probe".into()],
        ..RunConfig::default()
    };
    cfg.model = toml::from_str("kind = \"profile\"\nname = \"resnet-32\"").expect("model");
    cfg.runtime = runtime;
    // Long enough that a run waiting for it would not pass the time checks below.
    cfg.guard.stall_s = 120.0;
    cfg.process.peer_timeout_s = 120.0;
    cfg
}

/// The strategies with the probe failing `failing`, composed for `cfg`.
fn compose(failing: Failing, cfg: &RunConfig) -> concord::engine::contract::Assembly {
    let mut registry = concord::registry();
    registry
        .register(Arc::new(FailureProbe(failing)))
        .expect("register");
    registry.compose(cfg).expect("composes")
}

/// Runs the probe with `failing` under `runtime`; the error and how long the run took.
fn run(failing: Failing, runtime: RuntimeKind) -> (String, f64) {
    let cfg = config(runtime);
    let asm = compose(failing, &cfg);
    let started = Instant::now();
    let err = match concord::engine::run(&cfg, &asm, RunOptions::default()) {
        Err(e) => e.to_string(),
        Ok(r) => panic!("the run completed {} rows", r.rows.len()),
    };
    (err, started.elapsed().as_secs_f64())
}

#[test]
fn a_failing_coordinator_ends_the_run_with_its_error() {
    for runtime in [RuntimeKind::Sim, RuntimeKind::Wall] {
        let (err, took) = run(Failing::Coordinator, runtime);
        assert!(err.contains("the coordinator failed"), "{runtime:?}: {err}");
        assert!(
            err.contains("the probe gives up at clock 2"),
            "{runtime:?}: {err}"
        );
        assert!(!err.contains("time_limit_s"), "{runtime:?}: {err}");
        assert!(took < 60.0, "{runtime:?}: the run took {took} s to stop");
    }
}

#[test]
fn a_failing_server_ends_the_run_with_its_error() {
    for runtime in [RuntimeKind::Sim, RuntimeKind::Wall] {
        let (err, took) = run(Failing::Server, runtime);
        assert!(err.contains("a server failed"), "{runtime:?}: {err}");
        assert!(
            err.contains("the probe gives up at clock 2"),
            "{runtime:?}: {err}"
        );
        assert!(took < 60.0, "{runtime:?}: the run took {took} s to stop");
    }
}

/// Runs the probe with `failing` as a process job of three ranks (one machine each) on
/// loopback, each rank a thread here; every rank's error and how long the slowest took.
fn run_processes(failing: Failing) -> (Vec<String>, f64) {
    let mut cfg = config(RuntimeKind::Process);
    cfg.cluster.machines = vec![MachineGroup {
        device: "cpu".into(),
        count: 3,
        slots: 1,
        labels: Default::default(),
    }];
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let started = Instant::now();
    let ranks: Vec<_> = (0..3u32)
        .map(|rank| {
            let (cfg, asm) = (cfg.clone(), compose(failing, &cfg));
            std::thread::spawn(move || {
                let world = World::from_lookup(|k| match k {
                    "RANK" => Some(rank.to_string()),
                    "WORLD_SIZE" => Some("3".into()),
                    "MASTER_ADDR" => Some("127.0.0.1".into()),
                    "MASTER_PORT" => Some(port.to_string()),
                    _ => None,
                })
                .expect("world");
                match run_process(&cfg, &asm, RunOptions::default(), &world) {
                    Err(e) => e.to_string(),
                    Ok(_) => format!("rank {rank} completed"),
                }
            })
        })
        .collect();
    let errors = ranks
        .into_iter()
        .map(|r| r.join().expect("rank thread"))
        .collect();
    (errors, started.elapsed().as_secs_f64())
}

#[test]
fn under_processes_a_failing_role_ends_every_rank_with_its_error_named() {
    for (failing, named) in [
        (Failing::Coordinator, "the coordinator failed"),
        (Failing::Server, "server-0 failed"),
    ] {
        let (errors, took) = run_processes(failing);
        // The failing rank names its role; the others stop with that rank's error.
        assert!(
            errors
                .iter()
                .all(|e| e.contains(named) && e.contains("the probe gives up at clock 2")),
            "{named}: {errors:?}"
        );
        assert!(took < 60.0, "{named}: the ranks took {took} s to stop");
    }
}
