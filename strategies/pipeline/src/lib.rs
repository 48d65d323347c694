//! # PipeDream: pipeline-parallel training (Harlap thesis ch. 5; Narayanan et al., SOSP'19)
//!
//! The model's layers are cut into stages, each a run of consecutive layers on one or more
//! workers; minibatches flow through the stages in a pipeline. Three strategies share the
//! stages, the routing and the runtime and differ in their schedule:
//!
//! - **`pipedream`**: the planner ([`planner`]) picks the stages and their replication from a
//!   per-layer profile and the cluster's topology (or the config gives them); 1F1B-RR keeps
//!   NOAM minibatches in flight and every worker alternating forward and backward passes;
//!   weight stashing runs each minibatch's backward pass on the weights its forward pass saw;
//!   replicated stages average their gradients every round; vertical sync is an option.
//! - **`pipedream-mp`**: model parallelism, the baseline — the same layer ranges, unreplicated,
//!   one minibatch in flight, so one stage works at a time.
//! - **`gpipe`**: rounds of `depth` minibatches per input replica (`depth` in all when the
//!   input stage is not replicated), all forward then all backward, the stage's
//!   forward pass recomputed in the backward pass (only stage inputs kept), one update per
//!   round at a pipeline flush.
//!
//! Data parallelism, the other baseline, is the engine's (`allreduce`, or `bsp`).
//!
//! ```toml
//! strategies = ["pipedream"]
//! [strategy.pipedream]
//! # boundaries = [13]      # layers where stages 2, 3, … start; unset: the planner's choice
//! # replicas = [12, 1]     # workers per stage; unset with boundaries: one each
//! # straight = false       # true: the best straight pipeline, one stage per worker
//! # depth = 4              # minibatches in flight at the input stage; unset: NOAM;
//! #                        # "fit": the most the device's memory holds
//! # stash = true           # weight stashing (false: the ablation without it)
//! # vertical_sync = false
//! # search = "flat"        # the planner: "flat" or "hierarchical" (level by level)
//! # cost = "ring"          # a replicated stage's sync: this runtime's ring, or "thesis"
//! ```
//!
//! A job's iteration is one round of the output stage (one minibatch of `batch` samples when it
//! is not replicated). Figures: `<name>.stages`, `.workers_used`, `.noam`, `.depth`,
//! `.predicted_s`, `.replayed_s`, `.replicas.stage-<s>`, `.first_layer.stage-<s>`, `.warmup.stage-<s>`,
//! `.max_versions.stage-<s>`, `.steady_utilisation.{max,mean}`, `.utilisation`,
//! `.bytes_per_sample`, `.boundary_bytes_per_sample`.

pub mod choose;
pub mod coordinator;
pub mod layout;
pub mod options;
pub mod planner;
pub mod protocol;
pub mod schedule;
pub mod versions;
pub mod weights;
pub mod worker;

pub use coordinator::PipelineCoordinator;
pub use layout::Layout;
pub use options::{Depth, Kind, PipeOptions};
pub use worker::StageWorker;

use concord_engine::collective::NoServer;
use concord_engine::prelude::*;
use std::sync::{Arc, Mutex};

const SLOTS: &[Slot] = &[Slot::Worker, Slot::Coordinator, Slot::Consistency];

/// One of the pipeline strategies.
#[derive(Debug)]
pub struct Pipeline {
    kind: Kind,
}

impl Strategy for Pipeline {
    fn name(&self) -> &'static str {
        self.kind.name()
    }
    fn summary(&self) -> &'static str {
        match self.kind {
            Kind::PipeDream => "PipeDream: planned pipeline stages with replication, 1F1B-RR scheduling and weight stashing (Harlap thesis ch. 5, SOSP'19)",
            Kind::ModelParallel => "model parallelism: PipeDream's stages with one minibatch in flight (PipeDream's baseline)",
            Kind::GPipe => "GPipe: pipelined rounds with recomputation and a flush per round (PipeDream's baseline)",
        }
    }
    fn slots(&self) -> &'static [Slot] {
        SLOTS
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: PipeOptions = parse_options(self.name(), options)?;
        o.check(self.kind, config)?;
        asm.consistency = Some(Arc::new(NoServer));
        let resolved = Arc::new(Resolved {
            kind: self.kind,
            options: o,
            layout: Mutex::new(None),
        });
        let r = resolved.clone();
        asm.set_worker(move |job, id| {
            let layout = r.layout(&job)?;
            StageWorker::new(job, id, layout)
        });
        asm.set_coordinator(move |job| PipelineCoordinator::new(resolved.layout(&job)?, &job));
        Ok(())
    }
    /// A checkpoint is cut where the pipeline has drained: every minibatch of the iterations
    /// before it has run its backward pass at every stage and none after it has started, so
    /// each stage's parameters and optimizer state are all there is to keep, as PipeDream's
    /// per-stage checkpoints at an epoch's last minibatch (thesis §5.4). A run resumed from one
    /// restarts its pipeline with a fresh warm-up.
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// The layout of a job, resolved (and planned) once for all its roles.
struct Resolved {
    kind: Kind,
    options: PipeOptions,
    /// The job it was resolved for (by address) and the layout.
    layout: Mutex<Option<(usize, Arc<Layout>)>>,
}

impl Resolved {
    fn layout(&self, job: &Arc<Job>) -> Result<Arc<Layout>> {
        let key = Arc::as_ptr(job) as usize;
        let mut cached = self.layout.lock().map_err(|_| {
            EngineError::protocol(RoleId::Coordinator, "pipeline layout lock poisoned")
        })?;
        if let Some((k, l)) = cached.as_ref() {
            if *k == key {
                return Ok(l.clone());
            }
        }
        let costing = choose::Costing::of(job);
        let plan = choose::plan(job, &costing, self.kind, &self.options)?;
        let mut layout = Layout::new(job, self.kind, &self.options, plan)?;
        if self.kind != Kind::GPipe {
            layout.replayed_s = costing.replay(&layout);
        }
        let layout = Arc::new(layout);
        *cached = Some((key, layout.clone()));
        Ok(layout)
    }
}

/// Registers `pipedream`, `pipedream-mp` and `gpipe`.
pub fn register(registry: &mut Registry) -> Result<()> {
    for kind in [Kind::PipeDream, Kind::ModelParallel, Kind::GPipe] {
        registry.register(Arc::new(Pipeline { kind }))?;
    }
    Ok(())
}
