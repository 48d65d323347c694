//! Consistency: which parameter versions a read may return, and how updates are applied. The
//! [`Consistency`] seam (re-exported by [`crate::contract`]) and the engine's rules.
//!
//! The bulk-synchronous, stale-synchronous and
//! asynchronous rules themselves live here too, because the engine's default server needs one
//! and strategies that bring their own servers (FlexRR, elastic parameter servers) reuse them
//! without depending on another strategy crate. Clocks are numbered from 0; a server's version
//! `v` means every worker's updates of clocks `<= v` are applied.

use crate::ids::Clock;
use std::fmt;

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
/// holds the read until it can answer. The engine's rules are in [`crate::ps`]
/// ([`StaleSynchronous`], [`Asynchronous`]).
///
/// ```
/// use concord_engine::prelude::*;
///
/// /// Reads may be up to two clocks stale.
/// #[derive(Debug)]
/// struct TwoBehind;
///
/// impl Consistency for TwoBehind {
///     fn name(&self) -> String {
///         "two-behind".into()
///     }
///     fn min_version(&self, clock: Clock) -> Option<i64> {
///         Some(clock as i64 - 3)
///     }
///     fn staleness_bound(&self) -> Option<u64> {
///         Some(2)
///     }
/// }
/// assert_eq!(TwoBehind.min_version(5), Some(2));
/// ```
pub trait Consistency: Send + Sync + fmt::Debug {
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

/// Stale synchronous parallel with slack `s`: a read at clock `c` must see version
/// `>= c - s - 1`, so a worker runs at most `s` clocks ahead of the slowest. With `s = 0` this is
/// bulk synchronous parallel (BSP): every worker finished `c - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleSynchronous {
    /// Clocks a worker may run ahead of the slowest.
    pub slack: u64,
}

impl Consistency for StaleSynchronous {
    fn name(&self) -> String {
        if self.slack == 0 {
            "bsp".into()
        } else {
            format!("ssp(s={})", self.slack)
        }
    }
    fn min_version(&self, clock: Clock) -> Option<i64> {
        Some(clock as i64 - self.slack as i64 - 1)
    }
    fn staleness_bound(&self) -> Option<u64> {
        Some(self.slack)
    }
}

/// Asynchronous parallel: no read ever waits; updates apply on arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asynchronous;

impl Consistency for Asynchronous {
    fn name(&self) -> String {
        "asp".into()
    }
    fn min_version(&self, _clock: Clock) -> Option<i64> {
        None
    }
    fn apply_mode(&self) -> ApplyMode {
        ApplyMode::OnArrival
    }
    fn staleness_bound(&self) -> Option<u64> {
        None
    }
}
