//! The engine's default worker: data-parallel training against the parameter servers.
//!
//! Per clock: read every server's blocks at the version the consistency rule requires, take one
//! step on this worker's share of the global batch, push the gradients to the blocks' servers,
//! report to the coordinator. Under BSP this is synchronous data parallelism; under SSP/ASP the
//! same loop runs ahead as far as the rule allows.

use crate::context::{IterSpan, RoleContext, Work};
use crate::contract::{Worker, WorkerReport};
use crate::error::{EngineError, Result};
use crate::ids::{RoleId, WorkerId};
use crate::job::Job;
use crate::memory::{MemEvent, TensorClass};
use crate::message::{Directive, Message, Report};
use crate::metrics::IterRecord;
use crate::model::{Replica, StepOutput};
use async_trait::async_trait;
use candle_core::Tensor;
use concord_workloads::WorkloadError;
use std::sync::Arc;

/// A step's mean loss and gradients (`NaN` and `None` in throughput mode).
pub type StepResult = (f64, Option<Vec<Vec<f32>>>);

/// Where a step's samples come from: the clock and the slice of the run's sample stream.
#[derive(Clone, Copy, Debug)]
pub struct StepAt {
    /// The clock the step belongs to (named in a divergence error).
    pub clock: u64,
    /// First sample of the slice in the run's global stream.
    pub stream_offset: u64,
    /// Number of samples.
    pub batch: u64,
}

/// Where a step reads the parameters it runs at.
#[derive(Clone, Copy, Debug)]
pub enum ParamSource<'a> {
    /// These host values (per tensor, layout order), loaded into the replica for the step: what
    /// a worker read from parameter servers, or holds on the host.
    Host(&'a [Vec<f32>]),
    /// The replica's own tensors as they are: parameters kept on its device between steps
    /// ([`LocalModel::keep_on`](crate::collective::LocalModel::keep_on)).
    Resident,
}

/// How a training step's compute is charged on the role's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Charge {
    /// The whole iteration's step, waited for ([`RoleContext::compute`]).
    Whole,
    /// The slice `span` of the iteration, waited for ([`RoleContext::compute_span`]): for workers
    /// that run their iteration in many small units.
    Span(IterSpan),
    /// Not waited for: the result counts as ready at the returned time, so the role can keep
    /// communicating meanwhile (a compute thread beside a communication thread, RNA §5.1.3;
    /// [`RoleContext::compute_deferred`]).
    Deferred,
}

/// One training step of a worker, charged as `work` in the `charge` mode: on a real model, the
/// mean loss and the gradients of `batch` samples of the run's stream at the parameters `params`
/// gives (an error if the loss is not finite); in throughput mode, the charge alone (`NaN`, no
/// gradients). Returns the step's result and the run time at which it is ready (now, unless
/// deferred).
///
/// Every data-parallel worker of the engine and of strategies takes its steps this way, so they
/// draw the same samples; the step's activations are reported to the role's memory policy.
pub async fn train_step(
    ctx: &mut RoleContext,
    job: &Job,
    replica: Option<&Replica>,
    params: ParamSource<'_>,
    at: StepAt,
    work: Work,
    charge: Charge,
) -> Result<(StepResult, f64)> {
    run_step::<HostGrads>(ctx, job, replica, params, at, work, charge).await
}

/// A step's mean loss and gradients left where its backward pass computed them, each a tensor
/// shaped like its parameter on the replica's device (`NaN` and `None` in throughput mode).
pub type DeviceStepResult = (f64, Option<Vec<Tensor>>);

/// [`train_step`] with the gradients left on the replica's device
/// ([`Replica::step_on_device`]): for a worker that sums or applies them there (NCCL), so they
/// cross to the host only if it sends them. The same samples, charge and values as `train_step`.
pub async fn train_step_on_device(
    ctx: &mut RoleContext,
    job: &Job,
    replica: Option<&Replica>,
    params: ParamSource<'_>,
    at: StepAt,
    work: Work,
    charge: Charge,
) -> Result<(DeviceStepResult, f64)> {
    run_step::<DeviceGrads>(ctx, job, replica, params, at, work, charge).await
}

/// Where a step's gradients are wanted: the form a [`train_step`] variant returns.
trait GradForm {
    /// One parameter's gradient.
    type Grad: Send;

    /// The replica's step on samples `x` labelled `y`, under the memory policy's `plan` if it
    /// gave one for a graph network.
    fn step(
        replica: &Replica,
        x: Vec<f32>,
        y: &[u32],
        plan: Option<&crate::graph::MovePlan>,
    ) -> std::result::Result<StepOutput<Self::Grad>, WorkloadError>;
}

/// Gradients as host vectors ([`train_step`]).
struct HostGrads;

impl GradForm for HostGrads {
    type Grad = Vec<f32>;

    fn step(
        replica: &Replica,
        x: Vec<f32>,
        y: &[u32],
        plan: Option<&crate::graph::MovePlan>,
    ) -> std::result::Result<StepOutput, WorkloadError> {
        match (plan, replica.graph_net()) {
            (Some(plan), Some(_)) => replica.step_with_plan(x, y, plan),
            _ => replica.step(x, y),
        }
    }
}

/// Gradients as tensors where the step left them ([`train_step_on_device`]).
struct DeviceGrads;

impl GradForm for DeviceGrads {
    type Grad = Tensor;

    fn step(
        replica: &Replica,
        x: Vec<f32>,
        y: &[u32],
        plan: Option<&crate::graph::MovePlan>,
    ) -> std::result::Result<StepOutput<Tensor>, WorkloadError> {
        match (plan, replica.graph_net()) {
            (Some(plan), Some(_)) => replica.step_with_plan(x, y, plan)?.into_cpu_tensors(),
            _ => replica.step_on_device(x, y),
        }
    }
}

/// The body of [`train_step`] and [`train_step_on_device`], for gradients of the form `F`.
async fn run_step<F: GradForm>(
    ctx: &mut RoleContext,
    job: &Job,
    replica: Option<&Replica>,
    params: ParamSource<'_>,
    at: StepAt,
    work: Work,
    charge: Charge,
) -> Result<((f64, Option<Vec<F::Grad>>), f64)> {
    let plan = activations(ctx, job, at.batch).await?;
    // The step's math, run inside the charge (timed there in `wall`); none in throughput mode.
    // Under a layer-granular memory policy a graph network follows the policy's moves.
    let batch = match (replica, &job.data) {
        (Some(replica), Some(data)) => Some((replica, batch_of(job, data, replica, params, at)?)),
        _ => None,
    };
    // Host values were copied into the replica's tensors before the step: charged at the
    // machine's tensor copy rate (the step's own cost, as `calibrate --host` measures it, starts
    // from parameters already in place, as a worker keeping them there takes it).
    if let (Some(_), ParamSource::Host(values)) = (&batch, params) {
        let bytes = values.iter().map(|v| 4 * v.len() as u64).sum();
        let load = ctx.device().tensor_copy_seconds(bytes);
        if load > 0.0 {
            let t = ctx.now();
            ctx.charge_modeled(load).await;
            ctx.trace_span("load", "compute", t, ctx.now());
        }
    }
    let step = move || batch.map(|(replica, (x, y))| F::step(replica, x, &y, plan.as_ref()));
    let (out, ready_at) = match charge {
        Charge::Whole => {
            let out = ctx.compute("step", work, step).await;
            (out, ctx.now())
        }
        Charge::Span(span) => {
            let out = ctx.compute_span("step", work, span, step).await;
            (out, ctx.now())
        }
        Charge::Deferred => ctx.compute_deferred("step", work, step),
    };
    let result = match out {
        Some(out) => finite_step(ctx, job, at, out)?,
        None => (f64::NAN, None),
    };
    Ok((result, ready_at))
}

/// What a worker counted in one clock, beside when it started and ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockTally {
    /// Samples processed.
    pub samples: u64,
    /// Seconds computing.
    pub compute_s: f64,
    /// Seconds waiting for fresh-enough parameters.
    pub wait_s: f64,
    /// Seconds communicating, not overlapped with compute.
    pub comm_s: f64,
    /// Mean training loss (NaN in throughput mode).
    pub loss: f64,
    /// Lowest parameter version read.
    pub version_read: i64,
    /// Bytes sent.
    pub bytes_sent: u64,
}

/// Closes clock `clock` of the worker behind `ctx`, started at `start_s`: its record, ended now,
/// kept by the job's divergence guard (which checks its loss and may stop the run), and the
/// job's progress observer told that the worker has completed `clock + 1` clocks.
pub fn close_clock(
    ctx: &RoleContext,
    job: &Job,
    clock: u64,
    start_s: f64,
    tally: ClockTally,
) -> IterRecord {
    let record = IterRecord {
        clock,
        start_s,
        end_s: ctx.now(),
        wall_s: ctx.wall_now(),
        samples: tally.samples,
        compute_s: tally.compute_s,
        wait_s: tally.wait_s,
        comm_s: tally.comm_s,
        loss: tally.loss,
        version_read: tally.version_read,
        bytes_sent: tally.bytes_sent,
    };
    if let RoleId::Worker(w) = ctx.id() {
        job.guard.record(w, &record);
        job.observe(w, clock + 1);
    }
    record
}

/// Reports a step's activations to the memory policy: a layer-granular policy runs the model's
/// operator graph and returns its moves; otherwise every stage's activations are live from its
/// forward to its backward.
async fn activations(
    ctx: &mut RoleContext,
    job: &Job,
    batch: u64,
) -> Result<Option<crate::graph::MovePlan>> {
    if let Some(graph) = &job.op_graph {
        if let Some(plan) = ctx.memory_iteration(graph, batch).await? {
            return Ok(Some(plan));
        }
    }
    let stages = &job.stage_kept_bytes;
    for (stage, per_sample) in stages.iter().enumerate() {
        let bytes = per_sample * batch;
        ctx.memory_event(MemEvent::Forward { stage, bytes }).await?;
    }
    for (stage, per_sample) in stages.iter().enumerate().rev() {
        let bytes = per_sample * batch;
        ctx.memory_event(MemEvent::Backward { stage, bytes })
            .await?;
    }
    Ok(None)
}

/// Reports a worker's replica to its memory policy: the parameters and their gradients, resident
/// for the whole run. Every worker that holds the model calls it once before its first step.
pub async fn hold_replica(ctx: &mut RoleContext, job: &Job) -> Result<()> {
    let param_bytes = job.layout.param_bytes();
    for (class, what) in [
        (TensorClass::Params, "parameters"),
        (TensorClass::Grads, "gradients"),
    ] {
        let event = MemEvent::Allocate {
            class,
            bytes: param_bytes,
            what: what.into(),
        };
        ctx.memory_event(event).await?;
    }
    Ok(())
}

/// Reports the optimizer state a worker keeps beside its replica (allreduce, RNA: workers that
/// apply updates themselves), resident for the whole run.
pub async fn hold_optimizer_state(ctx: &mut RoleContext, job: &Job) -> Result<()> {
    let slots = job.config.optimizer.state_slots() as u64;
    let param_bytes = job.layout.param_bytes();
    let event = MemEvent::Allocate {
        class: TensorClass::OptimizerState,
        bytes: slots * param_bytes,
        what: "optimizer state".into(),
    };
    ctx.memory_event(event).await
}

/// The step's samples, with the replica set to `params`.
fn batch_of(
    job: &Job,
    data: &crate::data::Split,
    replica: &Replica,
    params: ParamSource<'_>,
    at: StepAt,
) -> Result<(Vec<f32>, Vec<u32>)> {
    let idx = job
        .stream
        .range(at.stream_offset as u128, at.batch as usize);
    if let ParamSource::Host(values) = params {
        replica.set_params(values)?;
    }
    Ok(data.train.gather(&idx))
}

/// A step's loss and gradients, or the divergence error naming the role and clock (the job's
/// guard stops the run).
fn finite_step<G>(
    ctx: &RoleContext,
    job: &Job,
    at: StepAt,
    out: std::result::Result<StepOutput<G>, WorkloadError>,
) -> Result<(f64, Option<Vec<G>>)> {
    let out = out?;
    check_loss(ctx, job, at.clock, out.loss)?;
    Ok((out.loss, Some(out.grads)))
}

/// Stops the run through the job's divergence guard when a loss `ctx`'s role computed at
/// `clock` is not finite: training cannot go on from it. Every role that computes a loss outside
/// [`train_step`] (a pipeline's output stage, a token's last level, a model of its own) passes
/// it here, so that the guard ends its run as it ends a data-parallel one, instead of the run
/// training on NaN to its last iteration.
///
/// # Errors
/// [`EngineError::Diverged`], naming the role, the clock and the loss.
pub fn check_loss(ctx: &RoleContext, job: &Job, clock: u64, loss: f64) -> Result<()> {
    if loss.is_finite() {
        return Ok(());
    }
    job.guard.non_finite(ctx.id(), clock, loss);
    Err(EngineError::Diverged {
        role: ctx.id(),
        clock,
        loss,
    })
}

/// How a parameter read that began at `start` and ended at `read_done` splits into a clock
/// record's `wait_s` and `comm_s`: the wait for a fresh-enough version, until the last server
/// served its part (`last_served`), then the transfer. Every worker that reads from servers
/// counts its read so, which makes `wait_share` compare across strategies.
pub fn read_wait_and_transfer(start: f64, last_served: f64, read_done: f64) -> (f64, f64) {
    let wait_s = (last_served - start).max(0.0);
    (wait_s, (read_done - start - wait_s).max(0.0))
}

/// The default data-parallel worker.
pub struct DataParallelWorker {
    id: WorkerId,
    job: Arc<Job>,
    replica: Option<Replica>,
}

impl DataParallelWorker {
    /// Builds worker `id` of `job`.
    pub fn new(job: Arc<Job>, id: WorkerId) -> Result<DataParallelWorker> {
        Ok(DataParallelWorker {
            id,
            replica: job.replica(RoleId::Worker(id))?,
            job,
        })
    }

    async fn directive(&mut self, ctx: &mut RoleContext, clock: u64) -> Result<Directive> {
        if !self.job.directed() {
            let b = self.job.config.batch;
            let n = self.job.config.workers as u64;
            return Ok(Directive {
                clock,
                batch: b,
                stream_offset: clock * n * b + self.id as u64 * b,
                global_batch: n * b,
            });
        }
        let env = ctx
            .recv_matching(|e| matches!(&e.msg, Message::Directive(d) if d.clock == clock))
            .await?;
        match env.msg {
            Message::Directive(d) => Ok(d),
            _ => Err(EngineError::protocol(ctx.id(), "expected a directive")),
        }
    }
}

#[async_trait]
impl Worker for DataParallelWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        let layout = &job.layout;
        let servers = layout.servers();
        hold_replica(ctx, &job).await?;
        let flops_per_sample = job.model.training_flops_per_sample();
        let mut params = if job.model.is_real() {
            layout.zeros()
        } else {
            Vec::new()
        };
        let clocks = job.clocks();
        let mut records = Vec::with_capacity((clocks.end - clocks.start) as usize);
        for clock in clocks {
            ctx.set_iter(clock);
            let start = ctx.now();
            // Read parameters at the version the consistency rule requires; the read is in flight
            // while the worker waits for its directive, so the two round trips overlap.
            let min_version = job.consistency.min_version(clock);
            for s in 0..servers {
                ctx.send(RoleId::Server(s), Message::Pull { clock, min_version });
            }
            let d = self.directive(ctx, clock).await?;
            let (mut version_read, mut last_served) = (i64::MAX, start);
            for _ in 0..servers {
                let env = ctx
                    .recv_matching(|e| matches!(e.msg, Message::Params { .. }))
                    .await?;
                if let Message::Params {
                    version,
                    served_at,
                    blocks,
                } = env.msg
                {
                    if job.model.is_real() {
                        layout.write_into(&blocks, &mut params);
                    }
                    version_read = version_read.min(version);
                    last_served = last_served.max(served_at);
                }
            }
            let read_done = ctx.now();
            let (wait_s, comm_s) = read_wait_and_transfer(start, last_served, read_done);
            ctx.trace_span("wait", "wait", start, last_served);
            ctx.trace_span("pull", "comm", last_served, read_done);

            let work = Work::training_step(flops_per_sample, d.batch as f64);
            let at = StepAt {
                clock,
                stream_offset: d.stream_offset,
                batch: d.batch,
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
            let mut bytes_sent = 0;
            for s in 0..servers {
                let msg = Message::Push {
                    clock,
                    samples: d.batch,
                    completes_clock: true,
                    grads: layout.slice_for(s, grads.as_deref()),
                };
                bytes_sent += msg.wire_bytes();
                ctx.send(RoleId::Server(s), msg);
            }
            let compute_s = compute_end - read_done;
            ctx.set_iter(clock + 1);
            let next_signals = ctx.resource_signals().map(|s| (s.cpu, s.mem));
            let report = Report {
                clock,
                samples: d.batch,
                compute_s,
                wait_s,
                comm_s,
                loss,
                speed: if compute_s > 0.0 {
                    d.batch as f64 / compute_s
                } else {
                    0.0
                },
                next_signals,
            };
            ctx.send(RoleId::Coordinator, Message::Report(report));
            let tally = ClockTally {
                samples: d.batch,
                compute_s,
                wait_s,
                comm_s,
                loss,
                version_read,
                bytes_sent,
            };
            records.push(close_clock(ctx, &job, clock, start, tally));
        }
        ctx.send(RoleId::Coordinator, Message::WorkerDone);
        // Stateless between clocks: the clock and the sample stream say where it is.
        Ok(WorkerReport {
            iterations: records,
            model: None,
            state: None,
        })
    }
}
