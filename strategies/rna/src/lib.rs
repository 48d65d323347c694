//! # RNA: randomized non-blocking partial allreduce (Yang thesis ch. 5, spec §2)
//!
//! Decentralized training that removes the allreduce barrier. Each round:
//!
//! 1. the **controller** (the coordinator role; it keeps no progress state) samples `q` distinct
//!    workers (power of two choices, q = 2) and probes them with the round id;
//! 2. a probed worker replies as soon as its gradient buffer holds a gradient the round would
//!    accept; the **first reply** makes its sender the initiator and the other probe expires
//!    (late replies carry an old round id and are ignored);
//! 3. the controller **activates** every worker: each takes its buffer (a weighted average of the
//!    gradients computed since its last contribution, newer ones weighing more; gradients more
//!    than η versions old dropped), or contributes a **null** gradient (zeros, w = 0) if it has
//!    nothing, and the group runs one ring allreduce of `[Σ g, Σ w]`
//!    ([`concord_engine::collective`]);
//! 4. every worker applies `ḡ = Σg/Σw` with learning rate `(Σw/P)·lr` (γ_k = Σw·γ with the
//!    per-worker γ = lr/P: full participation is the configured lr) to its replica, so replicas
//!    stay identical.
//!
//! Compute and communication are decoupled: a worker's compute never waits for a round (it
//! keeps computing on the latest parameters it has), and its communication side answers probes
//! and runs rings meanwhile ([`RnaWorker`]).
//!
//! ```toml
//! strategies = ["rna"]
//! [strategy.rna]
//! q = 2                       # probes per round, at most the workers (1 = eager-SGD's)
//! eta = 3                     # staleness bound
//! accumulate = "weighted-avg" # or "sum"
//! wait_for_all = false        # true: probe all, trigger when all are ready (= allreduce BSP)
//! bucket_mib = 64.0
//! hierarchy = false           # true: RNA-H (groups, RNA per group, averaging through a PS)
//! split_ratio = 0.5           # RNA-H split rule ζ > split_ratio · v (thesis literal: 1)
//! profile_steps = 20          # RNA-H: timed steps per worker before the groups form
//! sync_period = 1             # RNA-H: group rounds between two averagings
//! groups = []                 # RNA-H: explicit groups instead of profiling
//! merge = "average"           # RNA-H: server answers the mean of the groups' models, or
//!                             # "delta": adds each group's change to one global model
//! ```
//!
//! The hierarchical mode is described in [`hier`].
//!
//! Strategies: `rna`, `eager-sgd` (RNA with q = 1, the majority-collective baseline sharing
//! RNA's aggregation so the ablation isolates the sampling), `ad-psgd` (random pairwise model
//! averaging, atomic through an active/passive split). Figures: `rna.trigger_median_s` / `_mean_s` / `_sd_s` (probe to trigger),
//! `rna.contributors_share` (mean Σw/P), `rna.stale_share`, `rna.dropped`.
//!
//! One `iteration` of the config is one round (one model update).

#![warn(missing_docs)]

pub mod adpsgd;
pub mod buffer;
pub mod controller;
pub mod hier;
pub mod options;
pub mod protocol;
pub mod worker;

pub use adpsgd::{AdPsgdCoordinator, AdPsgdWorker};
pub use controller::RnaController;
pub use hier::{form_groups, AveragingServer, HierController};
pub use options::{Accumulate, Resolved, RnaOptions};
pub use worker::RnaWorker;

use concord_engine::collective::NoServer;
use concord_engine::prelude::*;
use std::sync::Arc;

const SLOTS: &[Slot] = &[Slot::Worker, Slot::Coordinator, Slot::Consistency];
/// `rna` also claims the server slot: RNA-H's averaging server (flat RNA leaves it idle).
const RNA_SLOTS: &[Slot] = &[
    Slot::Worker,
    Slot::Coordinator,
    Slot::Consistency,
    Slot::Server,
];

fn install_rna(name: &str, o: RnaOptions, config: &RunConfig, asm: &mut Assembly) -> Result<()> {
    let resolved = o.resolve(name, config)?;
    asm.consistency = Some(Arc::new(NoServer));
    let r = resolved.clone();
    asm.set_worker(move |job, id| RnaWorker::new(job, id, r.clone()));
    if let Some(h) = &resolved.hierarchy {
        let merge = h.merge;
        asm.set_server(move |job, id| AveragingServer::for_job(merge, &job, id));
        asm.set_coordinator(move |job| HierController::new(resolved.clone(), &job));
        return Ok(());
    }
    asm.set_coordinator(move |job| RnaController::new(resolved.clone(), &job));
    Ok(())
}

/// The `rna` strategy.
#[derive(Debug, Default)]
pub struct Rna;

impl Strategy for Rna {
    fn name(&self) -> &'static str {
        "rna"
    }
    fn summary(&self) -> &'static str {
        "RNA: randomized non-blocking partial allreduce with power-of-two probing (Yang thesis ch. 5)"
    }
    fn slots(&self) -> &'static [Slot] {
        RNA_SLOTS
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        install_rna(
            self.name(),
            parse_options(self.name(), options)?,
            config,
            asm,
        )
    }
    /// Flat RNA and RNA-H resume (RNA-H's groups, profiles and averaging server included).
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Options of `eager-sgd`: RNA's, without `q` (always 1) or `wait_for_all`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EagerOptions {
    /// Staleness bound (as RNA's).
    pub eta: i64,
    /// Local accumulation rule (as RNA's).
    pub accumulate: Accumulate,
    /// Fusion bucket in MiB (as RNA's).
    pub bucket_mib: f64,
}

impl Default for EagerOptions {
    fn default() -> Self {
        let r = RnaOptions::default();
        EagerOptions {
            eta: r.eta,
            accumulate: r.accumulate,
            bucket_mib: r.bucket_mib,
        }
    }
}

/// The `eager-sgd` strategy: a partial allreduce with a single random initiator per round.
#[derive(Debug, Default)]
pub struct EagerSgd;

impl Strategy for EagerSgd {
    fn name(&self) -> &'static str {
        "eager-sgd"
    }
    fn summary(&self) -> &'static str {
        "eager-SGD (majority collective): RNA's partial allreduce with one random initiator per round (q = 1)"
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
        let e: EagerOptions = parse_options(self.name(), options)?;
        let o = RnaOptions {
            q: Some(1),
            eta: e.eta,
            accumulate: e.accumulate,
            wait_for_all: false,
            bucket_mib: e.bucket_mib,
            ..RnaOptions::default()
        };
        install_rna(self.name(), o, config, asm)
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Options of `ad-psgd`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdPsgdOptions {}

/// The `ad-psgd` strategy: asynchronous decentralized SGD with random pairwise averaging.
#[derive(Debug, Default)]
pub struct AdPsgd;

impl Strategy for AdPsgd {
    fn name(&self) -> &'static str {
        "ad-psgd"
    }
    fn summary(&self) -> &'static str {
        "AD-PSGD: each worker averages its model with a random peer, then applies its own gradient (Lian et al.)"
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
        parse_options::<AdPsgdOptions>(self.name(), options)?;
        if config.workers < 2 {
            return Err(EngineError::config(
                "workers",
                config.workers,
                "`ad-psgd` averages with a peer: at least 2 workers",
            ));
        }
        asm.consistency = Some(Arc::new(NoServer));
        asm.set_worker(AdPsgdWorker::new);
        asm.set_coordinator(|job| Ok(AdPsgdCoordinator::new(job.config.workers)));
        Ok(())
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Registers `rna`, `eager-sgd` and `ad-psgd`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Rna))?;
    registry.register(Arc::new(EagerSgd))?;
    registry.register(Arc::new(AdPsgd))?;
    Ok(())
}
