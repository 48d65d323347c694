//! Launching a run: build the job, start every role on the chosen runtime, collect what they
//! report, evaluate, summarise, and write the run folder.

use crate::cluster::Cluster;
use crate::config::RunConfig;
use crate::context::{straggler_identity, RoleContext, RoleStats, RuntimeKind};
use crate::contract::Assembly;
use crate::contract::{Coordinator, CoordinatorReport, Server, Worker, WorkerReport};
use crate::contract::{ModelState, ReadRecord, ServerReport};
use crate::coordinator::StaticCoordinator;
use crate::data::SampleStream;
use crate::dp::DataParallelWorker;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::job::{Job, ProgressFn};
use crate::memory::DeviceMemory;
use crate::metrics::{self, IterRecord, IterationRow, Summary, TimedEvaluation, TraceEvent};
use crate::model::{ModelConfig, ModelSpec, Replica};
use crate::payload::BlockPayload;
use crate::ps::{self, ParamLayout, ParamServer, RoundRobinPlacement};
use crate::stragglers::{Probe, RoleKind, StragglerSet};
use crate::time::TimeBase;
use crate::transport::{LinkTraffic, Network};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::task::JoinSet;

/// How to run, beyond the config.
#[derive(Default, Clone)]
pub struct RunOptions {
    /// Write the run folder here (resolved config, metrics, summary, traces, checkpoint).
    pub out_dir: Option<PathBuf>,
    /// Called as workers finish clocks.
    pub progress: Option<ProgressFn>,
}

/// Everything a finished run produced.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The summary.
    pub summary: Summary,
    /// One row per iteration.
    pub rows: Vec<IterationRow>,
    /// Final parameters by name (real models).
    pub params: Option<Vec<(String, Vec<f32>)>>,
    /// Every read each server answered.
    pub reads: Vec<ReadRecord>,
    /// Per-worker clock records.
    pub worker_records: Vec<Vec<IterRecord>>,
    /// The model evaluated every `eval_every_s` seconds of run time (empty without it).
    pub evaluations: Vec<TimedEvaluation>,
    /// What the coordinator gathered.
    pub coordinator: CoordinatorReport,
    /// Traffic per directed role pair.
    pub traffic: BTreeMap<(RoleId, RoleId), LinkTraffic>,
}

/// Test-set accuracy (none for regression models such as MF) and loss of a parameter set, and the
/// values evaluated.
struct Evaluation {
    accuracy: Option<f64>,
    loss: f64,
    values: Vec<Vec<f32>>,
}

/// Evaluates the model at run times 0, Δ, 2Δ, … up to the run's end (Δ = `period`) from the
/// holders' timed snapshots; consecutive times with the same values are evaluated once. Holders
/// that record no timed snapshots make the series empty, with a warning.
fn evaluate_over_time(
    job: &Job,
    reports: &[ModelState],
    rows: &[IterationRow],
    period: f64,
    evaluate: &dyn Fn(Vec<BlockPayload>) -> Result<Option<Evaluation>>,
) -> Result<Vec<TimedEvaluation>> {
    let mut timed = Vec::with_capacity(reports.len());
    for r in reports {
        match &r.timed {
            Some(t) => timed.push(t),
            None => {
                tracing::warn!(
                    "eval_every_s: this strategy's servers keep no timed snapshots; \
                     no time-indexed evaluation"
                );
                return Ok(Vec::new());
            }
        }
    }
    let holders: Vec<ps::Holder<'_>> = timed
        .iter()
        .zip(reports)
        .map(|(t, r)| (t.as_slice(), r.blocks.as_slice()))
        .collect();
    let end = rows.last().map_or(0.0, |r| r.time_s);
    let mut out: Vec<TimedEvaluation> = Vec::new();
    // The records the last evaluation was built from, and its (accuracy, loss).
    let mut last: Option<(Vec<(usize, usize)>, AccuracyLoss)> = None;
    let mut k = 0u64;
    while (k as f64) * period <= end {
        let time_s = k as f64 * period;
        k += 1;
        let used = ps::records_at(&holders, k - 1);
        let iterations = rows.iter().take_while(|r| r.time_s <= time_s).count() as u64;
        let (test_accuracy, test_loss) = match &last {
            Some((prev, result)) if *prev == used => *result,
            _ => {
                let blocks = ps::model_from(&holders, &used);
                if blocks.len() != job.layout.blocks().len() {
                    continue;
                }
                let Some(e) = evaluate(blocks)? else {
                    return Ok(Vec::new());
                };
                last = Some((used, (e.accuracy, e.loss)));
                (e.accuracy, e.loss)
            }
        };
        out.push(TimedEvaluation {
            time_s,
            iterations,
            test_accuracy,
            test_loss,
        });
    }
    Ok(out)
}

/// Test accuracy (classifiers only) and test loss of one evaluation.
type AccuracyLoss = (Option<f64>, f64);

/// What one role's task hands back: its id, its report, its compute totals, its timeline and its
/// peak device memory.
type RoleOutput<T> = (RoleId, Result<T>, RoleStats, Vec<TraceEvent>, u64);

/// Runs `config` with the parts in `asm` to completion.
pub fn run(config: &RunConfig, asm: &Assembly, options: RunOptions) -> Result<RunResult> {
    config.validate()?;
    let wall_start = std::time::Instant::now();
    let (model, data) = match &config.model {
        ModelConfig::Profile { .. } => (ModelSpec::resolve(&config.model, &[], 0)?, None),
        _ => {
            // Pairing errors (MF without ratings data, ...) before generating any data.
            config.model.check_data(&config.data)?;
            let split = config.data.load(config.seed)?;
            let spec = ModelSpec::resolve_for_data(&config.model, &config.data, &split.train)?;
            (spec, Some(split))
        }
    };
    // Standby servers (elastic strategies) are placed like the others, after them.
    let total_servers = config.servers + asm.standby_servers;
    let cluster = Arc::new(Cluster::resolve(
        &config.cluster,
        config.workers,
        total_servers,
    )?);
    let placement = asm
        .placement
        .clone()
        .unwrap_or_else(|| Arc::new(RoundRobinPlacement));
    let layout = Arc::new(ParamLayout::new(
        model.params(),
        (config.block_bytes / 4) as usize,
        placement.as_ref(),
        config.servers,
    ));
    let missing =
        |slot: &str| EngineError::Composition(format!("no strategy fills the {slot} slot"));
    let consistency = asm
        .consistency
        .clone()
        .ok_or_else(|| missing("consistency"))?;
    let memory = asm.memory.clone().ok_or_else(|| missing("memory"))?;
    let stream = SampleStream::new(data.as_ref().map_or(0, |d| d.train.len()), config.seed);
    let init = model.init_values(config.seed);
    let job = Arc::new(Job {
        config: config.clone(),
        cluster: cluster.clone(),
        model,
        layout: layout.clone(),
        init,
        data,
        stream,
        consistency,
        memory,
        directed: std::sync::OnceLock::new(),
        progress: options.progress.clone(),
    });
    // The coordinator is built first: whether it directs batches shapes the workers.
    let coordinator: Box<dyn Coordinator> = match &asm.coordinator {
        Some(f) => f(job.clone())?,
        None => Box::new(StaticCoordinator),
    };
    let _ = job.directed.set(coordinator.directs_batches());
    let mut workers: Vec<Box<dyn Worker>> = Vec::new();
    for w in 0..config.workers {
        workers.push(match &asm.worker {
            Some(f) => f(job.clone(), w)?,
            None => Box::new(DataParallelWorker::new(job.clone(), w)?),
        });
    }
    let mut servers: Vec<Box<dyn Server>> = Vec::new();
    for s in 0..total_servers {
        servers.push(match &asm.server {
            Some(f) => f(job.clone(), s)?,
            None => Box::new(ParamServer::new(
                s,
                layout.clone(),
                job.init.as_deref(),
                job.consistency.clone(),
                config.optimizer.clone(),
                config.workers,
                crate::ps::SnapshotPlan::of(config),
            )),
        });
    }

    let rt = match config.runtime {
        RuntimeKind::Sim => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build(),
        RuntimeKind::Wall => tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .build(),
    }
    .map_err(|source| EngineError::Io {
        path: "tokio runtime".into(),
        source,
    })?;
    let (w_out, s_out, c_out, traffic) = rt.block_on(launch(
        job.clone(),
        workers,
        servers,
        coordinator,
        total_servers,
    ))?;
    drop(rt);

    finish(
        config, asm, &job, w_out, s_out, c_out, traffic, wall_start, &options,
    )
}

type Launched = (
    Vec<RoleOutput<WorkerReport>>,
    Vec<RoleOutput<ServerReport>>,
    RoleOutput<CoordinatorReport>,
    BTreeMap<(RoleId, RoleId), LinkTraffic>,
);

async fn launch(
    job: Arc<Job>,
    workers: Vec<Box<dyn Worker>>,
    servers: Vec<Box<dyn Server>>,
    mut coordinator: Box<dyn Coordinator>,
    total_servers: u32,
) -> Result<Launched> {
    let cfg = &job.config;
    let time = TimeBase::new(cfg.runtime == RuntimeKind::Sim);
    let mut roles = vec![RoleId::Coordinator];
    roles.extend((0..total_servers).map(RoleId::Server));
    roles.extend((0..cfg.workers).map(RoleId::Worker));
    let stragglers = |role: RoleId| -> Result<StragglerSet> {
        let machine = job.cluster.machine_of(role);
        Ok(match straggler_identity(role) {
            Some((kind, index)) => {
                StragglerSet::build(&cfg.stragglers, cfg.seed, kind, index, machine)?
            }
            None => StragglerSet::build(&[], cfg.seed, RoleKind::Server, u32::MAX, machine)?,
        })
    };
    // The wire's own view of NIC slowdowns (bandwidth caps), per role.
    let mut shapers = BTreeMap::new();
    for &r in &roles {
        let set = stragglers(r)?;
        if !set.is_empty() {
            shapers.insert(r, set);
        }
    }
    let cluster = job.cluster.clone();
    let workers_n = cfg.workers;
    // Each role's transfers are counted, so per-transfer patterns (server jitter) draw anew for
    // every message.
    let mut transfers: BTreeMap<RoleId, u64> = BTreeMap::new();
    let shaper = (!shapers.is_empty()).then(|| {
        Box::new(move |role: RoleId, now: f64| {
            let (Some(set), Some((kind, index))) =
                (shapers.get_mut(&role), straggler_identity(role))
            else {
                return 1.0;
            };
            let count = transfers.entry(role).or_insert(0);
            let transfer = *count;
            *count += 1;
            let probe = Probe {
                kind,
                index,
                machine: cluster.machine_of(role),
                num_workers: workers_n,
                now,
                iter: transfer,
                progress: 0.0,
                nominal_iter_s: 0.0,
            };
            set.effect(&probe).bandwidth_factor
        }) as crate::transport::BandwidthShaper
    });
    let (net, mut mailboxes) = Network::new(job.cluster.clone(), time, &roles, shaper);
    let pump = tokio::spawn(net.clone().pump());
    let mut ctx_for = |role: RoleId| -> Result<RoleContext> {
        let rx = mailboxes
            .remove(&role)
            .ok_or_else(|| EngineError::protocol(role, "no mailbox"))?;
        let device = job.cluster.device_of(role);
        let memory = DeviceMemory::new(
            (job.memory)(&job, role)?,
            job.cluster.device_label(role),
            role,
            device.memory_bytes(),
        );
        Ok(RoleContext::new(
            role,
            cfg.runtime,
            net.clone(),
            rx,
            cfg.workers,
            cfg.progress_points,
            stragglers(role)?,
            memory,
        ))
    };

    let mut worker_set = JoinSet::new();
    for (w, mut worker) in workers.into_iter().enumerate() {
        let mut ctx = ctx_for(RoleId::Worker(w as u32))?;
        worker_set.spawn(async move {
            let r = worker.run(&mut ctx).await;
            (
                ctx.id(),
                r,
                ctx.stats().clone(),
                ctx.take_trace(),
                ctx.peak_memory(),
            )
        });
    }
    let mut server_set = JoinSet::new();
    for (s, mut server) in servers.into_iter().enumerate() {
        let mut ctx = ctx_for(RoleId::Server(s as u32))?;
        server_set.spawn(async move {
            let r = server.run(&mut ctx).await;
            (
                ctx.id(),
                r,
                ctx.stats().clone(),
                ctx.take_trace(),
                ctx.peak_memory(),
            )
        });
    }
    let mut cctx = ctx_for(RoleId::Coordinator)?;
    let coord = tokio::spawn(async move {
        let r = coordinator.run(&mut cctx).await;
        (
            cctx.id(),
            r,
            cctx.stats().clone(),
            cctx.take_trace(),
            cctx.peak_memory(),
        )
    });

    let body = async {
        let mut w_out = Vec::new();
        while let Some(joined) = worker_set.join_next().await {
            let out = joined.map_err(|e| {
                EngineError::protocol(RoleId::Coordinator, format!("a worker task failed: {e}"))
            })?;
            if let Err(e) = &out.1 {
                let _ = e;
                let (role, r, ..) = out;
                return Err(r
                    .err()
                    .unwrap_or_else(|| EngineError::protocol(role, "failed")));
            }
            w_out.push(out);
        }
        for s in 0..total_servers {
            net.control_after_in_flight(RoleId::Server(s), crate::message::Message::Shutdown);
        }
        net.control_after_in_flight(RoleId::Coordinator, crate::message::Message::Shutdown);
        let mut s_out = Vec::new();
        while let Some(joined) = server_set.join_next().await {
            let out = joined.map_err(|e| {
                EngineError::protocol(RoleId::Coordinator, format!("a server task failed: {e}"))
            })?;
            s_out.push(out);
        }
        let c_out = coord.await.map_err(|e| {
            EngineError::protocol(
                RoleId::Coordinator,
                format!("the coordinator task failed: {e}"),
            )
        })?;
        Ok::<_, EngineError>((w_out, s_out, c_out))
    };
    let limit = cfg.time_limit_s;
    let outcome = tokio::select! {
        biased;
        r = body => r,
        _ = time.sleep(limit) => Err(EngineError::protocol(
            RoleId::Coordinator,
            format!("the run did not finish within time_limit_s = {limit} s of run time: a role is waiting for a message that never comes (deadlock) or the run is far longer than expected"),
        )),
    };
    net.close();
    let (mut w_out, mut s_out, c_out) = match outcome {
        Ok(v) => v,
        Err(e) => {
            pump.abort();
            return Err(e);
        }
    };
    let _ = pump.await;
    for (_, r, ..) in &s_out {
        if let Err(e) = r {
            return Err(EngineError::protocol(
                RoleId::Coordinator,
                format!("a server failed: {e}"),
            ));
        }
    }
    if let Err(e) = &c_out.1 {
        return Err(EngineError::protocol(
            RoleId::Coordinator,
            format!("the coordinator failed: {e}"),
        ));
    }
    w_out.sort_by_key(|o| o.0);
    s_out.sort_by_key(|o| o.0);
    Ok((w_out, s_out, c_out, net.traffic()))
}

#[allow(clippy::too_many_arguments)]
fn finish(
    config: &RunConfig,
    asm: &Assembly,
    job: &Job,
    w_out: Vec<RoleOutput<WorkerReport>>,
    s_out: Vec<RoleOutput<ServerReport>>,
    c_out: RoleOutput<CoordinatorReport>,
    traffic: BTreeMap<(RoleId, RoleId), LinkTraffic>,
    wall_start: std::time::Instant,
    options: &RunOptions,
) -> Result<RunResult> {
    let mut traces: Vec<(RoleId, Vec<TraceEvent>)> = Vec::new();
    let mut worker_records = Vec::new();
    let mut peak_memory = BTreeMap::new();
    let mut capacity = Vec::new();
    let mut held_model: Option<ModelState> = None;
    let mut reads: Vec<ReadRecord> = Vec::new();
    for (role, r, stats, trace, peak) in w_out {
        let mut report = r?;
        if held_model.is_none() {
            held_model = report.model.take();
        }
        peak_memory.insert(role.label(), peak);
        capacity.push((stats.flops, stats.compute_s));
        worker_records.push(report.iterations);
        traces.push((role, trace));
    }
    let mut server_reports = Vec::new();
    for (role, r, _, trace, _) in s_out {
        let report = r?;
        peak_memory.insert(role.label(), report.model.bytes());
        reads.extend(report.reads);
        server_reports.push(report.model);
        traces.push((role, trace));
    }
    // Decentralized strategies keep the model on the workers: evaluate theirs.
    let server_reports = match held_model {
        Some(m) => vec![m],
        None => server_reports,
    };
    let (c_role, c_report, _, c_trace, _) = c_out;
    let coordinator = c_report?;
    traces.push((c_role, c_trace));

    let mut rows = metrics::merge_iterations(&worker_records);
    // Evaluate the servers' snapshots offline, as the thesis does: measuring must not perturb the run.
    let replica = Replica::new(&job.model)?;
    let evaluate = |blocks: Vec<BlockPayload>| -> Result<Option<Evaluation>> {
        let (Some(replica), Some(data)) = (&replica, &job.data) else {
            return Ok(None);
        };
        let mut values = job.layout.zeros();
        job.layout.write_into(&blocks, &mut values);
        replica.set_params(&values)?;
        let (accuracy, loss) = replica.evaluate(&data.test.features, &data.test.labels)?;
        Ok(Some(Evaluation {
            accuracy,
            loss,
            values,
        }))
    };
    // A snapshot is usable once the servers' parts cover every block (elastic servers hand blocks
    // to each other, so which servers hold a part varies).
    let snapshot_iters: std::collections::BTreeSet<u64> = server_reports
        .iter()
        .flat_map(|r| r.snapshots.iter().map(|s| s.iterations))
        .collect();
    for it in snapshot_iters {
        let blocks: Vec<BlockPayload> = server_reports
            .iter()
            .filter_map(|r| r.snapshots.iter().find(|s| s.iterations == it))
            .flat_map(|s| s.blocks.iter().cloned())
            .collect();
        let covered: std::collections::BTreeSet<_> = blocks.iter().map(|b| b.block).collect();
        if covered.len() != job.layout.blocks().len() {
            continue;
        }
        if let Some(e) = evaluate(blocks)? {
            if let Some(row) = rows.get_mut(it as usize - 1) {
                row.test_accuracy = e.accuracy;
                row.test_loss = Some(e.loss);
            }
        }
    }
    let evaluations = match config.eval_every_s {
        Some(period) => evaluate_over_time(job, &server_reports, &rows, period, &evaluate)?,
        None => Vec::new(),
    };
    let final_eval = evaluate(
        server_reports
            .iter()
            .flat_map(|r| r.blocks.iter().cloned())
            .collect(),
    )?;
    if let (Some(row), Some(e)) = (rows.last_mut(), &final_eval) {
        row.test_accuracy = e.accuracy;
        row.test_loss = Some(e.loss);
    }

    let run_time = rows.last().map_or(0.0, |r| r.time_s);
    let iterations = rows.len() as u64;
    let samples: u64 = rows.iter().map(|r| r.samples).sum();
    let ideal = metrics::ideal_time(&capacity);
    let total_wait: f64 = worker_records.iter().flatten().map(|r| r.wait_s).sum();
    let summary = Summary {
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
        throughput_samples_per_s: if run_time > 0.0 {
            samples as f64 / run_time
        } else {
            0.0
        },
        ideal_time_s: ideal,
        efficiency: if run_time > 0.0 {
            ideal / run_time
        } else {
            0.0
        },
        wait_share: if run_time > 0.0 {
            total_wait / (run_time * config.workers as f64)
        } else {
            0.0
        },
        final_loss: rows.last().map_or(f64::NAN, |r| r.loss),
        final_test_accuracy: final_eval.as_ref().and_then(|e| e.accuracy),
        final_test_loss: final_eval.as_ref().map(|e| e.loss),
        bytes_sent: traffic.values().map(|t| t.bytes).sum(),
        messages_sent: traffic.values().map(|t| t.messages).sum(),
        bytes_sent_by_role: traffic
            .iter()
            .fold(BTreeMap::new(), |mut m, ((from, _), t)| {
                *m.entry(from.label()).or_default() += t.bytes;
                m
            }),
        peak_memory,
        figures: coordinator.figures.iter().cloned().collect(),
    };
    let params = final_eval.map(|Evaluation { values, .. }| {
        job.layout
            .params()
            .iter()
            .map(|p| p.name.clone())
            .zip(values)
            .collect::<Vec<_>>()
    });
    let result = RunResult {
        summary,
        rows,
        params,
        reads,
        worker_records,
        evaluations,
        coordinator,
        traffic,
    };
    if let Some(dir) = &options.out_dir {
        crate::output::write_run_folder(
            dir,
            config,
            &result,
            &traces,
            &job.layout,
            &server_reports,
        )?;
    }
    Ok(result)
}
