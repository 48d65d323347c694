//! [`StragglerConfig`], the serde enum of `[[stragglers]]` tables, and the [`Pattern`]
//! contract its dispatchers call on each pattern's config.

use serde::{Deserialize, Serialize};

use crate::common::Inert;
use crate::patterns::{
    BandwidthRotationConfig, ContentionConfig, CsvTraceConfig, DisruptedMachineConfig,
    JitterConfig, PersistentConfig, PowerLawConfig, ProbabilisticSleepConfig, RandomSlowdownConfig,
    RoundRobinSleepConfig, ServerMarkovConfig, SlowServerConfig, SlowWorkerConfig, TraceLikeConfig,
    UniformDelayConfig, VariableLengthConfig,
};
use crate::{JobShape, RoleKind, Straggler, StragglerError};

/// What each pattern's config provides to [`StragglerConfig`]: its tag, its checks, which
/// roles it touches, and how it builds for one of them.
pub(crate) trait Pattern {
    /// The pattern's TOML tag, e.g. `"slow-worker"`.
    fn name(&self) -> &'static str;

    /// Checks ranges; the error names the pattern, the field, the value and what is allowed.
    fn validate(&self) -> Result<(), StragglerError>;

    /// Whether the pattern can affect the role `(kind, index, machine)`.
    fn applies_to(&self, kind: RoleKind, index: u32, machine: u32) -> bool;

    /// Checks the pattern against the job's sizes before any work (e.g. a CSV trace's rows
    /// name roles that exist); `self` is already validated. Most patterns need no such check.
    fn check_job(&self, _job: &JobShape) -> Result<(), StragglerError> {
        Ok(())
    }

    /// Builds the instance for a role the pattern applies to; `self` is already validated.
    fn build(
        &self,
        seed: u64,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError>;
}

/// Serde config of one pattern, as written in TOML `[[stragglers]]` tables, tagged by `pattern`
/// (kebab-case). Unknown fields are errors so typos do not silently disable a pattern. Each
/// variant wraps its pattern's config, whose fields sit beside `pattern` in the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "pattern", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StragglerConfig {
    /// FlexRR Slow Worker (`slow-worker`), see [`SlowWorkerConfig`].
    SlowWorker(SlowWorkerConfig),
    /// FlexRR Disrupted Machine (`disrupted-machine`), see [`DisruptedMachineConfig`].
    DisruptedMachine(DisruptedMachineConfig),
    /// FlexRR Power-law (`power-law`), see [`PowerLawConfig`].
    PowerLaw(PowerLawConfig),
    /// Persistent per-worker speeds (`persistent`), see [`PersistentConfig`].
    Persistent(PersistentConfig),
    /// Fela round-robin sleep (`round-robin-sleep`), see [`RoundRobinSleepConfig`].
    RoundRobinSleep(RoundRobinSleepConfig),
    /// Fela probability-based sleep (`probabilistic-sleep`), see [`ProbabilisticSleepConfig`].
    ProbabilisticSleep(ProbabilisticSleepConfig),
    /// LB-BSP competing process (`contention`), see [`ContentionConfig`].
    Contention(ContentionConfig),
    /// LB-BSP Cluster-B stand-in (`trace-like`), see [`TraceLikeConfig`].
    TraceLike(TraceLikeConfig),
    /// LB-BSP network variation (`bandwidth-rotation`), see [`BandwidthRotationConfig`].
    BandwidthRotation(BandwidthRotationConfig),
    /// PSLD scheduled server slowdown (`slow-server`), see [`SlowServerConfig`].
    SlowServer(SlowServerConfig),
    /// PSLD real-world generator (`server-markov`), see [`ServerMarkovConfig`].
    ServerMarkov(ServerMarkovConfig),
    /// Multiplicative lognormal jitter (`jitter`), see [`JitterConfig`].
    Jitter(JitterConfig),
    /// RNA's random delay (`uniform-delay`), see [`UniformDelayConfig`].
    UniformDelay(UniformDelayConfig),
    /// Hop-like random slowdown (`random-slowdown`), see [`RandomSlowdownConfig`].
    RandomSlowdown(RandomSlowdownConfig),
    /// Inherent load imbalance (`variable-length`), see [`VariableLengthConfig`].
    VariableLength(VariableLengthConfig),
    /// Replay of a CSV trace (`csv-trace`), see [`CsvTraceConfig`].
    CsvTrace(CsvTraceConfig),
}

impl StragglerConfig {
    /// The wrapped pattern config, behind the contract the dispatchers use.
    fn pattern(&self) -> &dyn Pattern {
        match self {
            StragglerConfig::SlowWorker(c) => c,
            StragglerConfig::DisruptedMachine(c) => c,
            StragglerConfig::PowerLaw(c) => c,
            StragglerConfig::Persistent(c) => c,
            StragglerConfig::RoundRobinSleep(c) => c,
            StragglerConfig::ProbabilisticSleep(c) => c,
            StragglerConfig::Contention(c) => c,
            StragglerConfig::TraceLike(c) => c,
            StragglerConfig::BandwidthRotation(c) => c,
            StragglerConfig::SlowServer(c) => c,
            StragglerConfig::ServerMarkov(c) => c,
            StragglerConfig::Jitter(c) => c,
            StragglerConfig::UniformDelay(c) => c,
            StragglerConfig::RandomSlowdown(c) => c,
            StragglerConfig::VariableLength(c) => c,
            StragglerConfig::CsvTrace(c) => c,
        }
    }

    /// The pattern's TOML tag, e.g. `"slow-worker"` (used in error messages).
    pub fn pattern_name(&self) -> &'static str {
        self.pattern().name()
    }

    /// Checks ranges (probabilities in `[0, 1]`, delays >= 0, alpha > 2, factors > 0, ...).
    /// The error names the pattern, the field, the value and what is allowed.
    pub fn validate(&self) -> Result<(), StragglerError> {
        self.pattern().validate()
    }

    /// Validates, then checks the pattern against the job's sizes: the engine calls it once when
    /// it builds a job, before any work, so a CSV trace row for `worker:99` in an 8-worker job
    /// stops the run at start-up (naming the file, the line and the role) instead of being
    /// ignored.
    pub fn check_job(&self, job: &JobShape) -> Result<(), StragglerError> {
        let pattern = self.pattern();
        pattern.validate()?;
        pattern.check_job(job)
    }

    /// Whether the pattern can affect the role `(kind, index, machine)`; the others build to
    /// an inert instance. `csv-trace` always applies (its file decides).
    pub fn applies_to(&self, kind: RoleKind, index: u32, machine: u32) -> bool {
        self.pattern().applies_to(kind, index, machine)
    }

    /// Builds the instance for one role. `seed` is the run seed. Validates first. Patterns
    /// that do not apply to the role's kind/index/machine return an instance whose effect is
    /// always [`Effect::NONE`](crate::Effect::NONE) (see [`StragglerConfig::applies_to`]).
    /// Fails if a per-worker list (`speeds`, `load`) is too short for `index`, or if a CSV
    /// trace cannot be loaded.
    pub fn build(
        &self,
        seed: u64,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        let pattern = self.pattern();
        pattern.validate()?;
        if !pattern.applies_to(kind, index, machine) {
            return Ok(Box::new(Inert));
        }
        pattern.build(seed, kind, index, machine)
    }
}
