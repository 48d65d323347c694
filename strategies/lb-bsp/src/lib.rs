//! # LB-BSP: worker-adaptive batch sizes (003_f38350d714ce0428.txt)
//!
//! BSP whose **batch-size manager** sets each worker's batch `x_i` before every iteration so that
//! the global batch stays `X = workers × batch` while every worker's predicted iteration time is
//! equal: fast workers take more samples, stragglers fewer, and nobody waits at the barrier. The
//! iteration gradient is still the exact mean over the X samples, because the engine's servers
//! weight each push by its sample count (B1.5), and every clock's samples are a contiguous slice
//! of the run's global shuffled stream, so variable batches do not over-sample a shard (B6).
//!
//! ```toml
//! strategies = ["bsp", "lb-bsp"]
//! [strategy.lb-bsp]
//! predictor = "narx"   # narx | ema | memoryless | oracle
//! alpha = 0.2          # EMA weight (EMA predictor, NARX warm-up, communication-time EMA)
//! warmup = 500         # iterations of EMA before NARX is used (the paper); smaller for short runs
//! mode = "cpu"         # cpu: x ∝ predicted speed | gpu: profiled linear time model + comm EMA
//! # blocking = true    # default true on cpu, false on gpu
//! min_batch = 1
//! ```
//!
//! * **CPU rule** (B1.2): `x_i ∝ v̂_i`, rounded by largest remainders so `Σ x_i = X` exactly and
//!   `x_i ≥ min_batch`; with `comm_aware = true`, the water-filling generalization
//!   `x_i = v̂_i (T* − t^m_i)`. See [`alloc::cpu_rule`].
//! * **GPU rule** (B1.4): `t^p_i = m_i x + b_i` on `[x^s_i, x^o_i]`, profiled from the device and
//!   the model (see [`alloc::GpuProfile::from_device`]), plus an EMA of communication time;
//!   water-filling by bisection on the common time `T`. See [`alloc::gpu_rule`].
//! * **Predictors** (B1.3) behind [`predictor::SpeedPredictor`]: [`predictor::Memoryless`],
//!   [`predictor::Ema`], [`predictor::Narx`] (6 inputs, 2 tanh units, 17 parameters, trained
//!   online in candle with Adam, EMA while warming up, the paper's early-stopping rule) and
//!   [`predictor::Oracle`] (the true next speed, from the run's own straggler config).
//! * **Modes**: blocking (Algorithm 1) and non-blocking (publish one clock ahead); see
//!   [`coordinator::LbBspCoordinator`].
//!
//! Figures in the run summary: `lb-bsp.rmse` (speed-prediction RMSE in samples/s over the clocks
//! after the warm-up), `lb-bsp.rmse_relative` (RMSE / mean speed), `lb-bsp.overhead_s` and
//! `lb-bsp.overhead_share` (the manager's critical-path compute), `lb-bsp.train_s` (background
//! NARX training), `lb-bsp.infeasible_clocks` (GPU bounds relaxed), `lb-bsp.mean_batch_w<i>`.

#![warn(missing_docs)]

pub mod alloc;
pub mod coordinator;
pub mod options;
pub mod predictor;

pub use coordinator::LbBspCoordinator;
pub use options::{LbBspOptions, Mode, PredictorKind, Resolved};

use concord_engine::prelude::*;
use std::sync::Arc;

/// The `lb-bsp` strategy: fills the coordinator slot with the batch-size manager.
#[derive(Debug, Default)]
pub struct LbBsp;

impl Strategy for LbBsp {
    fn name(&self) -> &'static str {
        "lb-bsp"
    }

    fn summary(&self) -> &'static str {
        "LB-BSP: worker-adaptive batch sizes from predicted speeds (NARX), BSP semantics kept"
    }

    fn slots(&self) -> &'static [Slot] {
        &[Slot::Coordinator]
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn install(
        &self,
        options: Option<&toml::Value>,
        config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: LbBspOptions = parse_options(self.name(), options)?;
        let resolved = o.resolve(config)?;
        asm.set_coordinator(move |job| LbBspCoordinator::new(&job, resolved.clone()));
        Ok(())
    }
}

/// Registers `lb-bsp`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(LbBsp))?;
    Ok(())
}
