//! The FlexRR worker: SSP on the parameter server plus RapidReassignment (thesis §3.3, spec
//! §4.1.7).
//!
//! Per clock the worker reads parameters at the freshness SSP asks for, then processes its work
//! units front to back, updating its cached copy as it goes (read-my-writes) and buffering the
//! deltas. At 75 % of the iteration it reports its progress to its helpees. It checks its inbox
//! at the configured frequency (each check has a modeled cost): a helper's report that shows it
//! ahead by more than the trigger makes the worker offer that helper a range cut from the tail of
//! its remaining work (2.5 %), and each `begun-helping` earns that helper a follow-up (5 %) while
//! more help is needed. Offers it receives are handled by Algorithm 2: help now (the offer is for
//! an earlier clock, or this worker's own work is done), save for the end of the clock, or
//! discard (cancelled, or from a later clock). When its kept work is done, the worker cancels the
//! offers nobody began, waits for the helpers' acknowledgements and processes those ranges itself,
//! waits for every `help-completed` (helping others meanwhile), flushes its deltas and clocks.
//! Helpers flush their deltas for a helped range to the servers, acknowledged, before they report
//! it completed, so a clock's version holds every update of that clock.
//!
//! Every message wait also serves peers, so a worker blocked by SSP's slack helps the slow
//! workers it is waiting for. After its last clock a worker keeps serving until the coordinator
//! releases everyone.

use crate::options::Resolved;
use crate::protocol::{Processed, RrMsg, Update, UpdateAck, WorkerStats};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Where an offer this worker made stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OfferState {
    /// Sent; the helper has not said it began.
    Offered,
    /// Cancelled by us; waiting for the helper's acknowledgement (or its `begun-helping`).
    Cancelling,
    /// The helper began it: it is the helper's for good.
    Accepted,
    /// The helper finished it and its updates are at the servers.
    Done,
    /// Cancelled before the helper began; we process it ourselves.
    Cancelled,
}

/// An offer of a range of this worker's current clock to a helper.
#[derive(Clone, Copy, Debug)]
struct Offer {
    helper: WorkerId,
    start: u32,
    end: u32,
    timer: f64,
    state: OfferState,
}

/// An offer received from a helpee.
#[derive(Clone, Copy, Debug)]
struct Request {
    from: WorkerId,
    id: u64,
    iter: u64,
    start: u32,
    end: u32,
    timer: f64,
}

/// A helper's latest progress report.
#[derive(Clone, Copy, Debug)]
struct ReportSeen {
    iter: u64,
    frac: f64,
    timer: f64,
}

/// State of the current clock's own work.
#[derive(Default)]
struct Iteration {
    start_s: f64,
    units: u32,
    /// Front cursor: the next own unit to process.
    next: u32,
    /// Back cursor: units from here on have been offered away.
    tail: u32,
    /// Own units this worker has processed this clock.
    processed: u32,
    /// Units of offers a helper began.
    accepted: u32,
    report_sent: bool,
    /// Offers may be made (kept work not finished yet).
    offering: bool,
    /// Kept work finished (Algorithm 2's "finished own work this iteration").
    own_done: bool,
    offers: BTreeMap<u64, Offer>,
    initial_to: BTreeSet<WorkerId>,
    reclaimed: Vec<(u32, u32)>,
    units_since_check: u32,
    loss_sum: f64,
    loss_units: u32,
}

/// A FlexRR worker (also BSP, SSP and BSP RR, by its options).
pub struct FlexWorker {
    id: WorkerId,
    job: Arc<Job>,
    r: Arc<Resolved>,
    replica: Option<Replica>,
    /// The cached parameter values (real models), own writes included.
    params: Vec<Vec<f32>>,
    /// Own writes, by the clock they are tagged with, until a read shows them at the servers.
    writes: Vec<(Clock, Vec<Vec<f32>>)>,
    clock: Clock,
    avg_iter_s: Option<f64>,
    last_cancel: BTreeMap<WorkerId, f64>,
    saved: Vec<Request>,
    help_queue: VecDeque<Request>,
    helping: bool,
    acks_pending: u32,
    released: bool,
    reports: BTreeMap<WorkerId, ReportSeen>,
    it: Iteration,
    next_id: u64,
    stats: WorkerStats,
    bytes_sent: u64,
}

impl FlexWorker {
    /// Worker `id` of `job`.
    pub fn new(job: Arc<Job>, id: WorkerId, r: Arc<Resolved>) -> Result<FlexWorker> {
        let params = job.init.clone().unwrap_or_default();
        Ok(FlexWorker {
            id,
            replica: Replica::new(&job.model)?,
            params,
            writes: Vec::new(),
            clock: 0,
            avg_iter_s: None,
            last_cancel: BTreeMap::new(),
            saved: Vec::new(),
            help_queue: VecDeque::new(),
            helping: false,
            acks_pending: 0,
            released: false,
            reports: BTreeMap::new(),
            it: Iteration::default(),
            next_id: 0,
            stats: WorkerStats::default(),
            bytes_sent: 0,
            job,
            r,
        })
    }

    fn real(&self) -> bool {
        self.job.model.is_real()
    }

    fn opts(&self) -> &crate::options::FlexrrOptions {
        &self.r.options
    }

    fn send_rr(&mut self, ctx: &RoleContext, to: RoleId, msg: &RrMsg) -> Result<()> {
        let m = msg.encode()?;
        self.bytes_sent += m.wire_bytes();
        ctx.send(to, m);
        Ok(())
    }

    /// Undelayed seconds of one unit on this worker's device.
    fn unit_work(&self) -> Work {
        Work {
            flops_per_sample: self.job.model.training_flops_per_sample(),
            batch: self.r.unit_batch as f64,
        }
    }

    /// Undelayed seconds of this worker's whole iteration (the injector's T0).
    fn nominal_iter_s(&self, ctx: &RoleContext) -> f64 {
        let w = self.unit_work();
        ctx.device().compute_seconds(w.flops_per_sample, w.batch) * f64::from(self.it.units)
    }

    /// Progress through the current clock in the thesis's sense: own units processed plus units
    /// given away and accepted, as a fraction.
    fn frac_done(&self) -> f64 {
        f64::from(self.it.processed + self.it.accepted) / f64::from(self.it.units.max(1))
    }

    /// Processes one unit of `owner`'s clock `clock`; returns its delta (real models).
    async fn process_unit(
        &mut self,
        ctx: &mut RoleContext,
        owner: WorkerId,
        clock: Clock,
        unit: u32,
        span: IterSpan,
    ) -> Result<Option<Vec<Vec<f32>>>> {
        let at = StepAt {
            clock,
            stream_offset: self.r.stream_offset(owner, clock, unit),
            batch: self.r.unit_batch,
        };
        let work = self.unit_work();
        let replica = self.replica.as_ref();
        let charge = Charge::Span(span);
        let ((loss, grads), _) =
            train_step(ctx, &self.job, replica, &self.params, at, work, charge).await?;
        // The modeled cost of the message checks that fall in this unit.
        let per_unit_checks = f64::from(self.opts().checks) / f64::from(self.it.units.max(1));
        let poll = per_unit_checks * self.opts().check_cost_s;
        if poll > 0.0 {
            ctx.sleep(poll).await;
        }
        if owner == self.id && clock == self.clock && loss.is_finite() {
            self.it.loss_sum += loss;
            self.it.loss_units += 1;
        }
        let Some(grads) = grads else {
            return Ok(None);
        };
        let (lr, wd) = (self.r.lr, self.r.weight_decay);
        let delta: Vec<Vec<f32>> = grads
            .iter()
            .zip(&self.params)
            .map(|(g, p)| g.iter().zip(p).map(|(g, p)| -lr * (g + wd * p)).collect())
            .collect();
        if self.opts().read_my_writes {
            add_into(&mut self.params, &delta);
        }
        Ok(Some(delta))
    }

    /// A message check: handles everything delivered (parameters excepted, which belong to a
    /// read in progress). Help that becomes due is queued; the caller serves it.
    fn poll(&mut self, ctx: &mut RoleContext) -> Result<()> {
        self.stats.polls += 1;
        self.it.units_since_check = 0;
        while let Some(env) = ctx.try_recv_matching(not_params) {
            self.handle(ctx, env)?;
        }
        Ok(())
    }

    /// Whether a check is due after one more unit (every `⌈units / checks⌉` units).
    fn check_due(&mut self) -> bool {
        self.it.units_since_check += 1;
        let every = self.it.units.div_ceil(self.opts().checks).max(1);
        self.it.units_since_check >= every
    }

    /// Waits for the next message (parameters excepted) and handles it, then serves any help
    /// that became due.
    async fn wait_one(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let env = ctx.recv_matching(not_params).await?;
        self.handle(ctx, env)?;
        self.drain_help(ctx).await
    }

    /// Handles one message from a peer, a server or the coordinator.
    fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let me = ctx.id();
        if env.msg.has_tag(UpdateAck::TAG) {
            self.acks_pending = self.acks_pending.checked_sub(1).ok_or_else(|| {
                EngineError::protocol(me, "an update acknowledgement nobody asked for")
            })?;
            return Ok(());
        }
        let Some(msg) = RrMsg::decode(me, env.from, &env.msg)? else {
            return Err(EngineError::protocol(
                me,
                format!("unexpected message from {}: {:?}", env.from, env.msg),
            ));
        };
        if let (RoleId::Coordinator, RrMsg::Release) = (env.from, &msg) {
            self.released = true;
            return Ok(());
        }
        let RoleId::Worker(from) = env.from else {
            return Err(EngineError::protocol(
                me,
                format!("flexrr message from {}", env.from),
            ));
        };
        match msg {
            RrMsg::ProgressReport { iter, frac, timer } => {
                self.on_report(ctx, from, ReportSeen { iter, frac, timer })
            }
            RrMsg::DoThis {
                id,
                iter,
                start,
                end,
                timer,
            } => {
                self.on_request(Request {
                    from,
                    id,
                    iter,
                    start,
                    end,
                    timer,
                });
                Ok(())
            }
            RrMsg::BegunHelping { id } => self.on_begun(ctx, from, id),
            RrMsg::HelpCompleted { id } => self.on_completed(me, from, id),
            RrMsg::CancelHelp { timer } => self.on_cancel(ctx, from, timer),
            RrMsg::CancelAck { timer } => {
                self.on_cancel_ack(from, timer);
                Ok(())
            }
            other => Err(EngineError::protocol(
                me,
                format!("unexpected flexrr message from worker {from}: {other:?}"),
            )),
        }
    }

    /// Algorithm 1: how far ahead of this worker the reporting helper is, in iterations.
    fn progress_difference(&self, now: f64, rep: ReportSeen) -> Option<f64> {
        let mine = self.clock as f64 + self.frac_done();
        let avg = self.avg_iter_s.or_else(|| {
            let f = self.frac_done();
            (f > 0.0).then(|| (now - self.it.start_s) / f)
        })?;
        (avg > 0.0).then(|| rep.iter as f64 + rep.frac - mine + (now - rep.timer) / avg)
    }

    fn on_report(&mut self, ctx: &mut RoleContext, from: WorkerId, rep: ReportSeen) -> Result<()> {
        self.reports.insert(from, rep);
        if !self.opts().reassignment || !self.it.offering || self.it.initial_to.contains(&from) {
            return Ok(());
        }
        if !self.r.groups.helpers(self.id).contains(&from) {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("progress report from worker {from}, which is not one of my helpers"),
            ));
        }
        let ahead = self.progress_difference(ctx.now(), rep);
        if ahead.is_some_and(|d| d > self.opts().trigger) {
            let initial = self.opts().initial;
            if self.offer(ctx, from, initial, false)? {
                self.it.initial_to.insert(from);
            }
        }
        Ok(())
    }

    /// Offers `helper` the given fraction of this clock's work, cut from the tail of what is
    /// left (never below the front cursor, keeping one unit, and only inside the replicated
    /// tail). Returns whether an offer went out.
    fn offer(
        &mut self,
        ctx: &mut RoleContext,
        helper: WorkerId,
        fraction: f64,
        follow_up: bool,
    ) -> Result<bool> {
        let n = self.r.units_of(self.id, fraction);
        let low = (self.it.next + 1).max(self.r.replicated_from(self.id));
        let end = self.it.tail;
        let start = end.saturating_sub(n).max(low);
        if start >= end {
            return Ok(false);
        }
        self.it.tail = start;
        let id = self.next_id;
        self.next_id += 1;
        let timer = ctx.now();
        self.it.offers.insert(
            id,
            Offer {
                helper,
                start,
                end,
                timer,
                state: OfferState::Offered,
            },
        );
        self.stats.offers += 1;
        if follow_up {
            self.stats.follow_ups += 1;
        }
        let msg = RrMsg::DoThis {
            id,
            iter: self.clock,
            start,
            end,
            timer,
        };
        self.send_rr(ctx, RoleId::Worker(helper), &msg)?;
        Ok(true)
    }

    /// "More help is needed" (spec §4.1.5 [C]): at least two follow-ups' worth of work left, and
    /// the helper still ahead by half the trigger.
    fn more_help_needed(&self, now: f64, helper: WorkerId) -> bool {
        let follow = self.r.units_of(self.id, self.opts().follow_up);
        let left = self.it.tail.saturating_sub(self.it.next);
        left >= 2 * follow
            && self
                .reports
                .get(&helper)
                .and_then(|&rep| self.progress_difference(now, rep))
                .is_some_and(|d| d > 0.5 * self.opts().trigger)
    }

    fn on_begun(&mut self, ctx: &mut RoleContext, from: WorkerId, id: u64) -> Result<()> {
        let me = ctx.id();
        let offer = self
            .it
            .offers
            .get_mut(&id)
            .filter(|o| o.helper == from)
            .ok_or_else(|| {
                EngineError::protocol(me, format!("worker {from} began unknown offer {id}"))
            })?;
        let was = offer.state;
        match was {
            OfferState::Offered | OfferState::Cancelling => offer.state = OfferState::Accepted,
            _ => {
                return Err(EngineError::protocol(
                    me,
                    format!("worker {from} began offer {id} in state {was:?}: units would be processed twice"),
                ))
            }
        }
        self.it.accepted += offer.end - offer.start;
        self.stats.accepted += 1;
        if was == OfferState::Offered && self.it.offering && self.more_help_needed(ctx.now(), from)
        {
            let follow = self.opts().follow_up;
            self.offer(ctx, from, follow, true)?;
        }
        Ok(())
    }

    fn on_completed(&mut self, me: RoleId, from: WorkerId, id: u64) -> Result<()> {
        match self.it.offers.get_mut(&id) {
            Some(o) if o.helper == from && o.state == OfferState::Accepted => {
                o.state = OfferState::Done;
                Ok(())
            }
            other => Err(EngineError::protocol(
                me,
                format!(
                    "worker {from} completed offer {id}, which is {:?}",
                    other.map(|o| o.state)
                ),
            )),
        }
    }

    fn on_cancel(&mut self, ctx: &mut RoleContext, from: WorkerId, timer: f64) -> Result<()> {
        let last = self.last_cancel.entry(from).or_insert(f64::NEG_INFINITY);
        *last = last.max(timer);
        let before = self.saved.len() + self.help_queue.len();
        self.saved.retain(|r| !(r.from == from && r.timer <= timer));
        self.help_queue
            .retain(|r| !(r.from == from && r.timer <= timer));
        self.stats.discarded += (before - self.saved.len() - self.help_queue.len()) as u64;
        self.send_rr(ctx, RoleId::Worker(from), &RrMsg::CancelAck { timer })
    }

    fn on_cancel_ack(&mut self, from: WorkerId, timer: f64) {
        for o in self.it.offers.values_mut() {
            if o.helper == from && o.state == OfferState::Cancelling && o.timer <= timer {
                o.state = OfferState::Cancelled;
                self.it.reclaimed.push((o.start, o.end));
                self.stats.cancelled += 1;
            }
        }
    }

    fn cancelled(&self, r: &Request) -> bool {
        self.last_cancel.get(&r.from).is_some_and(|&t| r.timer <= t)
    }

    /// Algorithm 2: help now, save for the end of this clock, or discard.
    fn on_request(&mut self, r: Request) {
        if self.cancelled(&r) || r.iter > self.clock {
            self.stats.discarded += 1;
        } else if r.iter < self.clock || self.it.own_done {
            self.help_queue.push_back(r);
        } else {
            self.saved.push(r);
        }
    }

    /// Serves the help that is due, unless already helping (help is never nested).
    async fn drain_help(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if self.helping {
            return Ok(());
        }
        self.helping = true;
        while let Some(r) = self.help_queue.pop_front() {
            if self.cancelled(&r) {
                self.stats.discarded += 1;
                continue;
            }
            self.help(ctx, r).await?;
        }
        self.helping = false;
        Ok(())
    }

    /// Processes a helpee's range, flushes its deltas to the servers (acknowledged), and reports
    /// it completed.
    async fn help(&mut self, ctx: &mut RoleContext, r: Request) -> Result<()> {
        let owner_units = self.r.units.get(r.from as usize).copied().unwrap_or(0);
        if r.start >= r.end || r.end > owner_units || r.start < self.r.replicated_from(r.from) {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "worker {} offered units {}..{} of its clock {}, outside the {} units it has or the replicated tail",
                    r.from, r.start, r.end, r.iter, owner_units
                ),
            ));
        }
        self.send_rr(
            ctx,
            RoleId::Worker(r.from),
            &RrMsg::BegunHelping { id: r.id },
        )?;
        self.stats.processed.push(Processed {
            owner: r.from,
            clock: r.iter,
            start: r.start,
            end: r.end,
        });
        self.stats.help_units += u64::from(r.end - r.start);
        let at = self.frac_done().min(1.0);
        let span = IterSpan {
            from: at,
            to: at,
            nominal_iter_s: self.nominal_iter_s(ctx),
        };
        let mut delta = self.real().then(|| self.job.layout.zeros());
        for unit in r.start..r.end {
            if let (Some(d), Some(acc)) = (
                self.process_unit(ctx, r.from, r.iter, unit, span).await?,
                delta.as_mut(),
            ) {
                add_into(acc, &d);
            }
            if self.check_due() {
                self.poll(ctx)?;
            }
        }
        self.flush(ctx, r.iter, r.from, false, delta).await?;
        self.send_rr(
            ctx,
            RoleId::Worker(r.from),
            &RrMsg::HelpCompleted { id: r.id },
        )
    }

    /// Sends deltas tagged (`clock`, `owner`) to every server; a helper's flush waits for the
    /// servers' acknowledgements, the owner's completing flush does not need to.
    async fn flush(
        &mut self,
        ctx: &mut RoleContext,
        clock: Clock,
        owner: WorkerId,
        completes: bool,
        delta: Option<Vec<Vec<f32>>>,
    ) -> Result<()> {
        let layout = self.job.layout.clone();
        let ack = !completes;
        for s in 0..layout.servers() {
            let deltas: Vec<BlockPayload> = layout.slice_for(s, delta.as_deref());
            let msg = Update {
                clock,
                owner,
                completes_clock: completes,
                ack,
                blocks: Vec::new(),
            }
            .message(deltas)?;
            self.bytes_sent += msg.wire_bytes();
            ctx.send(RoleId::Server(s), msg);
        }
        if let Some(d) = delta.filter(|_| self.opts().read_my_writes) {
            self.writes.push((clock, d));
        }
        if ack {
            self.acks_pending += layout.servers();
            while self.acks_pending > 0 {
                let env = ctx.recv_matching(not_params).await?;
                self.handle(ctx, env)?;
            }
        }
        Ok(())
    }

    /// Reads every server's blocks at the freshness the consistency rule asks for at `clock`,
    /// serving peers while waiting, and installs them with this worker's own writes the servers
    /// do not have yet. Returns the lowest version read.
    async fn read(&mut self, ctx: &mut RoleContext, clock: Clock) -> Result<i64> {
        let layout = self.job.layout.clone();
        let min_version = self.job.consistency.min_version(clock);
        for s in 0..layout.servers() {
            ctx.send(RoleId::Server(s), Message::Pull { clock, min_version });
        }
        let mut fresh = self.real().then(|| layout.zeros());
        let mut versions = BTreeMap::new();
        while versions.len() < layout.servers() as usize {
            let env = ctx.recv().await?;
            match (env.from, &env.msg) {
                (
                    RoleId::Server(s),
                    Message::Params {
                        version, blocks, ..
                    },
                ) => {
                    if let Some(f) = fresh.as_mut() {
                        layout.write_into(blocks, f);
                    }
                    versions.insert(s, *version);
                }
                _ => {
                    self.handle(ctx, env)?;
                    self.drain_help(ctx).await?;
                }
            }
        }
        if let Some(mut f) = fresh {
            // Own writes a server does not reflect yet go back on top of its blocks.
            for block in layout.blocks() {
                let v = versions.get(&layout.owner(block.id)).copied().unwrap_or(-1);
                for (tag, w) in &self.writes {
                    if *tag as i64 > v {
                        let range = block.offset..block.offset + block.len;
                        for (x, d) in f[block.param][range.clone()]
                            .iter_mut()
                            .zip(&w[block.param][range])
                        {
                            *x += d;
                        }
                    }
                }
            }
            self.params = f;
        }
        let lowest = versions.values().copied().min().unwrap_or(-1);
        self.writes.retain(|(tag, _)| *tag as i64 > lowest);
        Ok(lowest)
    }

    /// Processes own unit `unit` of the current clock, adding its delta to `delta`.
    async fn own_unit(
        &mut self,
        ctx: &mut RoleContext,
        unit: u32,
        delta: &mut [Vec<f32>],
    ) -> Result<()> {
        let units = f64::from(self.it.units);
        let span = IterSpan {
            from: f64::from(self.it.processed) / units,
            to: f64::from(self.it.processed + 1) / units,
            nominal_iter_s: self.nominal_iter_s(ctx),
        };
        if let Some(d) = self
            .process_unit(ctx, self.id, self.clock, unit, span)
            .await?
        {
            add_into(delta, &d);
        }
        self.it.processed += 1;
        self.maybe_report(ctx)?;
        if self.check_due() {
            self.poll(ctx)?;
            self.drain_help(ctx).await?;
        }
        Ok(())
    }

    /// Sends the progress report to every helpee once the checkpoint is passed.
    fn maybe_report(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if self.it.report_sent || self.frac_done() < self.opts().report_at {
            return Ok(());
        }
        self.it.report_sent = true;
        if !self.opts().reassignment {
            return Ok(());
        }
        let msg = RrMsg::ProgressReport {
            iter: self.clock,
            frac: self.frac_done(),
            timer: ctx.now(),
        };
        for h in self.r.groups.helpees(self.id).to_vec() {
            self.send_rr(ctx, RoleId::Worker(h), &msg)?;
        }
        Ok(())
    }

    /// One clock: read, own work with reassignment, reclaim, wait for helpers, flush, clock.
    async fn run_clock(&mut self, ctx: &mut RoleContext, clock: Clock) -> Result<IterRecord> {
        self.clock = clock;
        ctx.set_iter(clock);
        let start = ctx.now();
        let compute_before = ctx.stats().compute_s;
        let bytes_before = self.bytes_sent;
        let units = self.r.units[self.id as usize];
        self.it = Iteration {
            start_s: start,
            units,
            tail: units,
            offering: self.opts().reassignment,
            ..Iteration::default()
        };
        let version_read = self.read(ctx, clock).await?;
        let read_done = ctx.now();
        self.it.start_s = read_done;

        // Own work, front to back, until the cursors meet.
        let mut delta = if self.real() {
            self.job.layout.zeros()
        } else {
            Vec::new()
        };
        while self.it.next < self.it.tail {
            let unit = self.it.next;
            self.it.next += 1;
            self.own_unit(ctx, unit, &mut delta).await?;
        }
        let kept = self.it.next;
        self.stats.processed.push(Processed {
            owner: self.id,
            clock,
            start: 0,
            end: kept,
        });
        self.it.offering = false;
        self.it.own_done = true;

        // Cancel the offers nobody began; process them once their helpers acknowledge.
        let now = ctx.now();
        let mut cancel_to = BTreeSet::new();
        for o in self.it.offers.values_mut() {
            if o.state == OfferState::Offered {
                o.state = OfferState::Cancelling;
                cancel_to.insert(o.helper);
            }
        }
        for h in cancel_to {
            self.send_rr(ctx, RoleId::Worker(h), &RrMsg::CancelHelp { timer: now })?;
        }
        while self
            .it
            .offers
            .values()
            .any(|o| o.state == OfferState::Cancelling)
        {
            self.wait_one(ctx).await?;
        }
        for (s, e) in std::mem::take(&mut self.it.reclaimed) {
            self.stats.processed.push(Processed {
                owner: self.id,
                clock,
                start: s,
                end: e,
            });
            for unit in s..e {
                self.own_unit(ctx, unit, &mut delta).await?;
            }
        }
        // Wait for every accepted range (the slack bound depends on it), helping meanwhile.
        while self
            .it
            .offers
            .values()
            .any(|o| o.state == OfferState::Accepted)
        {
            self.wait_one(ctx).await?;
        }
        self.flush(ctx, clock, self.id, true, self.real().then_some(delta))
            .await?;
        let end = ctx.now();
        self.avg_iter_s = Some(match self.avg_iter_s {
            Some(avg) => 0.5 * avg + 0.5 * (end - start),
            None => end - start,
        });
        let compute_s = ctx.stats().compute_s - compute_before;
        let record = IterRecord {
            clock,
            start_s: start,
            end_s: end,
            wall_s: ctx.wall_now(),
            samples: u64::from(units) * self.r.unit_batch,
            compute_s,
            wait_s: (end - start - compute_s).max(0.0),
            // The read: transfer plus the wait for the version SSP asks for.
            comm_s: read_done - start,
            loss: if self.it.loss_units > 0 {
                self.it.loss_sum / f64::from(self.it.loss_units)
            } else {
                f64::NAN
            },
            version_read,
            bytes_sent: self.bytes_sent - bytes_before,
        };
        // Clocked: saved requests for this clock are now for an earlier one, served at once.
        self.clock = clock + 1;
        let saved = std::mem::take(&mut self.saved);
        self.help_queue.extend(saved);
        self.drain_help(ctx).await?;
        Ok(record)
    }
}

/// Adds `d` into `acc`, element-wise (nothing in throughput mode).
fn add_into(acc: &mut [Vec<f32>], d: &[Vec<f32>]) {
    for (a, d) in acc.iter_mut().zip(d) {
        for (x, y) in a.iter_mut().zip(d) {
            *x += y;
        }
    }
}

/// Everything but parameter values, which only a read in progress takes.
fn not_params(env: &Envelope) -> bool {
    !matches!(env.msg, Message::Params { .. })
}

#[async_trait]
impl Worker for FlexWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        let iterations = self.job.config.iterations;
        let mut records = Vec::with_capacity(iterations as usize);
        for clock in 0..iterations {
            let record = self.run_clock(ctx, clock).await?;
            records.push(record);
            self.job.observe(self.id, clock + 1);
        }
        // Done: keep serving peers until everyone is.
        self.clock = iterations;
        self.it.own_done = true;
        self.send_rr(ctx, RoleId::Coordinator, &RrMsg::Finished)?;
        while !self.released {
            self.wait_one(ctx).await?;
        }
        let stats = std::mem::take(&mut self.stats);
        self.send_rr(ctx, RoleId::Coordinator, &RrMsg::Stats(stats))?;
        ctx.send(RoleId::Coordinator, Message::WorkerDone);
        Ok(WorkerReport {
            iterations: records,
            model: None,
        })
    }
}
