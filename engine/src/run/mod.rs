//! Running a job: [`run`] builds it, launches every role on the chosen runtime, collects what
//! they return, evaluates the model offline and summarises, and hands all of it back as a
//! [`RunResult`]. The caller decides where it goes: [`crate::output::write_run_folder`] writes
//! the run folder from it.
//!
//! The stages, one module each:
//! - `build`: the job (model, data, cluster, parameter layout) and its roles;
//! - `launch`: the runtime, mailboxes and contexts, one task per role, shutdown, role outputs;
//! - `parts`: the model as the union of its holders' parts ([`FinalModel`]);
//! - `evaluate`: offline evaluation per iteration, at fixed run times, and at the end;
//! - `finish`: metrics rows, evaluation and summary into the [`RunResult`].

mod build;
mod evaluate;
mod failure;
mod finish;
mod launch;
mod members;
mod parts;
mod process;

pub use parts::FinalModel;
pub use process::{process_cluster, run_process, RankOutcome, TOKEN_VAR};

use crate::checkpoint::{self, Resumable};
use crate::config::RunConfig;
use crate::contract::Assembly;
use crate::contract::CoordinatorReport;
use crate::contract::ReadRecord;
use crate::error::{EngineError, Result};
use crate::guard::StopReason;
use crate::ids::RoleId;
use crate::job::Segment;
use crate::job::{Job, ProgressFn};
use crate::metrics::{IterRecord, IterationRow, Summary, TimedEvaluation, TraceEvent};
use crate::output::FolderGate;
use crate::resume::ResumePoint;
use crate::transport::LinkTraffic;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to run, beyond the config.
#[derive(Default, Clone)]
pub struct RunOptions {
    /// Called as workers finish clocks.
    pub progress: Option<ProgressFn>,
    /// Continue from this checkpoint (read with [`crate::checkpoint::read`]) instead of starting
    /// afresh: the run picks up at its clock and runs to the config's `iterations`.
    pub resume: Option<Arc<ResumePoint>>,
    /// Where the checkpoints written every `checkpoint_every` iterations go (the run folder);
    /// none: mid-run checkpoints are still cut, but not written.
    pub checkpoint_dir: Option<PathBuf>,
    /// Where each role streams its timeline while the run goes (`<dir>/<role>.json`); `None`
    /// keeps the timelines in memory, in [`RunResult::traces`].
    pub trace_dir: Option<PathBuf>,
    /// Keep every read the parameter servers answer, in [`RunResult::reads`]: what a check of a
    /// consistency rule (the SSP staleness bound, FlexRR's freshness) reads. Off by default, since
    /// nothing else uses them and they grow with workers × servers × clocks: a thousand workers
    /// on 128 servers answer 13 M reads in 100 clocks, about 500 MB.
    pub record_reads: bool,
    /// The door of the run folder (`trace_dir`, `checkpoint_dir`): the run starts and completes
    /// its files there through it, and writes nothing more once it is shut. A caller that cleans
    /// up the folder while the run goes (on Ctrl-C) shuts it first.
    pub folder_gate: FolderGate,
}

/// Everything a finished run produced: what the run folder holds and more.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The summary.
    pub summary: Summary,
    /// One row per iteration.
    pub rows: Vec<IterationRow>,
    /// Final parameters by name (real models).
    pub params: Option<Vec<(String, Vec<f32>)>>,
    /// Every read the model's holders answered (in a run resumed from a checkpoint: since it),
    /// when [`RunOptions::record_reads`] asks for them; empty otherwise.
    pub reads: Vec<ReadRecord>,
    /// Per-worker clock records.
    pub worker_records: Vec<Vec<IterRecord>>,
    /// The model evaluated every `eval_every_s` seconds of run time (empty without it).
    pub evaluations: Vec<TimedEvaluation>,
    /// What the coordinator gathered.
    pub coordinator: CoordinatorReport,
    /// Traffic per directed role pair.
    pub traffic: BTreeMap<(RoleId, RoleId), LinkTraffic>,
    /// The configuration the run ran, fully resolved.
    pub config: RunConfig,
    /// Each role's timeline kept in memory: workers, then servers, then the coordinator (none
    /// with `trace = "off"` or streamed to [`RunOptions::trace_dir`]; `sampled`: the sampled
    /// roles only).
    pub traces: Vec<(RoleId, Vec<TraceEvent>)>,
    /// The final model (the union of its holders' parts) with its optimizer state: what the
    /// checkpoint holds.
    pub model: FinalModel,
    /// Where the run stopped, to continue from (when its strategies can resume).
    pub resume: Option<ResumePoint>,
}

/// The job a run of `config` composed as `asm` would build, without running it: the resolved
/// model and data, the placed cluster, the initial parameters and the sample stream. For tools
/// that plan a run (a pipeline planner's profile) and for tests that reproduce a run's math
/// outside its roles.
pub fn prepare(config: &RunConfig, asm: &Assembly) -> Result<Job> {
    build::job(config, asm, None, false)
}

/// Runs `config` with the parts in `asm` to completion: from the start, or from
/// `options.resume`; cutting a checkpoint every `checkpoint_every` iterations.
pub fn run(config: &RunConfig, asm: &Assembly, options: RunOptions) -> Result<RunResult> {
    config.validate()?;
    if config.runtime == crate::config::RuntimeKind::Process {
        return Err(EngineError::config(
            "runtime",
            "\"process\"",
            "a process job runs one process per machine, each through `run_process` with its \
             place in the job (`concord launch --nproc N train ...`, torchrun, srun or mpirun)",
        ));
    }
    if config.checkpoint_every.is_some() || options.resume.is_some() {
        asm.resumable()?;
    }
    let wall_start = std::time::Instant::now();
    let job = Arc::new(build::job(
        config,
        asm,
        options.progress.clone(),
        options.record_reads,
    )?);
    let mut from = options.resume.clone();
    if let Some(point) = &from {
        fits(point, config)?;
    }
    let mut stretches = Stretches::default();
    loop {
        let start = from.as_ref().map_or(0, |p| p.clock);
        let end = segment_end(config, start);
        job.set_segment(Segment {
            clocks: start..end,
            from: from.clone(),
        });
        let built = build::roles(&job, asm, |_| true)?;
        let launched = launch::launch(built, options.trace_dir.as_deref(), &options.folder_gate);
        if let Some(reason) = job.guard.stop_reason() {
            let resumed = options.resume.as_deref();
            let stopped = finish::stopped(asm, &job, reason, resumed, wall_start);
            return Err(EngineError::Stopped(Box::new(stopped)));
        }
        let result = finish::finish(asm, &job, launched?, from.as_deref(), wall_start)?;
        match stretches.close(result, end >= config.iterations, &options)? {
            ControlFlow::Break(result) => return Ok(result),
            ControlFlow::Continue(point) => from = Some(point),
        }
    }
}

/// What the stretches of a run cut by checkpoints gather before its last: each role's timeline
/// and the reads (the rest of a stretch's result is carried by its checkpoint's history).
#[derive(Default)]
struct Stretches {
    traces: BTreeMap<RoleId, Vec<TraceEvent>>,
    reads: Vec<ReadRecord>,
}

impl Stretches {
    /// Takes the timelines and reads of a stretch's `result`.
    fn keep(&mut self, result: &mut RunResult) {
        for (role, events) in std::mem::take(&mut result.traces) {
            self.traces.entry(role).or_default().extend(events);
        }
        // Moved, not copied: at a thousand workers they are the largest thing a run returns.
        if self.reads.is_empty() {
            self.reads = std::mem::take(&mut result.reads);
        } else {
            self.reads.append(&mut result.reads);
        }
    }

    /// Completes the last stretch's `result` with what the earlier ones gathered.
    fn complete(&mut self, result: &mut RunResult) {
        self.keep(result);
        result.traces = ordered(std::mem::take(&mut self.traces));
        result.reads = std::mem::take(&mut self.reads);
    }

    /// Closes a stretch that ended with `result`: the run's result when it was the `last`,
    /// otherwise the cut the next stretch starts from, its checkpoint written to
    /// `options.checkpoint_dir`.
    fn close(
        &mut self,
        mut result: RunResult,
        last: bool,
        options: &RunOptions,
    ) -> Result<ControlFlow<RunResult, Arc<ResumePoint>>> {
        if last {
            self.complete(&mut result);
            return Ok(ControlFlow::Break(result));
        }
        self.keep(&mut result);
        let point = result.resume.take().ok_or_else(|| {
            EngineError::Composition("a checkpoint was due but the run cannot cut one".into())
        })?;
        if let Some(dir) = &options.checkpoint_dir {
            let path = dir.join(checkpoint::FILE_NAME);
            options
                .folder_gate
                .write(&path, || write_checkpoint(&path, &result, &point))?;
        }
        Ok(ControlFlow::Continue(Arc::new(point)))
    }
}

/// Where the stretch of clocks that starts at `start` ends: at the next checkpoint, or at the end
/// of the run.
fn segment_end(config: &RunConfig, start: u64) -> u64 {
    match config.checkpoint_every {
        Some(k) => ((start / k + 1) * k).min(config.iterations),
        None => config.iterations,
    }
}

/// Writes the checkpoint at `point` to `path`, with the model of `result`.
fn write_checkpoint(path: &Path, result: &RunResult, point: &ResumePoint) -> Result<()> {
    let config = toml::to_string_pretty(&result.config)
        .map_err(|e| EngineError::config("(resolved config)", "", e.to_string()))?;
    let model = result.params.is_some().then_some(&result.model);
    let resume = Resumable {
        point,
        config: &config,
        strategies: &result.summary.strategies,
    };
    checkpoint::write(path, model, Some(resume))
}

/// Checks that `point` can continue under `config`: clocks left to run, and the same roles.
fn fits(point: &ResumePoint, config: &RunConfig) -> Result<()> {
    let bad = |key: &str, value: u64, reason: String| Err(EngineError::config(key, value, reason));
    if point.clock >= config.iterations {
        return bad(
            "iterations",
            config.iterations,
            format!(
                "the checkpoint is at iteration {}: nothing is left to run (raise `iterations` to \
                 continue training)",
                point.clock
            ),
        );
    }
    let workers = point.history.worker_records.len() as u64;
    if workers != u64::from(config.workers) {
        return bad(
            "workers",
            u64::from(config.workers),
            format!("the checkpoint was cut with {workers} workers"),
        );
    }
    Ok(())
}

/// Traces by role in the run's order: workers, then servers, then the coordinator.
fn ordered(traces: BTreeMap<RoleId, Vec<TraceEvent>>) -> Vec<(RoleId, Vec<TraceEvent>)> {
    let rank = |r: &RoleId| match r {
        RoleId::Worker(i) => (0, *i),
        RoleId::Server(i) => (1, *i),
        RoleId::Coordinator => (2, 0),
    };
    let mut v: Vec<_> = traces.into_iter().collect();
    v.sort_by_key(|(r, _)| rank(r));
    v
}

/// A run its divergence guard stopped: why, and what it did until then (the rows of the clocks
/// every worker completed, a summary of them with `stopped` set; no model or evaluation).
/// [`crate::output::write_run_folder`] writes its `result` like a completed run's.
#[derive(Clone)]
pub struct StoppedRun {
    /// Why it stopped.
    pub reason: StopReason,
    /// What it did until then.
    pub result: RunResult,
}

impl fmt::Display for StoppedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; stopped after {} complete iterations",
            self.reason,
            self.result.rows.len()
        )
    }
}

impl fmt::Debug for StoppedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoppedRun")
            .field("reason", &self.reason)
            .field("rows", &self.result.rows.len())
            .finish_non_exhaustive()
    }
}
