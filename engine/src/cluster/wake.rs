//! How much longer a message takes to reach a role that has waited long for it.
//!
//! A processor left idle is put to sleep: by its power states on bare metal, by the hypervisor
//! (which halts an idle virtual processor once it has polled for a while) on a virtual machine.
//! The message that ends a long wait then waits for the processor to wake as well. On a 2-core
//! virtual machine, a small message between two processes took 30 µs to a role waiting for it
//! alone, 52 µs to one that had waited 0.35 ms and 78–124 µs after 0.7–15 ms: in a job whose
//! step is a fraction of a millisecond that is most of its communication.

use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};

/// The time a message adds to its latency when its receiver has been idle, as measured points:
/// after `idle_us[i]` microseconds of waiting a message takes `extra_us[i]` longer than one to a
/// role that did not wait. Between points the extra time is interpolated linearly; below the
/// first it falls linearly to none at no wait; beyond the last it stays the last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeCurve {
    /// How long the receiver had waited, microseconds, increasing.
    pub idle_us: Vec<f64>,
    /// What the message took beyond a lone one's latency then, microseconds.
    pub extra_us: Vec<f64>,
}

impl WakeCurve {
    /// Seconds a message adds when its receiver has been idle for `idle` seconds.
    pub fn extra_seconds(&self, idle: f64) -> f64 {
        let idle_us = idle.max(0.0) * 1e6;
        let points = self.idle_us.iter().zip(&self.extra_us);
        let mut below = (0.0, 0.0);
        for (&at, &extra) in points {
            if idle_us <= at {
                let (x0, y0) = below;
                let share = if at > x0 {
                    (idle_us - x0) / (at - x0)
                } else {
                    1.0
                };
                return (y0 + share * (extra - y0)) * 1e-6;
            }
            below = (at, extra);
        }
        below.1 * 1e-6
    }

    /// An error naming `key` unless the curve has as many extra times as idle times, at least
    /// one point, idle times positive and increasing, and extra times finite and not negative.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.idle_us.is_empty() || self.idle_us.len() != self.extra_us.len() {
            return Err(EngineError::config(
                key,
                format!(
                    "{} idle times, {} extra times",
                    self.idle_us.len(),
                    self.extra_us.len()
                ),
                "needs as many `extra_us` as `idle_us`, at least one",
            ));
        }
        let mut last = 0.0;
        for &at in &self.idle_us {
            if !(at.is_finite() && at > last) {
                return Err(EngineError::config(
                    format!("{key}.idle_us"),
                    at,
                    "must be positive microseconds, each above the one before",
                ));
            }
            last = at;
        }
        if let Some(&bad) = self
            .extra_us
            .iter()
            .find(|e| !(e.is_finite() && **e >= 0.0))
        {
            return Err(EngineError::config(
                format!("{key}.extra_us"),
                bad,
                "must be microseconds, 0 or more",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve() -> WakeCurve {
        WakeCurve {
            idle_us: vec![100.0, 1000.0],
            extra_us: vec![10.0, 60.0],
        }
    }

    #[test]
    fn the_extra_time_is_interpolated_between_points_and_held_beyond_them() {
        let c = curve();
        let us = |idle_us: f64| c.extra_seconds(idle_us * 1e-6) * 1e6;
        assert!((us(0.0)).abs() < 1e-9);
        assert!((us(50.0) - 5.0).abs() < 1e-9);
        assert!((us(100.0) - 10.0).abs() < 1e-9);
        assert!((us(550.0) - 35.0).abs() < 1e-9);
        assert!((us(1000.0) - 60.0).abs() < 1e-9);
        assert!((us(1e6) - 60.0).abs() < 1e-9);
        // A message that arrives before its receiver finished its last one waited for nothing.
        assert_eq!(c.extra_seconds(-1.0), 0.0);
    }

    #[test]
    fn a_curve_that_cannot_be_read_is_refused_by_name() {
        assert!(curve().validate("cluster.devices.host.wake").is_ok());
        let bad = |c: WakeCurve| {
            c.validate("cluster.devices.host.wake")
                .unwrap_err()
                .to_string()
        };
        let mut c = curve();
        c.extra_us.pop();
        assert!(bad(c).contains("cluster.devices.host.wake"));
        let mut c = curve();
        c.idle_us = vec![100.0, 100.0];
        assert!(bad(c).contains("wake.idle_us"));
        let mut c = curve();
        c.extra_us[1] = f64::NAN;
        assert!(bad(c).contains("wake.extra_us"));
        assert!(bad(WakeCurve {
            idle_us: vec![],
            extra_us: vec![]
        })
        .contains("at least one"));
    }
}
