//! The stall watchdog of the real-time runtimes (`wall`, `process`): a run in which no worker
//! closes an iteration for `guard.stall_s` seconds of real time ends with an error that says
//! where every worker stands, instead of hanging until someone kills it.
//!
//! `sim` needs none: a run whose roles all wait for each other has no event left, so its clock
//! jumps to `time_limit_s` at once. In real time a deadlock (a role waiting for a message that
//! never comes) looks like a long iteration, so the watchdog cannot tell the two apart; like
//! PyTorch's process-group timeout, whose default it shares, it bounds how long a run may go
//! without progress. It reads the divergence guard's record store, where every worker's closed
//! iterations pass, and never changes what a role computes.

use crate::guard::RunGuard;
use crate::ids::WorkerId;
use crate::job::Job;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// Where the watched workers stood when the run stalled.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    /// Seconds of real time without a closed iteration (`guard.stall_s`).
    pub seconds: f64,
    /// The iterations the run was to do.
    pub iterations: u64,
    /// Each watched worker and the iterations it had closed (its last clock + 1; 0 for none).
    pub closed: Vec<(WorkerId, u64)>,
}

/// At most this many worker ids are listed per group in a stall's message.
const LISTED: usize = 8;

impl Stall {
    /// Where the workers stand, grouped by the iterations they closed: `worker 0 at iteration 3
    /// of 50; workers 1, 2 at iteration 4 of 50`.
    pub fn standing(&self) -> String {
        let mut by_count: BTreeMap<u64, Vec<WorkerId>> = BTreeMap::new();
        for &(w, n) in &self.closed {
            by_count.entry(n).or_default().push(w);
        }
        let groups: Vec<String> = by_count
            .iter()
            .map(|(n, workers)| {
                let mut ids: Vec<String> =
                    workers.iter().take(LISTED).map(u32::to_string).collect();
                if workers.len() > LISTED {
                    ids.push(format!("and {} more", workers.len() - LISTED));
                }
                let noun = if workers.len() == 1 {
                    "worker"
                } else {
                    "workers"
                };
                format!(
                    "{noun} {} at iteration {n} of {}",
                    ids.join(", "),
                    self.iterations
                )
            })
            .collect();
        groups.join("; ")
    }
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no worker closed an iteration for {} s (guard.stall_s): {}",
            self.seconds,
            self.standing()
        )?;
        if self.closed.iter().all(|&(_, n)| n >= self.iterations) {
            f.write_str(
                ": every worker has done its iterations, but the servers or the coordinator did not finish",
            )
        } else {
            f.write_str(
                ": a role is waiting for a message that never comes, or an iteration takes longer than that (raise guard.stall_s)",
            )
        }
    }
}

/// How long without a closed iteration before the watchdog warns (once, until the next one
/// closes), as Horovod's stall inspector does; half of `guard.stall_s` when that is shorter.
pub const WARN_AFTER: Duration = Duration::from_secs(60);

/// Completes once none of `workers` has closed an iteration in `guard` for `limit` of real time,
/// with where they stand; never completes while they make progress. After [`WARN_AFTER`] (or
/// half the limit) without one, `warn` is told where they stand, once until the next closes.
/// `iterations`: what the run is to do, for the messages.
pub async fn watch(
    guard: &RunGuard,
    workers: &[WorkerId],
    limit: Duration,
    iterations: u64,
    warn: impl Fn(&Stall),
) -> Stall {
    let tick = (limit / 20).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let warn_after = WARN_AFTER.min(limit / 2);
    let count = || -> usize { guard.progress(workers).iter().map(|(n, _)| n).sum() };
    let standing = |seconds: f64| Stall {
        seconds,
        iterations,
        closed: workers
            .iter()
            .zip(guard.progress(workers))
            .map(|(&w, (_, last))| (w, last.map_or(0, |c| c + 1)))
            .collect(),
    };
    let (mut seen, mut since, mut warned) = (count(), Instant::now(), false);
    loop {
        tokio::time::sleep(tick).await;
        let now = count();
        if now != seen {
            (seen, since, warned) = (now, Instant::now(), false);
        } else if since.elapsed() >= limit {
            return standing(limit.as_secs_f64());
        } else if !warned && since.elapsed() >= warn_after {
            warned = true;
            warn(&standing(since.elapsed().as_secs_f64().round()));
        }
    }
}

/// [`watch`] over `workers` of `job`, with its `guard.stall_s` and iterations, warning through the
/// log (each line led by `who`, e.g. `rank 1: `, to say which process warns).
pub async fn watch_job(job: &Job, workers: &[WorkerId], who: &str) -> Stall {
    let limit = Duration::from_secs_f64(job.config.guard.stall_s);
    let iterations = job.config.iterations;
    watch(&job.guard, workers, limit, iterations, |s| {
        tracing::warn!("{who}{}", warning(s, limit))
    })
    .await
}

/// The warning [`watch`] gives before it stops a run, for the log.
pub fn warning(stall: &Stall, limit: Duration) -> String {
    format!(
        "no worker has closed an iteration for {} s: {}; the run stops after guard.stall_s = {} s without one",
        stall.seconds,
        stall.standing(),
        limit.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;
    use crate::metrics::IterRecord;

    fn rec(clock: u64) -> IterRecord {
        IterRecord {
            clock,
            start_s: 0.0,
            end_s: 1.0,
            wall_s: 0.0,
            samples: 0,
            compute_s: 0.0,
            wait_s: 0.0,
            comm_s: 0.0,
            loss: f64::NAN,
            version_read: 0,
            bytes_sent: 0,
        }
    }

    fn guard(workers: u32) -> RunGuard {
        let cfg = RunConfig {
            workers,
            ..RunConfig::default()
        };
        RunGuard::new(&cfg, false)
    }

    #[tokio::test(start_paused = true)]
    async fn trips_after_the_limit_without_progress_naming_each_worker() {
        let g = guard(3);
        g.record(0, &rec(0));
        g.record(0, &rec(1));
        g.record(2, &rec(0));
        let started = tokio::time::Instant::now();
        let warned = std::sync::Mutex::new(Vec::new());
        let stall = watch(&g, &[0, 1, 2], Duration::from_secs(600), 10, |s| {
            warned
                .lock()
                .unwrap()
                .push((tokio::time::Instant::now() - started, s.clone()))
        })
        .await;
        let warned = warned.into_inner().unwrap();
        assert_eq!(warned.len(), 1, "one warning before the stop");
        assert!(warned[0].0 >= WARN_AFTER && warned[0].0 < Duration::from_secs(62));
        let text = warning(&warned[0].1, Duration::from_secs(600));
        assert!(
            text.contains("for 60 s: worker 1 at iteration 0 of 10"),
            "{text}"
        );
        assert!(text.contains("guard.stall_s = 600 s"), "{text}");
        assert!(started.elapsed() >= Duration::from_secs(600));
        assert_eq!(stall.closed, vec![(0, 2), (1, 0), (2, 1)]);
        let text = stall.to_string();
        assert!(text.contains("600 s (guard.stall_s)"), "{text}");
        assert!(text.contains("worker 1 at iteration 0 of 10"), "{text}");
        assert!(text.contains("worker 0 at iteration 2 of 10"), "{text}");
        assert!(text.contains("raise guard.stall_s"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn progress_within_the_limit_restarts_it() {
        let g = std::sync::Arc::new(guard(1));
        let feeder = {
            let g = g.clone();
            tokio::spawn(async move {
                for c in 0..5 {
                    tokio::time::sleep(Duration::from_secs(50)).await;
                    g.record(0, &rec(c));
                }
            })
        };
        let started = tokio::time::Instant::now();
        let warnings = std::sync::atomic::AtomicUsize::new(0);
        let stall = watch(&g, &[0], Duration::from_secs(60), 5, |_| {
            warnings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .await;
        // Half the limit (30 s) without an iteration: once in each 50 s gap before an iteration
        // closes, and once after the last.
        assert_eq!(warnings.into_inner(), 6);
        feeder.await.unwrap();
        // The last iteration closes at 250 s; a minute later the run counts as stalled.
        assert!(
            started.elapsed() >= Duration::from_secs(310),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(stall.closed, vec![(0, 5)]);
        assert!(stall
            .to_string()
            .contains("every worker has done its iterations"));
    }

    #[test]
    fn many_workers_at_one_iteration_are_listed_in_short() {
        let stall = Stall {
            seconds: 5.0,
            iterations: 4,
            closed: (0..20).map(|w| (w, 3)).collect(),
        };
        let text = stall.to_string();
        assert!(
            text.contains("workers 0, 1, 2, 3, 4, 5, 6, 7, and 12 more at iteration 3 of 4"),
            "{text}"
        );
    }
}
