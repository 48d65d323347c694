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
//!
//! The worker is split by concern, one module each:
//!
//! - `clock`: the per-clock loop (own units front to back, the progress report, the end of the
//!   clock) and the processing of one unit;
//! - `offers`: the helpee side, this worker's offers of its work and their cancels (Algorithm 1);
//! - `helping`: the helper side, the offers received from helpees and the help given
//!   (Algorithm 2);
//! - `inbox`: message checks and the dispatch of every message to its side;
//! - `exchange`: reads from and flushes to the parameter servers.

mod clock;
mod exchange;
mod helping;
mod inbox;
mod offers;

use crate::options::{FlexrrOptions, Resolved};
use crate::protocol::{RrMsg, WorkerStats};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use helping::Request;
use offers::{Offer, ReportSeen};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

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
    /// Message checks this clock makes.
    checks: u32,
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
    /// Compute seconds of the previous clock (own and helped units), for the check budget.
    last_compute_s: Option<f64>,
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

/// What a FlexRR worker carries from one clock to the next, for a checkpoint: its cached
/// parameters (it helps a peer with them while its own first read is still on its way), its
/// timing estimates (the offers it makes depend on them), the last progress report of each
/// helper and cancel of each helpee, and its offer counter. Not its own writes: at a cut every
/// clock before it is complete at the servers, so the first read shows them all and drops them.
#[derive(serde::Serialize, serde::Deserialize)]
struct FlexWorkerState {
    params: Vec<Vec<f32>>,
    avg_iter_s: Option<f64>,
    last_compute_s: Option<f64>,
    last_cancel: BTreeMap<WorkerId, f64>,
    reports: BTreeMap<WorkerId, ReportSeen>,
    next_id: u64,
}

impl FlexWorker {
    /// Worker `id` of `job` (continuing from its checkpoint when the job resumes).
    pub fn new(job: Arc<Job>, id: WorkerId, r: Arc<Resolved>) -> Result<FlexWorker> {
        let params = job.init.clone().unwrap_or_default();
        let mut worker = FlexWorker {
            id,
            replica: job.replica(RoleId::Worker(id))?,
            params,
            writes: Vec::new(),
            clock: 0,
            avg_iter_s: None,
            last_compute_s: None,
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
        };
        if let Some(cp) = worker.job.resumed(RoleId::Worker(id)) {
            let state: FlexWorkerState =
                cp.decode_state(RoleId::Worker(id), "FlexRR worker state")?;
            worker.restore(state);
        }
        Ok(worker)
    }

    /// This worker's state between clocks, for a checkpoint.
    fn state(&self) -> FlexWorkerState {
        FlexWorkerState {
            params: self.params.clone(),
            avg_iter_s: self.avg_iter_s,
            last_compute_s: self.last_compute_s,
            last_cancel: self.last_cancel.clone(),
            reports: self.reports.clone(),
            next_id: self.next_id,
        }
    }

    /// Continues from `state`, saved at a checkpoint by [`FlexWorker::state`].
    fn restore(&mut self, state: FlexWorkerState) {
        self.params = state.params;
        self.avg_iter_s = state.avg_iter_s;
        self.last_compute_s = state.last_compute_s;
        self.last_cancel = state.last_cancel;
        self.reports = state.reports;
        self.next_id = state.next_id;
    }

    /// Whether the model computes real values (not throughput mode).
    fn real(&self) -> bool {
        self.job.model.is_real()
    }

    /// The strategy's options.
    fn opts(&self) -> &FlexrrOptions {
        &self.r.options
    }

    /// Sends a FlexRR message, counting its bytes (as reassignment traffic when it goes to a
    /// peer).
    fn send_rr(&mut self, ctx: &RoleContext, to: RoleId, msg: &RrMsg) -> Result<()> {
        let m = msg.encode()?;
        let bytes = m.wire_bytes();
        self.bytes_sent += bytes;
        if matches!(to, RoleId::Worker(_)) {
            self.count_rr(bytes);
        }
        ctx.send(to, m);
        Ok(())
    }

    /// Counts one message of reassignment traffic.
    fn count_rr(&mut self, bytes: u64) {
        self.stats.rr_messages += 1;
        self.stats.rr_bytes += bytes;
    }

    /// Undelayed seconds of one unit on this worker's device.
    fn unit_work(&self) -> Work {
        Work::training_step(
            self.job.model.training_flops_per_sample(),
            self.r.unit_batch as f64,
        )
    }

    /// Undelayed seconds of this worker's whole iteration (the injector's T0).
    fn nominal_iter_s(&self, ctx: &RoleContext) -> f64 {
        ctx.nominal_seconds(self.unit_work()) * f64::from(self.it.units)
    }

    /// Progress through the current clock in the thesis's sense: own units processed plus units
    /// given away and accepted, as a fraction.
    fn frac_done(&self) -> f64 {
        f64::from(self.it.processed + self.it.accepted) / f64::from(self.it.units.max(1))
    }
}

#[async_trait]
impl Worker for FlexWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        let clocks = self.job.clocks();
        let mut records = Vec::with_capacity((clocks.end - clocks.start) as usize);
        for clock in clocks.clone() {
            let record = self.run_clock(ctx, clock).await?;
            records.push(record);
        }
        // Done: keep serving peers until everyone is.
        self.clock = clocks.end;
        self.it.own_done = true;
        self.send_rr(ctx, RoleId::Coordinator, &RrMsg::Finished)?;
        while !self.released {
            self.wait_one(ctx).await?;
        }
        let stats = std::mem::take(&mut self.stats);
        self.send_rr(ctx, RoleId::Coordinator, &RrMsg::Stats(stats))?;
        ctx.send(RoleId::Coordinator, Message::WorkerDone);
        Ok(WorkerReport {
            state: Some(RoleState::encode(&self.state())?),
            iterations: records,
            model: None,
        })
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
