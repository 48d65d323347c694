//! A layer-granular swapping policy as a device's [`MemoryPolicy`]: long-lived tensors
//! (parameters, gradients, optimizer state) are accounted resident, and every training iteration
//! of a model with an operator graph runs through the engine's two-lane executor under the
//! policy's hooks and allocator.

use concord_engine::memory::alloc::DeviceAllocator;
use concord_engine::memory::layers::LayerPolicy;
use concord_engine::memory::{Layered, MemAction, MemEvent, MemoryLedger, MemoryPolicy, Resident};
use concord_engine::prelude::Result;

/// A swapping policy with its allocator; see the module docs.
pub struct Swapping {
    policy: Box<dyn LayerPolicy>,
    allocator: Box<dyn DeviceAllocator>,
    pool_reserve: Option<u64>,
}

impl Swapping {
    /// `policy` placing tensors with `allocator`; with `pool_reserve = Some(β)` its pool is sized
    /// from the first iteration plus β bytes ([`Layered::pool_reserve`]), with `None` it is the
    /// device's free memory.
    pub fn new(
        policy: Box<dyn LayerPolicy>,
        allocator: Box<dyn DeviceAllocator>,
        pool_reserve: Option<u64>,
    ) -> Swapping {
        Swapping {
            policy,
            allocator,
            pool_reserve,
        }
    }
}

impl MemoryPolicy for Swapping {
    fn name(&self) -> String {
        format!("{} ({})", self.policy.name(), self.allocator.name())
    }

    /// Long-lived tensors, and the per-stage activations of a model without an operator graph,
    /// are kept resident.
    fn on_event(&mut self, event: &MemEvent, ledger: &mut MemoryLedger) -> Result<Vec<MemAction>> {
        Resident.on_event(event, ledger)
    }

    fn layered(&mut self) -> Option<Layered<'_>> {
        Some(Layered {
            policy: self.policy.as_mut(),
            allocator: self.allocator.as_mut(),
            pool_reserve: self.pool_reserve,
        })
    }
}
