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

mod contention;
mod csv_trace;
mod disrupted;
mod imbalance;
mod jitter;
mod persistent;
mod power_law;
mod rng;
mod rotation;
mod server;
mod sleeps;
mod slow_worker;
mod trace;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use rng::{key_hash, rng_for, rng_for_keys, splitmix64};

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
}

/// Errors from validating or building patterns. Messages name the pattern, the field,
/// the offending value and what is allowed; CSV errors name the file, line and column.
#[derive(thiserror::Error, Debug)]
pub enum StragglerError {
    /// A configuration field is out of range (or inconsistent with the role being built).
    #[error("straggler pattern `{pattern}`: field `{field}` = {value} is invalid: {allowed}")]
    InvalidField {
        /// Pattern tag, e.g. `slow-worker`.
        pattern: &'static str,
        /// Field name as written in TOML.
        field: &'static str,
        /// The offending value, rendered.
        value: String,
        /// What would have been accepted.
        allowed: String,
    },
    /// A CSV trace file could not be read at all (missing, unreadable).
    #[error("csv trace `{path}`: {problem}")]
    CsvFile {
        /// File path as configured.
        path: String,
        /// What went wrong.
        problem: String,
    },
    /// A CSV trace file has a malformed header or row.
    #[error("csv trace `{path}`, line {line}, column `{column}`: {problem}")]
    CsvRow {
        /// File path as configured.
        path: String,
        /// 1-based line number in the file.
        line: u64,
        /// Column name (`time`, `role`, `factor`, `header` or `row`).
        column: String,
        /// What went wrong.
        problem: String,
    },
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

/// FlexRR's uneven workload: `fraction_machines` of the machines carry `share` of the work.
///
/// Heavy machines are chosen without knowing the machine count: machine `m` is heavy iff
/// `ceil((m+1)·f) − ceil(m·f) = 1`, so machine 0 is heavy and any prefix of `M` machines holds
/// `ceil(M·f)` heavy ones (every other machine for `f = 0.5`). Time multipliers are the work per
/// machine relative to the average, `share/f` on heavy and `(1−share)/(1−f)` on light machines,
/// so the average work is unchanged when `M·f` is an integer. Defaults `f = 0.5`, `share = 0.75`
/// give 1.5 and 0.5: heavy machines take 3× as long as light ones.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Uneven {
    /// Fraction of machines that are heavy, in (0, 1). Default 0.5.
    #[serde(default = "d_half")]
    pub fraction_machines: f64,
    /// Share of the total work the heavy machines carry, in (0, 1). Default 0.75.
    #[serde(default = "d_three_quarters")]
    pub share: f64,
}

impl Default for Uneven {
    fn default() -> Self {
        Uneven {
            fraction_machines: 0.5,
            share: 0.75,
        }
    }
}

/// What a Slow Worker slowdown's drawn length measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlowLength {
    /// Run time: the slowdown ends at a point in time.
    #[default]
    Time,
    /// Nominal work: the slowdown ends once that much of the worker's own iteration is done.
    Work,
}

/// Which roles the `jitter` pattern touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JitterRoles {
    /// Workers only (compute jitter).
    Workers,
    /// Servers only (transfer/bandwidth jitter).
    Servers,
    /// Both kinds.
    #[default]
    All,
}

/// Serde config of one pattern, as written in TOML `[[stragglers]]` tables, tagged by `pattern`
/// (kebab-case). Unknown fields are errors so typos do not silently disable a pattern.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "pattern", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StragglerConfig {
    /// FlexRR Slow Worker: at each of `points` decision points per iteration (progress
    /// 1/points, …, 1) an unslowed worker becomes slowed with `probability` for a time
    /// ~ U[0, 2·T0]; while slowed it runs `1 + delay` times slower. About 9 % of time slowed.
    ///
    /// The slowdown lasts a span of time, but an [`Effect`] holds until the next probe; for
    /// the interval in which the slowdown ends, the factor is the exact time-average
    /// (`(r + Δ − r/(1+d)) / Δ` for `r` slowed seconds left and `Δ` nominal seconds of work to
    /// the next point), so `points` must match the engine's probe count. Worker-only.
    SlowWorker {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Probability of starting a slowdown at each decision point. Default 0.01.
        #[serde(default = "d_slow_probability")]
        probability: f64,
        /// Decision points per iteration. Default 10.
        #[serde(default = "d_points")]
        points: u32,
        /// Delay intensity d (1.0 = 100 % = twice as slow); ≥ 0. Required.
        delay: f64,
        /// What the drawn length U[0, 2·T0] measures: `time` (run time, the default) or `work`
        /// (nominal seconds of the worker's own iteration, like the thesis's sleeps inserted at
        /// progress points: the added time is then `d` × the slowed work, linear in `d`).
        #[serde(default)]
        length: SlowLength,
    },
    /// FlexRR Disrupted Machine: every `period_s`, each machine independently is disrupted with
    /// `probability` for `duration_s`; every worker on it (and every server, if
    /// `include_servers`) runs `1 + delay` times slower. Keyed by (seed, machine, period).
    DisruptedMachine {
        /// Machines that can be disrupted (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machines: Option<Vec<u32>>,
        /// Per-machine, per-period disruption probability. Default 0.2.
        #[serde(default = "d_disrupt_probability")]
        probability: f64,
        /// Decision period in seconds. Default 20.
        #[serde(default = "d_twenty")]
        period_s: f64,
        /// Disruption length in seconds. Default 20.
        #[serde(default = "d_twenty")]
        duration_s: f64,
        /// Delay intensity d; ≥ 0. Required.
        delay: f64,
        /// Also slow servers placed on a disrupted machine (service time × (1+d)). Default false.
        #[serde(default)]
        include_servers: bool,
    },
    /// FlexRR Power-law: each (worker, iteration) has time multiplier `U^(−1/(α−1))`, i.e.
    /// `p(t) ∝ t^−α` on `t ≥ T0`, constant over the iteration. Means 1.11 / 1.2 / 1.5 for
    /// α = 11 / 7 / 4. Worker-only.
    PowerLaw {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Exponent α > 2 (finite mean). Required; 4, 7, 11 typical.
        alpha: f64,
    },
    /// Persistent per-worker speeds (time multiplier = 1/speed). Exactly one of `speeds`,
    /// `spread` or `uneven`. LB-BSP's static Homo / Hetero-L2 / Hetero-L3 are
    /// `spread = {min = 1, max = 1}`, `{min = 0.5, max = 1}`, `{min = 0.3333, max = 1}`.
    /// Worker-only.
    Persistent {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Explicit speed per worker index (> 0); must cover every built worker index.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        speeds: Option<Vec<f64>>,
        /// Speeds linearly spaced from `min` (worker 0, slowest) to `max` (worker N−1);
        /// a single worker gets `max`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spread: Option<Span>,
        /// FlexRR uneven workload, see [`Uneven`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uneven: Option<Uneven>,
    },
    /// Fela round-robin: in iteration k, worker `k mod N` sleeps `delay_s` at progress 0.
    RoundRobinSleep {
        /// Sleep in seconds (≥ 0). Required (Fela: 2–10 s VGG19, 1–5 s GoogLeNet).
        delay_s: f64,
    },
    /// Fela probability-based: every iteration each worker independently sleeps `delay_s`
    /// at progress 0 with `probability`. Keyed by (seed, worker, iter).
    ProbabilisticSleep {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Per-iteration straggling probability. Required (Fela: 0.1–0.5).
        probability: f64,
        /// Sleep in seconds (≥ 0). Required (Fela: 6 s VGG19, 3 s GoogLeNet).
        delay_s: f64,
    },
    /// LB-BSP competing process: per worker an on/off Markov chain over iterations
    /// (P(off→on) = `p_on`, P(on→off) = `p_off`) with load share ℓ; availability
    /// `s = (1 − ℓ·on)·exp(noise·Z)`; compute factor `spike / s`, where single-iteration spikes
    /// (factor `spike_factor`, probability `spike_probability`) do not show in the signals.
    /// Signals: `cpu = ℓ·on + signal_noise·Z₁`, `mem = 0.3 + 0.5·ℓ·on + signal_noise·Z₂`
    /// (resident trainer plus the competitor's memory, which scales with its load), clamped to
    /// [0, 1]. Exactly one of `load` / `load_spread`. Worker-only. For LB-BSP's static levels
    /// use `persistent` with `spread`.
    Contention {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// P(off → on) per iteration. Required.
        p_on: f64,
        /// P(on → off) per iteration. Required.
        p_off: f64,
        /// Explicit load share ℓ per worker index, each in [0, 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        load: Option<Vec<f64>>,
        /// Loads linearly spaced from `max` (worker 0) to `min` (worker N−1), within [0, 1);
        /// a single worker gets `min`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        load_spread: Option<Span>,
        /// σ of the multiplicative lognormal (median 1) availability noise. Default 0.05.
        #[serde(default = "d_noise")]
        noise: f64,
        /// Probability of a transient single-iteration spike. Default 0.05.
        #[serde(default = "d_spike_probability")]
        spike_probability: f64,
        /// Compute factor of a spike (> 0). Default 2.0.
        #[serde(default = "d_two")]
        spike_factor: f64,
        /// σ of the additive Gaussian noise on both signals. Default 0.02.
        #[serde(default = "d_signal_noise")]
        signal_noise: f64,
    },
    /// LB-BSP Cluster-B stand-in: piecewise-constant availability per worker; segment lengths
    /// ~ Exp(mean `mean_segment_s`), level ~ U[`min`, `max`] at each shift; factor = 1/level.
    /// Signals: `cpu = 1 − level`, `mem = 0.3 + 0.5·(1 − level)`. Worker-only.
    TraceLike {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Mean segment length in seconds (> 0). Default 30.
        #[serde(default = "d_thirty")]
        mean_segment_s: f64,
        /// Lowest availability level (> 0). Default 0.5.
        #[serde(default = "d_half")]
        min: f64,
        /// Highest availability level (≥ min). Default 1.0.
        #[serde(default = "d_one")]
        max: f64,
    },
    /// LB-BSP's GPU-cluster network variation: the workers' NIC bandwidth cycles through
    /// `factors`, each held for `period_s` seconds (480 → 160 Mbit/s is `[1.0, 0.3333]`).
    /// Worker-only; compute is untouched.
    BandwidthRotation {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Seconds each factor is held (> 0).
        period_s: f64,
        /// Bandwidth multipliers in rotation order (each > 0, at least one).
        factors: Vec<f64>,
    },
    /// PSLD scheduled server slowdown: from `start_s` to `end_s` (exclusive; None = forever),
    /// the servers get `bandwidth_factor`, `cpu_factor` (service time multiplier) and
    /// `per_request_s`. Deterministic. Server-only.
    SlowServer {
        /// Servers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        servers: Option<Vec<u32>>,
        /// Start time in seconds (≥ 0). Default 0.
        #[serde(default)]
        start_s: f64,
        /// End time in seconds (> start_s), None = until the end of the run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end_s: Option<f64>,
        /// NIC bandwidth multiplier (> 0; 0.1 = a tenth). Default 1.
        #[serde(default = "d_one")]
        bandwidth_factor: f64,
        /// Service (CPU) time multiplier (> 0). Default 1.
        #[serde(default = "d_one")]
        cpu_factor: f64,
        /// Fixed extra seconds per request (≥ 0). Default 0.
        #[serde(default)]
        per_request_s: f64,
    },
    /// PSLD real-world generator: per-server Markov-modulated bandwidth factor. Every `step_s`
    /// the server jumps, with `switch_probability`, to a uniformly chosen other state of
    /// `states`; the initial state is uniform. Each (server, step) also gets a lognormal
    /// (median 1) factor of σ = `jitter`, so with the default states the cross-server
    /// (best − worst)/worst spans ≈ 0.005–3.2. With `cpu_coupled`, service time is also
    /// multiplied by 1/state. Keyed by (seed, server, step). Server-only.
    ServerMarkov {
        /// Servers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        servers: Option<Vec<u32>>,
        /// Bandwidth factor of each state (> 0). Default [1.0, 0.5, 0.25].
        #[serde(default = "d_states")]
        states: Vec<f64>,
        /// Seconds between switching decisions (> 0). Default 10.
        #[serde(default = "d_ten")]
        step_s: f64,
        /// Probability of switching at each step. Default 0.1.
        #[serde(default = "d_switch_probability")]
        switch_probability: f64,
        /// σ of the per-(server, step) lognormal factor. Default 0.01.
        #[serde(default = "d_markov_jitter")]
        jitter: f64,
        /// Also slow service time by 1/state. Default false.
        #[serde(default)]
        cpu_coupled: bool,
    },
    /// Multiplicative lognormal jitter `J = exp(σZ − σ²/2)` (mean 1): compute factor J for
    /// workers, per (worker, iteration, probe point); bandwidth factor 1/J (transfer time × J)
    /// for servers, drawn anew for every transfer.
    Jitter {
        /// Which kinds to jitter. Default `all`.
        #[serde(default)]
        roles: JitterRoles,
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Servers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        servers: Option<Vec<u32>>,
        /// σ of the lognormal (≥ 0). Default 0.1.
        #[serde(default = "d_jitter_sigma")]
        sigma: f64,
        /// One factor per (worker, iteration) instead of per probe point: noise that does not
        /// average out over an iteration however finely a strategy charges it (FlexRR's
        /// baseline jitter). Default false.
        #[serde(default)]
        per_iteration: bool,
    },
    /// RNA's random delay: before every iteration a worker sleeps U[`min_s`, `max_s`] seconds,
    /// keyed by (seed, worker, iter). The thesis injects U(0, 50 ms) per process per iteration,
    /// and U(50, 100 ms) on group B of its mixed setting (`workers` = group B). Worker-only.
    UniformDelay {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Shortest delay in seconds (≥ 0). Default 0.
        #[serde(default)]
        min_s: f64,
        /// Longest delay in seconds (≥ min_s). Required.
        max_s: f64,
    },
    /// Hop-like random slowdown (RNA §5.5, garbled in the thesis; spec's choice): each iteration
    /// a worker runs `factor`× slower with `probability` (default 1/N), keyed by (seed, worker,
    /// iter). Worker-only.
    RandomSlowdown {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Per-iteration probability in [0, 1]; default 1/N for N workers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probability: Option<f64>,
        /// Slowdown factor (≥ 1). Default 6.
        #[serde(default = "d_six")]
        factor: f64,
    },
    /// Inherent load imbalance (RNA §2.1.0, UCF101 + LSTM): iteration time ∝ the total length
    /// of `sequences` sequences whose lengths are lognormal with mean `mean_len` and standard
    /// deviation `std_len`, clipped to [`min_len`, `max_len`]; factor = total / (sequences ·
    /// mean_len). Defaults are UCF101's (186, 97.7, 29, 1776) with one length per batch, whose
    /// spread (CV ≈ 0.5) is close to the thesis's measured per-batch times (mean 1219 ms, std
    /// 760 ms). Worker-only.
    VariableLength {
        /// Workers affected (None = all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workers: Option<Vec<u32>>,
        /// Mean sequence length (> 0). Default 186.
        #[serde(default = "d_mean_len")]
        mean_len: f64,
        /// Standard deviation of the length (≥ 0). Default 97.7.
        #[serde(default = "d_std_len")]
        std_len: f64,
        /// Shortest length (> 0). Default 29.
        #[serde(default = "d_min_len")]
        min_len: f64,
        /// Longest length (≥ min_len). Default 1776.
        #[serde(default = "d_max_len")]
        max_len: f64,
        /// Sequences per batch whose lengths add up (≥ 1). Default 1.
        #[serde(default = "d_sequences")]
        sequences: u32,
    },
    /// Replay of a CSV file with header `time,role,factor`; `role` is `worker:N`, `server:N` or
    /// `machine:N`; `factor` (> 0) multiplies compute/service time. A role's factor at time t is
    /// the last row for it with `time ≤ t` (1 before its first row); a role's machine rows
    /// multiply in. Rows must be sorted by time. Loaded at build time; relative paths are
    /// relative to the process's working directory.
    CsvTrace {
        /// Path of the CSV file.
        path: PathBuf,
    },
}

fn d_half() -> f64 {
    0.5
}
fn d_three_quarters() -> f64 {
    0.75
}
fn d_slow_probability() -> f64 {
    0.01
}
fn d_points() -> u32 {
    10
}
fn d_disrupt_probability() -> f64 {
    0.2
}
fn d_twenty() -> f64 {
    20.0
}
fn d_noise() -> f64 {
    0.05
}
fn d_spike_probability() -> f64 {
    0.05
}
fn d_two() -> f64 {
    2.0
}
fn d_signal_noise() -> f64 {
    0.02
}
fn d_thirty() -> f64 {
    30.0
}
fn d_one() -> f64 {
    1.0
}
fn d_states() -> Vec<f64> {
    vec![1.0, 0.5, 0.25]
}
fn d_ten() -> f64 {
    10.0
}
fn d_switch_probability() -> f64 {
    0.1
}
fn d_markov_jitter() -> f64 {
    0.01
}
fn d_jitter_sigma() -> f64 {
    0.1
}
fn d_six() -> f64 {
    6.0
}
fn d_mean_len() -> f64 {
    186.0
}
fn d_std_len() -> f64 {
    97.7
}
fn d_min_len() -> f64 {
    29.0
}
fn d_max_len() -> f64 {
    1776.0
}
fn d_sequences() -> u32 {
    1
}

/// Range checks shared by `validate`.
struct Check {
    pattern: &'static str,
}

impl Check {
    fn err(
        &self,
        field: &'static str,
        value: impl std::fmt::Display,
        allowed: &str,
    ) -> StragglerError {
        StragglerError::InvalidField {
            pattern: self.pattern,
            field,
            value: value.to_string(),
            allowed: allowed.to_string(),
        }
    }
    fn prob(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if (0.0..=1.0).contains(&v) {
            Ok(())
        } else {
            Err(self.err(field, v, "a probability in [0, 1]"))
        }
    }
    fn nonneg(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(self.err(field, v, "a finite value >= 0"))
        }
    }
    fn pos(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(self.err(field, v, "a finite value > 0"))
        }
    }
    fn load(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if (0.0..1.0).contains(&v) {
            Ok(())
        } else {
            Err(self.err(field, v, "a load share in [0, 1) (1 would stop the worker)"))
        }
    }
}

fn in_filter(filter: &Option<Vec<u32>>, index: u32) -> bool {
    filter.as_ref().is_none_or(|list| list.contains(&index))
}

/// The always-NONE instance for roles a pattern does not touch.
#[derive(Debug, Clone, Copy, Default)]
struct Inert;

impl Straggler for Inert {
    fn effect(&mut self, _probe: &Probe) -> Effect {
        Effect::NONE
    }
}

impl StragglerConfig {
    /// The pattern's TOML tag, e.g. `"slow-worker"` (used in error messages).
    pub fn pattern_name(&self) -> &'static str {
        match self {
            StragglerConfig::SlowWorker { .. } => "slow-worker",
            StragglerConfig::DisruptedMachine { .. } => "disrupted-machine",
            StragglerConfig::PowerLaw { .. } => "power-law",
            StragglerConfig::Persistent { .. } => "persistent",
            StragglerConfig::RoundRobinSleep { .. } => "round-robin-sleep",
            StragglerConfig::ProbabilisticSleep { .. } => "probabilistic-sleep",
            StragglerConfig::Contention { .. } => "contention",
            StragglerConfig::TraceLike { .. } => "trace-like",
            StragglerConfig::BandwidthRotation { .. } => "bandwidth-rotation",
            StragglerConfig::SlowServer { .. } => "slow-server",
            StragglerConfig::ServerMarkov { .. } => "server-markov",
            StragglerConfig::Jitter { .. } => "jitter",
            StragglerConfig::CsvTrace { .. } => "csv-trace",
            StragglerConfig::UniformDelay { .. } => "uniform-delay",
            StragglerConfig::RandomSlowdown { .. } => "random-slowdown",
            StragglerConfig::VariableLength { .. } => "variable-length",
        }
    }

    /// Checks ranges (probabilities in `[0, 1]`, delays >= 0, alpha > 2, factors > 0, ...).
    /// The error names the pattern, the field, the value and what is allowed.
    pub fn validate(&self) -> Result<(), StragglerError> {
        let c = Check {
            pattern: self.pattern_name(),
        };
        match self {
            StragglerConfig::SlowWorker {
                probability,
                points,
                delay,
                ..
            } => {
                c.prob("probability", *probability)?;
                if *points == 0 {
                    return Err(c.err("points", points, "at least 1 decision point per iteration"));
                }
                c.nonneg("delay", *delay)
            }
            StragglerConfig::DisruptedMachine {
                probability,
                period_s,
                duration_s,
                delay,
                ..
            } => {
                c.prob("probability", *probability)?;
                c.pos("period_s", *period_s)?;
                c.nonneg("duration_s", *duration_s)?;
                c.nonneg("delay", *delay)
            }
            StragglerConfig::PowerLaw { alpha, .. } => {
                if alpha.is_finite() && *alpha > 2.0 {
                    Ok(())
                } else {
                    Err(c.err(
                        "alpha",
                        alpha,
                        "a finite exponent > 2: p(t) ∝ t^-alpha has an infinite mean for alpha <= 2 \
                         (typical values 4, 7, 11)",
                    ))
                }
            }
            StragglerConfig::Persistent {
                speeds,
                spread,
                uneven,
                ..
            } => {
                let given = [speeds.is_some(), spread.is_some(), uneven.is_some()];
                let n = given.iter().filter(|b| **b).count();
                if n != 1 {
                    return Err(c.err(
                        "speeds/spread/uneven",
                        format!("{n} of them set"),
                        "exactly one of `speeds`, `spread` or `uneven`",
                    ));
                }
                if let Some(list) = speeds {
                    if list.is_empty() {
                        return Err(c.err("speeds", "[]", "a non-empty list of speeds > 0"));
                    }
                    for &s in list {
                        c.pos("speeds", s)?;
                    }
                }
                if let Some(Span { min, max }) = spread {
                    c.pos("spread.min", *min)?;
                    c.pos("spread.max", *max)?;
                    if min > max {
                        return Err(c.err(
                            "spread",
                            format!("{{min = {min}, max = {max}}}"),
                            "min <= max",
                        ));
                    }
                }
                if let Some(Uneven {
                    fraction_machines,
                    share,
                }) = uneven
                {
                    if !(*fraction_machines > 0.0 && *fraction_machines < 1.0) {
                        return Err(c.err(
                            "uneven.fraction_machines",
                            fraction_machines,
                            "a fraction in (0, 1)",
                        ));
                    }
                    if !(*share > 0.0 && *share < 1.0) {
                        return Err(c.err("uneven.share", share, "a fraction in (0, 1)"));
                    }
                }
                Ok(())
            }
            StragglerConfig::RoundRobinSleep { delay_s } => c.nonneg("delay_s", *delay_s),
            StragglerConfig::ProbabilisticSleep {
                probability,
                delay_s,
                ..
            } => {
                c.prob("probability", *probability)?;
                c.nonneg("delay_s", *delay_s)
            }
            StragglerConfig::Contention {
                p_on,
                p_off,
                load,
                load_spread,
                noise,
                spike_probability,
                spike_factor,
                signal_noise,
                ..
            } => {
                c.prob("p_on", *p_on)?;
                c.prob("p_off", *p_off)?;
                if *p_on + *p_off <= 0.0 {
                    return Err(c.err(
                        "p_on",
                        p_on,
                        "p_on + p_off > 0 (otherwise the chain has no stationary on-fraction)",
                    ));
                }
                match (load, load_spread) {
                    (Some(list), None) => {
                        if list.is_empty() {
                            return Err(c.err(
                                "load",
                                "[]",
                                "a non-empty list of load shares in [0, 1)",
                            ));
                        }
                        for &l in list {
                            c.load("load", l)?;
                        }
                    }
                    (None, Some(Span { min, max })) => {
                        c.load("load_spread.min", *min)?;
                        c.load("load_spread.max", *max)?;
                        if min > max {
                            return Err(c.err(
                                "load_spread",
                                format!("{{min = {min}, max = {max}}}"),
                                "min <= max",
                            ));
                        }
                    }
                    _ => {
                        return Err(c.err(
                            "load/load_spread",
                            if load.is_some() {
                                "both set"
                            } else {
                                "neither set"
                            },
                            "exactly one of `load` or `load_spread`",
                        ))
                    }
                }
                c.nonneg("noise", *noise)?;
                c.prob("spike_probability", *spike_probability)?;
                c.pos("spike_factor", *spike_factor)?;
                c.nonneg("signal_noise", *signal_noise)
            }
            StragglerConfig::TraceLike {
                mean_segment_s,
                min,
                max,
                ..
            } => {
                c.pos("mean_segment_s", *mean_segment_s)?;
                c.pos("min", *min)?;
                c.pos("max", *max)?;
                if min > max {
                    return Err(c.err("min", min, "min <= max"));
                }
                Ok(())
            }
            StragglerConfig::BandwidthRotation {
                period_s, factors, ..
            } => {
                c.pos("period_s", *period_s)?;
                if factors.is_empty() {
                    return Err(c.err("factors", "[]", "at least one factor"));
                }
                for f in factors {
                    c.pos("factors", *f)?;
                }
                Ok(())
            }
            StragglerConfig::SlowServer {
                start_s,
                end_s,
                bandwidth_factor,
                cpu_factor,
                per_request_s,
                ..
            } => {
                c.nonneg("start_s", *start_s)?;
                if let Some(end) = end_s {
                    if !(end.is_finite() && end > start_s) {
                        return Err(c.err("end_s", end, "a finite time > start_s"));
                    }
                }
                c.pos("bandwidth_factor", *bandwidth_factor)?;
                c.pos("cpu_factor", *cpu_factor)?;
                c.nonneg("per_request_s", *per_request_s)
            }
            StragglerConfig::ServerMarkov {
                states,
                step_s,
                switch_probability,
                jitter,
                ..
            } => {
                if states.is_empty() {
                    return Err(c.err("states", "[]", "a non-empty list of bandwidth factors > 0"));
                }
                for &s in states {
                    c.pos("states", s)?;
                }
                c.pos("step_s", *step_s)?;
                c.prob("switch_probability", *switch_probability)?;
                c.nonneg("jitter", *jitter)
            }
            StragglerConfig::Jitter { sigma, .. } => c.nonneg("sigma", *sigma),
            StragglerConfig::UniformDelay { min_s, max_s, .. } => {
                c.nonneg("min_s", *min_s)?;
                c.nonneg("max_s", *max_s)?;
                if max_s < min_s {
                    return Err(c.err("max_s", max_s, "max_s >= min_s"));
                }
                Ok(())
            }
            StragglerConfig::RandomSlowdown {
                probability,
                factor,
                ..
            } => {
                if let Some(p) = probability {
                    c.prob("probability", *p)?;
                }
                if !(factor.is_finite() && *factor >= 1.0) {
                    return Err(c.err("factor", factor, "a finite slowdown factor >= 1"));
                }
                Ok(())
            }
            StragglerConfig::VariableLength {
                mean_len,
                std_len,
                min_len,
                max_len,
                sequences,
                ..
            } => {
                c.pos("mean_len", *mean_len)?;
                c.nonneg("std_len", *std_len)?;
                c.pos("min_len", *min_len)?;
                c.pos("max_len", *max_len)?;
                if max_len < min_len {
                    return Err(c.err("max_len", max_len, "max_len >= min_len"));
                }
                if *sequences == 0 {
                    return Err(c.err("sequences", sequences, "at least 1 sequence per batch"));
                }
                Ok(())
            }
            StragglerConfig::CsvTrace { path } => {
                if path.as_os_str().is_empty() {
                    Err(c.err("path", "\"\"", "a path to a CSV file"))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Whether the pattern can affect the role `(kind, index, machine)`; the others build to
    /// an inert instance. `csv-trace` always applies (its file decides).
    pub fn applies_to(&self, kind: RoleKind, index: u32, machine: u32) -> bool {
        use RoleKind::{Server, Worker};
        match self {
            StragglerConfig::SlowWorker { workers, .. }
            | StragglerConfig::PowerLaw { workers, .. }
            | StragglerConfig::Persistent { workers, .. }
            | StragglerConfig::ProbabilisticSleep { workers, .. }
            | StragglerConfig::Contention { workers, .. }
            | StragglerConfig::TraceLike { workers, .. }
            | StragglerConfig::UniformDelay { workers, .. }
            | StragglerConfig::RandomSlowdown { workers, .. }
            | StragglerConfig::VariableLength { workers, .. } => {
                kind == Worker && in_filter(workers, index)
            }
            StragglerConfig::RoundRobinSleep { .. } => kind == Worker,
            StragglerConfig::DisruptedMachine {
                machines,
                include_servers,
                ..
            } => (kind == Worker || *include_servers) && in_filter(machines, machine),
            StragglerConfig::BandwidthRotation { workers, .. } => {
                kind == Worker && in_filter(workers, index)
            }
            StragglerConfig::SlowServer { servers, .. }
            | StragglerConfig::ServerMarkov { servers, .. } => {
                kind == Server && in_filter(servers, index)
            }
            StragglerConfig::Jitter {
                roles,
                workers,
                servers,
                ..
            } => match kind {
                Worker => *roles != JitterRoles::Servers && in_filter(workers, index),
                Server => *roles != JitterRoles::Workers && in_filter(servers, index),
            },
            StragglerConfig::CsvTrace { .. } => true,
        }
    }

    /// Builds the instance for one role. `seed` is the run seed. Validates first. Patterns
    /// that do not apply to the role's kind/index/machine return an instance whose effect is
    /// always [`Effect::NONE`] (see [`StragglerConfig::applies_to`]). Fails if a per-worker list
    /// (`speeds`, `load`) is too short for `index`, or if a CSV trace cannot be loaded.
    pub fn build(
        &self,
        seed: u64,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        self.validate()?;
        if !self.applies_to(kind, index, machine) {
            return Ok(Box::new(Inert));
        }
        let pattern = self.pattern_name();
        Ok(match self {
            StragglerConfig::SlowWorker {
                probability,
                points,
                delay,
                length,
                ..
            } => Box::new(slow_worker::SlowWorker::new(
                seed,
                index,
                *probability,
                *points,
                *delay,
                *length,
            )),
            StragglerConfig::DisruptedMachine {
                probability,
                period_s,
                duration_s,
                delay,
                ..
            } => Box::new(disrupted::DisruptedMachine::new(
                seed,
                machine,
                *probability,
                *period_s,
                *duration_s,
                *delay,
            )),
            StragglerConfig::PowerLaw { alpha, .. } => {
                Box::new(power_law::PowerLaw::new(seed, index, *alpha))
            }
            StragglerConfig::Persistent {
                speeds,
                spread,
                uneven,
                ..
            } => {
                let mode = if let Some(list) = speeds {
                    let speed =
                        *list
                            .get(index as usize)
                            .ok_or_else(|| StragglerError::InvalidField {
                                pattern,
                                field: "speeds",
                                value: format!("a list of {} entries", list.len()),
                                allowed: format!(
                                    "one speed per worker; worker {index} needs at least {}",
                                    index + 1
                                ),
                            })?;
                    persistent::Mode::Fixed(1.0 / speed)
                } else if let Some(span) = spread {
                    persistent::Mode::Spread(*span)
                } else {
                    persistent::Mode::Uneven(uneven.unwrap_or_default())
                };
                Box::new(persistent::Persistent::new(index, machine, mode))
            }
            StragglerConfig::RoundRobinSleep { delay_s } => {
                Box::new(sleeps::RoundRobinSleep::new(index, *delay_s))
            }
            StragglerConfig::ProbabilisticSleep {
                probability,
                delay_s,
                ..
            } => Box::new(sleeps::ProbabilisticSleep::new(
                seed,
                index,
                *probability,
                *delay_s,
            )),
            StragglerConfig::Contention {
                p_on,
                p_off,
                load,
                load_spread,
                noise,
                spike_probability,
                spike_factor,
                signal_noise,
                ..
            } => {
                let load = match (load, load_spread) {
                    (Some(list), _) => {
                        contention::Load::Fixed(*list.get(index as usize).ok_or_else(|| {
                            StragglerError::InvalidField {
                                pattern,
                                field: "load",
                                value: format!("a list of {} entries", list.len()),
                                allowed: format!(
                                    "one load share per worker; worker {index} needs at least {}",
                                    index + 1
                                ),
                            }
                        })?)
                    }
                    (None, Some(span)) => contention::Load::Spread(*span),
                    (None, None) => unreachable!("validated: exactly one of load/load_spread"),
                };
                Box::new(contention::Contention::new(contention::Params {
                    seed,
                    index,
                    p_on: *p_on,
                    p_off: *p_off,
                    load,
                    noise: *noise,
                    spike_probability: *spike_probability,
                    spike_factor: *spike_factor,
                    signal_noise: *signal_noise,
                }))
            }
            StragglerConfig::TraceLike {
                mean_segment_s,
                min,
                max,
                ..
            } => Box::new(trace::TraceLike::new(
                seed,
                index,
                *mean_segment_s,
                *min,
                *max,
            )),
            StragglerConfig::BandwidthRotation {
                period_s, factors, ..
            } => Box::new(rotation::BandwidthRotation {
                period_s: *period_s,
                factors: factors.clone(),
            }),
            StragglerConfig::SlowServer {
                start_s,
                end_s,
                bandwidth_factor,
                cpu_factor,
                per_request_s,
                ..
            } => Box::new(server::SlowServer {
                start_s: *start_s,
                end_s: *end_s,
                effect: Effect {
                    compute_factor: *cpu_factor,
                    extra_delay_s: 0.0,
                    bandwidth_factor: *bandwidth_factor,
                    per_request_s: *per_request_s,
                },
            }),
            StragglerConfig::ServerMarkov {
                states,
                step_s,
                switch_probability,
                jitter,
                cpu_coupled,
                ..
            } => Box::new(server::ServerMarkov::new(
                seed,
                index,
                states.clone(),
                *step_s,
                *switch_probability,
                *jitter,
                *cpu_coupled,
            )),
            StragglerConfig::Jitter {
                sigma,
                per_iteration,
                ..
            } => Box::new(jitter::Jitter::new(
                seed,
                kind,
                index,
                *sigma,
                *per_iteration,
            )),
            StragglerConfig::CsvTrace { path } => {
                Box::new(csv_trace::CsvTrace::load(path, kind, index, machine)?)
            }
            StragglerConfig::UniformDelay { min_s, max_s, .. } => {
                Box::new(imbalance::UniformDelay {
                    seed,
                    index,
                    min_s: *min_s,
                    max_s: *max_s,
                    last_iter: None,
                })
            }
            StragglerConfig::RandomSlowdown {
                probability,
                factor,
                ..
            } => Box::new(imbalance::RandomSlowdown {
                seed,
                index,
                probability: *probability,
                factor: *factor,
            }),
            StragglerConfig::VariableLength {
                mean_len,
                std_len,
                min_len,
                max_len,
                sequences,
                ..
            } => Box::new(imbalance::VariableLength {
                seed,
                index,
                dist: imbalance::VariableLength::lognormal(*mean_len, *std_len),
                mean_len: *mean_len,
                min_len: *min_len,
                max_len: *max_len,
                sequences: *sequences,
            }),
        })
    }
}

/// Several patterns composed for one role (effects compose with [`Effect::then`]).
///
/// The `i`-th config is built with a seed derived from `(seed, i)`, so two patterns of the
/// same kind in one list draw independently while every role still agrees on each pattern's
/// draws. Patterns that do not apply to the role are dropped.
#[derive(Debug, Default)]
pub struct StragglerSet {
    items: Vec<Box<dyn Straggler>>,
}

impl StragglerSet {
    /// Validates and builds every applicable pattern of `configs` for the role.
    pub fn build(
        configs: &[StragglerConfig],
        seed: u64,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Self, StragglerError> {
        let mut items = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            config.validate()?;
            if config.applies_to(kind, index, machine) {
                items.push(config.build(rng::pattern_seed(seed, i), kind, index, machine)?);
            }
        }
        Ok(StragglerSet { items })
    }

    /// The composed effect of every pattern for this probe (NONE for an empty set).
    pub fn effect(&mut self, p: &Probe) -> Effect {
        self.items
            .iter_mut()
            .fold(Effect::NONE, |acc, s| acc.then(s.effect(p)))
    }

    /// Combined resource signals: `None` if no pattern reports any; otherwise shares combine
    /// as independent competitors, `1 − Π(1 − xᵢ)`, for both `cpu` and `mem`.
    pub fn signals(&mut self, p: &Probe) -> Option<ResourceSignals> {
        let mut out: Option<(f64, f64)> = None;
        for s in &mut self.items {
            if let Some(sig) = s.signals(p) {
                let (fc, fm) = out.unwrap_or((1.0, 1.0));
                out = Some((fc * (1.0 - sig.cpu), fm * (1.0 - sig.mem)));
            }
        }
        out.map(|(fc, fm)| ResourceSignals {
            cpu: 1.0 - fc,
            mem: 1.0 - fm,
        })
    }

    /// True when no pattern applies to this role (it is never slowed).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Number of applicable patterns.
    pub fn len(&self) -> usize {
        self.items.len()
    }
}
