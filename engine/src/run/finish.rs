//! Finishing a run: from what the roles returned to the [`RunResult`] — the metrics rows, the
//! model as the union of its holders' parts, its offline evaluation, and the summary.

use super::evaluate::Evaluator;
use super::launch::Launched;
use super::parts::{self, FinalModel};
use super::{RunResult, StoppedRun};
use crate::contract::Assembly;
use crate::contract::{CoordinatorReport, ModelState, RoleCheckpoint, RoleState};
use crate::error::Result;
use crate::guard::StopReason;
use crate::ids::RoleId;
use crate::job::Job;
use crate::metrics::{self, IterRecord, IterationRow, Summary, TraceEvent};
use crate::resume::{History, ResumePoint};
use crate::transport::LinkTraffic;
use std::collections::BTreeMap;
use std::time::Instant;

/// Turns the roles' outputs into the run's result; `wall_start` is when the run began, `from` the
/// checkpoint the roles continued from (its history comes first in every figure).
pub(super) fn finish(
    asm: &Assembly,
    job: &Job,
    launched: Launched,
    from: Option<&ResumePoint>,
    wall_start: Instant,
) -> Result<RunResult> {
    let Launched {
        workers,
        servers,
        coordinator,
        traffic,
        network,
    } = launched;
    let history = from.map(|p| p.history.clone()).unwrap_or_default();
    // The cut at the end of these clocks, when the strategies can continue from one.
    let mut cut = asm.resumable().is_ok().then(BTreeMap::new);
    let mut traces: Vec<(RoleId, Vec<TraceEvent>)> = Vec::new();
    let mut worker_records = history.worker_records;
    worker_records.resize(job.config.workers as usize, Vec::new());
    let mut peak_memory = history.peak_memory;
    let mut capacity = history.capacity;
    capacity.resize(job.config.workers as usize, (0.0, 0.0));
    // What the workers had charged but not done when they stopped: a checkpoint keeps it in the
    // capacity (a resumed run finishes that work), the summary's ideal time leaves it out.
    let mut unfinished = vec![(0.0, 0.0); capacity.len()];
    let mut worker_parts = Vec::new();
    let mut role_figures = FigureMeans::default();
    for (w, out) in workers.into_iter().enumerate() {
        let report = out.result?;
        role_figures.add(out.stats.memory.iter().chain(&out.stats.figures));
        let peak = peak_memory.entry(out.role.label()).or_default();
        *peak = (*peak).max(out.peak_memory);
        capacity[w].0 += out.stats.flops;
        capacity[w].1 += out.stats.compute_s;
        unfinished[w] = (out.stats.unfinished.flops, out.stats.unfinished.compute_s);
        if let Some(cut) = cut.as_mut() {
            let checkpoint = role_checkpoint(
                out.end_s,
                report.model.as_ref(),
                report.state,
                out.stragglers,
            );
            cut.insert(out.role, checkpoint);
        }
        worker_parts.push((out.role, report.model));
        worker_records[w].extend(report.iterations);
        traces.extend(out.trace.map(|t| (out.role, t)));
    }
    let mut server_parts = Vec::new();
    // Sized once: at a thousand workers the reads are the largest thing a run hands back, and a
    // growing vector would hold up to twice them while it reallocates.
    let read_count: usize = servers
        .iter()
        .filter_map(|s| s.result.as_ref().ok())
        .map(|r| r.reads.len())
        .sum();
    let mut reads = Vec::with_capacity(read_count);
    for out in servers {
        let report = out.result?;
        role_figures.add(out.stats.memory.iter().chain(&out.stats.figures));
        let peak = peak_memory.entry(out.role.label()).or_default();
        *peak = (*peak).max(report.model.bytes());
        reads.extend(report.reads);
        if let Some(cut) = cut.as_mut() {
            let checkpoint =
                role_checkpoint(out.end_s, Some(&report.model), report.state, out.stragglers);
            cut.insert(out.role, checkpoint);
        }
        server_parts.push((out.role, report.model));
        traces.extend(out.trace.map(|t| (out.role, t)));
    }
    let holders = parts::holders(worker_parts, server_parts);
    let mut coordinator_report = coordinator.result?;
    if let Some(cut) = cut.as_mut() {
        let state = coordinator_report.state.take();
        let checkpoint = role_checkpoint(coordinator.end_s, None, state, coordinator.stragglers);
        cut.insert(coordinator.role, checkpoint);
    }
    traces.extend(coordinator.trace.map(|t| (coordinator.role, t)));
    let mut traffic_total = traffic;
    for (from_role, to_role, t) in history.traffic {
        let link = traffic_total.entry((from_role, to_role)).or_default();
        link.messages += t.messages;
        link.bytes += t.bytes;
    }
    let traffic = traffic_total;

    let model = FinalModel::union(&job.layout, &holders)?;
    let mut rows = merge_rows(job, &worker_records);
    keep_evaluations(&mut rows, &history.rows);
    let evaluator = Evaluator::new(job)?;
    evaluator.snapshots_onto(&holders, &mut rows)?;
    let mut evaluations = history.evaluations;
    if let Some(period) = job.config.eval_every_s {
        let after = from.and(history.rows.last().map(|r| r.time_s));
        evaluations.extend(evaluator.over_time(&holders, &rows, period, after)?);
    }
    let resume = cut.map(|roles| ResumePoint {
        clock: job.clocks().end,
        roles,
        history: History {
            rows: rows.clone(),
            worker_records: worker_records.clone(),
            capacity: capacity.clone(),
            traffic: traffic
                .iter()
                .map(|(&(from, to), &t)| (from, to, t))
                .collect(),
            peak_memory: peak_memory.clone(),
            evaluations: evaluations.clone(),
            network,
        },
    });
    let final_eval = evaluator.evaluate(&model.blocks)?;
    if let (Some(row), Some(e)) = (rows.last_mut(), &final_eval) {
        row.test_accuracy = e.accuracy;
        row.test_loss = Some(e.loss);
        row.test_auc = e.auc;
    }
    let done: Vec<(f64, f64)> = capacity
        .iter()
        .zip(&unfinished)
        .map(|(&(flops, secs), &(left_flops, left_s))| (flops - left_flops, secs - left_s))
        .collect();
    let summary = summarise(
        asm,
        job,
        &Totals {
            rows: &rows,
            worker_records: &worker_records,
            capacity: &done,
            traffic: &traffic,
            coordinator: &coordinator_report,
            figures: &role_figures.means(),
        },
        peak_memory,
        final_eval.as_ref().map(|e| (e.accuracy, e.loss, e.auc)),
        wall_start,
    );
    let params = final_eval.map(|e| {
        job.layout
            .params()
            .iter()
            .map(|p| p.name.clone())
            .zip(e.values)
            .collect::<Vec<_>>()
    });
    Ok(RunResult {
        summary,
        rows,
        params,
        reads,
        worker_records,
        evaluations,
        coordinator: coordinator_report,
        traffic,
        config: job.config.clone(),
        traces,
        model,
        resume,
    })
}

/// The roles' figures, each summed with the number of roles that reported it.
#[derive(Default)]
struct FigureMeans(BTreeMap<String, (f64, u32)>);

impl FigureMeans {
    /// Adds one role's figures.
    fn add<'a>(&mut self, figures: impl Iterator<Item = (&'a String, &'a f64)>) {
        for (name, v) in figures {
            let e = self.0.entry(name.clone()).or_default();
            e.0 += v;
            e.1 += 1;
        }
    }

    /// Each figure's mean over the roles that reported it.
    fn means(&self) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .map(|(k, &(sum, n))| (k.clone(), sum / f64::from(n)))
            .collect()
    }
}

/// Rows before a checkpoint keep the evaluations made then (`before`: the checkpoint's rows).
fn keep_evaluations(rows: &mut [IterationRow], before: &[IterationRow]) {
    for (row, before) in rows.iter_mut().zip(before) {
        row.test_accuracy = before.test_accuracy;
        row.test_loss = before.test_loss;
        row.test_auc = before.test_auc;
    }
}

/// One role's checkpoint from what it returned: its model part without snapshots (the
/// evaluations made from them are in the history).
fn role_checkpoint(
    at_s: f64,
    model: Option<&ModelState>,
    state: Option<RoleState>,
    stragglers: Vec<Option<serde_json::Value>>,
) -> RoleCheckpoint {
    RoleCheckpoint {
        at_s,
        model: model.map(ModelState::values_only),
        state,
        stragglers,
    }
}

/// What the summary is computed from, besides the job.
struct Totals<'a> {
    rows: &'a [IterationRow],
    worker_records: &'a [Vec<IterRecord>],
    /// Per worker: (FLOPs, compute seconds).
    capacity: &'a [(f64, f64)],
    traffic: &'a BTreeMap<(RoleId, RoleId), LinkTraffic>,
    coordinator: &'a CoordinatorReport,
    /// The workers' and servers' figures (memory policy, strategy), each averaged over the roles
    /// that report it.
    figures: &'a BTreeMap<String, f64>,
}

/// The run's summary. Wait share and the ideal bound count the active workers only: those with at
/// least one clock record.
fn summarise(
    asm: &Assembly,
    job: &Job,
    t: &Totals<'_>,
    peak_memory: BTreeMap<String, u64>,
    final_eval: Option<(Option<f64>, f64, Option<f64>)>,
    wall_start: Instant,
) -> Summary {
    let config = &job.config;
    let rows = t.rows;
    let run_time = rows.last().map_or(0.0, |r| r.time_s);
    let iterations = rows.len() as u64;
    let samples: u64 = rows.iter().map(|r| r.samples).sum();
    let active: Vec<(f64, f64)> = t
        .capacity
        .iter()
        .zip(t.worker_records)
        .filter(|(_, records)| !records.is_empty())
        .map(|(c, _)| *c)
        .collect();
    let ideal = metrics::ideal_time(&active);
    let total_wait: f64 = t.worker_records.iter().flatten().map(|r| r.wait_s).sum();
    let per_run_time = |x: f64| if run_time > 0.0 { x / run_time } else { 0.0 };
    Summary {
        runtime: config.runtime.as_str().into(),
        strategies: asm.strategies().to_vec(),
        slots: asm
            .owners()
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        workers: config.workers,
        servers: config.servers,
        iterations,
        run_time_s: run_time,
        wall_time_s: wall_start.elapsed().as_secs_f64(),
        time_per_iteration_s: if iterations > 0 {
            run_time / iterations as f64
        } else {
            0.0
        },
        throughput_samples_per_s: per_run_time(samples as f64),
        ideal_time_s: ideal,
        efficiency: per_run_time(ideal),
        wait_share: if run_time > 0.0 {
            total_wait / (run_time * active.len() as f64)
        } else {
            0.0
        },
        final_loss: rows.last().map_or(f64::NAN, |r| r.loss),
        final_test_accuracy: final_eval.and_then(|(accuracy, _, _)| accuracy),
        final_test_loss: final_eval.map(|(_, loss, _)| loss),
        final_test_auc: final_eval.and_then(|(_, _, auc)| auc),
        bytes_sent: t.traffic.values().map(|t| t.bytes).sum(),
        messages_sent: t.traffic.values().map(|t| t.messages).sum(),
        bytes_sent_by_role: t
            .traffic
            .iter()
            .fold(BTreeMap::new(), |mut m, ((from, _), t)| {
                *m.entry(from.label()).or_default() += t.bytes;
                m
            }),
        peak_memory,
        figures: t
            .coordinator
            .figures
            .iter()
            .cloned()
            .chain(t.figures.iter().map(|(k, v)| (k.clone(), *v)))
            .collect(),
        stopped: None,
    }
}

/// The result of a run the divergence guard stopped for `reason`: the rows of the clocks every
/// worker closed before the guard tripped, and a summary of them that records the reason. The
/// roles were ended mid-run, so there is no final model, evaluation, timeline, memory or traffic
/// account.
pub(super) fn stopped(
    asm: &Assembly,
    job: &Job,
    reason: StopReason,
    resumed: Option<&ResumePoint>,
    wall_start: Instant,
) -> StoppedRun {
    // A resumed run's records start at its checkpoint; the history holds those before.
    let history = resumed.map(|p| p.history.clone()).unwrap_or_default();
    let mut worker_records = history.worker_records;
    worker_records.resize(job.config.workers as usize, Vec::new());
    for (all, since) in worker_records.iter_mut().zip(job.guard.records()) {
        all.extend(since);
    }
    let mut rows = metrics::merge_iterations(&worker_records);
    keep_evaluations(&mut rows, &history.rows);
    let coordinator = CoordinatorReport::default();
    let traffic = BTreeMap::new();
    let capacity = vec![(0.0, 0.0); worker_records.len()];
    let mut summary = summarise(
        asm,
        job,
        &Totals {
            rows: &rows,
            worker_records: &worker_records,
            capacity: &capacity,
            traffic: &traffic,
            coordinator: &coordinator,
            figures: &BTreeMap::new(),
        },
        BTreeMap::new(),
        None,
        wall_start,
    );
    summary.stopped = Some(reason.clone());
    let result = RunResult {
        summary,
        rows,
        params: None,
        reads: Vec::new(),
        worker_records,
        evaluations: Vec::new(),
        coordinator,
        traffic,
        config: job.config.clone(),
        traces: Vec::new(),
        model: FinalModel {
            layout: job.layout.clone(),
            blocks: Vec::new(),
            opt_state: BTreeMap::new(),
        },
        resume: None,
    };
    StoppedRun { reason, result }
}

/// The run's rows from its workers' records: every worker expected to the end in a job whose
/// membership never changes, whoever recorded each clock in one whose membership does.
fn merge_rows(job: &Job, worker_records: &[Vec<IterRecord>]) -> Vec<metrics::IterationRow> {
    if job.membership.is_static() {
        metrics::merge_iterations(worker_records)
    } else {
        metrics::merge_iterations_elastic(worker_records)
    }
}
