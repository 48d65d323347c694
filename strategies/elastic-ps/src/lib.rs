//! # Elastic parameter servers: PSLD (004_3d04b63091f008e9.txt), AgileML and Proteus
//!
//! Three mechanisms live here: PSLD's load-aware block placement (this page), AgileML's tiered
//! elastic parameter servers on reliable and transient machines ([`agileml`], strategy
//! `agileml`), and Proteus's spot-market allocator BidBrain with its trace-driven cost study
//! ([`proteus`], `concord market`).
//!
//! ## PSLD
//!
//! Synchronous parameter-server training where the block → server map is not fixed. Parameters
//! are cut into blocks of at most `block_bytes` (U, 4 MiB by default) dealt round-robin; every
//! worker times its exchange with each server and reports per period; the scheduler fits
//! `time(r, s) = α_r·s + β_r` per server with its uncertainty and, when the servers' speeds
//! differ too much (`(best − worst)/worst > 1`), reassigns every block: the superior set by 90%
//! confidence bounds (Algorithm 1), the exploit cost (Algorithm 2) with probability 1 − ε and a
//! uniformly random server with probability ε (Algorithm 3). A server left without blocks is in
//! effect scaled in; when the superior set is smaller than half the initial servers, one more
//! server is launched (scale-out). Blocks move between servers live, at an iteration boundary, with
//! their optimizer state (§1.10).
//!
//! ```toml
//! strategies = ["elastic-ps"]
//! [strategy.elastic-ps]
//! policy = "psld"        # psld | psld-no-explore | strawman | mxnet | tf | round-robin
//! epsilon = 0.1          # exploration probability, in [0, 1]
//! theta0 = 1.0           # weight of the normalised predicted time
//! theta1 = 1.0           # weight of the workload share
//! report_every = 20      # iterations per telemetry period
//! history = 5            # periods in the fitting window
//! migration = "overlapped"   # or "after-barrier"
//! # add_server_at = [40]                                # scheduled ADD_SERVER
//! # remove_servers = [{ server = 1, at_iteration = 60 }] # scheduled DEL_SERVER
//! ```
//!
//! Baselines: `mxnet` (MXNet's default: tensors of ≥ 1 M elements split over all servers, smaller
//! ones whole on `key·9973 mod M`; the paper's "Baseline"), `tf` (TensorFlow's round-robin by
//! tensor), `strawman` (reassignment in proportion to measured speed), `psld-no-explore` (ε = 0),
//! `round-robin` (PSLD's initial assignment, never changed).
//!
//! Figures in the run summary (`elastic-ps.*`): `epochs`, `blocks_moved`, `migrated_mb`,
//! `suspension_s_mean`/`_max` (training suspended per epoch, first worker blocked → resume),
//! `checkpoint_restart_s` (the emulated checkpoint-and-restart alternative) and
//! `suspension_vs_restart`, `superior_mean`, `scale_outs`, `removals`, `servers_final`,
//! `servers_used_final`, `load_mb_s<i>` (bytes per server at the end). The suspension figures
//! exist only where a reassignment happened and `superior_mean` only where a superior set was
//! computed: undefined is left out, not reported as 0.

#![warn(missing_docs)]

pub mod agileml;
pub mod assign;
pub mod options;
pub mod placement;
pub mod policy;
pub mod proteus;
pub mod protocol;
pub mod psld;
pub mod scheduler;
pub mod server;
pub mod telemetry;
pub mod worker;

pub use options::{ElasticOptions, MigrationMode, PolicyKind, Resolved};
pub use placement::ElasticPlacement;
pub use scheduler::Scheduler;
pub use server::ElasticServer;
pub use worker::ElasticWorker;

use concord_engine::prelude::*;
use concord_engine::ps::StaleSynchronous;
use std::sync::Arc;

/// The `elastic-ps` strategy: fills the consistency (synchronous), placement, worker, server and
/// coordinator slots.
#[derive(Debug, Default)]
pub struct ElasticPs;

impl Strategy for ElasticPs {
    fn name(&self) -> &'static str {
        "elastic-ps"
    }

    fn summary(&self) -> &'static str {
        "PSLD: elastic parameter servers with load-aware block placement, scaling and live migration"
    }

    fn slots(&self) -> &'static [Slot] {
        &[
            Slot::Consistency,
            Slot::Placement,
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
        let o: ElasticOptions = parse_options(self.name(), options)?;
        let resolved = o.resolve(config)?;
        // PSLD trains synchronously only (the paper's scope, §1.1): a block's clock-`c` value is
        // served once every worker's push for `c` is applied. The strategy fills the consistency
        // slot itself, so combining it with `ssp`, `asp` or `bsp` is a start-up error naming both.
        asm.consistency = Some(Arc::new(StaleSynchronous { slack: 0 }));
        asm.placement = Some(Arc::new(ElasticPlacement::new(
            resolved.policy,
            resolved.bigarray_bound,
        )));
        asm.standby_servers = resolved.max_servers - resolved.initial_servers;
        let w = resolved.clone();
        asm.set_worker(move |job, id| ElasticWorker::new(job, id, w.clone()));
        asm.set_server(move |job, id| ElasticServer::for_job(&job, id));
        let c = resolved;
        asm.set_coordinator(move |job| Scheduler::for_job(job, c.clone()));
        Ok(())
    }

    /// Its roles save the placement, the servers' blocks (wherever they moved) and the
    /// scheduler's history; a cut holds no reassignment open (one that would switch past it
    /// waits for the next period, a membership change for the next stretch).
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Registers `elastic-ps`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(ElasticPs))?;
    registry.register(Arc::new(agileml::AgileMl))?;
    Ok(())
}
