//! # Fela: token-based scheduling for flexible hybrid parallelism
//!
//! The model is split offline into a few sequential sub-models ([`partition`], `concord_engine::submodel`).
//! A central **token server** (the coordinator role, [`TokenServerRole`]) holds no parameters:
//! it hands out **tokens**, "train sub-model i on b_i samples", to workers that ask for them
//! ([`server`], [`plan`]). Higher-level tokens appear as the lower-level tokens they depend on
//! complete, so fast workers take more tokens and slow ones fewer: stragglers are absorbed
//! reactively. Three policies refine the distribution: ADS (deepest level first, then the best
//! data locality), HF (a sub-bucket per worker, helpers steal from stragglers) and CTD (the
//! communication-heavy sub-model trains on a subset of workers only, which shrinks its sync).
//! Training stays BSP: at the end of each iteration every sub-model's gradients are summed
//! over the workers that keep it ([`FelaWorker`]), so an iteration is one SGD step over the
//! global batch. The first iterations try the configurations (weights per sub-model, CTD subset
//! size) and keep the fastest ([`tuner`]).
//!
//! ```toml
//! strategies = ["fela"]
//! [strategy.fela]
//! # boundaries = [8, 16]   # where sub-models 2, 3 start; unset: bin-partitioned split
//! bin_width = 16
//! # threshold_batch = 16   # b_th of Eq. 2; unset: sub-model 1's, from the device model
//! # weights = [1, 2, 4]    # per sub-model; unset: tuned (13 cases × tune_iters iterations)
//! # ctd_size = 4           # with weights: the CTD subset size (unset: all workers, CTD off)
//! # ctd_submodel = 3       # unset: the sub-model with the most parameter bytes per FLOP
//! ads = true
//! hf = true
//! tune_iters = 5
//! late_start = true        # stragglers' start delay slept before the first token request
//! ```
//!
//! Figures: `fela.tokens`, `fela.locking_waits`, `fela.steals`, `fela.conflicts`,
//! `fela.remote_fetches`, `fela.remote_fetch_bytes`, `fela.local_fetches`, `fela.sync_bytes`,
//! the configuration kept (`fela.weight.<i>`, `fela.ctd_size`), each tuning case's mean
//! iteration seconds (`fela.case.<k>.w<weights>.s<subset>_s`), the saving of the best case over
//! the worst (`fela.tuning_gap`, Fig. 6b) and the mean iteration after tuning (`fela.iter_s`).

#![warn(missing_docs)]

pub mod baselines;
pub mod coordinator;
pub mod options;
pub mod partition;
pub mod plan;
pub mod protocol;
pub mod server;
pub mod tuner;
pub mod worker;

pub use coordinator::TokenServerRole;
pub use options::{Case, FelaOptions, Resolved};
pub use server::{Counters, Ctd, Policies, Token, TokenServer};
pub use worker::FelaWorker;

use concord_engine::collective::NoServer;
use concord_engine::model::ModelSpec;
use concord_engine::prelude::*;
use std::sync::Arc;

const SLOTS: &[Slot] = &[Slot::Worker, Slot::Coordinator, Slot::Consistency];

/// The options resolved against a job, refusing models that are not a stack of stages.
fn resolve(o: &FelaOptions, job: &Job) -> Result<Resolved> {
    if let ModelSpec::Mf(_) | ModelSpec::Graph(_) = job.model {
        return Err(EngineError::config(
            "model.kind",
            format!("{:?}", job.config.model.kind()),
            "`fela` splits a model into sub-models of stages: use a staged network or a profile",
        ));
    }
    o.resolve(job)
}

/// The `fela` strategy.
#[derive(Debug, Default)]
pub struct Fela;

impl Strategy for Fela {
    fn name(&self) -> &'static str {
        "fela"
    }
    fn summary(&self) -> &'static str {
        "Fela: token-based scheduling of sub-model work with ADS, HF and CTD, and runtime tuning (Fela, ICPP'20)"
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
        let o: FelaOptions = parse_options(self.name(), options)?;
        o.check(config)?;
        asm.consistency = Some(Arc::new(NoServer));
        let ow = o.clone();
        asm.set_worker(move |job, id| {
            let r = resolve(&ow, &job)?;
            FelaWorker::new(job, id, r)
        });
        asm.set_coordinator(move |job| {
            let r = resolve(&o, &job)?;
            let lat = job.cluster.device_of(RoleId::Worker(0)).latency_us * 1e-6;
            TokenServerRole::new(r, job.config.workers, job.clocks(), 2.0 * lat, &job)
        });
        Ok(())
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Registers `fela`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Fela))?;
    baselines::register(registry)?;
    Ok(())
}
