//! # concord-workloads
//!
//! What concord trains and simulates, independent of how a run is coordinated: the data sets
//! ([`data`]), the staged candle networks and matrix factorization that train for real
//! ([`model`]), the papers' big models as per-layer profiles for throughput mode ([`profiles`]),
//! and the counter-based random streams they are seeded from ([`rng`]).
//!
//! The crate knows nothing of roles, transport or time: the engine builds on it (and re-exports
//! its modules under the same paths), so a workload can be tested on its own and a strategy can
//! run a model stage by stage without candle code of its own.

#![warn(missing_docs)]

pub mod cost;
pub mod data;
pub mod error;
pub mod graph;
pub mod metrics;
pub mod model;
pub mod profiles;
pub mod rng;

pub use error::{Result, TensorContext, WorkloadError};
