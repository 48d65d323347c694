//! Device allocators behind the engine's [`DeviceAllocator`] seam, and the replay experiments
//! that compare them.
//!
//! - [`BestFit`]: one arena, best-fit with coalescing: the pool vDNN (CNMeM) and SuperNeurons
//!   use. Its footprint is the arena's top address.
//! - [`Gtbm`]: Dymem's Group-Tensors-By-Mobility allocator (Algorithm 4): short-lived
//!   [`Mobility::Movable`] tensors best-fit from the low end of a main arena, long-lived
//!   [`Mobility::Temporary`] ones from its high end, and small [`Mobility::Reclaimed`] ones on a
//!   separate incremental stack, so that a long-lived tensor never splits the region the
//!   short-lived ones come and go in.
//! - [`Recording`]: any allocator, writing down the trace it serves.
//! - [`PoolSizer`]: Dymem's pool sizing, the first iteration's high-water plus a reserve β,
//!   grown by β after each out-of-memory iteration.
//! - [`mod@replay`]: one iteration's allocation trace through an allocator ([`replay()`]:
//!   footprint, mean fragmentation, memory over time), and [`beta_failure_rate`], the β
//!   sensitivity experiment under jittered request sizes.
//!
//! # Fragmentation
//!
//! Both allocators report Dymem's Eq. 4.1 generalised to any request size `s`:
//! `U_f(s) = 1 − Σ{free regions ≥ s} / Σ{free regions}` (in bytes, not a count of regions, as the
//! formula needs), over the free memory the allocator may still use: its holes and the room left
//! up to its capacity, taken as one more region. See each allocator for its regions.

mod best_fit;
mod gtbm;
mod pool;
mod recording;
mod region;
pub mod replay;

pub use best_fit::BestFit;
pub use concord_engine::memory::alloc::{AllocError, AllocStats, Block, DeviceAllocator, Mobility};
pub use gtbm::{Gtbm, GtbmExtents, GtbmPeaks};
pub use pool::PoolSizer;
pub use recording::Recording;
pub use replay::{
    beta_experiment, beta_failure_rate, replay, AllocEvent, AllocTrace, BetaOutcome,
    ExperimentError, ReplayError, ReplayStats, Sample, TraceBuilder, TraceError,
};

/// Dymem's Eq. 4.1 for a request of `bytes`: the share of the free bytes that lie in regions
/// smaller than the request. `usable` are the free regions a request may be placed in;
/// `stranded` are free bytes no request can be placed in (they count as free but never serve).
/// 0 when nothing is free.
pub(crate) fn fragmentation(
    usable: impl IntoIterator<Item = u64>,
    stranded: u64,
    bytes: u64,
) -> f64 {
    let (mut total, mut serving) = (stranded, 0u64);
    for region in usable {
        total += region;
        if region >= bytes {
            serving += region;
        }
    }
    if total == 0 {
        0.0
    } else {
        1.0 - serving as f64 / total as f64
    }
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragmentation_counts_bytes_of_regions_too_small() {
        assert_eq!(fragmentation([], 0, 10), 0.0);
        assert_eq!(fragmentation([100], 0, 100), 0.0);
        assert_eq!(fragmentation([100, 300], 0, 200), 0.25);
        assert_eq!(fragmentation([100, 300], 0, 400), 1.0);
        assert_eq!(fragmentation([300], 100, 1), 0.25);
    }
}
