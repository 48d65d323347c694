//! The workloads' error type.
//!
//! Its messages are the engine's, word for word: the engine turns each variant into the
//! matching engine error (a config error stays a config error), so users see the same text
//! whichever layer reports it.

use crate::data::DataError;
use thiserror::Error;

/// Everything that can go wrong resolving, building or running a workload.
#[derive(Debug, Error)]
pub enum WorkloadError {
    /// A configuration value is missing, malformed or out of range.
    #[error("config: `{key}` = {value}: {reason}")]
    Config {
        /// Dotted key, e.g. `model.hidden`.
        key: String,
        /// The offending value as written.
        value: String,
        /// What is allowed.
        reason: String,
    },
    /// Tensor math failed (or a model was handed values of the wrong shape).
    #[error("tensor error at {context}: {source}")]
    Tensor {
        /// What was being computed.
        context: String,
        /// candle's error.
        #[source]
        source: candle_core::Error,
    },
    /// A data set could not be built or loaded.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A layer-by-layer step could not follow a memory manager's move plan.
    #[error("move plan: {0}")]
    Plan(#[from] crate::model::PlanError),
}

impl WorkloadError {
    /// Shorthand for a [`WorkloadError::Config`] error.
    pub fn config(key: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> Self {
        WorkloadError::Config {
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Attaches context to candle errors.
pub trait TensorContext<T> {
    /// Converts a candle error into [`WorkloadError::Tensor`] naming `context`.
    fn ctx(self, context: &str) -> Result<T>;
}

impl<T> TensorContext<T> for std::result::Result<T, candle_core::Error> {
    fn ctx(self, context: &str) -> Result<T> {
        self.map_err(|source| WorkloadError::Tensor {
            context: context.to_string(),
            source,
        })
    }
}

/// The workloads' result type.
pub type Result<T, E = WorkloadError> = std::result::Result<T, E>;
