//! `[strategy.dymem]`, `[strategy.vdnn]`, `[strategy.single-stream]` and
//! `[strategy.superneurons]`: the options users write, checked when the strategy is installed.

use crate::alloc::{BestFit, Gtbm};
use crate::policies::OffloadSet;
use concord_engine::error::EngineError;
use concord_engine::memory::alloc::DeviceAllocator;
use concord_engine::prelude::*;

/// Bytes per MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// The allocators a swapping policy may place tensors with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocatorKind {
    /// Dymem's grouping by mobility (low, high and incremental spaces).
    Gtbm,
    /// One arena, best fit (CNMeM, as vDNN and SuperNeurons use).
    BestFit,
}

impl AllocatorKind {
    /// A fresh allocator of this kind (its capacity is set before every iteration).
    pub fn build(self) -> Box<dyn DeviceAllocator> {
        match self {
            AllocatorKind::Gtbm => Box::new(Gtbm::new(0)),
            AllocatorKind::BestFit => Box::new(BestFit::new(0)),
        }
    }
}

/// Which feature maps vDNN sends to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VdnnOffload {
    /// vDNN-all: every candidate.
    All,
    /// vDNN-conv: the inputs of convolutions only.
    Conv,
}

impl From<VdnnOffload> for OffloadSet {
    fn from(o: VdnnOffload) -> OffloadSet {
        match o {
            VdnnOffload::All => OffloadSet::All,
            VdnnOffload::Conv => OffloadSet::ConvInputs,
        }
    }
}

/// What users write under a swapping strategy's table.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SwapOptions {
    /// The allocator (default: `gtbm` for `dymem` and `single-stream`, `best-fit` for `vdnn`
    /// and `superneurons`, as the thesis runs them).
    #[serde(default)]
    pub allocator: Option<AllocatorKind>,
    /// Dymem only: β, MiB. Dymem sizes its pool from the first iteration (which runs in the
    /// device's free memory) to that iteration's high-water mark plus β, against size
    /// fluctuations, and grows it by β after an iteration that does not fit. The thesis chose
    /// 300 MB on a 12 GB device whose request sizes jitter; a simulated iteration of a static
    /// graph repeats exactly, so the default is 0. Must be ≥ 0.
    #[serde(default)]
    pub beta_mib: Option<f64>,
    /// vDNN only: which feature maps go to the host (`all`, the default, or `conv`).
    #[serde(default)]
    pub offload: Option<VdnnOffload>,
}

impl SwapOptions {
    /// Checks the options of strategy `name`: β finite and non-negative, `offload` only for
    /// vDNN.
    pub fn check(&self, name: &str) -> Result<()> {
        let key = format!("strategy.{name}");
        if let Some(beta) = self.beta_mib {
            if name != "dymem" {
                return Err(EngineError::config(
                    format!("{key}.beta_mib"),
                    beta,
                    "only dymem sizes its pool (the others use the device's free memory)",
                ));
            }
            if !beta.is_finite() || beta < 0.0 {
                return Err(EngineError::config(
                    format!("{key}.beta_mib"),
                    beta,
                    "must be a non-negative number of MiB",
                ));
            }
        }
        if self.offload.is_some() && name != "vdnn" {
            return Err(EngineError::config(
                format!("{key}.offload"),
                "set",
                "only vdnn chooses its offload set (dymem and single-stream offload every candidate, superneurons the inputs of convolutions)",
            ));
        }
        Ok(())
    }

    /// β in bytes (0 when unset).
    pub fn beta_bytes(&self) -> u64 {
        (self.beta_mib.unwrap_or(0.0) * MIB) as u64
    }
}
