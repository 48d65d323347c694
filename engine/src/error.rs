//! The engine's error type.

use crate::ids::RoleId;
use thiserror::Error;

/// Everything that can stop a run, each naming what went wrong and where.
#[derive(Debug, Error)]
pub enum EngineError {
    /// A configuration value is missing, malformed or out of range.
    #[error("config: `{key}` = {value}: {reason}")]
    Config {
        /// Dotted key, e.g. `cluster.machines[0].device`.
        key: String,
        /// The offending value as written.
        value: String,
        /// What is allowed.
        reason: String,
    },
    /// Strategy composition failed (unknown name, two strategies claiming a slot, invalid combination).
    #[error("strategies: {0}")]
    Composition(String),
    /// A data set could not be loaded.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// A straggler pattern is invalid.
    #[error(transparent)]
    Straggler(#[from] crate::stragglers::StragglerError),
    /// A simulated device ran out of memory.
    #[error(
        "out of memory on {device} ({role}): needs {needed} bytes, budget {budget} bytes ({what})"
    )]
    OutOfMemory {
        /// The device (machine and profile).
        device: String,
        /// The role whose allocation failed.
        role: RoleId,
        /// Bytes that would be resident after the allocation.
        needed: u64,
        /// The device's memory budget.
        budget: u64,
        /// What was being allocated.
        what: String,
    },
    /// A GPU could not be opened or used.
    #[error("GPU: cannot {what}: {reason}")]
    Gpu {
        /// What was being done (e.g. `open GPU 1`).
        what: String,
        /// The CUDA or NCCL error, or why this build cannot.
        reason: String,
    },
    /// Training diverged.
    #[error("training diverged: loss is {loss} at clock {clock} on {role}")]
    Diverged {
        /// The role that saw it.
        role: RoleId,
        /// The clock.
        clock: u64,
        /// The non-finite loss value.
        loss: f64,
    },
    /// The run was stopped early (its divergence guard tripped); what it did so far is attached,
    /// so the caller can still write the run folder.
    #[error("{0}")]
    Stopped(Box<crate::run::StoppedRun>),
    /// A real-time run in which no worker closed an iteration for `guard.stall_s` seconds.
    #[error("the run stalled: {0}")]
    Stalled(crate::stall::Stall),
    /// `--runtime process`: the processes could not meet, or one of them failed or vanished.
    #[error("process runtime (rank {rank}): {reason}")]
    Process {
        /// The rank that reports it.
        rank: u32,
        /// What happened, naming the machine, its roles and the last iteration where known.
        reason: String,
    },
    /// A protocol violation between roles (a bug in a strategy, or a role that vanished).
    #[error("protocol error at {role}: {reason}")]
    Protocol {
        /// Where it was detected.
        role: RoleId,
        /// What happened.
        reason: String,
    },
    /// A strategy message could not be encoded.
    #[error("cannot encode message `{tag}`: {reason}")]
    Encode {
        /// Message tag.
        tag: String,
        /// Serializer error.
        reason: String,
    },
    /// A strategy message's body does not decode as the type its tag names.
    #[error("malformed message `{tag}`: {reason}")]
    Decode {
        /// Message tag.
        tag: String,
        /// Deserializer error.
        reason: String,
    },
    /// Tensor math failed.
    #[error("tensor error at {context}: {source}")]
    Tensor {
        /// What was being computed.
        context: String,
        /// candle's error.
        #[source]
        source: candle_core::Error,
    },
    /// No holder of the model reports a parameter block: the holders' parts do not cover the
    /// whole model.
    #[error("the model misses block {block} of `{param}`: none of its holders ({}) reports it", role_list(.holders))]
    MissingBlock {
        /// The block.
        block: crate::payload::BlockId,
        /// The parameter it is part of.
        param: String,
        /// Every holder of the model.
        holders: Vec<RoleId>,
    },
    /// More than one holder of the model reports a parameter block: the holders' parts overlap.
    #[error("block {block} of `{param}` is held by more than one of the model's holders: {}", role_list(.holders))]
    DoubledBlock {
        /// The block.
        block: crate::payload::BlockId,
        /// The parameter it is part of.
        param: String,
        /// The holders reporting it.
        holders: Vec<RoleId>,
    },
    /// A checkpoint cannot be read, or does not fit the run that resumes from it.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The checkpoint file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A strategy of the run cannot stop at a checkpoint and continue exactly.
    #[error(
        "strategy `{strategy}` cannot resume from a checkpoint (`checkpoint_every`, `--resume`): {reason}"
    )]
    NotResumable {
        /// The strategy.
        strategy: String,
        /// Why: the state its roles keep that a checkpoint does not capture.
        reason: String,
    },
    /// Writing outputs failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl EngineError {
    /// Shorthand for a [`EngineError::Config`] error.
    pub fn config(key: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> Self {
        EngineError::Config {
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// Shorthand for a [`EngineError::Protocol`] error.
    pub fn protocol(role: RoleId, reason: impl Into<String>) -> Self {
        EngineError::Protocol {
            role,
            reason: reason.into(),
        }
    }
}

impl From<concord_workloads::WorkloadError> for EngineError {
    /// Each workload error becomes the engine error of the same kind and message, so callers
    /// that match on [`EngineError::Config`], [`EngineError::Tensor`] or [`EngineError::Data`]
    /// see models and data sets fail exactly as before they lived in their own crate.
    fn from(e: concord_workloads::WorkloadError) -> Self {
        use concord_workloads::WorkloadError as W;
        match e {
            W::Config { key, value, reason } => EngineError::Config { key, value, reason },
            W::Tensor { context, source } => EngineError::Tensor { context, source },
            W::Data(e) => EngineError::Data(e),
            W::Plan(e) => EngineError::Tensor {
                context: "a layer-by-layer step following a move plan".into(),
                source: candle_core::Error::Msg(e.to_string()),
            },
        }
    }
}

/// `worker-0, worker-1`: roles for an error message.
fn role_list(roles: &[RoleId]) -> String {
    roles
        .iter()
        .map(RoleId::label)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Attaches context to candle errors.
pub trait TensorContext<T> {
    /// Converts a candle error into [`EngineError::Tensor`] naming `context`.
    fn ctx(self, context: &str) -> Result<T, EngineError>;
}

impl<T> TensorContext<T> for Result<T, candle_core::Error> {
    fn ctx(self, context: &str) -> Result<T, EngineError> {
        self.map_err(|source| EngineError::Tensor {
            context: context.to_string(),
            source,
        })
    }
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
