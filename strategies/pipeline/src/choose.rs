//! The configuration a run uses: the one the options give (with the planner's prediction for
//! it), the best straight pipeline (`straight = true`), or the planner's choice.

use crate::layout::{given, Layout};
use crate::options::{Kind, PipeOptions};
use crate::planner::{self, PipelinePlan, PlanOptions, Profile, Search, Sync, Topology};
use concord_engine::prelude::*;

/// What the planner sees of a job: its model's profile on worker 0's device (the planner
/// assumes identical workers) and its workers' topology.
pub struct Costing {
    profile: Profile,
    topology: Topology,
}

impl Costing {
    /// The profile and topology of `job`.
    pub fn of(job: &Job) -> Costing {
        Costing {
            profile: Profile::of_job(job, 0),
            topology: Topology::of_cluster(&job.cluster, job.config.workers),
        }
    }

    /// The time per minibatch of `layout`'s 1F1B schedule replayed on these costs.
    pub fn replay(&self, layout: &Layout) -> Option<f64> {
        planner::replay(&self.profile, &self.topology, &layout.stages, layout.depth)
    }
}

/// The stages and replicas of `job` under `options`, planned on `costing`.
pub fn plan(
    job: &Job,
    costing: &Costing,
    kind: Kind,
    options: &PipeOptions,
) -> Result<PipelinePlan> {
    let (profile, topology) = (&costing.profile, &costing.topology);
    let key = kind.key();
    let refuse = |what: &str, value: String, e: planner::PlanError| {
        EngineError::config(format!("{key}.{what}"), value, e.to_string())
    };
    let sync = match options.cost.as_str() {
        "thesis" => Sync::Thesis,
        _ => Sync::Ring,
    };
    if let Some(mut p) = given(options, job) {
        planner::validate_stages(profile, &p.stages).map_err(|e| {
            let given = options
                .boundaries
                .as_ref()
                .map_or_else(|| "(unset)".into(), |b| format!("{b:?}"));
            refuse("boundaries", given, e)
        })?;
        let t = planner::evaluate_under(profile, topology, &p.stages, sync);
        p.predicted_s = t.is_finite().then_some(t);
        return Ok(p);
    }
    let search = match options.search.as_str() {
        "hierarchical" => Search::Hierarchical,
        _ => Search::Flat,
    };
    let device = job.cluster.device_of(RoleId::Worker(0));
    let planned = PlanOptions {
        search,
        memory_bytes: Some(device.memory_bytes()),
        max_stages: None,
        sync,
        optimizer_slots: job.config.optimizer.state_slots() as u32,
    };
    if options.straight {
        let stages = job.config.workers as usize;
        return planner::straight(profile, topology, stages, &planned)
            .map_err(|e| refuse("straight", "true".into(), e));
    }
    planner::plan(profile, topology, &planned).map_err(|e| {
        refuse(
            "search",
            format!("{:?} (the planner's choice)", options.search),
            e,
        )
    })
}
