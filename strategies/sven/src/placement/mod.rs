//! Embedding placement: shard plans, tiers, hot/cold placement and eviction.
//!
//! - [`ShardPlan`]: which rank holds which rows/columns of every table (table-, row- or
//!   column-wise), and the flat dimension-major blocks each rank owns.
//! - [`AccessCounts`] and [`TierMap`]: warm-up access counts and the static hot/cold split (the
//!   top-α rows on the device, or a random α fraction as the baseline), with
//!   [`alpha_from_capacity`] and [`check_fits`].
//! - [`Importance`], [`DeviceCache`] and [`simulate`]: importance scores and a bounded device
//!   tier that evicts by importance, recency or at random; [`drifting_zipf`] generates the
//!   drifting-hot-set stream they are compared on.

mod cache;
mod counts;
mod error;
mod importance;
mod shard;
mod stream;
mod tier;

pub use cache::{simulate, CacheStats, DeviceCache, Eviction, SIMULATE_SEED};
pub use counts::AccessCounts;
pub use error::PlacementError;
pub use importance::{Importance, DEFAULT_BETA, DEFAULT_K, DEFAULT_L};
pub use shard::{Shard, ShardPlan, Sharding, ELEMENT_BYTES};
pub use stream::{
    drifting_zipf, Access, AccessStream, DEFAULT_STREAM_BATCH, DRIFT_OFFSET_DIVISOR,
    POSITIVE_RATE_DECAY, POSITIVE_RATE_TOP,
};
pub use tier::{alpha_from_capacity, check_fits, Tier, TierMap};
