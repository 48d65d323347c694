//! Building a job from a config and an assembly: the model and data, the cluster, the parameter
//! layout, the shared [`Job`], and every role (coordinator first, then workers, then servers).

use crate::cluster::Cluster;
use crate::config::RunConfig;
use crate::contract::Assembly;
use crate::contract::{Coordinator, Server, Worker};
use crate::coordinator::StaticCoordinator;
use crate::data::SampleStream;
use crate::dp::DataParallelWorker;
use crate::error::{EngineError, Result};
use crate::gpu::ProcessHost;
use crate::guard::RunGuard;
use crate::ids::RoleId;
use crate::job::{Job, ProgressFn, Segment};
use crate::membership::MembershipPlan;
use crate::model::{ModelConfig, ModelSpec};
use crate::ps::{ParamLayout, ParamServer, RoundRobinPlacement, SnapshotPlan};
use crate::stragglers::JobShape;
use std::sync::{Arc, RwLock};

/// A job and its roles, built and ready to launch.
pub(super) struct Built {
    /// What every role was built from.
    pub job: Arc<Job>,
    /// The workers built, each with its index.
    pub workers: Vec<(u32, Box<dyn Worker>)>,
    /// The servers built, each with its index: the configured servers, then the standby ones.
    pub servers: Vec<(u32, Box<dyn Server>)>,
    /// The coordinator.
    pub coordinator: Box<dyn Coordinator>,
}

/// Builds the roles of `job` with the parts in `asm`, for the clocks and checkpoint its segment
/// names: each role restores its checkpoint, if any, as it is built. Only the workers and servers
/// `placed_here` are built (a process builds the roles of its machine); the coordinator always
/// is, since whether it directs batches shapes every worker.
pub(super) fn roles(
    job: &Arc<Job>,
    asm: &Assembly,
    placed_here: impl Fn(RoleId) -> bool,
) -> Result<Built> {
    let job = job.clone();
    let config = &job.config;
    // The coordinator is built first: whether it directs batches shapes the workers.
    let coordinator: Box<dyn Coordinator> = match &asm.coordinator {
        Some(f) => f(job.clone())?,
        None => Box::new(StaticCoordinator::new(&job)?),
    };
    let _ = job.directed.set(coordinator.directs_batches());
    let mut workers: Vec<(u32, Box<dyn Worker>)> = Vec::new();
    for w in (0..config.workers).filter(|&w| placed_here(RoleId::Worker(w))) {
        let worker: Box<dyn Worker> = match &asm.worker {
            Some(f) => f(job.clone(), w)?,
            None => Box::new(DataParallelWorker::new(job.clone(), w)?),
        };
        workers.push((w, worker));
    }
    let mut servers: Vec<(u32, Box<dyn Server>)> = Vec::new();
    let here = (0..total_servers(config, asm)).filter(|&s| placed_here(RoleId::Server(s)));
    for s in here {
        let server: Box<dyn Server> = match &asm.server {
            Some(f) => f(job.clone(), s)?,
            None => {
                let mut server = ParamServer::new(
                    s,
                    job.layout.clone(),
                    job.init.as_deref(),
                    job.consistency.clone(),
                    config.optimizer.clone(),
                    config.workers,
                    SnapshotPlan::of(config),
                )
                .recording_reads(job.record_reads);
                if let Some(cp) = job.resumed(RoleId::Server(s)) {
                    server.restore(&cp)?;
                }
                Box::new(server)
            }
        };
        servers.push((s, server));
    }
    Ok(Built {
        job,
        workers,
        servers,
        coordinator,
    })
}

/// Servers started: the configured ones, then the standby ones (elastic strategies), placed like
/// the others, after them.
pub(super) fn total_servers(config: &RunConfig, asm: &Assembly) -> u32 {
    config.servers + asm.standby_servers
}

/// Checks every straggler pattern against the job's roles (a CSV trace's rows name workers,
/// servers and machines that exist), before any data is read or any role is built.
fn check_stragglers(config: &RunConfig, cluster: &Cluster) -> Result<()> {
    let shape = JobShape {
        workers: config.workers,
        servers: cluster.server_machine.len() as u32,
        machines: cluster.machines.len() as u32,
    };
    for pattern in &config.stragglers {
        pattern.check_job(&shape)?;
    }
    Ok(())
}

/// Resolves the job's membership trace against its cluster, and refuses what a changing
/// membership does not combine with: strategies whose roles do not handle it, and mid-run
/// checkpoints (not yet).
fn check_membership(
    config: &RunConfig,
    asm: &Assembly,
    cluster: &Cluster,
) -> Result<MembershipPlan> {
    let plan = MembershipPlan::resolve(&config.membership, cluster)?;
    if plan.is_static() {
        return Ok(plan);
    }
    if !asm.elastic_membership {
        return Err(EngineError::config(
            "membership",
            format!("{} entries", config.membership.len()),
            format!(
                "the strategies of this run ({}) keep a fixed set of machines; a membership trace \
                 needs one whose roles handle machines joining and leaving (such as `agileml`)",
                asm.strategies().join(", ")
            ),
        ));
    }
    if let Some(k) = config.checkpoint_every {
        return Err(EngineError::config(
            "checkpoint_every",
            k,
            "mid-run checkpoints of a job whose membership changes are not supported yet: the \
             cut would have to record which machines are in the job",
        ));
    }
    Ok(plan)
}

/// A DLRM trains only under strategies whose workers update embedding tables row-wise
/// ([`Assembly::sparse_embeddings`]); any other composition is refused here, before data is
/// generated or any role starts. A throughput-mode DLRM profile is refused likewise: a strategy
/// of dense replicas would charge whole-table gradients that no DLRM system moves.
fn check_sparse_embeddings(config: &RunConfig, asm: &Assembly) -> Result<()> {
    let (key, value) = match &config.model {
        ModelConfig::Dlrm { .. } => ("model.kind", "\"dlrm\"".to_string()),
        ModelConfig::Profile { name }
            if crate::profiles::builtin(name).is_some_and(|p| p.dlrm.is_some()) =>
        {
            ("model.name", format!("\"{name}\""))
        }
        _ => return Ok(()),
    };
    if !asm.sparse_embeddings {
        return Err(EngineError::config(
            key,
            value,
            format!(
                "a DLRM trains only with a strategy whose workers update embedding tables row-wise \
                 (one that sets `sparse_embeddings`, such as `sven` or `dlrm-async-ps`); the \
                 strategies of this run ({}) train dense replicas",
                asm.strategies().join(", ")
            ),
        ));
    }
    Ok(())
}

/// The job as one process runs all of it (`sim`, `wall`): see [`job_on`].
pub(super) fn job(
    config: &RunConfig,
    asm: &Assembly,
    progress: Option<ProgressFn>,
    record_reads: bool,
) -> Result<Job> {
    job_on(config, asm, progress, record_reads, None)
}

/// The job: model and data resolved, cluster placed, parameters cut into blocks; its segment is
/// the whole run until the engine sets another. `record_reads`: whether its servers keep a record
/// of the reads they answer ([`Job::record_reads`]). `host` is this process's place in a
/// multi-process job (its machine and first GPU), `None` when one process runs everything.
pub(super) fn job_on(
    config: &RunConfig,
    asm: &Assembly,
    progress: Option<ProgressFn>,
    record_reads: bool,
    host: Option<ProcessHost>,
) -> Result<Job> {
    let cluster = Cluster::resolve(&config.cluster, config.workers, total_servers(config, asm))?;
    let cluster = Arc::new(cluster.with_first_gpu(host.map_or(0, |h| h.first_gpu)));
    check_stragglers(config, &cluster)?;
    let membership = Arc::new(check_membership(config, asm, &cluster)?);
    crate::gpu::check_job(config, &cluster, host)?;
    check_sparse_embeddings(config, asm)?;
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
    let facts = model.stage_facts();
    let stage_kept_bytes = facts.iter().map(|s| s.kept_bytes).collect();
    let stage_output_bytes = facts.iter().map(|s| s.activation_bytes).collect();
    let cost_sheet = model.layer_costs().into();
    let op_graph = model.op_graph().map(Arc::new);
    let guard = RunGuard::new(config, data.is_some());
    Ok(Job {
        config: config.clone(),
        cluster,
        model,
        stage_kept_bytes,
        stage_output_bytes,
        cost_sheet,
        op_graph,
        layout,
        init,
        data,
        stream,
        consistency,
        memory,
        directed: std::sync::OnceLock::new(),
        progress,
        record_reads,
        guard,
        membership,
        segment: RwLock::new(Segment {
            clocks: 0..config.iterations,
            from: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dlrm_config() -> RunConfig {
        RunConfig {
            model: toml::from_str("kind = \"dlrm\"").unwrap(),
            data: toml::from_str("kind = \"ctr\"\ntrain = 100\ntest = 10").unwrap(),
            ..RunConfig::default()
        }
    }

    /// A DLRM under strategies that train dense replicas is refused before any work, naming
    /// the model kind and what trains it; with the flag set the check passes (the run then
    /// stops at the next missing piece, the empty assembly's consistency slot).
    #[test]
    fn dlrm_needs_row_wise_embedding_workers() {
        let e = job(&dlrm_config(), &Assembly::default(), None, false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("model.kind") && e.contains("dlrm") && e.contains("sparse_embeddings"),
            "{e}"
        );
        let asm = Assembly {
            sparse_embeddings: true,
            ..Assembly::default()
        };
        let e = job(&dlrm_config(), &asm, None, false)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("consistency"), "{e}");
        // A DLRM profile too; other profiles are not concerned.
        let profile = |name: &str| RunConfig {
            model: toml::from_str(&format!("kind = \"profile\"\nname = \"{name}\"")).unwrap(),
            ..RunConfig::default()
        };
        let e = job(&profile("dlrm-deep-fm"), &Assembly::default(), None, false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("model.name") && e.contains("sparse_embeddings"),
            "{e}"
        );
        let e = job(&profile("vgg16"), &Assembly::default(), None, false)
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("sparse_embeddings"), "{e}");
    }
}
