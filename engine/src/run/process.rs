//! One rank of a `--runtime process` job: meet the other processes, run the roles placed on this
//! process's machine, end them in step with the others, and (rank 0) gather every role's output
//! and finish the run as `sim` and `wall` do.
//!
//! The end of a run without a shared queue: when its workers are done, a process tells every
//! other (`WorkersDone`, after everything its workers sent on the same ordered connection). Once
//! a process has heard it from all, no worker message for its roles is still on the way, so its
//! servers and coordinator get their shutdown behind every message they were sent. Each follower
//! then sends rank 0 its outputs (`Outputs`) and waits for rank 0's `Bye`.

use super::build::{self, Built};
use super::finish;
use super::launch::{self, Launched, RoleOutput};
use super::{RunOptions, RunResult};
use crate::cluster::Cluster;
use crate::config::{RunConfig, RuntimeKind};
use crate::contract::{Assembly, CoordinatorReport, ServerReport, WorkerReport};
use crate::error::{EngineError, Result};
use crate::guard::StopReason;
use crate::ids::RoleId;
use crate::job::{ProgressFn, Segment};
use crate::message::Message;
use crate::process::mesh::{Event, Mesh, Peers};
use crate::process::net::{Mailboxes, MeshTransport};
use crate::process::wire::{Frame, JobIdentity, ProcessOutputs, RemoteOutput};
use crate::process::World;
use crate::resume::NetworkState;
use crate::time::TimeBase;
use crate::transport::{Envelope, LinkTraffic};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// What one rank of a process job ends with.
#[derive(Debug)]
pub enum RankOutcome {
    /// Rank 0: the run's result, to write as the run folder.
    Leader(Box<RunResult>),
    /// Any other rank: its roles' outputs are with rank 0.
    Follower,
}

/// The environment variable holding the job's shared token (optional; the config's digest is
/// checked in any case).
pub const TOKEN_VAR: &str = "CONCORD_TOKEN";

/// Runs this process's rank of `config` (with `runtime = "process"`) in `world`.
pub fn run_process(
    config: &RunConfig,
    asm: &Assembly,
    options: RunOptions,
    world: &World,
) -> Result<RankOutcome> {
    config.validate()?;
    check(config, asm, world, &options)?;
    let wall_start = std::time::Instant::now();
    let text = toml::to_string(config)
        .map_err(|e| EngineError::config("(resolved config)", "", e.to_string()))?;
    let token = std::env::var(TOKEN_VAR).unwrap_or_default();
    let identity = JobIdentity::new(&world.job_id, &token, &text);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .enable_io()
        .build()
        .map_err(|source| EngineError::Io {
            path: "tokio runtime".into(),
            source,
        })?;
    let outcome = rt.block_on(rank_main(config, asm, options, world, identity, wall_start));
    // Writers still flushing a bye get a moment; nothing else is left running.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    outcome
}

/// The checks before any connection: a world that matches the cluster, and what this runtime
/// does not do yet.
fn check(config: &RunConfig, asm: &Assembly, world: &World, options: &RunOptions) -> Result<()> {
    if config.runtime != RuntimeKind::Process {
        return Err(EngineError::config(
            "runtime",
            format!("\"{}\"", config.runtime.as_str()),
            "run_process runs `runtime = \"process\"` jobs only",
        ));
    }
    config.process.validate()?;
    if config.checkpoint_every.is_some() || options.resume.is_some() {
        return Err(EngineError::config(
            "checkpoint_every",
            config.checkpoint_every.unwrap_or(0),
            "mid-run checkpoints and --resume are not supported by the process runtime yet (a \
             checkpoint is still written at the end); use `sim` or `wall` to cut and resume",
        ));
    }
    let cluster = Cluster::resolve(
        &config.cluster,
        config.workers,
        build::total_servers(config, asm),
    )?;
    let machines = cluster.machines.len() as u32;
    if machines != world.size {
        return Err(EngineError::config(
            "cluster",
            format!("{machines} machines"),
            format!(
                "the process runtime runs one process per machine, but the launcher ({}) started \
                 {} (world size): start {machines} processes, or describe {} machines",
                world.launcher.name(),
                world.size,
                world.size
            ),
        ));
    }
    Ok(())
}

/// Every role of the job, coordinator first.
fn all_roles(config: &RunConfig, servers: u32) -> Vec<RoleId> {
    let mut roles = vec![RoleId::Coordinator];
    roles.extend((0..servers).map(RoleId::Server));
    roles.extend((0..config.workers).map(RoleId::Worker));
    roles
}

async fn rank_main(
    config: &RunConfig,
    asm: &Assembly,
    options: RunOptions,
    world: &World,
    identity: JobIdentity,
    wall_start: std::time::Instant,
) -> Result<RankOutcome> {
    let rank = world.rank;
    let servers = build::total_servers(config, asm);
    let cluster = Cluster::resolve(&config.cluster, config.workers, servers)?;
    let roles = all_roles(config, servers);
    let local: Vec<RoleId> = roles
        .iter()
        .copied()
        .filter(|&r| cluster.machine_of(r) == rank)
        .collect();
    let mut receivers = BTreeMap::new();
    let mut senders = Vec::new();
    for &r in &local {
        let (tx, rx) = mpsc::unbounded_channel::<Envelope>();
        senders.push((r, tx));
        receivers.insert(r, rx);
    }
    let mailboxes = Arc::new(Mailboxes::new(senders));

    let mesh = Mesh::connect(world, identity, config.process.limits()).await?;
    let boxes = mailboxes.clone();
    let local_progress = Arc::new(AtomicU64::new(0));
    let (peers, events) = mesh.start(
        Arc::new(move |env| MeshTransport::deliver(&boxes, env)),
        local_progress.clone(),
    );
    let peers = Arc::new(peers);
    let mut ranks = Ranks {
        peers: peers.clone(),
        events,
        cluster: Arc::new(cluster.clone()),
        progress: options.progress.clone(),
        ready: BTreeSet::new(),
        done: BTreeSet::new(),
        outputs: BTreeMap::new(),
        byes: BTreeSet::new(),
        diverged: BTreeSet::new(),
        world: world.size,
    };
    match rank_body(
        config,
        asm,
        &options,
        &mut ranks,
        receivers,
        mailboxes,
        local_progress,
        wall_start,
    )
    .await
    {
        Ok(outcome) => {
            peers.close().await;
            Ok(outcome)
        }
        Err(e) => {
            // Everyone else stops too (a divergence stop has already told them).
            if !matches!(e, EngineError::Stopped(_)) {
                peers.broadcast(&Frame::Abort {
                    reason: format!("rank {rank}: {e}"),
                });
            }
            peers.close().await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            Err(e)
        }
    }
}

/// The progress observer of this rank: rank 0 reports to `options.progress`; the others send
/// rank 0 a `Progress` frame. Both keep `local` at the most clocks any local worker completed
/// (what heartbeats carry).
fn progress_of(
    rank: u32,
    options: &RunOptions,
    peers: Arc<OnceLock<Arc<Peers>>>,
    local: Arc<AtomicU64>,
) -> ProgressFn {
    let report = options.progress.clone();
    Arc::new(move |worker, clocks| {
        local.fetch_max(clocks, Ordering::Relaxed);
        if rank == 0 {
            if let Some(p) = &report {
                p(worker, clocks);
            }
        } else if let Some(p) = peers.get() {
            p.send(0, &Frame::Progress { worker, clocks });
        }
    })
}

#[allow(clippy::too_many_arguments)]
async fn rank_body(
    config: &RunConfig,
    asm: &Assembly,
    options: &RunOptions,
    ranks: &mut Ranks,
    mut receivers: BTreeMap<RoleId, mpsc::UnboundedReceiver<Envelope>>,
    mailboxes: Arc<Mailboxes>,
    local_progress: Arc<AtomicU64>,
    wall_start: std::time::Instant,
) -> Result<RankOutcome> {
    let rank = ranks.peers.rank();
    let cell = Arc::new(OnceLock::new());
    let _ = cell.set(ranks.peers.clone());
    let progress = progress_of(rank, options, cell, local_progress);
    let job = Arc::new(build::job(config, asm, Some(progress))?);
    job.set_segment(Segment {
        clocks: 0..config.iterations,
        from: None,
    });
    let Built {
        job,
        workers,
        servers,
        coordinator,
    } = build::roles(&job, asm)?;
    let total_servers = servers.len() as u32;
    // Every process starts its roles (and its clock) once all have built theirs.
    ranks.peers.broadcast(&Frame::Ready);
    while ranks.ready.len() + 1 < ranks.world as usize {
        let event = ranks.events.recv().await;
        ranks.handle(event, &job)?;
    }
    let time = TimeBase::starting_at(false, 0.0);
    let roles = all_roles(config, total_servers);
    let net = Arc::new(MeshTransport::new(
        job.cluster.clone(),
        time,
        &roles,
        mailboxes.clone(),
        ranks.peers.clone(),
    ));
    // Rank 0 streams its roles' timelines to the run folder; the others send theirs along with
    // their outputs.
    let trace_dir = if rank == 0 {
        options.trace_dir.as_deref()
    } else {
        None
    };
    let traces = launch::trace_plan(&job, total_servers, trace_dir);
    let mut ctx_for = |role: RoleId| -> Result<crate::context::RoleContext> {
        let rx = receivers
            .remove(&role)
            .ok_or_else(|| EngineError::protocol(role, "no mailbox"))?;
        launch::context_for(&job, role, net.clone(), rx, &traces)
    };
    let here = |role: RoleId| job.cluster.machine_of(role) == rank;
    let mut worker_set = JoinSet::new();
    for (w, worker) in workers.into_iter().enumerate() {
        let role = RoleId::Worker(w as u32);
        if here(role) {
            worker_set.spawn(launch::run_worker(worker, ctx_for(role)?, None));
        }
    }
    let mut server_set = JoinSet::new();
    for (s, server) in servers.into_iter().enumerate() {
        let role = RoleId::Server(s as u32);
        if here(role) {
            server_set.spawn(launch::run_server(server, ctx_for(role)?, None));
        }
    }
    let coord = here(RoleId::Coordinator).then(|| {
        ctx_for(RoleId::Coordinator)
            .map(|ctx| tokio::spawn(launch::run_coordinator(coordinator, ctx, None)))
    });
    let coord = coord.transpose()?;
    let limit = config.time_limit_s;
    let body = async {
        // 1. This process's workers, while listening to the others.
        let mut w_out = Vec::new();
        while !worker_set.is_empty() {
            tokio::select! {
                joined = worker_set.join_next() => {
                    let Some(joined) = joined else { break };
                    let out = joined.map_err(|e| {
                        EngineError::protocol(RoleId::Coordinator, format!("a worker task failed: {e}"))
                    })?;
                    if let Err(e) = out.result {
                        return Err(EngineError::Process {
                            rank,
                            reason: format!("{} failed: {e}", out.role.label()),
                        });
                    }
                    w_out.push(out);
                }
                event = ranks.events.recv() => ranks.handle(event, &job)?,
            }
        }
        // 2. Tell the others, and hear from all of them.
        ranks.peers.broadcast(&Frame::WorkersDone);
        while ranks.done.len() + 1 < ranks.world as usize {
            let event = ranks.events.recv().await;
            ranks.handle(event, &job)?;
        }
        // 3. Shut this process's servers and coordinator down behind everything they were sent.
        for role in roles.iter().copied().filter(|&r| here(r)) {
            if !matches!(role, RoleId::Worker(_)) {
                MeshTransport::deliver(
                    &mailboxes,
                    Envelope {
                        from: RoleId::Coordinator,
                        to: role,
                        sent_at: time.now(),
                        msg: Message::Shutdown,
                    },
                );
            }
        }
        let mut s_out = Vec::new();
        while !server_set.is_empty() {
            tokio::select! {
                joined = server_set.join_next() => {
                    let Some(joined) = joined else { break };
                    let out = joined.map_err(|e| {
                        EngineError::protocol(RoleId::Coordinator, format!("a server task failed: {e}"))
                    })?;
                    s_out.push(out);
                }
                event = ranks.events.recv() => ranks.handle(event, &job)?,
            }
        }
        let c_out = match coord {
            Some(handle) => Some(handle.await.map_err(|e| {
                EngineError::protocol(
                    RoleId::Coordinator,
                    format!("the coordinator task failed: {e}"),
                )
            })?),
            None => None,
        };
        Ok::<_, EngineError>((w_out, s_out, c_out))
    };
    let outcome = tokio::select! {
        biased;
        _ = job.guard.tripped() => Err(EngineError::protocol(RoleId::Coordinator, "stopped by the divergence guard")),
        r = body => r,
        _ = time.sleep(limit) => Err(EngineError::Process {
            rank,
            reason: format!("the run did not finish within time_limit_s = {limit} s"),
        }),
    };
    if let Some(reason) = job.guard.stop_reason() {
        return Err(ranks.stop(&job, reason, asm, wall_start).await);
    }
    let (w_out, s_out, c_out) = outcome?;
    for out in s_out.iter().map(|o| (&o.role, &o.result)) {
        if let (role, Err(e)) = out {
            return Err(EngineError::Process {
                rank,
                reason: format!("{} failed: {e}", role.label()),
            });
        }
    }
    if let Some(Err(e)) = c_out.as_ref().map(|c| &c.result) {
        return Err(EngineError::Process {
            rank,
            reason: format!("the coordinator failed: {e}"),
        });
    }
    let mine = ProcessOutputs {
        workers: w_out.into_iter().filter_map(remote).collect(),
        servers: s_out.into_iter().filter_map(remote).collect(),
        coordinator: c_out.and_then(remote),
        traffic: net.traffic().into_iter().collect(),
    };
    if rank != 0 {
        ranks.peers.send(0, &Frame::Outputs(Box::new(mine)));
        while !ranks.byes.contains(&0) {
            let event = ranks.events.recv().await;
            ranks.handle(event, &job)?;
        }
        return Ok(RankOutcome::Follower);
    }
    while ranks.outputs.len() + 1 < ranks.world as usize {
        let event = ranks.events.recv().await;
        ranks.handle(event, &job)?;
    }
    let mut all = vec![mine];
    all.extend(std::mem::take(&mut ranks.outputs).into_values());
    let launched = gather(all)?;
    // The followers may go: everything they hold is here.
    ranks.peers.close().await;
    let result = finish::finish(asm, &job, launched, None, wall_start)?;
    Ok(RankOutcome::Leader(Box::new(result)))
}

/// What this rank knows of the others while its roles run.
struct Ranks {
    peers: Arc<Peers>,
    events: mpsc::UnboundedReceiver<Event>,
    cluster: Arc<Cluster>,
    progress: Option<ProgressFn>,
    /// Ranks that built their roles.
    ready: BTreeSet<u32>,
    /// Ranks whose workers are done.
    done: BTreeSet<u32>,
    /// Followers' outputs (rank 0).
    outputs: BTreeMap<u32, ProcessOutputs>,
    /// Ranks that said bye.
    byes: BTreeSet<u32>,
    /// Ranks that sent their records after a divergence stop.
    diverged: BTreeSet<u32>,
    world: u32,
}

impl Ranks {
    /// Takes in one event; an error when it means the run cannot go on.
    fn handle(&mut self, event: Option<Event>, job: &crate::job::Job) -> Result<()> {
        let rank = self.peers.rank();
        let Some(event) = event else {
            return Err(EngineError::Process {
                rank,
                reason: "every connection to the other processes is gone".into(),
            });
        };
        match event {
            Event::Failed { why } => Err(EngineError::Process { rank, reason: why }),
            Event::Lost { rank: r, why } => Err(EngineError::Process {
                rank,
                reason: format!(
                    "lost the process of machine {r} ({}): {why}; it had reported {} completed \
                     iterations",
                    roles_on(&self.cluster, r),
                    self.peers.last_iteration(r)
                ),
            }),
            Event::Frame { rank: r, frame } => match frame {
                Frame::Ready => {
                    self.ready.insert(r);
                    Ok(())
                }
                Frame::WorkersDone => {
                    self.done.insert(r);
                    Ok(())
                }
                Frame::Outputs(out) => {
                    self.outputs.insert(r, *out);
                    Ok(())
                }
                Frame::Progress { worker, clocks } => {
                    if let Some(p) = &self.progress {
                        p(worker, clocks);
                    }
                    Ok(())
                }
                Frame::Bye => {
                    self.byes.insert(r);
                    Ok(())
                }
                Frame::Abort { reason } => Err(EngineError::Process {
                    rank,
                    reason: format!("the run stopped elsewhere: {reason}"),
                }),
                Frame::Diverged { reason, records } => {
                    self.diverged.insert(r);
                    for (w, recs) in records {
                        job.guard.absorb(w, recs);
                    }
                    if let Ok(reason) = serde_json::from_value::<StopReason>(reason) {
                        job.guard.stop_with(reason);
                    }
                    Ok(())
                }
                other => {
                    tracing::warn!("ignored an unexpected {} frame from rank {r}", other.kind());
                    Ok(())
                }
            },
        }
    }

    /// After this rank's guard stopped the run: tell the others (with this rank's records), and
    /// on rank 0 gather theirs; the stopped run's result (rank 0) or the reason (others).
    async fn stop(
        &mut self,
        job: &crate::job::Job,
        reason: StopReason,
        asm: &Assembly,
        wall_start: std::time::Instant,
    ) -> EngineError {
        let rank = self.peers.rank();
        let records: Vec<(u32, Vec<crate::metrics::IterRecord>)> = job
            .guard
            .records()
            .into_iter()
            .enumerate()
            .filter(|(w, _)| job.cluster.machine_of(RoleId::Worker(*w as u32)) == rank)
            .map(|(w, r)| (w as u32, r))
            .collect();
        self.peers.broadcast(&Frame::Diverged {
            reason: serde_json::to_value(&reason).unwrap_or_default(),
            records,
        });
        if rank != 0 {
            // Its records are with rank 0, which writes the stopped run.
            let stopped = finish::stopped(asm, job, reason, None, wall_start);
            return EngineError::Stopped(Box::new(stopped));
        }
        let wait = job.config.process.limits().peer_timeout;
        let deadline = tokio::time::Instant::now() + wait;
        while self.diverged.len() + 1 < self.world as usize {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(event) => {
                    if self.handle(event, job).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let stopped = finish::stopped(asm, job, reason, None, wall_start);
        EngineError::Stopped(Box::new(stopped))
    }
}

/// The roles of machine `m`, e.g. `coordinator, server 0, workers 0, 4`.
fn roles_on(cluster: &Cluster, m: u32) -> String {
    let mut parts = Vec::new();
    if m == 0 {
        parts.push("coordinator".to_string());
    }
    let list = |ids: Vec<String>, one: &str, many: &str| match ids.len() {
        0 => None,
        1 => Some(format!("{one} {}", ids[0])),
        _ => Some(format!("{many} {}", ids.join(", "))),
    };
    let servers: Vec<String> = (0..cluster.server_machine.len())
        .filter(|&s| cluster.server_machine[s] == m)
        .map(|s| s.to_string())
        .collect();
    let workers: Vec<String> = (0..cluster.worker_machine.len())
        .filter(|&w| cluster.worker_machine[w] == m)
        .map(|w| w.to_string())
        .collect();
    parts.extend(list(servers, "server", "servers"));
    parts.extend(list(workers, "worker", "workers"));
    parts.join("; ")
}

/// A finished local role's output as it crosses to rank 0 (a failed one was reported already).
fn remote<T>(out: RoleOutput<T>) -> Option<RemoteOutput<T>> {
    Some(RemoteOutput {
        role: out.role,
        report: out.result.ok()?,
        stats: out.stats,
        trace: out.trace,
        peak_memory: out.peak_memory,
        end_s: out.end_s,
        stragglers: out.stragglers,
    })
}

/// A role output as the one-process launch returns it.
fn local<T>(out: RemoteOutput<T>) -> RoleOutput<T> {
    RoleOutput {
        role: out.role,
        result: Ok(out.report),
        stats: out.stats,
        trace: out.trace,
        peak_memory: out.peak_memory,
        end_s: out.end_s,
        stragglers: out.stragglers,
    }
}

/// Every process's outputs as one launch's: roles in order, traffic summed.
fn gather(all: Vec<ProcessOutputs>) -> Result<Launched> {
    let mut workers: Vec<RoleOutput<WorkerReport>> = Vec::new();
    let mut servers: Vec<RoleOutput<ServerReport>> = Vec::new();
    let mut coordinator: Option<RoleOutput<CoordinatorReport>> = None;
    let mut traffic: BTreeMap<(RoleId, RoleId), LinkTraffic> = BTreeMap::new();
    for p in all {
        workers.extend(p.workers.into_iter().map(local));
        servers.extend(p.servers.into_iter().map(local));
        if let Some(c) = p.coordinator {
            coordinator = Some(local(c));
        }
        for (pair, t) in p.traffic {
            let link = traffic.entry(pair).or_default();
            link.messages += t.messages;
            link.bytes += t.bytes;
        }
    }
    workers.sort_by_key(|o| o.role);
    servers.sort_by_key(|o| o.role);
    let coordinator = coordinator.ok_or_else(|| EngineError::Process {
        rank: 0,
        reason: "no process returned the coordinator's output".into(),
    })?;
    Ok(Launched {
        workers,
        servers,
        coordinator,
        traffic,
        network: NetworkState::default(),
    })
}
