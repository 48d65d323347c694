//! # Allreduce data parallelism (Horovod-like)
//!
//! The decentralized baseline of Yang's thesis ch. 5 (§5.5.3, "Horovod"): every iteration each
//! worker computes the gradient of its share of the global batch, the workers sum their fused
//! gradients with a ring allreduce ([`concord_engine::collective`]), and every worker applies the
//! same averaged update to its own replica. There is no parameter server: the model lives on the
//! workers and every replica stays bit-identical. The ring is an implicit barrier, so the slowest
//! worker sets the pace of every iteration (the long-tail effect RNA removes).
//!
//! ```toml
//! strategies = ["allreduce"]
//! [strategy.allreduce]
//! bucket_mib = 64.0   # tensor-fusion bucket (Horovod's default fusion threshold is 64 MiB)
//! ```
//!
//! The fused buffer is `[g_0, …, g_{T−1}, w]` with `w = 1` per worker; the update is
//! `x ← opt(x, Σg / Σw)` with the configured learning rate (Σw = P), exactly what RNA does when
//! every worker contributes ([`concord_engine::collective::LocalModel::apply_reduced`]), so RNA in
//! wait-for-all mode reproduces this strategy bit for bit. With equal batches it is the same SGD
//! as BSP over parameter servers (which weights by samples), up to float rounding.
//!
//! Fills the `worker` slot and the `consistency` slot (with
//! [`concord_engine::collective::NoServer`]: there is no read rule to set); the engine's servers
//! are started but idle.

#![warn(missing_docs)]

mod worker;

pub use worker::AllreduceWorker;

use concord_engine::collective::NoServer;
use concord_engine::prelude::*;
use serde::Deserialize;
use std::sync::Arc;

/// Options of `allreduce` (`[strategy.allreduce]`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AllreduceOptions {
    /// Tensor-fusion bucket size in MiB (> 0). Default 64, Horovod's fusion threshold.
    pub bucket_mib: f64,
}

impl Default for AllreduceOptions {
    fn default() -> Self {
        AllreduceOptions { bucket_mib: 64.0 }
    }
}

impl AllreduceOptions {
    /// The bucket size in fp32 elements; a non-positive or non-finite size is an error naming
    /// the key.
    pub fn bucket_elems(&self, strategy: &str) -> Result<usize> {
        if !(self.bucket_mib.is_finite() && self.bucket_mib > 0.0) {
            return Err(EngineError::config(
                format!("strategy.{strategy}.bucket_mib"),
                self.bucket_mib,
                "must be a finite size in MiB > 0",
            ));
        }
        Ok(((self.bucket_mib * 1024.0 * 1024.0 / 4.0) as usize).max(1))
    }
}

/// The `allreduce` strategy.
#[derive(Debug, Default)]
pub struct Allreduce;

impl Strategy for Allreduce {
    fn name(&self) -> &'static str {
        "allreduce"
    }
    fn summary(&self) -> &'static str {
        "Allreduce data parallelism (Horovod-like): ring allreduce of fused gradients every iteration, no parameter server"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Worker, Slot::Consistency]
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: AllreduceOptions = parse_options(self.name(), options)?;
        let bucket = o.bucket_elems(self.name())?;
        asm.consistency = Some(Arc::new(NoServer));
        asm.set_worker(move |job, id| AllreduceWorker::new(job, id, bucket));
        Ok(())
    }
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        if let Some(other) = asm.owners().get(&Slot::Coordinator) {
            return Err(EngineError::Composition(format!(
                "`allreduce` workers take no directives, but `{other}` fills the coordinator slot; they cannot be combined"
            )));
        }
        Ok(())
    }
}

/// Registers `allreduce`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Allreduce))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_bucket_sizes_name_the_key() {
        let mut asm = Assembly::default();
        let cfg = RunConfig::default();
        for bad in ["bucket_mib = 0.0", "bucket_mib = -3.0", "bucket_mib = nan"] {
            let v: toml::Value = toml::from_str(bad).unwrap();
            let e = Allreduce
                .install(Some(&v), &cfg, &mut asm)
                .unwrap_err()
                .to_string();
            assert!(e.contains("strategy.allreduce.bucket_mib"), "{e}");
        }
        let v: toml::Value = toml::from_str("bucket = 1.0").unwrap();
        let e = Allreduce
            .install(Some(&v), &cfg, &mut asm)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bucket"), "{e}");
        assert_eq!(
            AllreduceOptions::default().bucket_elems("x").unwrap(),
            16 * 1024 * 1024
        );
    }
}
