//! The run configuration (`configs/*.toml`), its defaults and its validation.

use crate::cluster::ClusterConfig;
use crate::data::DataConfig;
use crate::error::{EngineError, Result};
use crate::guard::GuardConfig;
use crate::membership::MembershipEntry;
use crate::model::ModelConfig;
use crate::optim::OptimizerConfig;
use crate::process::ProcessConfig;
use crate::stragglers::StragglerConfig;
use crate::trace::TraceMode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A whole run's configuration. Unknown keys are errors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Seed of everything random: data, initialisation, sampling order, stragglers.
    pub seed: u64,
    /// `sim` (virtual time, deterministic) or `wall` (real time).
    pub runtime: RuntimeKind,
    /// Number of workers.
    pub workers: u32,
    /// Number of parameter servers.
    pub servers: u32,
    /// Samples per worker per clock (the global batch is `workers × batch`).
    pub batch: u64,
    /// Clocks (iterations) each worker runs.
    pub iterations: u64,
    /// Evaluate test accuracy every this many iterations (and at the end).
    pub eval_every: u64,
    /// Also evaluate the model every this many seconds of run time (virtual in `sim`), from time
    /// 0: a time-indexed curve (`evaluations.jsonl`) for comparing strategies whose iterations
    /// mean different things (RNA rounds, asynchronous groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_every_s: Option<f64>,
    /// Largest parameter block, in bytes: tensors are cut into blocks of at most this size.
    pub block_bytes: u64,
    /// Points per iteration at which stragglers are probed.
    pub progress_points: u32,
    /// Stop with an error if the run has not finished by this run time (seconds): catches
    /// deadlocked strategies in `sim`, where time jumps straight to it.
    pub time_limit_s: f64,
    /// Write a checkpoint every this many iterations (and always at the end), from which
    /// `concord train --resume` continues the run exactly. Each checkpoint is a consistent cut:
    /// under SSP/ASP, workers ahead wait at a checkpoint clock for the others. Needs strategies
    /// that can resume. Unset: a checkpoint at the end only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_every: Option<u64>,
    /// Strategies to compose, e.g. `["ssp"]`.
    pub strategies: Vec<String>,
    /// Memory policy (default `resident`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The model.
    pub model: ModelConfig,
    /// The data set.
    pub data: DataConfig,
    /// The optimizer, applied by the servers.
    pub optimizer: OptimizerConfig,
    /// Machines and devices.
    pub cluster: ClusterConfig,
    /// Straggler patterns, composed.
    #[serde(default)]
    pub stragglers: Vec<StragglerConfig>,
    /// Options of each strategy, by name: `[strategy.ssp] slack = 2`.
    #[serde(default)]
    pub strategy: BTreeMap<String, toml::Value>,
    /// When a run counts as diverged and is stopped early (`[guard]`).
    #[serde(default)]
    pub guard: GuardConfig,
    /// How much of each role's timeline the run keeps: `full`, `sampled` or `off`.
    #[serde(default)]
    pub trace: TraceMode,
    /// What runs the engine's allreduce: the message-based `ring` (default, the reference; timed
    /// by the link model in `sim`) or `nccl` on the members' GPUs (`wall` runtime, every member on
    /// a CUDA device of its own, a build with the `nccl` feature).
    #[serde(default, skip_serializing_if = "CollectiveBackend::is_ring")]
    pub collective: CollectiveBackend,
    /// Timeouts and limits of `runtime = "process"` (`[process]`).
    #[serde(default, skip_serializing_if = "ProcessConfig::is_default")]
    pub process: ProcessConfig,
    /// Machines that join, are warned of an eviction, or fail while the job trains
    /// (`[[membership]]`, see [`crate::membership`]). Empty: every machine stays for the whole job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub membership: Vec<MembershipEntry>,
}

/// What runs the engine's allreduce ([`crate::collective::Allreduce`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectiveBackend {
    /// The ring of engine messages, on the transport and its link model.
    #[default]
    Ring,
    /// NCCL on the members' CUDA devices; its communicator's id travels over the transport.
    Nccl,
}

impl CollectiveBackend {
    /// Whether this is the default ring (left out of a written config).
    pub fn is_ring(&self) -> bool {
        *self == CollectiveBackend::Ring
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            seed: 42,
            runtime: RuntimeKind::Sim,
            workers: 8,
            servers: 2,
            batch: 32,
            iterations: 300,
            eval_every: 25,
            eval_every_s: None,
            block_bytes: 4 << 20,
            progress_points: 10,
            time_limit_s: 1e7,
            checkpoint_every: None,
            strategies: vec!["bsp".into()],
            memory: None,
            model: ModelConfig::default(),
            data: DataConfig::default(),
            optimizer: OptimizerConfig::default(),
            cluster: ClusterConfig::default(),
            stragglers: Vec::new(),
            strategy: BTreeMap::new(),
            guard: GuardConfig::default(),
            trace: TraceMode::Full,
            collective: CollectiveBackend::Ring,
            process: ProcessConfig::default(),
            membership: Vec::new(),
        }
    }
}

impl RunConfig {
    /// Checks every value that types alone do not; errors name the key and what is allowed.
    pub fn validate(&self) -> Result<()> {
        let at_least_one = |key: &str, v: u64| {
            if v >= 1 {
                Ok(())
            } else {
                Err(EngineError::config(key, v, "must be at least 1"))
            }
        };
        at_least_one("workers", self.workers as u64)?;
        at_least_one("servers", self.servers as u64)?;
        at_least_one("batch", self.batch)?;
        at_least_one("iterations", self.iterations)?;
        at_least_one("eval_every", self.eval_every)?;
        if let Some(k) = self.checkpoint_every {
            at_least_one("checkpoint_every", k)?;
        }
        at_least_one("progress_points", self.progress_points as u64)?;
        if self.block_bytes < 4 {
            return Err(EngineError::config(
                "block_bytes",
                self.block_bytes,
                "must be at least 4 (one fp32 element)",
            ));
        }
        if let Some(s) = self.eval_every_s {
            if !(s.is_finite() && s > 0.0) {
                return Err(EngineError::config(
                    "eval_every_s",
                    s,
                    "must be a positive number of seconds",
                ));
            }
        }
        if !(self.time_limit_s.is_finite() && self.time_limit_s > 0.0) {
            return Err(EngineError::config(
                "time_limit_s",
                self.time_limit_s,
                "must be a positive number of seconds",
            ));
        }
        self.guard.validate()?;
        self.optimizer.validate()?;
        self.data.validate()?;
        for s in &self.stragglers {
            s.validate()?;
        }
        Ok(())
    }
}

/// How a run keeps time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// Virtual time on one thread: compute costs come from the cost model; deterministic.
    Sim,
    /// Real time on a thread pool: compute costs what it costs; slowdowns are extra sleeps.
    Wall,
    /// Real time, one OS process per machine of the cluster, messages between processes over
    /// TCP (started by `concord launch`, torchrun, srun or mpirun; see `crate::process`).
    Process,
}

impl RuntimeKind {
    /// Whether time is real (measured) rather than the cost model's: `wall` and `process`.
    pub fn is_real_time(self) -> bool {
        !matches!(self, RuntimeKind::Sim)
    }

    /// The config spelling (`sim`, `wall`, `process`).
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Sim => "sim",
            RuntimeKind::Wall => "wall",
            RuntimeKind::Process => "process",
        }
    }
}
