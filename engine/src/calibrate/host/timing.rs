//! Timing a measured operation: a warm-up, then repeats until enough of them and enough time
//! have passed, and their median (robust to the odd preempted repeat). A measurement whose
//! untimed preparation is long (emptying a large last-level cache before every run) stops at
//! its time budget once it has its minimum of runs.

use std::time::Instant;

/// How often an operation is repeated for one figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Repeats {
    /// Runs before timing (caches, allocator, candle's first-use set-up).
    pub warmup: usize,
    /// Timed runs at least.
    pub min_runs: usize,
    /// Timed seconds at least (more runs for fast operations, for a stable median).
    pub min_seconds: f64,
    /// Timed runs at most.
    pub max_runs: usize,
    /// Seconds the whole measurement may take, untimed preparation included, once `min_runs`
    /// are in: a fast operation timed after a sweep of a large cache would otherwise repeat the
    /// sweep thousands of times to reach `min_seconds` of timed work.
    pub max_seconds: f64,
}

impl Repeats {
    /// The full measurement: 3 warm-up runs, then at least 15 runs and 0.25 s timed (3 s in all
    /// at most, once the 15 are in).
    pub fn full() -> Repeats {
        Repeats {
            warmup: 3,
            min_runs: 15,
            min_seconds: 0.25,
            max_runs: 5000,
            max_seconds: 3.0,
        }
    }

    /// The quick measurement (`--quick`): 1 warm-up run, then at least 5 runs and 0.02 s timed
    /// (0.5 s in all at most, once the 5 are in).
    pub fn quick() -> Repeats {
        Repeats {
            warmup: 1,
            min_runs: 5,
            min_seconds: 0.02,
            max_runs: 1000,
            max_seconds: 0.5,
        }
    }

    /// The median seconds of `op` over the timed runs, and how many there were; the first error
    /// `op` returns stops the measurement.
    pub fn median<E>(&self, op: impl FnMut() -> Result<(), E>) -> Result<(f64, usize), E> {
        self.median_after(|| (), op)
    }

    /// [`Repeats::median`] with `before` run untimed before every run of `op` (e.g. a
    /// [`CacheSweep`](super::CacheSweep), to time `op` on data no longer cached).
    pub fn median_after<E>(
        &self,
        before: impl FnMut(),
        op: impl FnMut() -> Result<(), E>,
    ) -> Result<(f64, usize), E> {
        let mut times = self.times_after(before, op)?;
        Ok((median(&mut times), times.len()))
    }

    /// One of `passes` shares of these repeats, for a measurement taken in turns with others
    /// (so that each figure's runs span the whole measurement, and a slow spell of the machine
    /// weighs on every figure alike rather than on the one it fell on): a warm-up run per pass
    /// where there were any, and the timed runs, seconds and budget divided among the passes.
    pub fn share(&self, passes: usize) -> Repeats {
        let passes = passes.max(1);
        Repeats {
            warmup: self.warmup.div_ceil(passes),
            min_runs: self.min_runs.div_ceil(passes),
            min_seconds: self.min_seconds / passes as f64,
            max_runs: self.max_runs.div_ceil(passes),
            max_seconds: self.max_seconds / passes as f64,
        }
    }

    /// The seconds of every timed run of `op`, `before` run untimed before each (the runs
    /// [`Repeats::median_after`] takes the median of).
    pub fn times_after<E>(
        &self,
        mut before: impl FnMut(),
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<Vec<f64>, E> {
        for _ in 0..self.warmup {
            before();
            op()?;
        }
        let mut times = Vec::with_capacity(self.min_runs);
        let mut total = 0.0;
        let started = Instant::now();
        let more = |times: &[f64], total: f64| {
            if times.len() >= self.max_runs.max(1) {
                return false;
            }
            times.len() < self.min_runs.max(1)
                || (total < self.min_seconds && started.elapsed().as_secs_f64() < self.max_seconds)
        };
        while more(&times, total) {
            before();
            let t0 = Instant::now();
            op()?;
            let t = t0.elapsed().as_secs_f64();
            total += t;
            times.push(t);
        }
        Ok(times)
    }
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub(super) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn repeats_run_the_warmup_and_at_least_the_minimum() {
        let r = Repeats {
            warmup: 2,
            min_runs: 4,
            min_seconds: 0.0,
            max_runs: 10,
            max_seconds: 60.0,
        };
        let mut calls = 0;
        let (_, runs) = r
            .median(|| {
                calls += 1;
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!((runs, calls), (4, 6));
        let err = r.median(|| Err::<(), &str>("broken")).unwrap_err();
        assert_eq!(err, "broken");
    }

    #[test]
    fn a_share_divides_the_runs_and_keeps_a_warmup_per_pass() {
        let share = Repeats::full().share(3);
        assert_eq!((share.warmup, share.min_runs, share.max_runs), (1, 5, 1667));
        assert!((share.min_seconds - 0.25 / 3.0).abs() < 1e-12);
        assert!((share.max_seconds - 1.0).abs() < 1e-12);
        // One pass, or none asked for, is the whole measurement.
        assert_eq!(Repeats::quick().share(1), Repeats::quick());
        assert_eq!(Repeats::quick().share(0), Repeats::quick());
    }

    #[test]
    fn the_untimed_step_runs_before_every_run() {
        let r = Repeats {
            warmup: 1,
            min_runs: 3,
            min_seconds: 0.0,
            max_runs: 10,
            max_seconds: 60.0,
        };
        let log = std::cell::RefCell::new(String::new());
        r.median_after(
            || log.borrow_mut().push('b'),
            || {
                log.borrow_mut().push('o');
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        assert_eq!(log.into_inner(), "bobobobo");
    }

    #[test]
    fn a_slow_preparation_stops_the_runs_at_the_budget_once_the_minimum_is_in() {
        let r = Repeats {
            warmup: 0,
            min_runs: 3,
            min_seconds: 10.0,
            max_runs: 1000,
            max_seconds: 0.05,
        };
        let (_, runs) = r
            .median_after(
                || std::thread::sleep(std::time::Duration::from_millis(10)),
                || Ok::<(), ()>(()),
            )
            .unwrap();
        // Five preparations take the budget; without it the runs would go on to `max_runs`,
        // since the operation itself never adds up to `min_seconds`.
        assert!((3..=5).contains(&runs), "{runs} runs");
    }
}
