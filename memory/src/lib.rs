//! # Memory policies
//!
//! [`Resident`] keeps every tensor on the device and accounts its bytes against the device's
//! budget: parameters, gradients, optimizer state and activations. It moves nothing, so it is the
//! baseline every swapping policy is compared with, and it is what turns "this model does not fit"
//! into a clear simulated out-of-memory error. The policy itself is the engine's
//! ([`concord_engine::memory::Resident`], which tests that build contexts by hand use too); this
//! crate makes it the `resident` strategy.
//!
//! The swapping policies run every training iteration of a model with an operator graph layer
//! by layer through the engine's two-lane executor ([`concord_engine::memory::lanes`]):
//! - `dymem`: Dymem (Yang, HPDC 2020) — dependency-aware offload and prefetch with no barrier
//!   between the compute and memory lanes, and the GTBM allocator ([`alloc::Gtbm`]);
//! - `vdnn`: vDNN with a barrier per layer and a best-fit pool ([`alloc::BestFit`]);
//! - `single-stream`: Dymem's moves with copies and compute on one stream;
//! - `superneurons`: SuperNeurons without recomputation (convolution inputs only, best fit).

pub mod alloc;
pub mod options;
pub mod policies;
pub mod study;
pub mod swap;

mod fits;

use concord_engine::memory::layers::LayerPolicy;
pub use concord_engine::memory::Resident;
use concord_engine::prelude::*;
use options::{AllocatorKind, SwapOptions};
use policies::{Dymem, OffloadSet, SingleStream, SuperNeurons, Vdnn};
use std::sync::Arc;
use swap::Swapping;

/// The `resident` strategy (memory slot).
#[derive(Debug, Default)]
pub struct ResidentStrategy;

impl Strategy for ResidentStrategy {
    fn name(&self) -> &'static str {
        "resident"
    }
    fn summary(&self) -> &'static str {
        "Keep every tensor on the device; account bytes against its budget"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Memory]
    }
    fn install(
        &self,
        _options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        asm.set_memory(|_, _| Ok(Resident));
        Ok(())
    }
}

/// A swapping policy as a memory-slot strategy.
pub struct SwapStrategy {
    name: &'static str,
    summary: &'static str,
    allocator: AllocatorKind,
    /// Whether it sizes its pool from the first iteration plus β (Dymem).
    sizes_pool: bool,
    policy: fn(&SwapOptions) -> Box<dyn LayerPolicy>,
}

impl SwapStrategy {
    /// Every swapping strategy this crate registers.
    pub fn all() -> Vec<SwapStrategy> {
        vec![
            SwapStrategy {
                name: "dymem",
                summary:
                    "Dymem: dependency-aware offload/prefetch, no per-layer barrier, GTBM allocator",
                allocator: AllocatorKind::Gtbm,
                sizes_pool: true,
                policy: |_| Box::new(Dymem::default()),
            },
            SwapStrategy {
                name: "vdnn",
                summary: "vDNN: offload/prefetch with a barrier per layer, best-fit pool",
                allocator: AllocatorKind::BestFit,
                sizes_pool: false,
                policy: |o| Box::new(Vdnn::new(o.offload.map_or(OffloadSet::All, Into::into))),
            },
            SwapStrategy {
                name: "single-stream",
                summary: "Dymem's offloads with copies and compute on one stream (no overlap)",
                allocator: AllocatorKind::Gtbm,
                sizes_pool: false,
                policy: |_| Box::new(SingleStream),
            },
            SwapStrategy {
                name: "superneurons",
                summary: "SuperNeurons without recomputation: conv inputs offloaded, best-fit pool",
                allocator: AllocatorKind::BestFit,
                sizes_pool: false,
                policy: |_| Box::new(SuperNeurons),
            },
        ]
    }
}

impl SwapStrategy {
    /// Its policy under `options`, and the allocator it places with by default.
    pub fn layer_policy(&self, options: &SwapOptions) -> (Box<dyn LayerPolicy>, AllocatorKind) {
        ((self.policy)(options), self.allocator)
    }
}

impl Strategy for SwapStrategy {
    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Memory]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: SwapOptions = parse_options(self.name, options)?;
        o.check(self.name)?;
        let allocator = o.allocator.unwrap_or(self.allocator);
        let policy = self.policy;
        let sizes_pool = self.sizes_pool;
        asm.set_memory(move |job, role| {
            fits::largest_layer_fits(job, role)?;
            Ok(Swapping::new(
                policy(&o),
                allocator.build(),
                sizes_pool.then(|| o.beta_bytes()),
            ))
        });
        Ok(())
    }
}

/// Adds the memory policies to a registry.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(ResidentStrategy))?;
    for s in SwapStrategy::all() {
        registry.register(Arc::new(s))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_engine::error::EngineError;
    use concord_engine::ids::RoleId;
    use concord_engine::memory::{MemEvent, MemoryLedger, TensorClass};

    #[test]
    fn activations_come_and_go_and_peak_is_kept() {
        let mut ledger = MemoryLedger::new("machine 0 (cpu)".into(), RoleId::Worker(0), 1000);
        let mut p = Resident;
        let ev = |e| e;
        p.on_event(
            &ev(MemEvent::Allocate {
                class: TensorClass::Params,
                bytes: 300,
                what: "parameters".into(),
            }),
            &mut ledger,
        )
        .unwrap();
        p.on_event(
            &MemEvent::Forward {
                stage: 0,
                bytes: 400,
            },
            &mut ledger,
        )
        .unwrap();
        p.on_event(
            &MemEvent::Backward {
                stage: 0,
                bytes: 400,
            },
            &mut ledger,
        )
        .unwrap();
        assert_eq!(ledger.total(), 300);
        assert_eq!(ledger.peak, 700);
    }

    #[test]
    fn exceeding_the_budget_names_device_bytes_and_budget() {
        let mut ledger = MemoryLedger::new("machine 2 (k40c)".into(), RoleId::Worker(3), 1000);
        let mut p = Resident;
        p.on_event(
            &MemEvent::Allocate {
                class: TensorClass::Params,
                bytes: 900,
                what: "parameters".into(),
            },
            &mut ledger,
        )
        .unwrap();
        let e = p
            .on_event(
                &MemEvent::Forward {
                    stage: 4,
                    bytes: 200,
                },
                &mut ledger,
            )
            .unwrap_err();
        assert!(matches!(
            e,
            EngineError::OutOfMemory {
                needed: 1100,
                budget: 1000,
                ..
            }
        ));
        let msg = e.to_string();
        assert!(
            msg.contains("machine 2 (k40c)") && msg.contains("worker-3") && msg.contains("stage 4"),
            "{msg}"
        );
    }
}
