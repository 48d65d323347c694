//! The elastic data-parallel worker (§6.5): pushes every block to its current owner, collects the
//! updated blocks, times its exchange with each server, and switches assignments at the step the
//! scheduler names.
//!
//! Telemetry: one sample per server and iteration, `s` = the bytes of this worker's blocks on
//! that server (its load, the size Algorithms 1 and 2 evaluate `Pred` at), `t` = the time the
//! server spent on them. Each block counts from when its push starts leaving this worker's NIC,
//! or when the server finished this worker's previous block if that is later, to when the server
//! has aggregated it (its answer says when): the transfer, the other workers' blocks interleaved
//! at the server and the server's service — what the server's speed and load decide. This
//! worker's own send queue and the wait behind its own earlier pushes are excluded (the §5.4
//! pitfall), and so is the wait for other workers before a block's update (§1.4). Per-iteration
//! samples carry the server's fluctuation from one iteration to the next into the fit's
//! standard error.

use crate::options::Resolved;
use crate::protocol::{self, tag, PerfReport, Progress, PushAck, ReassignCmd, ReassignReq, Resume};
use crate::telemetry::{OlsStats, PeriodReport};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per-server timing of one iteration.
#[derive(Clone, Copy)]
struct Exchange {
    bytes: u64,
    last_push_arrival: f64,
    first_served: f64,
    last_received: f64,
}

/// What a worker carries across a checkpoint: the assignment it pushes by, and the telemetry of
/// the period under way. (Its parameters are the servers': every block comes back each clock.)
#[derive(serde::Serialize, serde::Deserialize)]
struct WorkerState {
    owners: Vec<ServerId>,
    epoch: u64,
    period: BTreeMap<ServerId, OlsStats>,
    period_start: f64,
    cmd: Option<ReassignCmd>,
}

/// The elastic-ps worker role.
pub struct ElasticWorker {
    id: WorkerId,
    job: Arc<Job>,
    opts: Resolved,
    replica: Option<Replica>,
    owners: Vec<ServerId>,
    epoch: u64,
    /// Where a resumed run's worker continues from (`None` for a fresh run).
    resumed: Option<WorkerState>,
}

impl ElasticWorker {
    /// Worker `id` of `job`, starting on the job's initial assignment.
    pub fn new(job: Arc<Job>, id: WorkerId, opts: Resolved) -> Result<ElasticWorker> {
        let owners = (0..job.layout.blocks().len() as u32)
            .map(|b| job.layout.owner(b))
            .collect();
        let resumed = match job.resumed(RoleId::Worker(id)) {
            Some(cp) => {
                Some(cp.decode_state::<WorkerState>(RoleId::Worker(id), "PSLD worker state")?)
            }
            None => None,
        };
        let mut worker = ElasticWorker {
            id,
            replica: job.replica(RoleId::Worker(id))?,
            job,
            opts,
            owners,
            epoch: 0,
            resumed: None,
        };
        if let Some(st) = resumed {
            if st.owners.len() != worker.owners.len() {
                return Err(EngineError::protocol(
                    RoleId::Worker(id),
                    format!(
                        "its checkpoint assigns {} blocks, the layout has {}",
                        st.owners.len(),
                        worker.owners.len()
                    ),
                ));
            }
            worker.owners = st.owners.clone();
            worker.epoch = st.epoch;
            worker.resumed = Some(st);
        }
        Ok(worker)
    }

    /// The model at the checkpoint a resumed run continues from: every server's blocks.
    fn params_at_checkpoint(&self) -> Vec<Vec<f32>> {
        let job = &self.job;
        let mut params = job.init.clone().unwrap_or_default();
        if params.is_empty() {
            return params;
        }
        for s in 0..job.cluster.server_machine.len() as ServerId {
            if let Some(model) = job.resumed(RoleId::Server(s)).and_then(|c| c.model) {
                job.layout.write_into(&model.blocks, &mut params);
            }
        }
        params
    }

    /// Takes any reassignment command that has arrived, without waiting.
    fn poll_command(&self, ctx: &mut RoleContext, cmd: &mut Option<ReassignCmd>) -> Result<()> {
        while let Some(env) = ctx.try_recv_matching(
            |e| matches!(&e.msg, Message::Custom(CustomMessage { tag: t, .. }) if t == tag::REASSIGN_CMD),
        ) {
            if let Message::Custom(CustomMessage { tag: t, body, .. }) = env.msg {
                *cmd = Some(protocol::decode(ctx.id(), &t, &body)?);
            }
        }
        Ok(())
    }

    /// At the agreed step: block, ask for the new map, install it.
    async fn switch(
        &mut self,
        ctx: &mut RoleContext,
        cmd: ReassignCmd,
        completed: Clock,
    ) -> Result<()> {
        let t0 = ctx.now();
        let req = ReassignReq {
            epoch: cmd.epoch,
            completed,
        };
        ctx.send(
            RoleId::Coordinator,
            protocol::encode(tag::REASSIGN_REQ, &req)?,
        );
        let env = ctx
            .recv_matching(|e| matches!(&e.msg, Message::Custom(CustomMessage { tag: t, .. }) if t == tag::RESUME))
            .await?;
        let Message::Custom(CustomMessage { tag: t, body, .. }) = env.msg else {
            return Err(EngineError::protocol(ctx.id(), "expected RESUME"));
        };
        let resume: Resume = protocol::decode(ctx.id(), &t, &body)?;
        if resume.epoch != cmd.epoch || resume.owners.len() != self.owners.len() {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "RESUME for epoch {} with {} owners, expected epoch {} with {}",
                    resume.epoch,
                    resume.owners.len(),
                    cmd.epoch,
                    self.owners.len()
                ),
            ));
        }
        self.owners = resume.owners;
        self.epoch = resume.epoch;
        ctx.trace_span("suspended", "wait", t0, ctx.now());
        Ok(())
    }
}

#[async_trait]
impl Worker for ElasticWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        let layout = &job.layout;
        let blocks = layout.blocks();
        let batch = job.config.batch;
        let n = job.config.workers as u64;
        let flops_per_sample = job.model.training_flops_per_sample();
        let clocks = job.clocks();
        let mut records = Vec::with_capacity((clocks.end - clocks.start) as usize);
        let (mut params, mut period, mut period_start, mut cmd) = match self.resumed.take() {
            Some(st) => (
                self.params_at_checkpoint(),
                st.period,
                st.period_start,
                st.cmd,
            ),
            None => (
                job.init.clone().unwrap_or_default(),
                BTreeMap::new(),
                ctx.now(),
                None,
            ),
        };
        for clock in clocks {
            ctx.set_iter(clock);
            let start = ctx.now();
            let work = Work::training_step(flops_per_sample, batch as f64);
            let at = StepAt {
                clock,
                stream_offset: clock * n * batch + self.id as u64 * batch,
                batch,
            };
            let replica = self.replica.as_ref();
            let ((loss, grads), _) = train_step(
                ctx,
                &job,
                replica,
                ParamSource::Host(&params),
                at,
                work,
                Charge::Whole,
            )
            .await?;
            let compute_end = ctx.now();
            // Push every block to its owner, in block order (one request per block, as PS-Lite).
            let mut exchange: BTreeMap<ServerId, Exchange> = BTreeMap::new();
            let mut bytes_sent = 0;
            let mut left_nic = vec![0.0; blocks.len()];
            for b in blocks {
                let owner = self.owners[b.id as usize];
                let Some(payload) = layout.block_payload(b.id, grads.as_deref()) else {
                    continue;
                };
                let msg = Message::Push {
                    clock,
                    samples: batch,
                    completes_clock: true,
                    grads: vec![payload],
                };
                bytes_sent += msg.wire_bytes();
                let departure = ctx.send_timed(RoleId::Server(owner), msg);
                let arrival = departure.arrival;
                left_nic[b.id as usize] = departure.start;
                let e = exchange.entry(owner).or_insert(Exchange {
                    bytes: 0,
                    last_push_arrival: arrival,
                    first_served: f64::INFINITY,
                    last_received: compute_end,
                });
                e.bytes += b.bytes();
                e.last_push_arrival = e.last_push_arrival.max(arrival);
            }
            // Collect every push's answer (the telemetry sample) and every updated block (a
            // push is also the pull).
            let mut processed: BTreeMap<ServerId, f64> = BTreeMap::new();
            let mut spent: BTreeMap<ServerId, (f64, f64)> = BTreeMap::new();
            for _ in 0..2 * blocks.len() {
                let env = ctx
                    .recv_matching(|e| match &e.msg {
                        Message::Params { .. } => true,
                        Message::Custom(CustomMessage { tag: t, .. }) => t == tag::PUSH_ACK,
                        _ => false,
                    })
                    .await?;
                let RoleId::Server(from) = env.from else {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        "parameters from a non-server",
                    ));
                };
                if let Message::Custom(CustomMessage { tag: t, body, .. }) = &env.msg {
                    let ack: PushAck = protocol::decode(ctx.id(), t, body)?;
                    let (Some(b), Some(&left)) = (
                        blocks.get(ack.block as usize),
                        left_nic.get(ack.block as usize),
                    ) else {
                        return Err(EngineError::protocol(
                            ctx.id(),
                            format!("server {from} acknowledged unknown block {}", ack.block),
                        ));
                    };
                    if ack.clock != clock {
                        return Err(EngineError::protocol(
                            ctx.id(),
                            format!(
                                "server {from} acknowledged clock {} during clock {clock}",
                                ack.clock
                            ),
                        ));
                    }
                    // Not before the server finished this worker's previous block: waiting
                    // behind one's own earlier pushes is not the server's doing (§5.4).
                    let ready = processed.get(&from).map_or(left, |&p| p.max(left));
                    processed.insert(from, ack.processed_at);
                    let e = spent.entry(from).or_default();
                    e.0 += b.bytes() as f64;
                    e.1 += (ack.processed_at - ready).max(0.0);
                    continue;
                }
                if let Message::Params {
                    version,
                    served_at,
                    blocks: got,
                } = env.msg
                {
                    if version != clock as i64 {
                        return Err(EngineError::protocol(
                            ctx.id(),
                            format!("server {from} answered clock {clock} with version {version}"),
                        ));
                    }
                    if job.model.is_real() {
                        layout.write_into(&got, &mut params);
                    }
                    let now = ctx.now();
                    let e = exchange.get_mut(&from).ok_or_else(|| {
                        EngineError::protocol(
                            ctx.id(),
                            format!("unrequested blocks from server {from}"),
                        )
                    })?;
                    e.first_served = e.first_served.min(served_at);
                    e.last_received = e.last_received.max(now);
                }
            }
            // One sample per server and iteration: its load, and the time it spent on it.
            for (server, (bytes, secs)) in spent {
                period.entry(server).or_default().add(bytes, secs);
            }
            let end = ctx.now();
            let last_push = exchange
                .values()
                .map(|e| e.last_push_arrival)
                .fold(compute_end, f64::max);
            let first_served = exchange
                .values()
                .map(|e| e.first_served)
                .fold(f64::INFINITY, f64::min);
            let wait_s = (first_served - last_push).max(0.0);
            let tally = ClockTally {
                samples: batch,
                compute_s: compute_end - start,
                wait_s,
                comm_s: (end - compute_end - wait_s).max(0.0),
                loss,
                version_read: clock as i64 - 1,
                bytes_sent,
            };
            records.push(close_clock(ctx, &job, clock, start, tally));
            if (clock + 1).is_multiple_of(self.opts.report_every) {
                let iters = self.opts.report_every as f64;
                let report = PerfReport {
                    period: (clock + 1) / self.opts.report_every - 1,
                    completed: clock,
                    iteration_s: (ctx.now() - period_start) / iters,
                    samples: PeriodReport {
                        worker: self.id,
                        per_server: std::mem::take(&mut period),
                    },
                    sent_at: ctx.now(),
                };
                ctx.send(
                    RoleId::Coordinator,
                    protocol::encode(tag::PERF_REPORT, &report)?,
                );
                period_start = ctx.now();
            }
            let progress = Progress {
                completed: clock,
                sent_at: ctx.now(),
            };
            ctx.send(
                RoleId::Coordinator,
                protocol::encode(tag::PROGRESS, &progress)?,
            );
            self.poll_command(ctx, &mut cmd)?;
            if let Some(c) = cmd.take() {
                match clock.cmp(&c.switch_after) {
                    std::cmp::Ordering::Equal => self.switch(ctx, c, clock).await?,
                    std::cmp::Ordering::Less => cmd = Some(c),
                    std::cmp::Ordering::Greater => {
                        return Err(EngineError::protocol(
                            ctx.id(),
                            format!(
                                "reassignment epoch {} asks to switch after iteration {}, but this worker already finished iteration {clock}",
                                c.epoch, c.switch_after
                            ),
                        ))
                    }
                }
            }
        }
        ctx.send(RoleId::Coordinator, Message::WorkerDone);
        let state = WorkerState {
            owners: self.owners.clone(),
            epoch: self.epoch,
            period,
            period_start,
            cmd,
        };
        Ok(WorkerReport {
            state: Some(RoleState::encode(&state)?),
            iterations: records,
            model: None,
        })
    }
}
