//! Finishing a run: from what the roles returned to the [`RunResult`] — the metrics rows, the
//! model as the union of its holders' parts, its offline evaluation, and the summary.

use super::evaluate::Evaluator;
use super::launch::{Launched, RoleOutput};
use super::parts::{self, FinalModel};
use super::RunResult;
use crate::context::RuntimeKind;
use crate::contract::Assembly;
use crate::contract::CoordinatorReport;
use crate::error::Result;
use crate::ids::RoleId;
use crate::job::Job;
use crate::metrics::{self, IterRecord, IterationRow, Summary, TraceEvent};
use crate::transport::LinkTraffic;
use std::collections::BTreeMap;
use std::time::Instant;

/// Turns the roles' outputs into the run's result; `wall_start` is when the run began.
pub(super) fn finish(
    asm: &Assembly,
    job: &Job,
    launched: Launched,
    wall_start: Instant,
) -> Result<RunResult> {
    let Launched {
        workers,
        servers,
        coordinator,
        traffic,
    } = launched;
    let mut traces: Vec<(RoleId, Vec<TraceEvent>)> = Vec::new();
    let mut worker_records = Vec::new();
    let mut peak_memory = BTreeMap::new();
    let mut capacity = Vec::new();
    let mut worker_parts = Vec::new();
    for RoleOutput {
        role,
        result,
        stats,
        trace,
        peak_memory: peak,
    } in workers
    {
        let report = result?;
        peak_memory.insert(role.label(), peak);
        capacity.push((stats.flops, stats.compute_s));
        worker_parts.push((role, report.model));
        worker_records.push(report.iterations);
        traces.extend(trace.map(|t| (role, t)));
    }
    let mut server_parts = Vec::new();
    // Sized once: at a thousand workers the reads are the largest thing a run hands back, and a
    // growing vector would hold up to twice them while it reallocates.
    let read_count = servers
        .iter()
        .filter_map(|s| s.result.as_ref().ok())
        .map(|r| r.reads.len())
        .sum();
    let mut reads = Vec::with_capacity(read_count);
    for RoleOutput {
        role,
        result,
        trace,
        ..
    } in servers
    {
        let report = result?;
        peak_memory.insert(role.label(), report.model.bytes());
        reads.extend(report.reads);
        server_parts.push((role, report.model));
        traces.extend(trace.map(|t| (role, t)));
    }
    let holders = parts::holders(worker_parts, server_parts);
    let coordinator_report = coordinator.result?;
    traces.extend(coordinator.trace.map(|t| (coordinator.role, t)));

    let model = FinalModel::union(&job.layout, &holders)?;
    let mut rows = metrics::merge_iterations(&worker_records);
    let evaluator = Evaluator::new(job)?;
    evaluator.snapshots_onto(&holders, &mut rows)?;
    let evaluations = match job.config.eval_every_s {
        Some(period) => evaluator.over_time(&holders, &rows, period)?,
        None => Vec::new(),
    };
    let final_eval = evaluator.evaluate(&model.blocks)?;
    if let (Some(row), Some(e)) = (rows.last_mut(), &final_eval) {
        row.test_accuracy = e.accuracy;
        row.test_loss = Some(e.loss);
    }
    let summary = summarise(
        asm,
        job,
        &Totals {
            rows: &rows,
            worker_records: &worker_records,
            capacity: &capacity,
            traffic: &traffic,
            coordinator: &coordinator_report,
        },
        peak_memory,
        final_eval.as_ref().map(|e| (e.accuracy, e.loss)),
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
    })
}

/// What the summary is computed from, besides the job.
struct Totals<'a> {
    rows: &'a [IterationRow],
    worker_records: &'a [Vec<IterRecord>],
    /// Per worker: (FLOPs, compute seconds).
    capacity: &'a [(f64, f64)],
    traffic: &'a BTreeMap<(RoleId, RoleId), LinkTraffic>,
    coordinator: &'a CoordinatorReport,
}

/// The run's summary. Wait share and the ideal bound count the active workers only: those with at
/// least one clock record.
fn summarise(
    asm: &Assembly,
    job: &Job,
    t: &Totals<'_>,
    peak_memory: BTreeMap<String, u64>,
    final_eval: Option<(Option<f64>, f64)>,
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
        runtime: match config.runtime {
            RuntimeKind::Sim => "sim".into(),
            RuntimeKind::Wall => "wall".into(),
        },
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
        final_test_accuracy: final_eval.and_then(|(accuracy, _)| accuracy),
        final_test_loss: final_eval.map(|(_, loss)| loss),
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
        figures: t.coordinator.figures.iter().cloned().collect(),
    }
}
