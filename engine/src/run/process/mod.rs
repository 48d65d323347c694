//! One rank of a `--runtime process` job: meet the other processes, run the roles placed on this
//! process's machine, end them in step with the others, and (rank 0) gather every role's output
//! and finish the run as `sim` and `wall` do.
//!
//! The end of a run without a shared queue: when its workers are done, a process tells every
//! other (`WorkersDone`, after everything its workers sent on the same ordered connection). Once
//! a process has heard it from all, no worker message for its roles is still on the way, so its
//! servers and coordinator get their shutdown behind every message they were sent. Each follower
//! then sends rank 0 its outputs (`Outputs`) and waits for rank 0's `Bye`.

mod outputs;
mod ranks;

use super::build::{self, Built};
use super::finish;
use super::launch;
use super::{RunOptions, RunResult};
use crate::cluster::Cluster;
use crate::config::{RunConfig, RuntimeKind};
use crate::contract::Assembly;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::job::{ProgressFn, Segment};
use crate::message::Message;
use crate::process::mesh::{Mesh, Peers};
use crate::process::net::{Mailboxes, MeshTransport};
use crate::process::wire::{Frame, JobIdentity, ProcessOutputs};
use crate::process::World;
use crate::time::TimeBase;
use crate::transport::Envelope;
use outputs::{gather, remote};
use ranks::{join_listening, Ranks};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    let cluster = check(config, asm, world, &options)?;
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
    let outcome = rt.block_on(rank_main(
        config, asm, options, world, identity, cluster, wall_start,
    ));
    // Writers still flushing a bye get a moment; nothing else is left running.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    outcome
}

/// The checks before any connection: a world that matches the cluster, and what this runtime
/// does not do yet. Returns the cluster.
fn check(
    config: &RunConfig,
    asm: &Assembly,
    world: &World,
    options: &RunOptions,
) -> Result<Cluster> {
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
    Ok(cluster)
}

async fn rank_main(
    config: &RunConfig,
    asm: &Assembly,
    options: RunOptions,
    world: &World,
    identity: JobIdentity,
    cluster: Cluster,
    wall_start: std::time::Instant,
) -> Result<RankOutcome> {
    let rank = world.rank;
    let servers = build::total_servers(config, asm);
    let roles = launch::all_roles(config.workers, servers);
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
        cluster: Arc::new(cluster),
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
fn progress_of(options: &RunOptions, peers: Arc<Peers>, local: Arc<AtomicU64>) -> ProgressFn {
    let report = options.progress.clone();
    Arc::new(move |worker, clocks| {
        local.fetch_max(clocks, Ordering::Relaxed);
        if peers.rank() == 0 {
            if let Some(p) = &report {
                p(worker, clocks);
            }
        } else {
            peers.send(0, &Frame::Progress { worker, clocks });
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
    let progress = progress_of(options, ranks.peers.clone(), local_progress);
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
    ranks
        .wait(&job, |r| r.ready.len() + 1 >= r.world as usize)
        .await?;
    let time = TimeBase::starting_at(false, 0.0);
    let roles = launch::all_roles(config.workers, total_servers);
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
    // Every process replays the membership trace for its own roles; the coordinator's process
    // also tells the coordinator.
    let presence = launch::Presence::new(&job.membership, job.cluster.machines.len());
    let gate_of = |role: RoleId| presence.gate(job.cluster.machine_of(role));
    let mut worker_set = JoinSet::new();
    for (w, worker) in workers.into_iter().enumerate() {
        let role = RoleId::Worker(w as u32);
        if here(role) {
            let gate = gate_of(role);
            worker_set.spawn(launch::run_worker(worker, ctx_for(role)?, None, gate));
        }
    }
    let mut server_set = JoinSet::new();
    for (s, server) in servers.into_iter().enumerate() {
        let role = RoleId::Server(s as u32);
        if here(role) {
            let gate = gate_of(role);
            server_set.spawn(launch::run_server(server, ctx_for(role)?, None, gate));
        }
    }
    let driver = presence.is_dynamic().then(|| {
        let (mailboxes, coordinator_here) = (mailboxes.clone(), here(RoleId::Coordinator));
        tokio::spawn(launch::members::drive(
            job.membership.clone(),
            presence.clone(),
            move |msg| {
                if coordinator_here {
                    MeshTransport::deliver(
                        &mailboxes,
                        Envelope {
                            from: RoleId::Coordinator,
                            to: RoleId::Coordinator,
                            sent_at: time.now(),
                            msg,
                        },
                    );
                }
            },
            time,
        ))
    });
    let local_workers = worker_set.len();
    let local_absent = || {
        job.cluster
            .worker_machine
            .iter()
            .filter(|&&m| m == rank && presence.is_absent(m))
            .count()
    };
    let coord = here(RoleId::Coordinator).then(|| {
        ctx_for(RoleId::Coordinator)
            .map(|ctx| tokio::spawn(launch::run_coordinator(coordinator, ctx, None)))
    });
    let coord = coord.transpose()?;
    let limit = config.time_limit_s;
    let body = async {
        // 1. This process's workers, while listening to the others. Where membership changes,
        // workers of a machine that has not joined when every other process is done never will.
        let cancel = |ranks: &Ranks, joined: usize| {
            if presence.is_dynamic()
                && ranks.done.len() + 1 >= ranks.world as usize
                && joined + local_absent() == local_workers
            {
                presence.cancel_absent();
            }
        };
        let w_out: Vec<_> = join_listening(&mut worker_set, ranks, &job, rank, cancel)
            .await?
            .into_iter()
            .map(|out| launch::with_departed_records(&job, out))
            .collect();
        // 2. Tell the others, and hear from all of them.
        ranks.peers.broadcast(&Frame::WorkersDone);
        ranks
            .wait(&job, |r| r.done.len() + 1 >= r.world as usize)
            .await?;
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
        let s_out = join_listening(&mut server_set, ranks, &job, rank, |_, _| {}).await?;
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
    if let Some(d) = driver {
        d.abort();
    }
    if let Some(reason) = job.guard.stop_reason() {
        return Err(ranks.stop(&job, reason, asm, wall_start).await);
    }
    let (w_out, s_out, c_out) = outcome?;
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
        ranks.wait(&job, |r| r.byes.contains(&0)).await?;
        return Ok(RankOutcome::Follower);
    }
    ranks
        .wait(&job, |r| r.outputs.len() + 1 >= r.world as usize)
        .await?;
    let mut all = vec![mine];
    all.extend(std::mem::take(&mut ranks.outputs).into_values());
    let launched = gather(all)?;
    // The followers may go: everything they hold is here.
    ranks.peers.close().await;
    let result = finish::finish(asm, &job, launched, None, wall_start)?;
    Ok(RankOutcome::Leader(Box::new(result)))
}
