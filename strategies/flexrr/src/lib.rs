//! # FlexRR: SSP plus RapidReassignment (Harlap thesis ch. 3, spec §4)
//!
//! Stale synchronous parallel on a parameter server, plus peer-to-peer work shedding: a worker
//! that falls behind the helpers of its fixed helper group hands them contiguous ranges cut from
//! the tail of its current clock's work, which they have prefetched. Reassignments are temporary
//! (the rest of the clock), every unit is processed exactly once, and there is no central
//! arbiter. The slack gives time to detect a slow worker and move work before anyone blocks.
//!
//! - [`worker`]: the worker loop (Algorithms 1 and 2, offers, cancels, flush before
//!   `help-completed`, serving peers during every wait).
//! - [`server`]: the LazyTable-style shard: additive deltas, per-clock versions, SSP reads.
//! - [`groups`]: helper groups (one on the same machine, the others on distinct machines).
//! - [`protocol`]: progress-report, do-this, begun-helping, help-completed, cancel-help,
//!   cancel-ack.
//! - [`coordinator`]: ends the run and checks that every (clock, unit) was processed once.
//!
//! The thesis's baselines are modes of the same system, as in its experiments:
//!
//! ```toml
//! strategies = ["flexrr"]
//! [strategy.flexrr]
//! slack = 1              # 0: BSP RR
//! reassignment = true    # false: plain SSP (slack 1) or BSP (slack 0)
//! units = 100            # work units per worker per clock (batch / units samples each)
//! group_size = 4
//! initial = 0.025
//! follow_up = 0.05
//! checks = 100           # message checks per iteration (unset: 100, at most one per unit)
//! check_cost_s = 2e-5
//! trigger = 0.2
//! report_at = 0.75
//! replication = 1.0      # ρ: prefetched tail of each helpee's work
//! read_my_writes = true
//! # uneven = { fraction_machines = 0.5, share = 0.75 }
//! ```
//!
//! Workers apply plain SGD deltas (`-(lr / units) · (g + weight_decay · w)` per unit, `units`
//! being every worker's units of a clock) to their cached copy and send them to the servers,
//! which add them up: the optimizer must be SGD without momentum, and a clock moves the model by
//! `lr` times the mean gradient, as under the engine's strategies (see [`rate`]). Figures:
//! `flexrr.reassigned_share`, `flexrr.units_verified`, offers, follow-ups, cancels, discards,
//! checks and inbox polls per worker-clock, and the reassignment's messages and bytes per unit
//! moved.

#![warn(missing_docs)]

pub mod coordinator;
pub mod groups;
pub mod options;
pub mod protocol;
pub mod rate;
pub mod server;
pub mod worker;

pub use coordinator::{FlexCoordinator, Ledger};
pub use groups::HelperGroups;
pub use options::{FlexrrOptions, Resolved};
pub use server::FlexServer;
pub use worker::FlexWorker;

use concord_engine::cluster::Cluster;
use concord_engine::prelude::*;
use concord_engine::ps::StaleSynchronous;
use std::sync::Arc;

/// The `flexrr` strategy.
#[derive(Debug, Default)]
pub struct Flexrr;

impl Strategy for Flexrr {
    fn name(&self) -> &'static str {
        "flexrr"
    }
    fn summary(&self) -> &'static str {
        "FlexRR: SSP plus peer-to-peer RapidReassignment of work (Harlap thesis ch. 3)"
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
        config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: FlexrrOptions = parse_options(self.name(), options)?;
        let cluster = Cluster::resolve(&config.cluster, config.workers, config.servers)?;
        let devices: Vec<_> = (0..config.workers)
            .map(|w| cluster.device_of(RoleId::Worker(w)))
            .collect();
        let resolved = Arc::new(o.resolve(config, &cluster.worker_machine, &devices)?);
        asm.consistency = Some(Arc::new(StaleSynchronous {
            slack: resolved.options.slack,
        }));
        let r = resolved.clone();
        asm.set_worker(move |job, id| FlexWorker::new(job, id, r.clone()));
        let eager = resolved.options.slack > 0;
        asm.set_server(move |job, id| FlexServer::new(&job, id, eager));
        asm.set_coordinator(move |job| {
            FlexCoordinator::new(resolved.units.clone(), job.clocks(), &job)
        });
        Ok(())
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Adds `flexrr` to a registry.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Flexrr))?;
    Ok(())
}
