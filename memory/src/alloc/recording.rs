//! An allocator that writes down what it is asked: the allocation trace of an iteration, to
//! replay through other allocators ([`super::replay()`]) or under jittered sizes
//! ([`super::beta_failure_rate`]).

use super::replay::{AllocEvent, AllocTrace, TraceError};
use concord_engine::memory::alloc::{AllocError, AllocStats, Block, DeviceAllocator, Mobility};
use std::collections::HashMap;

/// Wraps an allocator and records every placement and release it serves (a refused request
/// leaves no trace: it changed nothing).
pub struct Recording {
    inner: Box<dyn DeviceAllocator>,
    events: Vec<AllocEvent>,
    live: HashMap<Block, u64>,
    next_id: u64,
}

impl Recording {
    /// Records what `inner` serves.
    pub fn new(inner: Box<dyn DeviceAllocator>) -> Recording {
        Recording {
            inner,
            events: Vec::new(),
            live: HashMap::new(),
            next_id: 0,
        }
    }

    /// The trace recorded since the last reset.
    pub fn trace(&self) -> Result<AllocTrace, TraceError> {
        AllocTrace::new(self.events.clone())
    }
}

impl DeviceAllocator for Recording {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn alloc(&mut self, bytes: u64, mobility: Mobility) -> Result<Block, AllocError> {
        let block = self.inner.alloc(bytes, mobility)?;
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(block, id);
        self.events.push(AllocEvent::Alloc {
            id,
            bytes,
            mobility,
        });
        Ok(block)
    }

    fn free(&mut self, block: Block) {
        if let Some(id) = self.live.remove(&block) {
            self.events.push(AllocEvent::Free { id });
        }
        self.inner.free(block);
    }

    fn stats(&self) -> AllocStats {
        self.inner.stats()
    }

    fn fragmentation(&self, bytes: u64) -> f64 {
        self.inner.fragmentation(bytes)
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn reset(&mut self, capacity: u64) {
        self.inner.reset(capacity);
        self.events.clear();
        self.live.clear();
        self.next_id = 0;
    }
}
