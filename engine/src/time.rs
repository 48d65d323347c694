//! The run's time base: virtual seconds in `sim`, real seconds in `wall`.
//!
//! In `sim` the tokio clock is paused and auto-advances when every role waits. tokio's timers have
//! millisecond granularity, so simulated time is dilated: a tenth of a simulated microsecond is one
//! tokio millisecond, which gives sub-microsecond resolution to latencies and small compute steps.

use tokio::time::{Duration, Instant};

/// Tokio-clock seconds per simulated second in `sim` mode.
pub const SIM_DILATION: f64 = 10_000.0;

/// Converts between the tokio clock and run seconds.
#[derive(Clone, Copy, Debug)]
pub struct TimeBase {
    start: Instant,
    scale: f64,
    /// Run seconds at `start`: zero for a fresh run, the checkpoint's time for a resumed one.
    origin: f64,
}

impl TimeBase {
    /// A time base starting now; `dilated` for simulated runs.
    pub fn new(dilated: bool) -> TimeBase {
        TimeBase::starting_at(dilated, 0.0)
    }

    /// A time base whose clock reads `origin` run seconds now: a run resumed from a checkpoint
    /// continues the run time of the run it resumes.
    pub fn starting_at(dilated: bool, origin: f64) -> TimeBase {
        TimeBase {
            start: Instant::now(),
            scale: if dilated { SIM_DILATION } else { 1.0 },
            origin,
        }
    }

    /// Run seconds now: the origin plus the seconds since this time base started (a fresh run's
    /// origin is 0, and `0 + x` is `x` exactly).
    pub fn now(&self) -> f64 {
        self.origin + (Instant::now() - self.start).as_secs_f64() / self.scale
    }

    /// The tokio instant of run time `s`.
    pub fn instant_at(&self, s: f64) -> Instant {
        self.start + Duration::from_secs_f64((s - self.origin).max(0.0) * self.scale)
    }

    /// Waits `s` run seconds.
    pub async fn sleep(&self, s: f64) {
        if s > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(s * self.scale)).await;
        }
    }

    /// Waits until run time `s`.
    pub async fn sleep_until(&self, s: f64) {
        tokio::time::sleep_until(self.instant_at(s)).await;
    }
}
