//! # Fela's baselines: model parallelism (`fela-mp`) and hybrid parallelism (`fela-hp`)
//!
//! The two baselines the Fela paper compares with besides data parallelism, both BSP with no
//! staleness, so an iteration is one SGD step over the global batch X = batch × workers and a
//! run ends with the parameters BSP data parallelism reaches (to rounding).
//!
//! - **`fela-mp`** ([`PipelineWorker`]): the model cut into N contiguous pipeline stages, one
//!   per worker, balanced in compute ([`balance`]); GPipe-style micro-batches (all forward, then
//!   all backward in reverse, then each stage's update). The worst work conservation of the
//!   three: the pipeline bubble, and small micro-batches far from the device's saturation.
//! - **`fela-hp`** ([`HybridWorker`]): Stanza-like. The stages before the FC block are
//!   data-parallel over N−1 conv workers (gradients allreduced among them); the FC block runs
//!   on the last worker on the whole batch. Its traffic grows with X, so the FC worker becomes
//!   the bottleneck at large batches.
//!
//! ```toml
//! strategies = ["fela-mp"]
//! [strategy.fela-mp]
//! micro_batch = 16          # the last micro-batch is smaller when it does not divide X
//! # boundaries = [4, 9, 14] # where stages 2.. start; unset: the compute-balanced split
//!
//! # strategies = ["fela-hp"]
//! # [strategy.fela-hp]
//! # fc_from = 16            # the FC block's first stage; unset: the first dense stage
//! ```
//!
//! Each worker reports the part of the model it holds (MP: its stage; HP: worker 0 the conv
//! part, the FC worker the FC block). Figures: `<name>.bubble_share`,
//! `<name>.busy_share.worker-<w>`, and `fela-mp.micro_batches`, `fela-mp.boundary.<k>` or
//! `fela-hp.fc_from`.

pub mod balance;
pub mod figures;
pub mod hybrid;
pub mod options;
pub mod pipeline;
pub mod protocol;

pub use figures::FiguresCoordinator;
pub use hybrid::HybridWorker;
pub use options::{HpOptions, HpPlan, MpOptions, MpPlan};
pub use pipeline::PipelineWorker;

use concord_engine::collective::NoServer;
use concord_engine::prelude::*;
use concord_engine::submodel::Held;
use std::sync::Arc;

const SLOTS: &[Slot] = &[Slot::Worker, Slot::Coordinator, Slot::Consistency];

/// When the job resumes, restores worker `id`'s `held` part from the one `holder` reported at
/// the checkpoint (its own, or a replica's twin): both baselines update each part once per
/// iteration, so the update count is the checkpoint's clock.
fn resume_held(job: &Job, id: WorkerId, holder: WorkerId, held: &mut Held) -> Result<()> {
    if job.resumed(RoleId::Worker(id)).is_none() {
        return Ok(());
    }
    let part = job
        .resumed(RoleId::Worker(holder))
        .and_then(|cp| cp.model)
        .ok_or_else(|| {
            EngineError::protocol(
                RoleId::Worker(id),
                format!("the checkpoint holds no model part of worker {holder}"),
            )
        })?;
    held.restore(&job.layout, &part, job.clocks().start)
}

/// The `fela-mp` strategy.
#[derive(Debug, Default)]
pub struct FelaMp;

impl Strategy for FelaMp {
    fn name(&self) -> &'static str {
        "fela-mp"
    }
    fn summary(&self) -> &'static str {
        "Fela's MP baseline: a compute-balanced pipeline, one stage per worker, GPipe micro-batches under BSP (Fela, ICPP'20)"
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
        let o: MpOptions = parse_options(self.name(), options)?;
        o.check(config)?;
        asm.consistency = Some(Arc::new(NoServer));
        let ow = o.clone();
        asm.set_worker(move |job, id| {
            let plan = Arc::new(ow.resolve(&job)?);
            PipelineWorker::new(job, id, plan)
        });
        asm.set_coordinator(move |job| {
            let plan = o.resolve(&job)?;
            let mut fixed = vec![(
                "fela-mp.micro_batches".to_string(),
                plan.micro_batches.len() as f64,
            )];
            for (k, b) in plan.boundaries.iter().enumerate() {
                fixed.push((format!("fela-mp.boundary.{}", k + 1), *b as f64));
            }
            FiguresCoordinator::new("fela-mp", fixed, &job)
        });
        Ok(())
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// The `fela-hp` strategy.
#[derive(Debug, Default)]
pub struct FelaHp;

impl Strategy for FelaHp {
    fn name(&self) -> &'static str {
        "fela-hp"
    }
    fn summary(&self) -> &'static str {
        "Fela's HP baseline (Stanza-like): conv layers data-parallel on N-1 workers, the FC block on the last (Fela, ICPP'20)"
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
        let o: HpOptions = parse_options(self.name(), options)?;
        o.check(config)?;
        asm.consistency = Some(Arc::new(NoServer));
        let ow = o.clone();
        asm.set_worker(move |job, id| {
            let plan = Arc::new(ow.resolve(&job)?);
            HybridWorker::new(job, id, plan)
        });
        asm.set_coordinator(move |job| {
            let plan = o.resolve(&job)?;
            let fixed = vec![("fela-hp.fc_from".to_string(), plan.fc_from as f64)];
            FiguresCoordinator::new("fela-hp", fixed, &job)
        });
        Ok(())
    }
    fn resumes(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Registers `fela-mp` and `fela-hp`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(FelaMp))?;
    registry.register(Arc::new(FelaHp))?;
    Ok(())
}
