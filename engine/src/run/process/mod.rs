//! One rank of a `--runtime process` job: meet the other processes, run the roles placed on this
//! process's machine, end them in step with the others, and (rank 0) gather every role's output
//! and finish the run as `sim` and `wall` do.
//!
//! The end of a run without a shared queue: when its workers are done, a process tells every
//! other (`WorkersDone`, after everything its workers sent on the same ordered connection). Once
//! a process has heard it from all, no worker message for its roles is still on the way, so its
//! servers and coordinator get their shutdown behind every message they were sent. Each follower
//! then sends rank 0 its outputs (`Outputs`) and waits for rank 0's `Bye`.
//!
//! A run cut by checkpoints (`checkpoint_every`, or resumed with `--resume`) plays each stretch of
//! clocks between cuts that way, with roles built afresh from the cut, as `sim` and `wall` do. Rank
//! 0 holds the cuts: it sends each process where the next stretch starts (`Segment`, with every
//! role's checkpoint), gathers the stretch's outputs and writes its checkpoint. A
//! follower starts the next stretch only once every other follower has said its roles are done
//! (`SegmentEnd`), so no message of one stretch reaches the roles of the next.

mod clock;
mod outputs;
mod ranks;

use super::build::{self, Built};
use super::failure::FirstFailure;
use super::finish;
use super::launch;
use super::{RunOptions, RunResult};
use crate::cluster::Cluster;
use crate::config::{RunConfig, RuntimeKind};
use crate::contract::Assembly;
use crate::error::{EngineError, Result};
use crate::gpu::ProcessHost;
use crate::ids::{RoleId, WorkerId};
use crate::job::{Job, ProgressFn, Segment};
use crate::message::Message;
use crate::process::mesh::{Mesh, Peers};
use crate::process::net::{Mailboxes, MeshTransport, Postbox};
use crate::process::wire::{Frame, JobIdentity, ProcessOutputs};
use crate::process::World;
use crate::resume::ResumePoint;
use crate::stall;
use crate::transport::Envelope;
use outputs::{gather, remote, write_timelines};
use ranks::{join_listening, Ranks};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
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
    let workers_here = cluster
        .worker_machine
        .iter()
        .filter(|&&machine| machine == world.rank)
        .count();
    let rt = crate::process::runtime(workers_here)?;
    let outcome = rt.block_on(rank_main(
        config, asm, options, world, identity, cluster, wall_start,
    ));
    // Writers still flushing a bye get a moment; nothing else is left running.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    outcome
}

/// The checks before any connection: a world that matches the cluster, and strategies that can
/// be cut by checkpoints where the run is. Returns the cluster.
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
        asm.resumable()?;
    }
    process_cluster(config, asm, world.size, world.launcher.name())
}

/// The cluster of a process job of `config` composed as `asm`, checked to have one machine for
/// each of the `processes` processes `launcher` starts (or started): a launcher checks it before
/// it starts any, so that a mismatch is told once rather than by every process.
pub fn process_cluster(
    config: &RunConfig,
    asm: &Assembly,
    processes: u32,
    launcher: &str,
) -> Result<Cluster> {
    let cluster = Cluster::resolve(
        &config.cluster,
        config.workers,
        build::total_servers(config, asm),
    )?;
    let machines = cluster.machines.len() as u32;
    if machines != processes {
        return Err(EngineError::config(
            "cluster",
            format!("{machines} machines"),
            format!(
                "the process runtime runs one process per machine, but the launcher ({launcher}) \
                 started {processes} (world size): start {machines} processes, or describe \
                 {processes} machines"
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
    let postbox = Arc::new(Postbox::default());
    let mesh = Mesh::connect(world, identity, config.process.limits()).await?;
    let boxes = postbox.clone();
    let local_progress = Arc::new(AtomicU64::new(0));
    let (peers, events) = mesh.start(
        Arc::new(move |env| boxes.deliver(env)),
        local_progress.clone(),
    );
    let peers = Arc::new(peers);
    let mut ranks = Ranks::new(peers.clone(), events, Arc::new(cluster), world.size);
    ranks.progress = options.progress.clone();
    let stage = Stage {
        config,
        asm,
        options: &options,
        postbox,
        wall_start,
        host: process_host(config, world, &ranks.cluster),
    };
    match rank_body(&stage, &mut ranks, local_progress).await {
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

/// What every stretch of a rank's run is played on: the job's description, how to run it, where
/// messages for this process's roles go, and when the run began.
struct Stage<'a> {
    config: &'a RunConfig,
    asm: &'a Assembly,
    options: &'a RunOptions,
    postbox: Arc<Postbox>,
    wall_start: std::time::Instant,
    /// This process's machine and the first of its host's GPUs its slots use.
    host: ProcessHost,
}

/// Where `world`'s process sits: machine `rank`, whose slots start at the GPU `process.gpus`
/// gives a process of its local rank.
fn process_host(config: &RunConfig, world: &World, cluster: &Cluster) -> ProcessHost {
    let slots = cluster
        .machines
        .get(world.rank as usize)
        .map_or(0, |m| m.slots);
    ProcessHost {
        machine: world.rank,
        first_gpu: config.process.gpus.first_gpu(world.local_rank, slots),
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

/// This rank's run: the clocks up to each checkpoint (`checkpoint_every`) are one stretch, played
/// by roles built afresh from the cut before it, as `sim` and `wall` do. Rank 0 holds the cuts:
/// before each stretch it sends every other rank where it starts (the roles' checkpoints); after
/// it, rank 0 gathers every rank's outputs, finishes the stretch and writes its checkpoint.
async fn rank_body(
    stage: &Stage<'_>,
    ranks: &mut Ranks,
    local_progress: Arc<AtomicU64>,
) -> Result<RankOutcome> {
    let Stage {
        config,
        asm,
        options,
        ..
    } = *stage;
    let rank = ranks.peers.rank();
    let progress = progress_of(options, ranks.peers.clone(), local_progress);
    let job = Arc::new(build::job_on(
        config,
        asm,
        Some(progress),
        options.record_reads,
        Some(stage.host),
    )?);
    let mut from = if rank == 0 {
        options.resume.clone()
    } else {
        None
    };
    if let Some(point) = &from {
        super::fits(point, config)?;
    }
    let mut stretches = super::Stretches::default();
    let mut first = true;
    loop {
        if rank == 0 {
            let start = from.as_deref().map(|p| Box::new(without_history(p)));
            ranks.peers.broadcast(&Frame::Segment(start));
        } else {
            from = ranks.next_segment(&job, first).await?;
        }
        first = false;
        let start = from.as_ref().map_or(0, |p| p.clock);
        let end = super::segment_end(config, start);
        job.set_segment(Segment {
            clocks: start..end,
            from: from.clone(),
        });
        let mine = run_segment(stage, &job, ranks).await?;
        // Every Ready and WorkersDone of this stretch is in; the next stretch's may come once
        // rank 0 has everyone's outputs.
        ranks.ready.clear();
        ranks.done.clear();
        ranks.end_clock();
        let last = end >= config.iterations;
        if rank != 0 {
            ranks.peers.send(0, &Frame::Outputs(Box::new(mine)));
            if last {
                ranks.wait(&job, |r| r.byes.contains(&0)).await?;
                return Ok(RankOutcome::Follower);
            }
            // The other followers start the next stretch once nothing of this one is on the way.
            for r in (1..ranks.world).filter(|&r| r != rank) {
                ranks.peers.send(r, &Frame::SegmentEnd);
            }
            continue;
        }
        ranks
            .wait(&job, |r| r.outputs.len() + 1 >= r.world as usize)
            .await?;
        let mut all = vec![mine];
        all.extend(std::mem::take(&mut ranks.outputs).into_values());
        let mut launched = gather(all)?;
        if let Some(dir) = &options.trace_dir {
            write_timelines(&mut launched, dir, start, &options.folder_gate)?;
        }
        if last {
            // The followers may go: everything they hold is here.
            ranks.peers.close().await;
        }
        let result = finish::finish(asm, &job, launched, from.as_deref(), stage.wall_start)?;
        match stretches.close(result, last, options)? {
            ControlFlow::Break(result) => return Ok(RankOutcome::Leader(Box::new(result))),
            ControlFlow::Continue(point) => from = Some(point),
        }
    }
}

/// What the other processes need of cut `point`: every role's checkpoint (a role may restore from
/// another's: allreduce's replicas all restore worker 0's), without the run's history, which stays
/// with rank 0 and is the larger part of a long run's cut.
fn without_history(point: &ResumePoint) -> ResumePoint {
    ResumePoint {
        clock: point.clock,
        roles: point.roles.clone(),
        history: Default::default(),
    }
}

/// One stretch of this rank: build the roles placed on this machine, start them with every other
/// process's, run them to the stretch's end, end them in step with the others; their outputs.
async fn run_segment(
    stage: &Stage<'_>,
    job: &Arc<Job>,
    ranks: &mut Ranks,
) -> Result<ProcessOutputs> {
    let Stage {
        config,
        asm,
        ref postbox,
        wall_start,
        ..
    } = *stage;
    let rank = ranks.peers.rank();
    let Built {
        job,
        workers,
        servers,
        coordinator,
    } = build::roles(job, asm, |role| job.cluster.machine_of(role) == rank)?;
    let total_servers = build::total_servers(config, asm);
    let roles = launch::all_roles(config.workers, total_servers);
    let here = |role: RoleId| job.cluster.machine_of(role) == rank;
    let mut receivers = BTreeMap::new();
    let mut senders = Vec::new();
    for role in roles.iter().copied().filter(|&r| here(r)) {
        let (tx, rx) = mpsc::unbounded_channel::<Envelope>();
        senders.push((role, tx));
        receivers.insert(role, rx);
    }
    postbox.replace(Mailboxes::new(senders));
    // Every process starts its roles (and its clock) once all have built theirs.
    ranks.peers.broadcast(&Frame::Ready);
    ranks
        .wait(&job, |r| r.ready.len() + 1 >= r.world as usize)
        .await?;
    let from = job.segment_start();
    let origin = from.as_ref().map_or(0.0, |p| p.earliest_s());
    // Each role restarts at the run time it stopped at.
    let start_of = |role: RoleId| {
        from.as_ref()
            .and_then(|p| p.roles.get(&role))
            .map(|c| c.at_s)
    };
    // One run clock across the processes: the followers set theirs by rank 0's.
    let time = if rank == 0 {
        ranks.lead_clock(&job, origin).await?
    } else {
        ranks.follow_clock(&job, origin).await?
    };
    let net = Arc::new(MeshTransport::new(
        job.cluster.clone(),
        time,
        &roles,
        postbox.clone(),
        ranks.peers.clone(),
    ));
    // Rank 0 streams its roles' timelines to the run folder; the others send theirs along with
    // their outputs.
    let trace_dir = if rank == 0 {
        stage.options.trace_dir.as_deref()
    } else {
        None
    };
    let traces = launch::trace_plan(&job, total_servers, trace_dir, &stage.options.folder_gate);
    let mut ctx_for = |role: RoleId| -> Result<crate::context::RoleContext> {
        let rx = receivers
            .remove(&role)
            .ok_or_else(|| EngineError::protocol(role, "no mailbox"))?;
        launch::context_for(&job, role, net.clone(), rx, &traces)
    };
    // Every process replays the membership trace for its own roles; the coordinator's process
    // also tells the coordinator.
    let presence = launch::Presence::new(&job.membership, job.cluster.machines.len());
    let gate_of = |role: RoleId| presence.gate(job.cluster.machine_of(role));
    let local_ids: Vec<WorkerId> = workers.iter().map(|(w, _)| *w).collect();
    let mut worker_set = JoinSet::new();
    for (w, worker) in workers {
        let role = RoleId::Worker(w);
        let ctx = ctx_for(role)?;
        worker_set.spawn(launch::run_worker(
            worker,
            ctx,
            start_of(role),
            gate_of(role),
        ));
    }
    let failure = FirstFailure::default();
    let mut server_set = JoinSet::new();
    for (s, server) in servers {
        let role = RoleId::Server(s);
        let ran = launch::run_server(server, ctx_for(role)?, start_of(role), gate_of(role));
        server_set.spawn(failure.watching(ran, format!("{} failed", role.label())));
    }
    let driver = presence.is_dynamic().then(|| {
        let (postbox, coordinator_here) = (postbox.clone(), here(RoleId::Coordinator));
        tokio::spawn(launch::members::drive(
            job.membership.clone(),
            presence.clone(),
            move |msg| {
                if coordinator_here {
                    postbox.deliver(Envelope {
                        from: RoleId::Coordinator,
                        to: RoleId::Coordinator,
                        sent_at: time.now(),
                        msg,
                    });
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
        ctx_for(RoleId::Coordinator).map(|ctx| {
            let start = start_of(RoleId::Coordinator);
            let ran = launch::run_coordinator(coordinator, ctx, start);
            tokio::spawn(failure.watching(ran, "the coordinator failed".into()))
        })
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
                postbox.deliver(Envelope {
                    from: RoleId::Coordinator,
                    to: role,
                    sent_at: time.now(),
                    msg: Message::Shutdown,
                });
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
    // Each process watches its own workers: where they stop, the run has stopped (a process
    // without workers learns it from the others).
    let who = format!("rank {rank}: ");
    let stall = stall::watch_job(&job, &local_ids, &who);
    let outcome = tokio::select! {
        biased;
        _ = job.guard.tripped() => Err(EngineError::protocol(RoleId::Coordinator, "stopped by the divergence guard")),
        r = body => r,
        // A server or the coordinator of this process failed mid-run.
        reason = failure.first() => Err(EngineError::Process { rank, reason }),
        s = stall, if !local_ids.is_empty() => Err(EngineError::Process {
            rank,
            reason: EngineError::Stalled(s).to_string(),
        }),
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
    Ok(ProcessOutputs {
        workers: w_out.into_iter().filter_map(remote).collect(),
        servers: s_out.into_iter().filter_map(remote).collect(),
        coordinator: c_out.and_then(remote),
        traffic: net.traffic().into_iter().collect(),
    })
}
