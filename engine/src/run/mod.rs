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
mod finish;
mod launch;
mod parts;

pub use parts::FinalModel;

use crate::config::RunConfig;
use crate::contract::Assembly;
use crate::contract::CoordinatorReport;
use crate::contract::ReadRecord;
use crate::error::Result;
use crate::ids::RoleId;
use crate::job::ProgressFn;
use crate::metrics::{IterRecord, IterationRow, Summary, TimedEvaluation, TraceEvent};
use crate::transport::LinkTraffic;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How to run, beyond the config.
#[derive(Default, Clone)]
pub struct RunOptions {
    /// Called as workers finish clocks.
    pub progress: Option<ProgressFn>,
    /// Where each role streams its timeline while the run goes (`<dir>/<role>.json`); `None`
    /// keeps the timelines in memory, in [`RunResult::traces`].
    pub trace_dir: Option<PathBuf>,
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
    /// Every read the model's holders answered.
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
}

/// Runs `config` with the parts in `asm` to completion.
pub fn run(config: &RunConfig, asm: &Assembly, options: RunOptions) -> Result<RunResult> {
    config.validate()?;
    let wall_start = std::time::Instant::now();
    let built = build::build(config, asm, options.progress)?;
    let job = built.job.clone();
    let launched = launch::launch(built, options.trace_dir.as_deref())?;
    finish::finish(asm, &job, launched, wall_start)
}
