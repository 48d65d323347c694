//! The engine's consistency rules: which parameter versions a read may return, and how updates
//! are applied ([`Consistency`] is the seam, in [`crate::contract`]).
//!
//! The bulk-synchronous, stale-synchronous and
//! asynchronous rules themselves live here too, because the engine's default server needs one
//! and strategies that bring their own servers (FlexRR, elastic parameter servers) reuse them
//! without depending on another strategy crate. Clocks are numbered from 0; a server's version
//! `v` means every worker's updates of clocks `<= v` are applied.

use crate::contract::{ApplyMode, Consistency};
use crate::ids::Clock;

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
