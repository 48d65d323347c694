//! What workers collect: per server, the sufficient statistics of their (size, time) samples
//! ([`OlsStats`]), shipped once per period as a [`PeriodReport`].

use concord_engine::prelude::*;
use std::collections::BTreeMap;

/// Relative spread of sizes below which a fit is treated as degenerate: the standard deviation
/// of `s` is at most this fraction of its mean (sizes that are equal up to rounding).
const DEGENERATE_CV: f64 = 1e-6;

/// Sufficient statistics of an OLS fit of time t (seconds) on size s (bytes).
///
/// Workers accumulate these per server instead of shipping raw samples, so a report is a few
/// numbers per server whatever the period length, and reports merge by addition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OlsStats {
    /// Number of samples.
    pub n: f64,
    /// Σ s.
    pub sum_s: f64,
    /// Σ t.
    pub sum_t: f64,
    /// Σ s².
    pub sum_ss: f64,
    /// Σ s·t.
    pub sum_st: f64,
    /// Σ t².
    pub sum_tt: f64,
}

impl OlsStats {
    /// Adds one sample of `s` bytes that took `t` seconds.
    pub fn add(&mut self, s: f64, t: f64) {
        self.n += 1.0;
        self.sum_s += s;
        self.sum_t += t;
        self.sum_ss += s * s;
        self.sum_st += s * t;
        self.sum_tt += t * t;
    }

    /// Adds all samples of `other` (the statistics of the union of both sample sets).
    pub fn merge(&mut self, other: &OlsStats) {
        self.n += other.n;
        self.sum_s += other.sum_s;
        self.sum_t += other.sum_t;
        self.sum_ss += other.sum_ss;
        self.sum_st += other.sum_st;
        self.sum_tt += other.sum_tt;
    }

    /// Mean size (0 without samples).
    pub fn mean_s(&self) -> f64 {
        if self.n > 0.0 {
            self.sum_s / self.n
        } else {
            0.0
        }
    }

    /// Mean time (0 without samples).
    pub fn mean_t(&self) -> f64 {
        if self.n > 0.0 {
            self.sum_t / self.n
        } else {
            0.0
        }
    }

    /// Centered sum of squares of sizes, `Σ (s − s̄)²` (never negative).
    pub(super) fn sxx(&self) -> f64 {
        if self.n > 0.0 {
            (self.sum_ss - self.sum_s * self.sum_s / self.n).max(0.0)
        } else {
            0.0
        }
    }

    /// Centered cross product, `Σ (s − s̄)(t − t̄)`.
    pub(super) fn sxy(&self) -> f64 {
        if self.n > 0.0 {
            self.sum_st - self.sum_s * self.sum_t / self.n
        } else {
            0.0
        }
    }

    /// Residual sum of squares of the line `t = α·s + β` over these samples (never negative).
    pub(super) fn sse(&self, alpha: f64, beta: f64) -> f64 {
        (self.sum_tt - 2.0 * alpha * self.sum_st - 2.0 * beta * self.sum_t
            + alpha * alpha * self.sum_ss
            + 2.0 * alpha * beta * self.sum_s
            + self.n * beta * beta)
            .max(0.0)
    }

    /// Whether the sizes do not vary enough to fit a slope.
    pub(super) fn degenerate(&self) -> bool {
        let mean = self.mean_s();
        self.n < 2.0 || self.sxx() / self.n <= (DEGENERATE_CV * mean) * (DEGENERATE_CV * mean)
    }
}

/// One worker's samples of one report period, per server. A sample is (bytes the worker exchanged with
/// server r in one iteration = r's load, seconds that exchange took excluding barrier wait).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeriodReport {
    /// Reporting worker.
    pub worker: u32,
    /// Statistics of this period's samples, per server the worker talked to.
    pub per_server: BTreeMap<ServerId, OlsStats>,
}
