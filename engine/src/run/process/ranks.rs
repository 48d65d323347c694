//! What one rank knows of the others while its roles run: which have built their roles, finished
//! their workers, sent their outputs or said bye; and what their events mean for the run.

use super::super::finish;
use super::super::launch::RoleOutput;
use super::clock;
use crate::cluster::Cluster;
use crate::contract::Assembly;
use crate::error::{EngineError, Result};
use crate::guard::StopReason;
use crate::ids::RoleId;
use crate::job::{Job, ProgressFn};
use crate::process::mesh::{Event, Peers};
use crate::process::wire::{Frame, ProcessOutputs};
use crate::resume::ResumePoint;
use crate::time::TimeBase;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// What this rank knows of the others while its roles run.
pub(super) struct Ranks {
    pub(super) peers: Arc<Peers>,
    pub(super) events: mpsc::UnboundedReceiver<Event>,
    pub(super) cluster: Arc<Cluster>,
    pub(super) progress: Option<ProgressFn>,
    /// Ranks that built their roles.
    pub(super) ready: BTreeSet<u32>,
    /// Ranks whose workers are done.
    pub(super) done: BTreeSet<u32>,
    /// Followers' outputs (rank 0).
    pub(super) outputs: BTreeMap<u32, ProcessOutputs>,
    /// Ranks that said bye.
    pub(super) byes: BTreeSet<u32>,
    /// Ranks that sent their records after a divergence stop.
    pub(super) diverged: BTreeSet<u32>,
    /// Where the next stretch starts, once rank 0 has said (followers): `Some(None)` at clock 0.
    pub(super) segment: Option<Option<Box<ResumePoint>>>,
    /// Followers whose roles are done with the stretch before the next (followers).
    pub(super) ended: BTreeSet<u32>,
    /// Rank 0's run clock for the stretch, once started: what it answers clock probes with.
    clock: Option<TimeBase>,
    /// Probes that came before rank 0's clock started, by rank: answered when it starts.
    early_probes: Vec<(u32, u32)>,
    /// Rank 0's answers to this follower's clock probes, by probe.
    echoes: BTreeMap<u32, f64>,
    /// Followers whose clocks are set by rank 0's for the stretch (rank 0).
    clock_set: BTreeSet<u32>,
    pub(super) world: u32,
}

/// Joins every role task of `set` while taking in the other ranks' events; their outputs, or the
/// first role's failure. `progress` hears, before each wait, the ranks' state and how many roles
/// have returned.
pub(super) async fn join_listening<T: Send + 'static>(
    set: &mut JoinSet<RoleOutput<T>>,
    ranks: &mut Ranks,
    job: &Job,
    rank: u32,
    progress: impl Fn(&Ranks, usize),
) -> Result<Vec<RoleOutput<T>>> {
    let mut outputs = Vec::new();
    while !set.is_empty() {
        progress(ranks, outputs.len());
        tokio::select! {
            joined = set.join_next() => {
                let Some(joined) = joined else { break };
                let out = joined.map_err(|e| EngineError::Process {
                    rank,
                    reason: format!("a role task failed: {e}"),
                })?;
                if let Err(e) = &out.result {
                    return Err(EngineError::Process {
                        rank,
                        reason: format!("{} failed: {e}", out.role.label()),
                    });
                }
                outputs.push(out);
            }
            event = ranks.events.recv() => ranks.handle(event, job)?,
        }
    }
    Ok(outputs)
}

impl Ranks {
    /// What rank `peers.rank()` knows before any other rank has said anything.
    pub(super) fn new(
        peers: Arc<Peers>,
        events: mpsc::UnboundedReceiver<Event>,
        cluster: Arc<Cluster>,
        world: u32,
    ) -> Ranks {
        Ranks {
            peers,
            events,
            cluster,
            progress: None,
            ready: BTreeSet::new(),
            done: BTreeSet::new(),
            outputs: BTreeMap::new(),
            byes: BTreeSet::new(),
            diverged: BTreeSet::new(),
            segment: None,
            ended: BTreeSet::new(),
            clock: None,
            early_probes: Vec::new(),
            echoes: BTreeMap::new(),
            clock_set: BTreeSet::new(),
            world,
        }
    }

    /// Where this follower's next stretch starts (`None`: at clock 0), once rank 0 has said and,
    /// after the `first`, every other follower's roles are done with the stretch before.
    pub(super) async fn next_segment(
        &mut self,
        job: &Job,
        first: bool,
    ) -> Result<Option<Arc<ResumePoint>>> {
        let others = (self.world as usize).saturating_sub(2);
        self.wait(job, |r| {
            r.segment.is_some() && (first || r.ended.len() >= others)
        })
        .await?;
        self.ended.clear();
        Ok(self.segment.take().flatten().map(|p| Arc::new(*p)))
    }

    /// Rank 0: starts the stretch's run clock (reading `origin` now), answers the probes that
    /// came before it, and waits until every follower has set its clock by it.
    pub(super) async fn lead_clock(&mut self, job: &Job, origin: f64) -> Result<TimeBase> {
        let time = TimeBase::starting_at(false, origin);
        self.clock = Some(time);
        for (r, probe) in std::mem::take(&mut self.early_probes) {
            self.echo(r, probe);
        }
        self.wait(job, |r| r.clock_set.len() + 1 >= r.world as usize)
            .await?;
        self.clock_set.clear();
        Ok(time)
    }

    /// Forgets the stretch's clock (rank 0), so that probes of the next stretch wait for its own.
    pub(super) fn end_clock(&mut self) {
        self.clock = None;
    }

    /// A follower: sets its run clock by rank 0's (see [`super::clock`]) and tells rank 0.
    pub(super) async fn follow_clock(&mut self, job: &Job, origin: f64) -> Result<TimeBase> {
        let mut samples = Vec::with_capacity(clock::PROBES as usize);
        for probe in 0..clock::PROBES {
            let sent = std::time::Instant::now();
            self.peers.send(0, &Frame::ClockProbe { probe });
            self.wait(job, |r| r.echoes.contains_key(&probe)).await?;
            let received = std::time::Instant::now();
            let leader_s = self.echoes.remove(&probe).unwrap_or(origin);
            samples.push(clock::ClockSample {
                sent,
                received,
                leader_s,
            });
        }
        let start = clock::leader_start(&samples, origin).ok_or_else(|| EngineError::Process {
            rank: self.peers.rank(),
            reason: "no answer from rank 0's clock".into(),
        })?;
        self.peers.send(0, &Frame::ClockSet);
        Ok(TimeBase::real_from(start, origin))
    }

    /// Answers follower `r`'s clock probe `probe` with rank 0's run clock now.
    fn echo(&self, r: u32, probe: u32) {
        if let Some(time) = &self.clock {
            self.peers.send(
                r,
                &Frame::ClockEcho {
                    probe,
                    leader_s: time.now(),
                },
            );
        }
    }

    /// Takes in the other ranks' events until `done` holds.
    pub(super) async fn wait(&mut self, job: &Job, done: impl Fn(&Ranks) -> bool) -> Result<()> {
        while !done(self) {
            let event = self.events.recv().await;
            self.handle(event, job)?;
        }
        Ok(())
    }

    /// Takes in one event; an error when it means the run cannot go on.
    pub(super) fn handle(&mut self, event: Option<Event>, job: &Job) -> Result<()> {
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
                Frame::ClockProbe { probe } => {
                    if self.clock.is_some() {
                        self.echo(r, probe);
                    } else {
                        self.early_probes.push((r, probe));
                    }
                    Ok(())
                }
                Frame::ClockEcho { probe, leader_s } => {
                    self.echoes.insert(probe, leader_s);
                    Ok(())
                }
                Frame::ClockSet => {
                    self.clock_set.insert(r);
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
                Frame::Segment(point) => {
                    self.segment = Some(point);
                    Ok(())
                }
                Frame::SegmentEnd => {
                    self.ended.insert(r);
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
                    job.guard.stop_with(reason);
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
    pub(super) async fn stop(
        &mut self,
        job: &Job,
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
            reason: reason.clone(),
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
        // Rank 0's cut holds the run's history before this stretch.
        let from = job.segment_start();
        let stopped = finish::stopped(asm, job, reason, from.as_deref(), wall_start);
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
