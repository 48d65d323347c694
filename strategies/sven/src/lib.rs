//! Sven (Yang, ch. 6): communication-efficient training of DLRM-style click-through-rate models
//! on heterogeneous clusters.
//!
//! Each worker is a rank ("GPU trainer"): it holds its shards of the embedding tables (column-wise
//! by default; row- and table-wise as options), each row on the device or the host tier, and a
//! replica of the dense part. A batch's lookups reach the samples' owners by an alltoall —
//! Sven's asynchronous one, where every rank scatters at its own arrival, or the blocking
//! NCCL-style baseline —, the embedding gradients return by another, and the dense gradients are
//! ring-allreduced. The tasks run on a compute lane and a communication lane, sequentially
//! (Eq. 6.1), with the input re-distribution offloaded to an input service on CPU machines
//! ("1-stage"), or in the inter-batch 4-stage pipeline (Eq. 6.2) that keeps embedding staleness
//! within 3. Hot rows (the top α by access count after a warm-up) go to the device tier; random
//! placement is the baseline.
//!
//! Modules: [`placement`] (shard plans, tiers, importance eviction), [`layout`] (parameter
//! blocks cut at the shards' boundaries), [`schedule`] (the lanes'
//! task orders), [`shards`] (what a rank's shards send and apply), [`options`], the worker and
//! the input service.

#![warn(missing_docs)]

pub mod async_ps;
mod input;
pub mod layout;
pub mod options;
pub mod placement;
pub mod protocol;
pub mod schedule;
pub mod shards;
pub mod source;
mod worker;

pub use input::InputService;
pub use worker::SvenWorker;

use concord_engine::collective::NoServer;
use concord_engine::prelude::*;
use layout::ShardedTables;
use options::{Resolved, SvenOptions};
use placement::ShardPlan;
use std::sync::Arc;

/// The `sven` strategy.
#[derive(Debug, Default)]
pub struct Sven;

impl Strategy for Sven {
    fn name(&self) -> &'static str {
        "sven"
    }
    fn summary(&self) -> &'static str {
        "Sven (Yang ch. 6): DLRM training with hot embeddings on the device tier, an asynchronous hybrid alltoall and a 4-stage inter-batch pipeline"
    }
    fn slots(&self) -> &'static [Slot] {
        &[
            Slot::Worker,
            Slot::Server,
            Slot::Consistency,
            Slot::Placement,
        ]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: SvenOptions = parse_options(self.name(), options)?;
        let resolved: Arc<Resolved> = Arc::new(o.resolve(self.name())?);
        let offload = resolved.opts.pipeline.offloads_input();
        if offload {
            let mode = if resolved.opts.pipeline == schedule::Mode::FourStage {
                "four-stage"
            } else {
                "input-offload"
            };
            let why = format!(
                "`sven` with pipeline = \"{mode}\" runs its input service on CPU machines of their own: set servers >= 1 and cluster.dedicated_servers = true (e.g. cluster.server_device = \"cpu\")"
            );
            if config.servers == 0 {
                return Err(EngineError::config("servers", 0, why));
            }
            if !config.cluster.dedicated_servers {
                return Err(EngineError::config("cluster.dedicated_servers", false, why));
            }
        }
        let sharding = resolved.opts.sharding;
        let ranks = config.workers as usize;
        asm.consistency = Some(Arc::new(NoServer));
        asm.placement = Some(Arc::new(ShardedTables::new(sharding, ranks)));
        asm.sparse_embeddings = true;
        let opts = resolved.clone();
        asm.set_worker(move |job, id| {
            let tables: Vec<(usize, usize)> = job
                .model
                .dlrm()
                .map(|s| s.fields.iter().map(|&r| (r, s.width())).collect())
                .unwrap_or_default();
            let plan = ShardPlan::new(sharding, &tables, ranks).map_err(|e| {
                EngineError::config(
                    "strategy.sven.sharding",
                    format!("{sharding:?}").to_lowercase(),
                    e.to_string(),
                )
            })?;
            if let Some((device, host)) = opts.capacities {
                placement::check_fits(&plan, device, host).map_err(|e| {
                    EngineError::config("strategy.sven.device_mib", device, e.to_string())
                })?;
            }
            SvenWorker::new(job, id, opts.clone(), Arc::new(plan))
        });
        asm.set_server(|job, id| {
            let spec = job.model.dlrm().cloned();
            let per = job.config.batch;
            let global = per * u64::from(job.config.workers);
            // Ids of the whole batch for the rank's shards (int64), its samples' dense features
            // and labels.
            let elems = spec.map_or(0, |s| {
                global * s.num_tables() as u64 * 2 + per * (s.dense_features as u64 + 1)
            });
            let served = job.resumed_state(RoleId::Server(id), "Sven input service state")?;
            Ok(InputService::new(elems).having_served(served))
        });
        Ok(())
    }
    /// Its ranks save their shards, the dense part's optimizer state, their placement's state
    /// and measurements; a cut drains the pipeline (the run's batches are SGD steps either way).
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        if let Some(other) = asm.owners().get(&Slot::Coordinator) {
            return Err(EngineError::Composition(format!(
                "`sven` ranks take no directives, but `{other}` fills the coordinator slot; they cannot be combined"
            )));
        }
        Ok(())
    }
}

/// Registers `sven`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Sven))?;
    registry.register(Arc::new(async_ps::DlrmAsyncPs))?;
    Ok(())
}
