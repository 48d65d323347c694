//! `dlrm-async-ps`: the baseline Sven is measured against (thesis §6.2, spec §3.2), a
//! TensorFlow-like asynchronous parameter server for DLRM training.
//!
//! The servers hold the embedding tables cut row-wise over them and the dense tensors dealt
//! round-robin; the workers pull the rows their batch looks up and the dense part, step, and push
//! the gradients, which the servers apply on arrival. No process waits for any other after an
//! update, so a worker's push lands on rows that other workers' pushes changed since its pull —
//! the unbounded staleness the thesis blames for the baseline's lower AUC. The workers report it
//! as the figures `async_ps.mean_staleness` and `async_ps.max_staleness` (each averaged over the
//! workers): per push, the other workers' pushes the server applied between the worker's pull
//! and that push, as the servers tell it with their next answer (a worker's pushes of its last
//! clock are not in the figures, no answer following them).
//!
//! Modules: [`layout`] (where the servers keep the model), [`batch`] (a batch's unique ids),
//! [`protocol`], [`options`], the server and the worker.

pub mod batch;
pub mod layout;
pub mod options;
pub mod protocol;
mod server;
mod worker;

pub use server::AsyncPsServer;
pub use worker::AsyncPsWorker;

use concord_engine::prelude::*;
use concord_engine::ps::Asynchronous;
use layout::ServerTables;
use options::AsyncPsOptions;
use std::sync::Arc;

/// The `dlrm-async-ps` strategy.
#[derive(Debug, Default)]
pub struct DlrmAsyncPs;

impl Strategy for DlrmAsyncPs {
    fn name(&self) -> &'static str {
        "dlrm-async-ps"
    }
    fn summary(&self) -> &'static str {
        "TensorFlow-like asynchronous parameter server for DLRM (Sven's baseline, Yang §6.2): row-wise tables on the servers, pushes applied on arrival"
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
        let opts: AsyncPsOptions = parse_options(self.name(), options)?;
        let opts = Arc::new(opts.check(self.name())?);
        if config.servers == 0 {
            return Err(EngineError::config(
                "servers",
                config.servers,
                "`dlrm-async-ps` keeps the embedding tables and the dense part on parameter servers: set servers >= 1",
            ));
        }
        asm.consistency = Some(Arc::new(Asynchronous));
        asm.placement = Some(Arc::new(ServerTables));
        asm.sparse_embeddings = true;
        let o = opts.clone();
        asm.set_worker(move |job, id| AsyncPsWorker::new(job, id, &o));
        asm.set_server(move |job, id| AsyncPsServer::new(&job, id, &opts));
        Ok(())
    }
    /// Its servers save their rows, dense tensors with optimizer state and counts, its workers
    /// their staleness figures and Zipf draws.
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        if let Some(other) = asm.owners().get(&Slot::Coordinator) {
            return Err(EngineError::Composition(format!(
                "`dlrm-async-ps` workers take no directives, but `{other}` fills the coordinator slot; they cannot be combined"
            )));
        }
        Ok(())
    }
}
