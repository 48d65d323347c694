//! The `agileml` strategy: AgileML's tiered elastic parameter servers, composed from the plan,
//! the workers, the per-machine servers and the elasticity controller.

use super::controller::Controller;
use super::options::AgileOptions;
use super::plan::Plan;
use super::server::AgileServer;
use super::worker::AgileWorker;
use concord_engine::prelude::*;
use concord_engine::ps::StaleSynchronous;
use std::sync::{Arc, Mutex, Weak};

/// The `agileml` strategy: fills the consistency (bulk-synchronous clocks), worker, server and
/// coordinator slots, and handles machines that join, are warned, or fail.
#[derive(Debug, Default)]
pub struct AgileMl;

/// The plan, derived once per job and shared by the role factories.
#[derive(Default)]
struct PlanCache {
    /// The job the plan was derived for and the plan.
    entry: Mutex<Option<(Weak<Job>, Arc<Plan>)>>,
}

impl PlanCache {
    fn get(&self, job: &Arc<Job>, options: &AgileOptions) -> Result<Arc<Plan>> {
        let mut entry = self.entry.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, plan)) = entry.as_ref() {
            if k.upgrade().is_some_and(|j| Arc::ptr_eq(&j, job)) {
                return Ok(plan.clone());
            }
        }
        let plan = Arc::new(Plan::new(job, options)?);
        *entry = Some((Arc::downgrade(job), plan.clone()));
        Ok(plan)
    }
}

impl Strategy for AgileMl {
    fn name(&self) -> &'static str {
        "agileml"
    }

    fn summary(&self) -> &'static str {
        "AgileML: tiered elastic parameter servers on reliable and transient machines (stages 1-3)"
    }

    fn slots(&self) -> &'static [Slot] {
        &[
            Slot::Consistency,
            Slot::Worker,
            Slot::Server,
            Slot::Coordinator,
        ]
    }

    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: AgileOptions = parse_options(self.name(), options)?;
        o.validate()?;
        // Clocks are bulk-synchronous: a read of clock c waits for every update of c − 1. The
        // strategy fills the consistency slot itself, so `ssp` or `asp` beside it is a start-up
        // error naming both.
        asm.consistency = Some(Arc::new(StaleSynchronous { slack: 0 }));
        asm.elastic_membership = true;
        let cache = Arc::new(PlanCache::default());
        let (c1, o1) = (cache.clone(), o.clone());
        asm.set_worker(move |job, id| AgileWorker::new(job.clone(), id, c1.get(&job, &o1)?));
        let (c2, o2) = (cache.clone(), o.clone());
        asm.set_server(move |job, id| AgileServer::new(job.clone(), id, c2.get(&job, &o2)?));
        asm.set_coordinator(move |job| Ok(Controller::new(job.clone(), cache.get(&job, &o)?)));
        Ok(())
    }
}
