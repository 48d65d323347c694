//! Launching a built job: the runtime (virtual time on one thread for `sim`, a thread pool for
//! `wall`), the network with every role's mailbox and context, one task per role, the shutdown of
//! servers and coordinator once every worker is done, and the collection of what each role
//! returned.

use super::build::Built;
use crate::context::{straggler_identity, RoleContext, RoleStats, RuntimeKind};
use crate::contract::{Coordinator, CoordinatorReport, Server, ServerReport, Worker, WorkerReport};
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::job::Job;
use crate::memory::DeviceMemory;
use crate::message::Message;
use crate::metrics::TraceEvent;
use crate::stragglers::{Probe, RoleKind, StragglerSet};
use crate::time::TimeBase;
use crate::trace::{Sampling, TracePlan};
use crate::transport::{BandwidthShaper, LinkTraffic, Network};
use std::collections::BTreeMap;
use std::path::Path;
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
}

/// Runs every role of `built` to completion on the runtime its config names; roles stream their
/// timelines to `trace_dir` when given.
pub(super) fn launch(built: Built, trace_dir: Option<&Path>) -> Result<Launched> {
    let rt = match built.job.config.runtime {
        RuntimeKind::Sim => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build(),
        RuntimeKind::Wall => tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .build(),
    }
    .map_err(|source| EngineError::Io {
        path: "tokio runtime".into(),
        source,
    })?;
    let launched = rt.block_on(run_roles(built, trace_dir))?;
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

/// The wire's own view of NIC slowdowns (bandwidth caps), per role; `None` when no role has a
/// straggler pattern.
fn bandwidth_shaper(job: &Job, roles: &[RoleId]) -> Result<Option<BandwidthShaper>> {
    let mut shapers = BTreeMap::new();
    for &r in roles {
        let set = stragglers_of(job, r)?;
        if !set.is_empty() {
            shapers.insert(r, set);
        }
    }
    let cluster = job.cluster.clone();
    let workers_n = job.config.workers;
    // Each role's transfers are counted, so per-transfer patterns (server jitter) draw anew for
    // every message.
    let mut transfers: BTreeMap<RoleId, u64> = BTreeMap::new();
    Ok((!shapers.is_empty()).then(|| {
        Box::new(move |role: RoleId, now: f64| {
            let (Some(set), Some((kind, index))) =
                (shapers.get_mut(&role), straggler_identity(role))
            else {
                return 1.0;
            };
            let count = transfers.entry(role).or_insert(0);
            let transfer = *count;
            *count += 1;
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
async fn run_roles(built: Built, trace_dir: Option<&Path>) -> Result<Launched> {
    let Built {
        job,
        workers,
        servers,
        coordinator,
    } = built;
    let cfg = &job.config;
    let total_servers = servers.len() as u32;
    let time = TimeBase::new(cfg.runtime == RuntimeKind::Sim);
    let mut roles = vec![RoleId::Coordinator];
    roles.extend((0..total_servers).map(RoleId::Server));
    roles.extend((0..cfg.workers).map(RoleId::Worker));
    let shaper = bandwidth_shaper(&job, &roles)?;
    let (net, mut mailboxes) = Network::new(job.cluster.clone(), time, &roles, shaper);
    let pump = tokio::spawn(net.clone().pump());
    let sampling = Sampling::new(cfg.workers, total_servers, cfg.iterations);
    let traces = TracePlan::new(cfg.trace, trace_dir, sampling);
    let mut ctx_for = |role: RoleId| -> Result<RoleContext> {
        let rx = mailboxes
            .remove(&role)
            .ok_or_else(|| EngineError::protocol(role, "no mailbox"))?;
        let device = job.cluster.device_of(role);
        let memory = DeviceMemory::new(
            (job.memory)(&job, role)?,
            job.cluster.device_label(role),
            role,
            device.memory_bytes(),
        );
        Ok(RoleContext::new(
            role,
            cfg.runtime,
            net.clone(),
            rx,
            cfg.workers,
            cfg.progress_points,
            stragglers_of(&job, role)?,
            memory,
        )
        .with_trace(traces.recorder(role)?))
    };

    let mut worker_set = JoinSet::new();
    for (w, worker) in workers.into_iter().enumerate() {
        worker_set.spawn(run_worker(worker, ctx_for(RoleId::Worker(w as u32))?));
    }
    let mut server_set = JoinSet::new();
    for (s, server) in servers.into_iter().enumerate() {
        server_set.spawn(run_server(server, ctx_for(RoleId::Server(s as u32))?));
    }
    let coord = tokio::spawn(run_coordinator(coordinator, ctx_for(RoleId::Coordinator)?));

    let body = async {
        let mut w_out = Vec::new();
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
    let outcome = tokio::select! {
        biased;
        r = body => r,
        _ = time.sleep(limit) => Err(EngineError::protocol(
            RoleId::Coordinator,
            format!("the run did not finish within time_limit_s = {limit} s of run time: a role is waiting for a message that never comes (deadlock) or the run is far longer than expected"),
        )),
    };
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
    Ok(Launched {
        workers: w_out,
        servers: s_out,
        coordinator: c_out,
        traffic: net.traffic(),
    })
}

/// One worker's task.
async fn run_worker(mut worker: Box<dyn Worker>, mut ctx: RoleContext) -> RoleOutput<WorkerReport> {
    let result = worker.run(&mut ctx).await;
    output_of(ctx, result)
}

/// One server's task.
async fn run_server(mut server: Box<dyn Server>, mut ctx: RoleContext) -> RoleOutput<ServerReport> {
    let result = server.run(&mut ctx).await;
    output_of(ctx, result)
}

/// The coordinator's task.
async fn run_coordinator(
    mut coordinator: Box<dyn Coordinator>,
    mut ctx: RoleContext,
) -> RoleOutput<CoordinatorReport> {
    let result = coordinator.run(&mut ctx).await;
    output_of(ctx, result)
}

/// A finished role's output, with the totals and timeline its context kept; a timeline that could
/// not be written fails the role.
fn output_of<T>(mut ctx: RoleContext, result: Result<T>) -> RoleOutput<T> {
    let (result, trace) = match ctx.finish_trace() {
        Ok(trace) => (result, trace),
        Err(e) => (result.and(Err(e)), None),
    };
    RoleOutput {
        role: ctx.id(),
        result,
        stats: ctx.stats().clone(),
        trace,
        peak_memory: ctx.peak_memory(),
    }
}
