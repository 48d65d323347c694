//! The device allocator seam: where in a device's memory each tensor of an iteration is placed,
//! so that fragmentation (free bytes that no request can use) counts against the budget like
//! the tensors themselves.
//!
//! A layer-granular memory policy asks its allocator for a block whenever a tensor becomes
//! resident and returns it when the tensor is released or moved to the host. The allocator's
//! footprint (the bytes of the device it had to reserve, holes included) is what must fit the
//! device; a request it cannot place within its capacity is a simulated out-of-memory.
//! Implementations: a best-fit single arena (the vDNN / CNMeM baseline) and GTBM, Dymem's
//! grouping of tensors by mobility, live in the `concord-memory` crate.

use serde::Serialize;
use thiserror::Error;

/// How long a tensor lives and how it moves, which a grouping allocator places by (Dymem's
/// Algorithm 4). Single-arena allocators ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mobility {
    /// One consumer, consumed next, then offloaded or freed: short-lived.
    Movable,
    /// A fork output or a tensor waiting for a join: lives across several later operations.
    Temporary,
    /// A small output of a fully-connected, softmax or dropout layer, never moved: allocated and
    /// freed in stack order.
    Reclaimed,
}

/// A placed block: what [`DeviceAllocator::alloc`] returns and [`DeviceAllocator::free`] takes
/// back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Block {
    /// Start address, in bytes from the start of the block's space.
    pub offset: u64,
    /// Size in bytes (as requested).
    pub bytes: u64,
    /// Which of the allocator's spaces holds it (0 for single-arena allocators).
    pub space: u8,
}

/// A request the allocator cannot place within its capacity.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "cannot place {bytes} bytes: {used} in use, {free} free but the largest hole is {largest_hole}, capacity {capacity}"
)]
pub struct AllocError {
    /// The request.
    pub bytes: u64,
    /// Bytes held by live blocks.
    pub used: u64,
    /// Free bytes within the footprint and capacity.
    pub free: u64,
    /// The largest contiguous free region a request could have taken.
    pub largest_hole: u64,
    /// The allocator's capacity.
    pub capacity: u64,
}

/// A snapshot of an allocator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct AllocStats {
    /// Bytes held by live blocks.
    pub used: u64,
    /// Bytes of the device the allocator spans now, holes included.
    pub footprint: u64,
    /// The largest footprint so far: the memory the iteration needs with this allocator.
    pub high_water: u64,
    /// Free bytes inside the footprint (holes).
    pub holes: u64,
}

/// Places tensors in a device's memory; see the module docs.
pub trait DeviceAllocator: Send {
    /// Short name for reports (`best-fit`, `gtbm`).
    fn name(&self) -> &'static str;

    /// Places `bytes` for a tensor of mobility `mobility`; an error when it does not fit the
    /// capacity.
    fn alloc(&mut self, bytes: u64, mobility: Mobility) -> Result<Block, AllocError>;

    /// Returns a block [`DeviceAllocator::alloc`] gave out.
    fn free(&mut self, block: Block);

    /// Where the allocator stands.
    fn stats(&self) -> AllocStats;

    /// The fragmentation a request of `bytes` meets (Dymem's Eq. 4.1 generalised to any size):
    /// the share of free memory in regions too small to serve it, `1 − Σ{free regions ≥ bytes} /
    /// Σ{free regions}`, over the free memory the allocator may still use (holes and the room
    /// left up to its capacity). 0 when nothing is free.
    fn fragmentation(&self, bytes: u64) -> f64;

    /// The bytes it may span at most.
    fn capacity(&self) -> u64;

    /// Forgets every block and the high-water mark, and takes a new capacity: the start of a
    /// new iteration with a pool sized from the last one.
    fn reset(&mut self, capacity: u64);
}
