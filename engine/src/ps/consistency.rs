//! Consistency rules: which parameter versions a read may return, and how updates are applied.

use crate::ids::Clock;
use std::fmt::Debug;

/// How a server applies the gradients it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyMode {
    /// Buffer each clock's gradients and apply their sample-weighted mean once every worker has
    /// completed that clock, in clock order. The version is the last clock applied.
    PerClock,
    /// Apply each push as it arrives, scaled by 1/workers; versions count applied pushes / workers.
    OnArrival,
}

/// A read-freshness rule of the parameter server (BSP, SSP, ASP, ...).
///
/// A worker working on clock `c` asks for parameters with version `>= min_version(c)`; the server
/// holds the read until it can answer. Implemented by consistency strategies; the engine's server
/// and worker only ask these two questions.
pub trait Consistency: Send + Sync + Debug {
    /// Short name for reports, e.g. `ssp(s=1)`.
    fn name(&self) -> String;
    /// Minimum version a read at clock `c` must reflect (`None`: any version will do).
    fn min_version(&self, clock: Clock) -> Option<i64>;
    /// How the server applies updates.
    fn apply_mode(&self) -> ApplyMode {
        ApplyMode::PerClock
    }
    /// The largest number of clocks a worker may run ahead of the slowest (`None`: unbounded).
    fn staleness_bound(&self) -> Option<u64>;
}
