//! Launching a built job: the runtime (virtual time on one thread for `sim`, a thread pool for
//! `wall`), the network with every role's mailbox and context, one task per role, the shutdown of
//! servers and coordinator once every worker is done, and the collection of what each role
//! returned.

use super::build::Built;
use super::failure::FirstFailure;
pub(super) use super::members::{self, gated, Gated, Presence};
use crate::context::{straggler_identity, RoleContext, RoleStats, RuntimeKind};
use crate::contract::{Coordinator, CoordinatorReport, Server, ServerReport, Worker, WorkerReport};
use crate::error::{EngineError, Result};
use crate::ids::{RoleId, WorkerId};
use crate::job::Job;
use crate::memory::DeviceMemory;
use crate::message::Message;
use crate::metrics::TraceEvent;
use crate::output::FolderGate;
use crate::resume::NetworkState;
use crate::stall;
use crate::stragglers::{Probe, RoleKind, StragglerSet};
use crate::time::TimeBase;
use crate::trace::{Sampling, TracePlan};
use crate::transport::tables::ByRole;
use crate::transport::{BandwidthShaper, Inbox, LinkTraffic, Network, Transport};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::task::JoinSet;

/// What one role's task returned: its result, its compute totals and its timeline.
pub(super) struct RoleOutput<T> {
    /// The role.
    pub role: RoleId,
    /// What the role's `run` returned.
    pub result: Result<T>,
    /// Its compute totals.
    pub stats: RoleStats,
    /// Its timeline, where it was kept in memory.
    pub trace: Option<Vec<TraceEvent>>,
    /// The highest number of bytes its memory policy accounted on its device.
    pub peak_memory: u64,
    /// Run time at which it returned.
    pub end_s: f64,
    /// Its straggler patterns' state when it returned.
    pub stragglers: Vec<Option<serde_json::Value>>,
    /// Whether its machine left the job, or never joined it, before the role finished
    /// ([`crate::membership`]): it takes no part in the rows after its last record.
    pub left: bool,
}

/// Everything the roles of a finished run returned, each kind in role order.
pub(super) struct Launched {
    /// Workers, by index.
    pub workers: Vec<RoleOutput<WorkerReport>>,
    /// Servers, by index (standby ones included).
    pub servers: Vec<RoleOutput<ServerReport>>,
    /// The coordinator.
    pub coordinator: RoleOutput<CoordinatorReport>,
    /// Traffic per directed role pair.
    pub traffic: BTreeMap<(RoleId, RoleId), LinkTraffic>,
    /// The network's queues at the end.
    pub network: NetworkState,
}

/// Runs every role of `built` to completion on the runtime its config names; roles stream their
/// timelines to `trace_dir` when given, through the run folder's `gate`.
pub(super) fn launch(
    built: Built,
    trace_dir: Option<&Path>,
    gate: &FolderGate,
) -> Result<Launched> {
    let rt = match built.job.config.runtime {
        RuntimeKind::Sim => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build(),
        RuntimeKind::Wall | RuntimeKind::Process => tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .build(),
    }
    .map_err(|source| EngineError::Io {
        path: "tokio runtime".into(),
        source,
    })?;
    let launched = rt.block_on(run_roles(built, trace_dir, gate))?;
    drop(rt);
    Ok(launched)
}

/// The straggler patterns of `role` (none for the coordinator).
fn stragglers_of(job: &Job, role: RoleId) -> Result<StragglerSet> {
    let cfg = &job.config;
    let machine = job.cluster.machine_of(role);
    Ok(match straggler_identity(role) {
        Some((kind, index)) => {
            StragglerSet::build(&cfg.stragglers, cfg.seed, kind, index, machine)?
        }
        None => StragglerSet::build(&[], cfg.seed, RoleKind::Server, u32::MAX, machine)?,
    })
}

/// Transfers made so far per role, shared between the wire's shaper, which numbers them (twice
/// per message between machines: a counter by role number, not a locked search), and the launch,
/// which saves and restores them at checkpoints.
struct TransferCounts(ByRole<AtomicU64>);

impl TransferCounts {
    /// A counter for each of `roles`, at its count in `restored` (a checkpoint's) or 0.
    fn new(roles: &[RoleId], restored: Option<&BTreeMap<RoleId, u64>>) -> TransferCounts {
        let count = |role| restored.and_then(|r| r.get(&role)).copied().unwrap_or(0);
        TransferCounts(ByRole::new(
            roles
                .iter()
                .map(|&role| (role, AtomicU64::new(count(role)))),
        ))
    }

    /// The number of `role`'s next transfer (0 for its first), counted.
    fn next(&self, role: RoleId) -> u64 {
        self.0
            .get(role)
            .map_or(0, |count| count.fetch_add(1, Ordering::Relaxed))
    }

    /// The counts as a checkpoint keeps them: every role that has made a transfer.
    fn to_map(&self) -> BTreeMap<RoleId, u64> {
        self.0
            .iter()
            .map(|(role, count)| (role, count.load(Ordering::Relaxed)))
            .filter(|&(_, count)| count > 0)
            .collect()
    }
}

/// The wire's own view of NIC slowdowns (bandwidth caps), per role; `None` when no role has a
/// straggler pattern. `transfers` counts each role's transfers (restored at a resume).
fn bandwidth_shaper(
    job: &Job,
    roles: &[RoleId],
    transfers: Arc<TransferCounts>,
) -> Result<Option<BandwidthShaper>> {
    let mut sets = Vec::new();
    for &r in roles {
        let set = stragglers_of(job, r)?;
        if !set.is_empty() {
            sets.push((r, set));
        }
    }
    // Asked twice per message between machines: a table by role number, not a search.
    let mut shapers = ByRole::new(sets);
    let cluster = job.cluster.clone();
    let workers_n = job.config.workers;
    // Each role's transfers are counted, so per-transfer patterns (server jitter) draw anew for
    // every message.
    Ok((!shapers.is_empty()).then(|| {
        Box::new(move |role: RoleId, now: f64| {
            let (Some(set), Some((kind, index))) =
                (shapers.get_mut(role), straggler_identity(role))
            else {
                return 1.0;
            };
            let transfer = transfers.next(role);
            let probe = Probe {
                kind,
                index,
                machine: cluster.machine_of(role),
                num_workers: workers_n,
                now,
                iter: transfer,
                progress: 0.0,
                nominal_iter_s: 0.0,
            };
            set.effect(&probe).bandwidth_factor
        }) as BandwidthShaper
    }))
}

/// Spawns every role, waits for the workers, shuts the servers and the coordinator down once
/// the messages in flight are delivered, and collects what each returned, within the run's time
/// limit.
async fn run_roles(built: Built, trace_dir: Option<&Path>, gate: &FolderGate) -> Result<Launched> {
    let Built {
        job,
        workers,
        servers,
        coordinator,
    } = built;
    let cfg = &job.config;
    let total_servers = servers.len() as u32;
    let from = job.segment_start();
    let origin = from.as_ref().map_or(0.0, |p| p.earliest_s());
    let time = TimeBase::starting_at(cfg.runtime == RuntimeKind::Sim, origin);
    let roles = all_roles(cfg.workers, total_servers);
    let restored = from.as_ref().map(|p| &p.history.network);
    let transfers = Arc::new(TransferCounts::new(&roles, restored.map(|n| &n.transfers)));
    let shaper = bandwidth_shaper(&job, &roles, transfers.clone())?;
    let (net, mut mailboxes) = Network::new(job.cluster.clone(), time, &roles, shaper);
    if let Some(n) = restored {
        net.restore_queues(&n.egress_free, &n.ingress_free);
        net.restore_role_queues(&n.bus);
        net.restore_processor_clocks(&n.processors);
    }
    // Each role restarts at the run time it stopped at.
    let start_of = |role: RoleId| {
        from.as_ref()
            .and_then(|p| p.roles.get(&role))
            .map(|c| c.at_s)
    };
    let pump = tokio::spawn(net.clone().pump());
    let traces = trace_plan(&job, total_servers, trace_dir, gate);
    let mut ctx_for = |role: RoleId| -> Result<RoleContext> {
        let rx = mailboxes
            .remove(&role)
            .ok_or_else(|| EngineError::protocol(role, "no mailbox"))?;
        context_for(&job, role, net.clone(), rx, &traces)
    };

    let presence = Presence::new(&job.membership, job.cluster.machines.len());
    let gate_of = |role: RoleId| presence.gate(job.cluster.machine_of(role));
    let mut worker_set = JoinSet::new();
    for (w, worker) in workers {
        let role = RoleId::Worker(w);
        let (job, gate) = (job.clone(), gate_of(role));
        let ctx = ctx_for(role)?;
        let start = start_of(role);
        worker_set.spawn(async move {
            let out = run_worker(worker, ctx, start, gate).await;
            with_departed_records(&job, out)
        });
    }
    let failure = FirstFailure::default();
    let mut server_set = JoinSet::new();
    for (s, server) in servers {
        let role = RoleId::Server(s);
        let ran = run_server(server, ctx_for(role)?, start_of(role), gate_of(role));
        server_set.spawn(failure.watching(ran, "a server failed".into()));
    }
    let driver = (!job.membership.is_static()).then(|| {
        let net = net.clone();
        tokio::spawn(members::drive(
            job.membership.clone(),
            presence.clone(),
            move |msg| net.control_now(RoleId::Coordinator, msg),
            time,
        ))
    });
    // Workers of machines that have not joined: once every other worker is done, they never will.
    let absent_workers = || {
        job.cluster
            .worker_machine
            .iter()
            .filter(|&&m| presence.is_absent(m))
            .count()
    };
    let total_workers = job.config.workers as usize;
    let coord = tokio::spawn(failure.watching(
        run_coordinator(
            coordinator,
            ctx_for(RoleId::Coordinator)?,
            start_of(RoleId::Coordinator),
        ),
        "the coordinator failed".into(),
    ));

    let body = async {
        let mut w_out = Vec::new();
        if driver.is_some() && absent_workers() == total_workers {
            presence.cancel_absent();
        }
        while let Some(joined) = worker_set.join_next().await {
            let out = joined.map_err(|e| {
                EngineError::protocol(RoleId::Coordinator, format!("a worker task failed: {e}"))
            })?;
            if out.result.is_err() {
                let RoleOutput { role, result, .. } = out;
                return Err(result
                    .err()
                    .unwrap_or_else(|| EngineError::protocol(role, "failed")));
            }
            w_out.push(out);
            if driver.is_some() && w_out.len() + absent_workers() == total_workers {
                presence.cancel_absent();
            }
        }
        for s in 0..total_servers {
            net.control_after_in_flight(RoleId::Server(s), Message::Shutdown);
        }
        net.control_after_in_flight(RoleId::Coordinator, Message::Shutdown);
        let mut s_out = Vec::new();
        while let Some(joined) = server_set.join_next().await {
            let out = joined.map_err(|e| {
                EngineError::protocol(RoleId::Coordinator, format!("a server task failed: {e}"))
            })?;
            s_out.push(out);
        }
        let c_out = coord.await.map_err(|e| {
            EngineError::protocol(
                RoleId::Coordinator,
                format!("the coordinator task failed: {e}"),
            )
        })?;
        Ok::<_, EngineError>((w_out, s_out, c_out))
    };
    let limit = cfg.time_limit_s;
    let every_worker: Vec<WorkerId> = (0..cfg.workers).collect();
    let stall = stall::watch_job(&job, &every_worker, "");
    // A tripped divergence guard ends the run at once, whatever the roles are waiting for.
    let outcome = tokio::select! {
        biased;
        _ = job.guard.tripped() => Err(EngineError::protocol(
            RoleId::Coordinator,
            "stopped by the divergence guard",
        )),
        r = body => r,
        // A server or the coordinator failed mid-run: the workers would wait for it forever.
        what = failure.first() => Err(EngineError::protocol(RoleId::Coordinator, what)),
        s = stall, if cfg.runtime != RuntimeKind::Sim => Err(EngineError::Stalled(s)),
        _ = time.sleep(limit) => Err(EngineError::protocol(
            RoleId::Coordinator,
            format!("the run did not finish within time_limit_s = {limit} s of run time: a role is waiting for a message that never comes (deadlock) or the run is far longer than expected"),
        )),
    };
    if let Some(d) = driver {
        d.abort();
    }
    net.close();
    let (mut w_out, mut s_out, c_out) = match outcome {
        Ok(v) => v,
        Err(e) => {
            pump.abort();
            return Err(e);
        }
    };
    let _ = pump.await;
    for out in &s_out {
        if let Err(e) = &out.result {
            return Err(EngineError::protocol(
                RoleId::Coordinator,
                format!("a server failed: {e}"),
            ));
        }
    }
    if let Err(e) = &c_out.result {
        return Err(EngineError::protocol(
            RoleId::Coordinator,
            format!("the coordinator failed: {e}"),
        ));
    }
    w_out.sort_by_key(|o| o.role);
    s_out.sort_by_key(|o| o.role);
    let (egress_free, ingress_free) = net.queues();
    let transfers = transfers.to_map();
    Ok(Launched {
        workers: w_out,
        servers: s_out,
        coordinator: c_out,
        traffic: net.traffic(),
        network: NetworkState {
            egress_free,
            ingress_free,
            transfers,
            bus: net.role_queues(),
            processors: net.processor_clocks(),
        },
    })
}

/// Every role of a job of `workers` workers and `servers` servers: the coordinator, the servers,
/// the workers.
pub(super) fn all_roles(workers: u32, servers: u32) -> Vec<RoleId> {
    let mut roles = vec![RoleId::Coordinator];
    roles.extend((0..servers).map(RoleId::Server));
    roles.extend((0..workers).map(RoleId::Worker));
    roles
}

/// Which timelines the run keeps and where they go (through the run folder's `gate`).
pub(super) fn trace_plan(
    job: &Job,
    total_servers: u32,
    trace_dir: Option<&Path>,
    gate: &FolderGate,
) -> TracePlan {
    let cfg = &job.config;
    let sampling = Sampling::new(cfg.workers, total_servers, cfg.iterations);
    TracePlan::new(cfg.trace, trace_dir, sampling)
        .continuing_from(job.clocks().start)
        .through(gate.clone())
}

/// The context of `role`, talking through `net` and reading its mailbox `rx`: its straggler
/// set (restored at a resume), its memory policy, the job's cost sheet and its timeline.
pub(super) fn context_for(
    job: &Job,
    role: RoleId,
    net: Arc<dyn Transport>,
    rx: impl Into<Inbox>,
    traces: &TracePlan,
) -> Result<RoleContext> {
    let cfg = &job.config;
    let from = job.segment_start();
    let device = job.cluster.device_of(role);
    let mut stragglers = stragglers_of(job, role)?;
    if let Some(cp) = from.as_ref().and_then(|p| p.roles.get(&role)) {
        stragglers.restore(&cp.stragglers)?;
    }
    let memory = DeviceMemory::new(
        (job.memory)(job, role)?,
        job.cluster.device_label(role),
        role,
        device.memory_bytes(),
    );
    Ok(RoleContext::new(
        role,
        cfg.runtime,
        net,
        rx,
        cfg.workers,
        cfg.progress_points,
        stragglers,
        memory,
    )
    .with_cost_sheet(job.cost_sheet.clone())
    .with_modeled_compute(!job.model.is_real())
    .with_trace(traces.recorder(role)?))
}

/// One worker's task; `start_at`: the run time it restarts at when resuming; `gate`: its
/// machine's standing where membership changes.
pub(super) async fn run_worker(
    mut worker: Box<dyn Worker>,
    mut ctx: RoleContext,
    start_at: Option<f64>,
    gate: Option<Gate>,
) -> RoleOutput<WorkerReport> {
    wait_until(ctx.time(), start_at).await;
    let ran = gated(gate, worker.run(&mut ctx)).await;
    gated_output(ctx, ran)
}

/// One server's task; `start_at`: the run time it restarts at when resuming; `gate`: its
/// machine's standing where membership changes.
pub(super) async fn run_server(
    mut server: Box<dyn Server>,
    mut ctx: RoleContext,
    start_at: Option<f64>,
    gate: Option<Gate>,
) -> RoleOutput<ServerReport> {
    wait_until(ctx.time(), start_at).await;
    let ran = gated(gate, server.run(&mut ctx)).await;
    gated_output(ctx, ran)
}

/// A worker's output where its machine left (or never joined): the records it closed before it
/// went, which the run's guard keeps, stand for its report.
pub(super) fn with_departed_records(
    job: &Job,
    mut out: RoleOutput<WorkerReport>,
) -> RoleOutput<WorkerReport> {
    if let (true, RoleId::Worker(w)) = (out.left, out.role) {
        out.result = Ok(WorkerReport {
            iterations: job.guard.records_of(w),
            ..WorkerReport::default()
        });
    }
    out
}

/// What a role's machine standing is watched through.
pub(super) type Gate = tokio::sync::watch::Receiver<members::Standing>;

/// The output of a gated role: a role whose machine left or never joined returns an empty report
/// (the caller fills in what it recorded) and is marked as having left.
fn gated_output<T: Default>(ctx: RoleContext, ran: Gated<T>) -> RoleOutput<T> {
    match ran {
        Gated::Ran(result) => output_of(ctx, result),
        Gated::NeverJoined | Gated::Departed => {
            let mut out = output_of(ctx, Ok(T::default()));
            out.left = true;
            out
        }
    }
}

/// The coordinator's task; `start_at`: the run time it restarts at when resuming.
pub(super) async fn run_coordinator(
    mut coordinator: Box<dyn Coordinator>,
    mut ctx: RoleContext,
    start_at: Option<f64>,
) -> RoleOutput<CoordinatorReport> {
    wait_until(ctx.time(), start_at).await;
    let result = coordinator.run(&mut ctx).await;
    output_of(ctx, result)
}

/// Waits until run time `at` (a resumed role restarting where it stopped).
async fn wait_until(time: TimeBase, at: Option<f64>) {
    if let Some(at) = at {
        time.sleep_until(at).await;
    }
}

/// A finished role's output, with the totals and timeline its context kept; a timeline that could
/// not be written fails the role.
pub(super) fn output_of<T>(mut ctx: RoleContext, result: Result<T>) -> RoleOutput<T> {
    let (result, trace) = match ctx.finish_trace() {
        Ok(trace) => (result, trace),
        Err(e) => (result.and(Err(e)), None),
    };
    let end_s = ctx.stopped_at();
    RoleOutput {
        role: ctx.id(),
        result,
        stats: ctx.stats_at_end(end_s),
        trace,
        peak_memory: ctx.peak_memory(),
        end_s,
        stragglers: ctx.straggler_state(),
        left: false,
    }
}
