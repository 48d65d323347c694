//! What a role sees of the run: its identity, its mailbox, the clock, and compute charging.
//!
//! Every role (worker, server, coordinator) runs as one async task with a [`RoleContext`]. The context
//! is the only door to the outside: messages go through the transport, time through the run's time
//! base, and compute is charged through [`RoleContext::compute`], which applies the cost model and the
//! straggler injector. The same role code therefore runs in `sim` (virtual time, modeled costs) and
//! in `wall` (real time, real costs plus injected sleeps).

use crate::cluster::DeviceProfile;
pub use crate::config::RuntimeKind;
use crate::cost::LayerCost;
use crate::error::{EngineError, Result};
use crate::ids::{MachineId, RoleId};
use crate::memory::{DeviceMemory, MemEvent};
use crate::message::Message;
use crate::metrics::TraceEvent;
use crate::stragglers::{Effect, Probe, ResourceSignals, RoleKind, StragglerSet};
use crate::trace::Recorder;
use crate::transport::{Departure, Envelope, Inbox, Transport};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

/// How the straggler injector knows a role: its kind and index (`None` for the coordinator, which
/// no pattern slows).
pub fn straggler_identity(role: RoleId) -> Option<(RoleKind, u32)> {
    match role {
        RoleId::Worker(w) => Some((RoleKind::Worker, w)),
        RoleId::Server(s) => Some((RoleKind::Server, s)),
        RoleId::Coordinator => None,
    }
}

/// Amount of compute one call charges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    /// FLOPs per sample (or in total when `batch` is 0).
    pub flops_per_sample: f64,
    /// Samples in the batch (0 for batch-independent work such as an optimizer update).
    pub batch: f64,
    /// Whether this is a training step of the job's model on `batch` samples (forward,
    /// backward, update): a device with a per-layer cost model charges it from the job's
    /// per-layer facts instead of `flops_per_sample`.
    pub training: bool,
    /// Where the work is a part of a training step rather than all of it: which layers and
    /// which share of their step (see [`Work::step_part`]).
    pub part: Option<StepPart>,
    /// Seconds a strategy's own cost model gives the work (see [`Work::modeled`]); the device's
    /// FLOP or per-layer model is not asked then.
    pub modeled_s: Option<f64>,
}

/// A part of a training step: the forward or backward pass of a contiguous run of the model's
/// layers, as strategies that split the model between workers (token scheduling, pipelines)
/// charge their pieces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepPart {
    /// The first layer (an index into the job's per-layer cost facts).
    pub first: usize,
    /// One past the last layer.
    pub end: usize,
    /// The share of those layers' training step charged: 1/3 for a forward pass, 2/3 for a
    /// backward pass (it computes the gradients of both the input and the weights).
    pub share: f64,
}

impl StepPart {
    /// The share of a training step the forward pass is.
    pub const FORWARD: f64 = 1.0 / 3.0;
    /// The share of a training step the backward pass is.
    pub const BACKWARD: f64 = 2.0 / 3.0;
}

impl Work {
    /// A training step of the job's model: `batch` samples of `flops_per_sample` training FLOPs
    /// each (what the FLOP model charges; a calibrated device charges the model's layers).
    pub fn training_step(flops_per_sample: f64, batch: f64) -> Work {
        Work {
            flops_per_sample,
            batch,
            training: true,
            part: None,
            modeled_s: None,
        }
    }

    /// The share `part.share` of a training step of layers `part.first..part.end` on `batch`
    /// samples, those layers costing `flops_per_sample` training FLOPs per sample: charged like
    /// [`Work::training_step`] restricted to those layers (their per-layer facts on a calibrated
    /// device, their FLOPs otherwise), times the share.
    pub fn step_part(part: StepPart, flops_per_sample: f64, batch: f64) -> Work {
        Work {
            flops_per_sample: flops_per_sample * part.share,
            batch,
            training: true,
            part: Some(part),
            modeled_s: None,
        }
    }

    /// Batch-independent work of `flops` FLOPs (a decision, an assignment, an update).
    pub fn fixed(flops: f64) -> Work {
        Work {
            flops_per_sample: flops,
            batch: 0.0,
            training: false,
            part: None,
            modeled_s: None,
        }
    }

    /// Work whose undelayed cost a strategy models itself: `seconds` on any device (an
    /// embedding lookup priced per row and tier, a copy priced by its bytes). It counts no FLOPs;
    /// stragglers slow it like any other work.
    pub fn modeled(seconds: f64) -> Work {
        Work {
            flops_per_sample: 0.0,
            batch: 0.0,
            training: false,
            part: None,
            modeled_s: Some(seconds.max(0.0)),
        }
    }

    /// Undelayed seconds this work costs on `device` for a job whose per-layer cost facts are
    /// `sheet` (see [`crate::job::Job::cost_sheet`]): the one cost model every role's
    /// [`RoleContext::compute`] charges by, public so that planners predict exactly what the
    /// runtime will charge.
    pub fn seconds_on(&self, device: &DeviceProfile, sheet: &[LayerCost]) -> f64 {
        if let Some(s) = self.modeled_s {
            return s;
        }
        if self.batch > 0.0 {
            if let Some(part) = self.part {
                let sheet = sheet.get(part.first..part.end).unwrap_or(&[]);
                let flops = self.flops_per_sample / part.share.max(f64::MIN_POSITIVE);
                device.step_seconds(sheet, flops, self.batch) * part.share
            } else if self.training {
                device.step_seconds(sheet, self.flops_per_sample, self.batch)
            } else {
                device.compute_seconds(self.flops_per_sample, self.batch)
            }
        } else {
            device.work_seconds(self.flops_per_sample)
        }
    }

    /// Total FLOPs.
    pub fn flops(&self) -> f64 {
        if self.batch > 0.0 {
            self.flops_per_sample * self.batch
        } else {
            self.flops_per_sample
        }
    }
}

/// Where a piece of work lies in a role's iteration: from progress `from` to `to` (fractions of
/// the iteration, `from == to` for work outside the iteration's own share, such as help given to
/// a peer), with `nominal_iter_s` the undelayed time of the whole iteration (the injector's T0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterSpan {
    /// Progress where the work starts, in `[0, 1]`.
    pub from: f64,
    /// Progress where it ends, in `[from, 1]`.
    pub to: f64,
    /// Undelayed seconds of the whole iteration.
    pub nominal_iter_s: f64,
}

impl IterSpan {
    /// The probe points of the span and the share of its work after each: its start, then every
    /// multiple of `1/points` strictly inside it.
    pub fn pieces(&self, points: u32) -> Vec<(f64, f64)> {
        let (from, to) = (self.from.clamp(0.0, 1.0), self.to.clamp(0.0, 1.0));
        if to <= from {
            return vec![(from, 1.0)];
        }
        let n = f64::from(points.max(1));
        let mut cuts = vec![from];
        let mut k = (from * n + 1e-9).floor() + 1.0;
        while k / n < to - 1e-12 {
            cuts.push(k / n);
            k += 1.0;
        }
        cuts.push(to);
        cuts.windows(2)
            .map(|w| (w[0], (w[1] - w[0]) / (to - from)))
            .collect()
    }
}

/// Totals a role accumulates; feeds the summary and the ideal bound.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct RoleStats {
    /// FLOPs charged.
    pub flops: f64,
    /// Seconds the cost model predicted for that work, before slowdowns.
    pub nominal_compute_s: f64,
    /// Seconds spent computing (with slowdowns and injected delays): as charged in `sim`, as
    /// measured in `wall`.
    pub compute_s: f64,
    /// What a layer-granular memory policy measured of the role's last training iteration
    /// ([`IterationReport::figures`](crate::memory::lanes::IterationReport::figures)); empty
    /// under other policies.
    #[serde(default)]
    pub memory: BTreeMap<String, f64>,
    /// A strategy's own figures of this role (`RoleContext::set_figure`): the summary reports
    /// each one's mean over the roles (workers and servers) that set it.
    #[serde(default)]
    pub figures: BTreeMap<String, f64>,
    /// Of `compute_s` and `flops`, what work still in flight when the role stopped would have
    /// done after it (a step started without waiting, [`RoleContext::compute_deferred`], whose
    /// result comes after the run's end): the summary's ideal time counts the work done within
    /// the run, and a checkpoint keeps it all, since a resumed run finishes it.
    #[serde(default)]
    pub unfinished: Unfinished,
}

/// Work a role had charged but not finished when it stopped: its seconds after the stop and
/// their share of its FLOPs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Unfinished {
    /// Seconds of charged compute after the stop.
    pub compute_s: f64,
    /// FLOPs of that compute (each piece of work's FLOPs in proportion to its time after the
    /// stop).
    pub flops: f64,
}

/// A role's view of the run.
pub struct RoleContext {
    id: RoleId,
    kind: RuntimeKind,
    net: Arc<dyn Transport>,
    rx: Inbox,
    stash: VecDeque<Envelope>,
    device: DeviceProfile,
    machine: MachineId,
    num_workers: u32,
    progress_points: u32,
    stragglers: StragglerSet,
    iter: u64,
    stats: RoleStats,
    trace: Recorder,
    memory: DeviceMemory,
    /// The job's per-layer cost facts, what a calibrated device charges training steps by.
    cost_sheet: Arc<[LayerCost]>,
    /// Whether compute is charged by the cost model in every runtime: the job runs no math
    /// (throughput mode), so a real-time runtime has nothing to time and emulates the work.
    modeled_compute: bool,
    /// When the role last started waiting before the engine's shutdown reached it: the end of
    /// its last work, where a resumed run restarts it.
    stopped_at: Option<f64>,
    /// Whether the role has sent a message since its task last gave up its thread: the task the
    /// send woke (a connection's writer, a role of this process) may be waiting in the thread's
    /// next-task slot, where math run on this thread would keep it ([`RoleContext::clear_for_math`]).
    sent_since_wait: AtomicBool,
    /// Seconds the role's last math of each label took in real time: what says whether its next
    /// may keep its thread ([`INLINE_MATH_S`]).
    math_s: HashMap<String, f64>,
    /// Deferred work not known to be done: (start, done, FLOPs) of each
    /// [`RoleContext::compute_deferred`] whose result was still ahead when the last began.
    deferred: Vec<(f64, f64, f64)>,
}

/// The longest math (as the role's last took) that runs on the role's own thread in `--runtime
/// process`; longer math hands the thread over for its duration. Handing over costs tens of
/// microseconds of thread wake-ups, a few percent of math this long; keeping the thread stalls
/// the process's transport and heartbeats for the math's duration, which this bounds.
pub const INLINE_MATH_S: f64 = 1e-3;

impl RoleContext {
    /// The run's time base.
    pub(crate) fn time(&self) -> crate::time::TimeBase {
        self.net.time()
    }

    /// When the role stopped working: the end of its last work before the engine's shutdown
    /// reached it, or now for a role that returned by itself.
    pub(crate) fn stopped_at(&self) -> f64 {
        self.stopped_at.unwrap_or_else(|| self.now())
    }

    /// The role's totals, with what of its deferred work lies after `end` (see
    /// [`RoleStats::unfinished`]).
    pub(crate) fn stats_at_end(&self, end: f64) -> RoleStats {
        let mut stats = self.stats.clone();
        for &(start, done, flops) in &self.deferred {
            let after = done - start.max(end);
            if after > 0.0 {
                stats.unfinished.compute_s += after;
                stats.unfinished.flops += flops * after / (done - start);
            }
        }
        stats
    }

    /// The state of this role's straggler patterns, for a checkpoint.
    pub(crate) fn straggler_state(&self) -> Vec<Option<serde_json::Value>> {
        self.stragglers.save()
    }

    /// Builds the context of `id`; the engine does this when it launches a run.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: RoleId,
        kind: RuntimeKind,
        net: Arc<dyn Transport>,
        rx: impl Into<Inbox>,
        num_workers: u32,
        progress_points: u32,
        stragglers: StragglerSet,
        memory: DeviceMemory,
    ) -> RoleContext {
        let device = net.cluster().device_of(id).clone();
        let machine = net.cluster().machine_of(id);
        RoleContext {
            id,
            kind,
            net,
            rx: rx.into(),
            stash: VecDeque::new(),
            device,
            machine,
            num_workers,
            progress_points: progress_points.max(1),
            stragglers,
            iter: 0,
            stats: RoleStats::default(),
            trace: Recorder::default(),
            memory,
            cost_sheet: Arc::from(Vec::new()),
            modeled_compute: kind == RuntimeKind::Sim,
            stopped_at: None,
            sent_since_wait: AtomicBool::new(false),
            math_s: HashMap::new(),
            deferred: Vec::new(),
        }
    }

    /// The same context charging training steps by `sheet`, the job's per-layer cost facts (see
    /// [`crate::job::Job::cost_sheet`]); without one, every device charges by FLOPs.
    pub fn with_cost_sheet(mut self, sheet: Arc<[LayerCost]>) -> RoleContext {
        self.cost_sheet = sheet;
        self
    }

    /// The same context charging compute by the cost model in real time too when `modeled`: for a
    /// job that runs no math (throughput mode), whose steps a real-time runtime cannot time, so
    /// it sleeps what the device profile says they cost, as `sim` charges them.
    pub fn with_modeled_compute(mut self, modeled: bool) -> RoleContext {
        self.modeled_compute = self.kind == RuntimeKind::Sim || modeled;
        self
    }

    /// Undelayed seconds `work` costs on this role's device by the cost model (what `sim`
    /// charges before straggler effects).
    pub fn nominal_seconds(&self, work: Work) -> f64 {
        work.seconds_on(&self.device, &self.cost_sheet)
    }

    /// The same context recording its timeline with `recorder` instead of keeping every event
    /// in memory (what the run does for its `trace` mode and trace folder).
    pub fn with_trace(mut self, recorder: Recorder) -> RoleContext {
        self.trace = recorder;
        self
    }

    /// This role.
    pub fn id(&self) -> RoleId {
        self.id
    }

    /// The runtime kind.
    pub fn runtime(&self) -> RuntimeKind {
        self.kind
    }

    /// The device this role computes on.
    pub fn device(&self) -> &DeviceProfile {
        &self.device
    }

    /// The machine this role runs on.
    pub fn machine(&self) -> MachineId {
        self.machine
    }

    /// Number of workers in the job.
    pub fn num_workers(&self) -> u32 {
        self.num_workers
    }

    /// Seconds since the run started.
    pub fn now(&self) -> f64 {
        self.net.now()
    }

    /// Real (wall-clock) seconds since the run started; not deterministic, for reporting only.
    pub fn wall_now(&self) -> f64 {
        self.net.wall_now()
    }

    /// Sets the iteration (clock) the role works on; straggler patterns key on it.
    pub fn set_iter(&mut self, iter: u64) {
        self.iter = iter;
        self.trace.set_clock(iter);
    }

    /// Accumulated compute totals.
    pub fn stats(&self) -> &RoleStats {
        &self.stats
    }

    /// Sends a message; returns its arrival time.
    pub fn send(&self, to: RoleId, msg: Message) -> f64 {
        self.send_timed(to, msg).arrival
    }

    /// Sends the message `stamped` builds from the current run time, read once for both the
    /// message and its departure; returns its arrival time.
    pub(crate) fn send_stamped(&self, to: RoleId, stamped: impl FnOnce(f64) -> Message) -> f64 {
        let now = self.now();
        self.send_at(to, stamped(now), now).arrival
    }

    /// Sends a message; returns when it starts leaving this role's NIC and when it arrives, so
    /// a transfer can be timed without this role's own send queue.
    pub fn send_timed(&self, to: RoleId, msg: Message) -> Departure {
        self.send_at(to, msg, self.now())
    }

    /// Every send of this role, the clock read as `now`: noted for [`RoleContext::clear_for_math`].
    fn send_at(&self, to: RoleId, msg: Message, now: f64) -> Departure {
        self.sent_since_wait.store(true, Ordering::Relaxed);
        self.net.send_at(self.id, to, msg, now)
    }

    /// The next message, in arrival order (stashed ones first).
    pub async fn recv(&mut self) -> Result<Envelope> {
        let called = self.now();
        let env = match self.stash.pop_front() {
            Some(env) => env,
            None => self
                .mailbox()
                .await
                .ok_or_else(|| EngineError::protocol(self.id, "mailbox closed while waiting"))?,
        };
        if matches!(env.msg, Message::Shutdown) {
            self.stopped_at = Some(called);
        }
        Ok(self.delivered(env))
    }

    /// A message handed to the role; the timeline follows the clock it carries.
    fn delivered(&mut self, env: Envelope) -> Envelope {
        self.trace.saw(&env.msg);
        env
    }

    /// The next message for which `want` holds; others are kept, in order, for later receives.
    pub async fn recv_matching(&mut self, want: impl Fn(&Envelope) -> bool) -> Result<Envelope> {
        if let Some(pos) = self.stash.iter().position(&want) {
            if let Some(env) = self.stash.remove(pos) {
                return Ok(self.delivered(env));
            }
        }
        loop {
            let env = self
                .mailbox()
                .await
                .ok_or_else(|| EngineError::protocol(self.id, "mailbox closed while waiting"))?;
            if want(&env) {
                return Ok(self.delivered(env));
            }
            self.stash.push_back(env);
        }
    }

    /// The next message, or `None` once run time reaches `deadline` with nothing delivered.
    ///
    /// Lets a role wait for messages and for an event of its own at once (e.g. a gradient that a
    /// compute step started with [`RoleContext::compute_deferred`] makes ready at a known time).
    pub async fn recv_until(&mut self, deadline: f64) -> Result<Option<Envelope>> {
        let env = self.recv_until_inner(deadline).await?;
        Ok(env.map(|env| self.delivered(env)))
    }

    /// [`RoleContext::recv_until`] before the timeline sees the message.
    async fn recv_until_inner(&mut self, deadline: f64) -> Result<Option<Envelope>> {
        if let Some(env) = self.stash.pop_front() {
            return Ok(Some(env));
        }
        if !deadline.is_finite() {
            return self
                .mailbox()
                .await
                .map(Some)
                .ok_or_else(|| EngineError::protocol(self.id, "mailbox closed while waiting"));
        }
        if self.now() >= deadline {
            return Ok(self.rx.try_recv());
        }
        let time = self.net.time();
        let (delivered, gave_up_thread) = until_ready(async {
            tokio::select! {
                biased;
                env = self.rx.recv() => env.map(Some),
                _ = time.sleep_until(deadline) => Some(None),
            }
        })
        .await;
        self.waited(gave_up_thread);
        delivered.ok_or_else(|| EngineError::protocol(self.id, "mailbox closed while waiting"))
    }

    /// The next message of this role's mailbox (`None` once it is closed), waited for.
    async fn mailbox(&mut self) -> Option<Envelope> {
        let (env, gave_up_thread) = until_ready(self.rx.recv()).await;
        self.waited(gave_up_thread);
        env
    }

    /// Notes a wait of this role's task: where it gave up its thread, the tasks its sends woke
    /// have had their turn.
    fn waited(&self, gave_up_thread: bool) {
        if gave_up_thread {
            self.sent_since_wait.store(false, Ordering::Relaxed);
        }
    }

    /// A message already delivered for which `want` holds, without waiting.
    pub fn try_recv_matching(&mut self, want: impl Fn(&Envelope) -> bool) -> Option<Envelope> {
        while let Some(env) = self.rx.try_recv() {
            self.stash.push_back(env);
        }
        let pos = self.stash.iter().position(want)?;
        let env = self.stash.remove(pos)?;
        Some(self.delivered(env))
    }

    fn probe(&self, progress: f64, nominal_iter_s: f64) -> Probe {
        // The coordinator has no straggler patterns; any identity outside the servers will do.
        let (kind, index) = straggler_identity(self.id).unwrap_or((RoleKind::Server, u32::MAX));
        Probe {
            kind,
            index,
            machine: self.machine,
            num_workers: self.num_workers,
            now: self.now(),
            iter: self.iter,
            progress,
            nominal_iter_s,
        }
    }

    /// Resource signals (CPU, memory pressure) the injector exposes for this role now.
    pub fn resource_signals(&mut self) -> Option<ResourceSignals> {
        let probe = self.probe(0.0, 0.0);
        self.stragglers.signals(&probe)
    }

    /// Runs `math`; returns its result and the nominal seconds of `work`: the cost model's where
    /// compute is modeled (`sim`, where the math itself takes no virtual time, and throughput
    /// mode, which has no math to time), the measured time otherwise.
    ///
    /// Where the math runs in real time: on the role's own thread where the caller has `cleared`
    /// the way ([`RoleContext::clear_for_math`]: short math in `--runtime process`); otherwise on
    /// a thread of its own (`tokio::task::block_in_place`), so that the other roles, the transport
    /// and the emulated network's timers go on meanwhile. Handing the runtime's thread over costs
    /// thread wake-ups every step: in four interleaved pairs of two-process jobs of the small
    /// MLP on two cores, a clock took 1.04–1.36 times as long with it.
    fn run_math<T>(
        &mut self,
        label: &str,
        work: Work,
        cleared: bool,
        math: impl FnOnce() -> T,
    ) -> (T, f64) {
        if self.modeled_compute {
            let out = math();
            (out, self.nominal_seconds(work))
        } else {
            let started = std::time::Instant::now();
            let out = if cleared {
                math()
            } else {
                tokio::task::block_in_place(math)
            };
            let took = started.elapsed().as_secs_f64();
            match self.math_s.get_mut(label) {
                Some(last) => *last = took,
                None => {
                    self.math_s.insert(label.to_owned(), took);
                }
            }
            (out, took)
        }
    }

    /// Whether this role's next math of `label` may run on its own thread: in `--runtime
    /// process`, where its last of that label took at most [`INLINE_MATH_S`] (the first hands the
    /// thread over; `wall`'s one runtime holds every machine's roles, so its math always does).
    fn math_inline(&self, label: &str) -> bool {
        !self.modeled_compute
            && self.kind == RuntimeKind::Process
            && self
                .math_s
                .get(label)
                .is_some_and(|&last| last <= INLINE_MATH_S)
    }

    /// Before math in real time: whether it may run on the role's own thread
    /// ([`RoleContext::math_inline`]), having let the tasks this role woke since it last waited
    /// run first. A task woken by the running one waits in its thread's next-task slot, which
    /// the runtime's other threads do not take: the writer of the push a worker has just sent
    /// would otherwise wait out the whole step before sending it. Where nothing was sent since
    /// the role last waited (a worker stepping on the parameters it was just sent), it does not
    /// yield: a yield wakes the runtime's other threads to look for work, which cost a ring
    /// allreduce's clock up to 90 µs in most clocks of two-process jobs of the small MLP on two
    /// cores (two threads a process).
    async fn clear_for_math(&mut self, label: &str) -> bool {
        let inline = self.math_inline(label);
        if inline && self.sent_since_wait.swap(false, Ordering::Relaxed) {
            tokio::task::yield_now().await;
        }
        inline
    }

    /// Runs `math` and charges `work` on this role's device, with the straggler injector applied.
    ///
    /// The work is split into `progress_points` equal parts and the injector is probed at the start
    /// of each, so patterns that strike mid-iteration (FlexRR's Slow Worker) act where they should.
    /// In `sim` the math takes no virtual time and the modeled cost is slept; in the real-time
    /// runtimes the math takes what it takes and slowdowns are slept on top (throughput mode,
    /// which has no math, sleeps the modeled cost there too). Returns the math's result.
    pub async fn compute<T>(&mut self, label: &str, work: Work, math: impl FnOnce() -> T) -> T {
        let cleared = self.clear_for_math(label).await;
        let t0 = self.now();
        let (out, nominal) = self.run_math(label, work, cleared, math);
        // With no straggler pattern on this role there is nothing to probe: charge in one go.
        let parts = if self.stragglers.is_empty() {
            1
        } else {
            self.progress_points
        };
        let part = nominal / parts as f64;
        let pieces: Vec<(f64, f64)> = (0..parts)
            .map(|i| (i as f64 / parts as f64, part))
            .collect();
        self.charge(label, t0, work, nominal, nominal, &pieces)
            .await;
        out
    }

    /// Sleeps the cost of `pieces` of work — (progress where the injector is probed, nominal
    /// seconds that follow) — each scaled by the effect probed there, and books the work.
    async fn charge(
        &mut self,
        label: &str,
        t0: f64,
        work: Work,
        nominal: f64,
        nominal_iter_s: f64,
        pieces: &[(f64, f64)],
    ) {
        let mut charged = 0.0;
        for (i, &(at, seconds)) in pieces.iter().enumerate() {
            let effect = if self.stragglers.is_empty() {
                Effect::NONE
            } else {
                self.stragglers.effect(&self.probe(at, nominal_iter_s))
            };
            // A fixed delay belongs to the start of an iteration, charged once.
            let mut sleep = if i == 0 && at <= 0.0 {
                effect.extra_delay_s
            } else {
                0.0
            };
            sleep += if self.modeled_compute {
                seconds * effect.compute_factor
            } else {
                seconds * (effect.compute_factor - 1.0).max(0.0)
            };
            charged += sleep;
            charged += self.work_for(sleep).await;
        }
        let t1 = self.now();
        self.stats.flops += work.flops();
        self.stats.nominal_compute_s += nominal;
        // Account what the model charged, not the clock's reading: the clock has a finite tick.
        self.stats.compute_s += if self.modeled_compute {
            charged
        } else {
            t1 - t0
        };
        self.trace_span(label, "compute", t0, t1);
    }

    /// Runs `math` and charges `work` as the slice `span` of this role's iteration: the straggler
    /// injector is probed where the slice starts and at every progress point inside it, so a
    /// worker that charges its iteration in many small pieces (FlexRR's work units, help given to
    /// peers) meets the patterns at the same points as one that charges it whole. Returns the
    /// math's result.
    pub async fn compute_span<T>(
        &mut self,
        label: &str,
        work: Work,
        span: IterSpan,
        math: impl FnOnce() -> T,
    ) -> T {
        let cleared = self.clear_for_math(label).await;
        let t0 = self.now();
        let (out, nominal) = self.run_math(label, work, cleared, math);
        let pieces: Vec<(f64, f64)> = if self.stragglers.is_empty() {
            vec![(span.from, nominal)]
        } else {
            span.pieces(self.progress_points)
                .into_iter()
                .map(|(at, share)| (at, nominal * share))
                .collect()
        };
        self.charge(label, t0, work, nominal, span.nominal_iter_s, &pieces)
            .await;
        out
    }

    /// Runs `math` now and returns its result with the run time at which the work is done, without
    /// waiting for it: the role may keep handling messages meanwhile (a compute thread beside a
    /// communication thread, RNA §5.1.3) and treats the result as available only from that time.
    ///
    /// The cost is what [`RoleContext::compute`] would charge for `work` from now: the cost model and
    /// the straggler injector probed at `progress_points` points, each probe at the run time its
    /// part of the work would start. The span and the totals are recorded as the work's own.
    pub fn compute_deferred<T>(
        &mut self,
        label: &str,
        work: Work,
        math: impl FnOnce() -> T,
    ) -> (T, f64) {
        let t0 = self.now();
        // It cannot yield first: it keeps the thread only where no task it woke waits for it.
        let cleared = self.math_inline(label) && !self.sent_since_wait.load(Ordering::Relaxed);
        let (out, nominal) = self.run_math(label, work, cleared, math);
        let start = self.now();
        let parts = if self.stragglers.is_empty() {
            1
        } else {
            self.progress_points
        };
        let part = nominal / parts as f64;
        let mut charged = 0.0;
        for i in 0..parts {
            let effect = if self.stragglers.is_empty() {
                Effect::NONE
            } else {
                let mut probe = self.probe(i as f64 / parts as f64, nominal);
                probe.now = start + charged;
                self.stragglers.effect(&probe)
            };
            let mut cost = if i == 0 { effect.extra_delay_s } else { 0.0 };
            cost += if self.modeled_compute {
                part * effect.compute_factor
            } else {
                part * (effect.compute_factor - 1.0).max(0.0)
            };
            charged += cost;
        }
        let waited = if self.modeled_compute {
            self.net.processor_wait(self.id, start, charged)
        } else {
            0.0
        };
        let done = start + waited + charged;
        if self.modeled_compute {
            self.net.busy_until(self.id, done);
        }
        self.stats.flops += work.flops();
        self.stats.nominal_compute_s += nominal;
        self.stats.compute_s += done - t0;
        self.deferred.retain(|&(_, until, _)| until > t0);
        self.deferred.push((t0, done, work.flops()));
        self.trace_span(label, "compute", t0, done);
        (out, done)
    }

    /// Charges `seconds` of modeled work whose math has already run: slept where compute is
    /// modeled (`sim`, where the math took no virtual time; throughput mode, where there was
    /// none), nothing otherwise (the math took its real time as it ran).
    pub async fn charge_modeled(&mut self, seconds: f64) {
        if self.modeled_compute {
            self.work_for(seconds).await;
        }
    }

    /// Sleeps `seconds` of this role's work, and returns how long it waited for a processor
    /// besides: in `sim`, where its machine shares a host's processors with other machines
    /// (`cluster.hosts`), the work runs as one of them has time for it; elsewhere the work is the
    /// sleep (a real runtime's threads share the real processors).
    async fn work_for(&mut self, seconds: f64) -> f64 {
        let waited = if self.modeled_compute {
            let now = self.now();
            let waited = self.net.processor_wait(self.id, now, seconds);
            self.net.busy_until(self.id, now + waited + seconds);
            waited
        } else {
            0.0
        };
        self.net.time().sleep(waited + seconds).await;
        waited
    }

    /// Charges a request's service time on a server: `work` plus the injector's fixed per-request cost.
    ///
    /// The clock is read once before the wait and once after: a server calls this per request.
    pub async fn serve(&mut self, label: &str, flops: f64) {
        self.charge_service(label, flops, None).await;
    }

    /// [`RoleContext::serve`] for a request whose math began at run time `began` (read before
    /// the math ran): in the real-time runtimes that math took its real time, which is booked as
    /// the server's compute and traced with the charge; in `sim` it took none.
    pub async fn serve_since(&mut self, label: &str, flops: f64, began: f64) {
        self.charge_service(label, flops, Some(began)).await;
    }

    /// Charges a request's service time (see [`RoleContext::serve`]), booked from `began` in the
    /// real-time runtimes when the caller read it before the math.
    async fn charge_service(&mut self, label: &str, flops: f64, began: Option<f64>) {
        let nominal = self.device.work_seconds(flops);
        let probe = self.probe(0.0, nominal);
        let t0 = match began {
            Some(began) if !self.modeled_compute => began.min(probe.now),
            _ => probe.now,
        };
        let effect = self.stragglers.effect(&probe);
        let cost = if self.modeled_compute {
            nominal * effect.compute_factor + effect.per_request_s
        } else {
            nominal * (effect.compute_factor - 1.0).max(0.0) + effect.per_request_s
        };
        self.work_for(cost).await;
        let t1 = self.now();
        self.stats.flops += flops;
        self.stats.nominal_compute_s += nominal;
        self.stats.compute_s += t1 - t0;
        if cost > 0.0 || (!self.modeled_compute && t1 > t0) {
            self.trace_span(label, "serve", t0, t1);
        }
    }

    /// The delay the straggler patterns put at the start of this role's current iteration (a
    /// sleep-before-computing pattern such as Fela's `round-robin-sleep`), booked as compute from
    /// now, without waiting for it: the caller starts no compute before now + the delay, while
    /// its communication goes on — the patterns delay a worker's computation, not its network.
    /// For a worker that asks for its work piece by piece, the iteration thus starts late
    /// *before* it claims any, so its share can go to others meanwhile. The patterns report such
    /// a delay once per iteration, so the first compute of the iteration does not charge it again.
    pub fn iteration_start_delay(&mut self) -> f64 {
        if self.stragglers.is_empty() {
            return 0.0;
        }
        let t0 = self.now();
        let delay = self.stragglers.effect(&self.probe(0.0, 0.0)).extra_delay_s;
        if delay > 0.0 {
            self.stats.compute_s += delay;
            self.trace_span("late start", "compute", t0, t0 + delay);
        }
        delay
    }

    /// Sets one of this role's figures for the run summary (averaged over the workers and servers
    /// that set it), e.g. a strategy's measured hit rate or stage time. The last value set counts.
    pub fn set_figure(&mut self, name: impl Into<String>, value: f64) {
        self.stats.figures.insert(name.into(), value);
    }

    /// Waits `s` seconds of run time.
    pub async fn sleep(&mut self, s: f64) {
        self.net.time().sleep(s).await;
    }

    /// Tells this role's memory policy about `event` and charges the host-link transfers it asks
    /// for; an error when the device runs out of memory.
    pub async fn memory_event(&mut self, event: MemEvent) -> Result<()> {
        let bytes = self.memory.event(&event)?;
        if bytes > 0 {
            let t0 = self.now();
            self.sleep(bytes as f64 / self.device.host_link_bytes_per_s())
                .await;
            self.trace_span("swap", "memory", t0, self.now());
        }
        Ok(())
    }

    /// Runs one training iteration of `graph` on `batch` samples through this role's memory
    /// policy layer by layer, when the policy is layer-granular: the time its copies and memory
    /// waits add to the step's computation is charged now (a `swap` span). Returns the moves the
    /// policy made, for a layer-by-layer step to follow (`None`: the policy is not
    /// layer-granular, and the caller reports per-stage events instead).
    pub async fn memory_iteration(
        &mut self,
        graph: &crate::graph::OpGraph,
        batch: u64,
    ) -> Result<Option<crate::graph::MovePlan>> {
        let device = &self.device;
        let iteration = crate::memory::layers::IterationGraph::new(graph, batch, |op| {
            device.op_seconds(op, batch)
        });
        let Some(report) = self.memory.iteration(&iteration, device.host_link())? else {
            return Ok(None);
        };
        self.stats.memory = report.figures();
        let stall = report.stall_s();
        if stall > 0.0 {
            let t0 = self.now();
            self.sleep(stall).await;
            self.trace_span("swap", "memory", t0, self.now());
        }
        Ok(Some(report.plan))
    }

    /// The highest number of bytes ever resident on this role's device, as its memory policy
    /// accounted them.
    pub fn peak_memory(&self) -> u64 {
        self.memory.peak()
    }

    /// Records a span on this role's timeline.
    pub fn trace_span(&mut self, name: &str, category: &str, start_s: f64, end_s: f64) {
        self.trace.record(name, category, start_s, end_s);
    }

    /// Ends the recorded timeline (the engine does this when the role is done): its events when
    /// they were kept in memory, `None` when there are none to hand over (trace off, a role the
    /// sample leaves out, or a timeline already streamed to its file); an error when its file
    /// could not be written.
    pub fn finish_trace(&mut self) -> Result<Option<Vec<TraceEvent>>> {
        std::mem::replace(&mut self.trace, Recorder::off()).finish()
    }
}

/// Awaits `fut`; returns its output and whether it gave up the thread on the way (was pending at
/// least once), which lets the tasks woken before it run.
async fn until_ready<F: Future>(fut: F) -> (F::Output, bool) {
    let mut fut = std::pin::pin!(fut);
    let mut pending = false;
    let out = std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        Poll::Ready(out) => Poll::Ready(out),
        Poll::Pending => {
            pending = true;
            Poll::Pending
        }
    })
    .await;
    (out, pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stragglers::StragglerSet;
    use crate::time::TimeBase;
    use crate::transport::Network;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    /// Runs `body` as worker 0 of a `--runtime process` context on a runtime of one thread (a
    /// process holding one worker), beside a task that counts its turns on that thread.
    fn on_one_thread<F, Fut>(body: F)
    where
        F: FnOnce(RoleContext, Arc<AtomicU64>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let rt = crate::process::runtime(1).expect("a runtime");
        rt.block_on(async {
            let roles = [RoleId::Worker(0), RoleId::Worker(1)];
            let cluster = crate::cluster::test_cluster(2);
            let (net, mut rx) = Network::new(cluster, TimeBase::new(false), &roles, None);
            let pump = tokio::spawn(net.clone().pump());
            let ctx = RoleContext::new(
                RoleId::Worker(0),
                RuntimeKind::Process,
                net.clone(),
                rx.remove(&RoleId::Worker(0)).expect("an inbox"),
                2,
                1,
                StragglerSet::default(),
                DeviceMemory::unbounded(RoleId::Worker(0)),
            );
            let turns = Arc::new(AtomicU64::new(0));
            let counter = turns.clone();
            let ticker = tokio::spawn(async move {
                loop {
                    counter.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            });
            tokio::spawn(body(ctx, turns)).await.expect("the role");
            ticker.abort();
            net.close();
            let _ = pump.await;
        });
    }

    /// Whether the other task takes a turn while `label`'s math runs, the role's last math of
    /// that label having taken `last` seconds: the math waits for the turn up to `patience`.
    /// Then the role gives up its thread: after math that handed its thread over, the role goes
    /// on where the math ran, beside the thread that took over, until it next waits.
    async fn others_run_during(
        ctx: &mut RoleContext,
        turns: &AtomicU64,
        (label, last): (&str, f64),
        patience: Duration,
    ) -> bool {
        ctx.math_s.insert(label.to_owned(), last);
        let ran = ctx
            .compute(label, Work::fixed(0.0), || {
                let before = turns.load(Ordering::SeqCst);
                let started = Instant::now();
                while started.elapsed() < patience {
                    if turns.load(Ordering::SeqCst) != before {
                        return true;
                    }
                    std::hint::spin_loop();
                }
                false
            })
            .await;
        tokio::task::yield_now().await;
        ran
    }

    #[test]
    fn long_math_hands_the_thread_over_and_short_math_keeps_it() {
        on_one_thread(|mut ctx, turns| async move {
            let (forever, a_while) = (Duration::from_secs(30), Duration::from_millis(5));
            // Math whose last took longer than the bound hands the thread over: the other task
            // runs meanwhile.
            let long = ("step", 2.0 * INLINE_MATH_S);
            assert!(others_run_during(&mut ctx, &turns, long, forever).await);
            // Math whose last took no longer keeps it: nothing else runs while it does.
            let short = ("step", INLINE_MATH_S);
            assert!(!others_run_during(&mut ctx, &turns, short, a_while).await);
            // That math took 5 ms, past the bound: the next of its label hands the thread over.
            assert!(ctx.math_s["step"] >= a_while.as_secs_f64());
            assert!(!ctx.math_inline("step"));
            // The first math of a label hands over, not knowing how long it is.
            assert!(!ctx.math_inline("update"));
        });
    }

    /// The turns the other task takes between the call of a short math and its start.
    async fn turns_before_math(ctx: &mut RoleContext, turns: &AtomicU64) -> u64 {
        ctx.math_s.insert("step".into(), 0.0);
        let before = turns.load(Ordering::SeqCst);
        let seen = ctx
            .compute("step", Work::fixed(0.0), || turns.load(Ordering::SeqCst))
            .await;
        seen - before
    }

    #[test]
    fn math_on_the_roles_thread_lets_what_a_send_woke_run_first() {
        on_one_thread(|mut ctx, turns| async move {
            // Nothing sent since the role last gave up its thread: the math starts at once.
            assert_eq!(
                turns_before_math(&mut ctx, &turns).await,
                0,
                "math without a send waited"
            );
            // After a send, the tasks it may have woken have their turn before the math.
            ctx.send(RoleId::Worker(1), Message::Shutdown);
            assert!(
                turns_before_math(&mut ctx, &turns).await > 0,
                "math after a send kept the thread"
            );
        });
    }

    #[test]
    fn until_ready_says_whether_the_future_gave_up_the_thread() {
        let rt = crate::process::runtime(1).expect("a runtime");
        rt.block_on(async {
            assert_eq!(until_ready(async { 7 }).await, (7, false));
            assert_eq!(
                until_ready(async {
                    tokio::task::yield_now().await;
                    8
                })
                .await,
                (8, true)
            );
        });
    }
}
