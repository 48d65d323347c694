//! Why the planner could not plan.

use thiserror::Error;

/// A planning failure; each names its cause.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PlanError {
    /// The topology holds no worker.
    #[error("planner: no workers to plan for (the topology's levels multiply to 0)")]
    NoWorkers,
    /// The profile has no layer.
    #[error("planner: the profile has no layers")]
    EmptyProfile,
    /// A level's bandwidth is not a positive number.
    #[error("planner: level {level}'s bandwidth is {bandwidth} bytes/s; it must be positive")]
    Bandwidth {
        /// The level, 1 = lowest.
        level: usize,
        /// The bandwidth given, bytes per second.
        bandwidth: f64,
    },
    /// A layer's compute time is negative or not finite.
    #[error("planner: layer {layer}'s compute time is {compute_s} s; it must be finite and >= 0")]
    Compute {
        /// The layer index.
        layer: usize,
        /// The time given.
        compute_s: f64,
    },
    /// `max_stages` is 0.
    #[error("planner: `max_stages` is 0; a plan has at least one stage")]
    NoStages,
    /// No plan's stages fit in the device memory.
    #[error(
        "planner: no plan fits in the device memory of {memory_bytes} bytes per worker; \
         the smallest need of any plan is {smallest_need} bytes"
    )]
    DoesNotFit {
        /// Device memory per worker, bytes.
        memory_bytes: u64,
        /// The least per-worker memory any plan needs (its largest stage's need), bytes.
        smallest_need: u64,
    },
    /// The hierarchical search found a plan that breaks a limit it does not search under.
    #[error(
        "planner: the hierarchical search's plan {config} {reason}; it does not search under \
         this limit, use the flat search"
    )]
    HierarchicalLimit {
        /// The plan found, e.g. "3-1".
        config: String,
        /// The limit it breaks.
        reason: String,
    },
    /// A given list of stages is not a plan of the profile.
    #[error("planner: invalid stages: {0}")]
    InvalidStages(String),
}
