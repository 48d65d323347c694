//! The divergence guard: a run whose training loss blows up is stopped early, and what it did so
//! far is kept.
//!
//! Every worker's clock record passes through [`RunGuard::record`] (from
//! [`crate::dp::close_clock`]), which keeps it in a per-run store and, every `eval_every` clocks,
//! compares the worker's loss with its starting loss. A worker whose loss stays above
//! `loss_ratio` × its starting loss for `patience` checks in a row, or whose training step gives
//! a non-finite loss ([`crate::dp::train_step`], or [`crate::dp::check_loss`] for a loss a
//! strategy computes itself), trips the guard: the run records why
//! ([`StopReason`]) and signals the launcher, which ends every role at once (roles blocked on
//! each other cannot hold it up) and returns the records kept so far. The store is frozen when
//! the guard trips, so the rows of a stopped run are those closed before the trip.
//!
//! The guard observes; it never changes what a role computes, so a healthy run gives the same
//! bits with it on or off. Throughput mode (no loss) is never checked.

use crate::config::RunConfig;
use crate::error::{EngineError, Result};
use crate::ids::{RoleId, WorkerId};
use crate::metrics::IterRecord;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

/// The `[guard]` section: when a run counts as diverged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GuardConfig {
    /// Check the loss against `loss_ratio` (default on). A non-finite loss stops a run either
    /// way: training cannot go on from it.
    pub enabled: bool,
    /// A worker's loss counts as exploded above this multiple of its starting loss (its first
    /// recorded clock's).
    pub loss_ratio: f64,
    /// Consecutive checks (one every `eval_every` clocks) a worker's loss must stay above the
    /// ratio before the run is stopped.
    pub patience: u32,
    /// In the real-time runtimes (`wall`, `process`), seconds of real time in which some worker
    /// must close an iteration: a run that goes longer without one (a role waiting for a
    /// message that never comes) ends with an error naming where every worker stands instead
    /// of hanging (see [`crate::stall`]). The default is PyTorch's process-group timeout;
    /// raise it for iterations longer than that. `sim` has `time_limit_s` instead.
    pub stall_s: f64,
}

/// `guard.stall_s` by default: 30 minutes, PyTorch's default process-group timeout.
pub const DEFAULT_STALL_S: f64 = 1800.0;

impl Default for GuardConfig {
    fn default() -> Self {
        GuardConfig {
            enabled: true,
            loss_ratio: 10.0,
            patience: 3,
            stall_s: DEFAULT_STALL_S,
        }
    }
}

impl GuardConfig {
    /// Checks the values; errors name the key and what is allowed.
    pub fn validate(&self) -> Result<()> {
        if !(self.loss_ratio.is_finite() && self.loss_ratio > 1.0) {
            return Err(EngineError::config(
                "guard.loss_ratio",
                self.loss_ratio,
                "must be a finite number above 1",
            ));
        }
        if !(self.stall_s.is_finite() && self.stall_s > 0.0) {
            return Err(EngineError::config(
                "guard.stall_s",
                self.stall_s,
                "must be a positive number of seconds",
            ));
        }
        if self.patience == 0 {
            return Err(EngineError::config(
                "guard.patience",
                0,
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// What the guard saw.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "cause")]
pub enum Cause {
    /// A training step's loss was NaN or infinite.
    NonFinite,
    /// The loss stayed above `ratio` × the starting loss for `checks` checks in a row.
    LossRatio {
        /// The worker's starting loss.
        starting_loss: f64,
        /// The configured ratio.
        ratio: f64,
        /// Consecutive checks over it.
        checks: u32,
    },
}

/// Why a run stopped before completing (`summary.json`'s `stopped`).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct StopReason {
    /// Always `"diverged"` today.
    pub reason: String,
    /// The role that saw it, e.g. `worker-3`.
    pub role: String,
    /// The iteration (1-based, as in `metrics.jsonl`) whose loss tripped the guard.
    pub iteration: u64,
    /// That loss (`null` in JSON when not finite).
    pub loss: f64,
    /// The strategies composed, e.g. `bsp + lb-bsp`.
    pub strategy: String,
    /// What the guard saw.
    #[serde(flatten)]
    pub cause: Cause,
}

impl StopReason {
    /// A divergence seen by `role` at `clock` (0-based) with `loss`, in a run of `strategy`.
    pub fn diverged(strategy: &str, role: RoleId, clock: u64, loss: f64, cause: Cause) -> Self {
        StopReason {
            reason: "diverged".into(),
            role: role.label(),
            iteration: clock + 1,
            loss,
            strategy: strategy.into(),
            cause,
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "training diverged on {} at iteration {} (strategy {}): ",
            self.role, self.iteration, self.strategy
        )?;
        match &self.cause {
            Cause::NonFinite => write!(f, "loss is {}", self.loss),
            Cause::LossRatio {
                starting_loss,
                ratio,
                checks,
            } => write!(
                f,
                "loss {:.4} above {ratio} × its starting loss {starting_loss:.4} for {checks} checks in a row (guard.loss_ratio, guard.patience)",
                self.loss
            ),
        }
    }
}

/// One worker's standing with the guard.
#[derive(Clone, Copy, Debug, Default)]
struct Watch {
    /// Its first recorded loss.
    start: Option<f64>,
    /// Consecutive checks above the ratio.
    strikes: u32,
}

/// What the guard keeps, behind its lock.
#[derive(Debug, Default)]
struct State {
    /// Every worker's records, in the order closed.
    records: Vec<Vec<IterRecord>>,
    /// Every worker's standing.
    watch: Vec<Watch>,
    /// Why the run stopped, once it did.
    stopped: Option<StopReason>,
}

/// A run's guard: the record store, the loss checks and the stop signal (see the module docs).
#[derive(Debug)]
pub struct RunGuard {
    config: GuardConfig,
    /// Clocks between checks (`eval_every`).
    every: u64,
    /// The strategies composed, as a stop reason names them.
    strategy: String,
    /// Whether the run trains a real model (throughput mode has no loss to check).
    checked: bool,
    state: Mutex<State>,
    stop: Notify,
}

impl RunGuard {
    /// The guard of a run of `config`; `real_model`: false in throughput mode.
    pub fn new(config: &RunConfig, real_model: bool) -> RunGuard {
        let workers = config.workers as usize;
        RunGuard {
            config: config.guard.clone(),
            every: config.eval_every.max(1),
            strategy: config.strategies.join(" + "),
            checked: real_model,
            state: Mutex::new(State {
                records: vec![Vec::new(); workers],
                watch: vec![Watch::default(); workers],
                stopped: None,
            }),
            stop: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `worker`'s `record` (unless the run has stopped) and checks its loss.
    pub fn record(&self, worker: WorkerId, record: &IterRecord) {
        let mut st = self.lock();
        if st.stopped.is_some() {
            return;
        }
        let w = worker as usize;
        if w >= st.records.len() {
            st.records.resize(w + 1, Vec::new());
            st.watch.resize(w + 1, Watch::default());
        }
        st.records[w].push(record.clone());
        // Records without a loss of their own (no samples, or none computed) are not checked.
        if !self.checked || record.samples == 0 || !record.loss.is_finite() {
            return;
        }
        let watch = &mut st.watch[w];
        let Some(start) = watch.start else {
            watch.start = Some(record.loss);
            return;
        };
        if !self.config.enabled || !(record.clock + 1).is_multiple_of(self.every) {
            return;
        }
        if record.loss > self.config.loss_ratio * start {
            watch.strikes += 1;
        } else {
            watch.strikes = 0;
        }
        if watch.strikes >= self.config.patience {
            let cause = Cause::LossRatio {
                starting_loss: start,
                ratio: self.config.loss_ratio,
                checks: watch.strikes,
            };
            let reason = StopReason::diverged(
                &self.strategy,
                RoleId::Worker(worker),
                record.clock,
                record.loss,
                cause,
            );
            self.trip(&mut st, reason);
        }
    }

    /// Stops the run: `role`'s training step at `clock` gave the non-finite `loss`.
    pub fn non_finite(&self, role: RoleId, clock: u64, loss: f64) {
        let reason = StopReason::diverged(&self.strategy, role, clock, loss, Cause::NonFinite);
        let mut st = self.lock();
        self.trip(&mut st, reason);
    }

    /// Records the first reason only, and signals the launcher.
    fn trip(&self, st: &mut State, reason: StopReason) {
        if st.stopped.is_none() {
            st.stopped = Some(reason);
            self.stop.notify_one();
        }
    }

    /// Stops the run for a `reason` another process's guard gave (`--runtime process`).
    pub fn stop_with(&self, reason: StopReason) {
        let mut st = self.lock();
        self.trip(&mut st, reason);
    }

    /// Keeps `records` of `worker` that another process's guard kept, unless this guard already
    /// holds records of that worker (`--runtime process`: every process keeps its own workers').
    pub fn absorb(&self, worker: WorkerId, records: Vec<IterRecord>) {
        let mut st = self.lock();
        let w = worker as usize;
        if w >= st.records.len() {
            st.records.resize(w + 1, Vec::new());
            st.watch.resize(w + 1, Watch::default());
        }
        if st.records[w].is_empty() {
            st.records[w] = records;
        }
    }

    /// Completes once the guard has tripped (at once if it already has).
    pub async fn tripped(&self) {
        self.stop.notified().await;
    }

    /// Why the run stopped, if it did.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.lock().stopped.clone()
    }

    /// Every worker's records kept so far, by worker.
    pub fn records(&self) -> Vec<Vec<IterRecord>> {
        self.lock().records.clone()
    }

    /// How many iterations each of `workers` has closed here, and the clock of its last.
    pub fn progress(&self, workers: &[WorkerId]) -> Vec<(usize, Option<u64>)> {
        let st = self.lock();
        workers
            .iter()
            .map(|&w| {
                st.records
                    .get(w as usize)
                    .map_or((0, None), |r| (r.len(), r.last().map(|rec| rec.clock)))
            })
            .collect()
    }

    /// The records `worker` closed so far (none for a worker it has not seen).
    pub fn records_of(&self, worker: WorkerId) -> Vec<IterRecord> {
        self.lock()
            .records
            .get(worker as usize)
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(clock: u64, loss: f64) -> IterRecord {
        IterRecord {
            clock,
            start_s: clock as f64,
            end_s: clock as f64 + 1.0,
            wall_s: 0.0,
            samples: 32,
            compute_s: 1.0,
            wait_s: 0.0,
            comm_s: 0.0,
            loss,
            version_read: clock as i64,
            bytes_sent: 0,
        }
    }

    fn guard(enabled: bool, eval_every: u64) -> RunGuard {
        let cfg = RunConfig {
            workers: 2,
            eval_every,
            guard: GuardConfig {
                enabled,
                ..GuardConfig::default()
            },
            ..RunConfig::default()
        };
        RunGuard::new(&cfg, true)
    }

    #[test]
    fn trips_after_patience_consecutive_checks_and_freezes_the_store() {
        let g = guard(true, 2);
        g.record(1, &rec(0, 2.0));
        // Clock 1 (check 1): 30 > 10 × 2; clock 3 (check 2): 5, below: strikes reset.
        for (clock, loss) in [(1, 30.0), (2, 99.0), (3, 5.0), (5, 21.0), (7, 25.0)] {
            g.record(1, &rec(clock, loss));
            assert_eq!(g.stop_reason(), None, "clock {clock}");
        }
        g.record(1, &rec(9, 40.0));
        let r = g
            .stop_reason()
            .expect("tripped on the third check in a row");
        assert_eq!(
            (r.role.as_str(), r.iteration, r.loss),
            ("worker-1", 10, 40.0)
        );
        assert_eq!(
            r.cause,
            Cause::LossRatio {
                starting_loss: 2.0,
                ratio: 10.0,
                checks: 3
            }
        );
        assert!(r
            .to_string()
            .contains("worker-1 at iteration 10 (strategy bsp)"));
        g.record(0, &rec(0, 2.0));
        assert_eq!(g.records()[0].len(), 0, "no record is kept after the trip");
        assert_eq!(g.records()[1].len(), 7);
    }

    #[test]
    fn disabled_keeps_records_but_never_trips_on_the_ratio() {
        let g = guard(false, 1);
        for clock in 0..10 {
            g.record(0, &rec(clock, if clock == 0 { 1.0 } else { 1e6 }));
        }
        assert_eq!(g.stop_reason(), None);
        assert_eq!(g.records()[0].len(), 10);
        g.non_finite(RoleId::Worker(0), 10, f64::NAN);
        assert_eq!(g.stop_reason().map(|r| r.cause), Some(Cause::NonFinite));
    }

    #[test]
    fn records_without_samples_or_loss_are_not_checked() {
        let g = guard(true, 1);
        let mut empty = rec(0, f64::NAN);
        empty.samples = 0;
        g.record(0, &empty);
        g.record(0, &rec(1, 1.0));
        for clock in 2..6 {
            g.record(0, &rec(clock, 5.0));
        }
        assert_eq!(g.stop_reason(), None, "starting loss is the first real one");
    }

    #[test]
    fn validation_names_the_key() {
        for (cfg, key) in [
            (
                GuardConfig {
                    loss_ratio: 1.0,
                    ..GuardConfig::default()
                },
                "guard.loss_ratio",
            ),
            (
                GuardConfig {
                    patience: 0,
                    ..GuardConfig::default()
                },
                "guard.patience",
            ),
            (
                GuardConfig {
                    stall_s: 0.0,
                    ..GuardConfig::default()
                },
                "guard.stall_s",
            ),
            (
                GuardConfig {
                    stall_s: f64::INFINITY,
                    ..GuardConfig::default()
                },
                "guard.stall_s",
            ),
        ] {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
        GuardConfig::default().validate().unwrap();
    }
}
