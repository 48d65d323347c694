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

    /// A real-time base whose clock read `origin` run seconds at `start`: a process of a
    /// `--runtime process` job sets its clock by rank 0's, so that times the processes exchange
    /// (when a server served a read, when a message was sent) compare.
    pub fn real_from(start: std::time::Instant, origin: f64) -> TimeBase {
        TimeBase {
            start: Instant::from_std(start),
            scale: 1.0,
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
        if s <= 0.0 {
            return;
        }
        let wait = Duration::from_secs_f64(s * self.scale);
        if self.is_dilated() {
            tokio::time::sleep(wait).await;
        } else {
            wait_until(Instant::now() + wait).await;
        }
    }

    /// Waits until run time `s`.
    pub async fn sleep_until(&self, s: f64) {
        let at = self.instant_at(s);
        if self.is_dilated() {
            tokio::time::sleep_until(at).await;
        } else {
            wait_until(at).await;
        }
    }

    /// Whether this is `sim`'s dilated clock (paused, auto-advancing) rather than real time.
    pub(crate) fn is_dilated(&self) -> bool {
        self.scale != 1.0
    }
}

/// Waits in real time until `at`, to a tenth of a millisecond or so rather than tokio's
/// millisecond tick: tokio's timer wakes on ticks, up to one late, which would stretch an
/// emulated wait of 50 µs (a straggler's slowdown of a small step, a modeled compute in
/// throughput mode) to a millisecond. It sleeps on the timer to a tick before `at`, then parks a
/// thread of the blocking pool on the operating system's finer timer for the rest. Nothing
/// spins: an emulated wait stands for work on the emulated machine, not on this one, and must
/// not take a processor from the roles that run real math beside it.
async fn wait_until(at: Instant) {
    if let Some(coarse) = at.checked_sub(TIMER_TICK) {
        if coarse > Instant::now() {
            tokio::time::sleep_until(coarse).await;
        }
    }
    park_until(at).await;
}

/// The granularity of tokio's timer in real time: a timer fires on the first tick at or after
/// its deadline.
pub(crate) const TIMER_TICK: Duration = Duration::from_millis(1);

/// Parks a thread of the blocking pool until `at` (meant for the last tick of a wait), on the
/// operating system's timer, which is finer than tokio's. Returns at once when `at` is past.
pub(crate) async fn park_until(at: Instant) {
    let rest = at.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        // A pool thread that fails to run (the runtime shutting down) ends the wait early: the
        // run is ending anyway.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real-time wait, however short or long against tokio's tick, never ends before its time:
    /// emulated work is charged in full.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_real_time_wait_never_ends_early() {
        let time = TimeBase::new(false);
        for s in [0.0, 20e-6, 300e-6, 1.0e-3, 1.5e-3, 2.5e-3] {
            let from = time.now();
            time.sleep(s).await;
            let slept = time.now() - from;
            assert!(slept >= s - 1e-9, "sleep({s}) took {slept}");
            let at = time.now() + s;
            time.sleep_until(at).await;
            let late = time.now() - at;
            assert!(late >= -1e-9, "sleep_until ended {late} s early");
        }
    }

    /// In `sim` a wait is the paused clock's: it advances virtual time by exactly its length.
    #[tokio::test(start_paused = true)]
    async fn a_simulated_wait_advances_virtual_time_exactly() {
        let time = TimeBase::new(true);
        time.sleep(0.25e-3).await;
        assert!((time.now() - 0.25e-3).abs() < 1e-12, "{}", time.now());
        time.sleep_until(1.0e-3).await;
        assert!((time.now() - 1.0e-3).abs() < 1e-12, "{}", time.now());
    }
}
