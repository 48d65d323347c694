//! # concord-stragglers
//!
//! Seeded straggler / slowdown injector.
//!
//! Concord simulates a cluster on a small box, so slow workers and slow parameter
//! servers are not real contention but *injected* effects: the engine asks the
//! injector, at well-defined probe points, how much slower a role runs until the
//! next probe ([`Effect`]). The patterns reproduce, with the papers' parameters,
//!
//! * FlexRR / Harlap thesis §4.3.2: `slow-worker`, `disrupted-machine`, `power-law`,
//!   `persistent` (uneven workload);
//! * Fela: `round-robin-sleep`, `probabilistic-sleep`;
//! * LB-BSP: `contention` (on/off competing process with NARX signals), static
//!   heterogeneity (Homo/L2/L3, expressed as `persistent` with `spread`), `trace-like`;
//! * PSLD: `slow-server` (scheduled bandwidth/CPU/per-request slowdowns),
//!   `server-markov` (real-world Markov-modulated generator), `jitter`;
//! * RNA (Yang thesis §5.5): `uniform-delay` (U(0, 50) ms per iteration, and the mixed groups'
//!   U(50, 100) ms), `random-slowdown` (Hop-like: 6× with probability 1/N per iteration),
//!   `variable-length` (inherent imbalance: time ∝ the batch's sequence lengths);
//! * plus `csv-trace`, a replay of a recorded `time,role,factor` file.
//!
//! Each pattern lives in a module of its own holding its serde config (e.g.
//! [`SlowWorkerConfig`]), its validation and its build; [`StragglerConfig`] is the tagged
//! enum users write in TOML (`[[stragglers]] pattern = "slow-worker" ...`) and dispatches to
//! them.
//!
//! **Determinism.** Each role builds its own instance ([`StragglerConfig::build`]);
//! roles share no state. Every random decision comes from a counter-based RNG keyed by
//! `(seed, stream, role/machine, iteration or period)` ([`rng_for`]), so the outcome does
//! not depend on the order in which roles are probed, and all workers of a machine agree
//! on machine-level events. Only two patterns keep sequential per-role state
//! (`trace-like`'s segment stream and caches of Markov chains), and that state is driven
//! by this role alone.
//!
//! **Patterns that do not apply** to a role (wrong kind, filtered out by `workers` /
//! `servers` / `machines`) build to an inert instance whose effect is always
//! [`Effect::NONE`] and whose signals are `None`; [`StragglerSet::build`] drops them, so
//! [`StragglerSet::is_empty`] tells the engine that the role is never slowed.

#![warn(missing_docs)]

mod common;
mod config;
mod error;
mod patterns;
mod rng;
mod set;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use config::StragglerConfig;
pub use error::StragglerError;
pub use patterns::{
    BandwidthRotationConfig, ContentionConfig, CsvTraceConfig, DisruptedMachineConfig,
    JitterConfig, JitterRoles, PersistentConfig, PowerLawConfig, ProbabilisticSleepConfig,
    RandomSlowdownConfig, RoundRobinSleepConfig, ServerMarkovConfig, SlowLength, SlowServerConfig,
    SlowWorkerConfig, TraceLikeConfig, Uneven, UniformDelayConfig, VariableLengthConfig,
};
pub use rng::{key_hash, rng_for, rng_for_keys, splitmix64};
pub use set::StragglerSet;

/// Where a role stands when it asks the injector (virtual or wall seconds since run start).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probe {
    /// Worker or server.
    pub kind: RoleKind,
    /// Worker index `0..num_workers` or server index `0..num_servers`.
    pub index: u32,
    /// Machine id the role is placed on.
    pub machine: u32,
    /// Number of workers in the run (round-robin sleeps and linear spreads need it).
    pub num_workers: u32,
    /// Seconds since run start (virtual or wall).
    pub now: f64,
    /// The role's current iteration / clock; for the wire's bandwidth probes, the number of
    /// transfers of the role so far.
    pub iter: u64,
    /// Fraction of the current iteration done, in `[0, 1]`.
    pub progress: f64,
    /// T0: the undelayed iteration time of this role (seconds), as the engine's cost model predicts.
    pub nominal_iter_s: f64,
}

/// The sizes of a job, for the checks of patterns that name roles (a CSV trace's rows):
/// [`StragglerConfig::check_job`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobShape {
    /// Workers `0..workers`.
    pub workers: u32,
    /// Servers `0..servers`, standby servers of elastic strategies included.
    pub servers: u32,
    /// Machines `0..machines` of the resolved cluster.
    pub machines: u32,
}

/// The kind of role a pattern acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoleKind {
    /// A training worker (computes gradients).
    Worker,
    /// A parameter server (aggregates updates, serves pulls).
    Server,
}

/// What the injector does to the role from this point until the next probe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effect {
    /// Multiplies compute time (1 = nominal, 2 = twice as slow); for servers: service/CPU time.
    pub compute_factor: f64,
    /// An additive sleep before continuing (Fela-style sleeps); only reported at progress 0.
    pub extra_delay_s: f64,
    /// Multiplies the role's NIC bandwidth (1 = nominal, 0.25 = a quarter).
    pub bandwidth_factor: f64,
    /// Fixed extra service cost per request (PSLD CPU-starved server), seconds.
    pub per_request_s: f64,
}

impl Effect {
    /// No slowdown at all: the identity of [`Effect::then`].
    pub const NONE: Effect = Effect {
        compute_factor: 1.0,
        extra_delay_s: 0.0,
        bandwidth_factor: 1.0,
        per_request_s: 0.0,
    };

    /// Composes two effects acting at once: factors multiply, delays and per-request costs add.
    pub fn then(self, other: Effect) -> Effect {
        Effect {
            compute_factor: self.compute_factor * other.compute_factor,
            extra_delay_s: self.extra_delay_s + other.extra_delay_s,
            bandwidth_factor: self.bandwidth_factor * other.bandwidth_factor,
            per_request_s: self.per_request_s + other.per_request_s,
        }
    }

    /// An effect that only scales compute time.
    pub fn compute(factor: f64) -> Effect {
        Effect {
            compute_factor: factor,
            ..Effect::NONE
        }
    }
}

impl Default for Effect {
    fn default() -> Self {
        Effect::NONE
    }
}

/// Exogenous resource signals a contention pattern exposes (LB-BSP's NARX inputs):
/// CPU load share and memory pressure in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct ResourceSignals {
    /// Share of the CPU taken by competing work, in `[0, 1]`.
    pub cpu: f64,
    /// Memory-pressure proxy, in `[0, 1]`.
    pub mem: f64,
}

/// One seeded slowdown pattern, owned by one role (each role builds its own instance: roles share no state,
/// so cross-role coordination — e.g. all workers of a machine disrupted together — must come from
/// counter-based randomness keyed by (seed, machine, period), not from shared objects).
pub trait Straggler: Send + std::fmt::Debug {
    /// Effect from this probe until the next. The engine probes a worker at progress 0 (iteration start)
    /// and at `points` evenly spaced progress points per iteration (default 10), in order.
    fn effect(&mut self, probe: &Probe) -> Effect;
    /// Resource signals for this role now (None for patterns that have no such notion).
    fn signals(&mut self, _probe: &Probe) -> Option<ResourceSignals> {
        None
    }
    /// The pattern's own state, for a checkpoint: what a fresh instance cannot recompute from the
    /// probes alone. `None` (the default) for patterns whose effect is a function of the probe
    /// (counter-based draws, schedules, replays that regenerate from the seed).
    fn save(&self) -> Option<serde_json::Value> {
        None
    }
    /// Restores what [`Straggler::save`] returned, so that a run resumed from a checkpoint sees
    /// the same slowdowns as one that never stopped.
    fn restore(&mut self, _state: &serde_json::Value) -> Result<(), StragglerError> {
        Ok(())
    }
}

/// A closed range `[min, max]` used for linear spreads (speeds, loads) and level draws.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// Lower end.
    pub min: f64,
    /// Upper end.
    pub max: f64,
}
