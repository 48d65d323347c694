//! Dymem's pool sizing (thesis §4.1.3.3): size the pool from the first iteration and keep a
//! reserve β for the next ones.

use serde::Serialize;

/// The pool capacity for the iterations after the first, and how often it had to grow.
///
/// The thesis runs the first iteration in a large pool, tracks the smallest gap between the two
/// ends of the main arena (`squeeze_gap`) and sizes the pool `(init − squeeze_gap) + β`. With
/// footprints measured directly, `init − squeeze_gap` is the first iteration's high-water mark,
/// so the capacity starts at `high_water + β`. An iteration that runs out of memory is a failure:
/// it restarts with the pool grown by another β.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PoolSizer {
    beta: u64,
    capacity: u64,
    failures: u64,
}

impl PoolSizer {
    /// Sizes the pool from the high-water mark of a first iteration run in a large pool.
    pub fn from_first_iteration(high_water: u64, beta: u64) -> Self {
        Self {
            beta,
            capacity: high_water.saturating_add(beta),
            failures: 0,
        }
    }

    /// The capacity to run the next iteration with.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The reserve β.
    pub fn beta(&self) -> u64 {
        self.beta
    }

    /// Out-of-memory iterations recorded so far.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Records an out-of-memory iteration and grows the pool by β; returns the capacity to
    /// restart it with.
    pub fn record_failure(&mut self) -> u64 {
        self.failures += 1;
        self.capacity = self.capacity.saturating_add(self.beta);
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_starts_at_high_water_plus_beta_and_grows_by_beta_per_failure() {
        let mut p = PoolSizer::from_first_iteration(1000, 300);
        assert_eq!((p.capacity(), p.failures(), p.beta()), (1300, 0, 300));
        assert_eq!(p.record_failure(), 1600);
        assert_eq!(p.record_failure(), 1900);
        assert_eq!((p.capacity(), p.failures()), (1900, 2));
    }
}
