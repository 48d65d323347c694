//! # Memory policies
//!
//! [`Resident`] keeps every tensor on the device and accounts its bytes against the device's
//! budget: parameters, gradients, optimizer state and activations. It moves nothing, so it is the
//! baseline every swapping policy is compared with, and it is what turns "this model does not fit"
//! into a clear simulated out-of-memory error. The policy itself is the engine's
//! ([`concord_engine::memory::Resident`], which tests that build contexts by hand use too); this
//! crate makes it the `resident` strategy.

pub mod alloc;

pub use concord_engine::memory::Resident;
use concord_engine::prelude::*;
use std::sync::Arc;

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

/// Adds the memory policies to a registry.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(ResidentStrategy))?;
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
