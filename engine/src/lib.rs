//! # concord-engine
//!
//! The engine of concord: the roles a distributed training job is made of ([`roles::Worker`],
//! [`roles::Server`], [`roles::Coordinator`], [`memory::MemoryPolicy`]), the transport they talk
//! over, a virtual-time simulator and a wall-clock runtime that run the same role code, the cluster
//! and cost model, staged candle models and throughput-mode profiles, data, optimizers with
//! exportable state, straggler injection, metrics, and the slot-based composition of strategies.
//!
//! The engine never names a strategy: strategies are crates that implement
//! [`strategy::Strategy`] and are listed in a [`strategy::Registry`].

#![warn(missing_docs)]

pub mod cluster;
pub mod collective;
pub mod config;
pub mod coordinator;
pub mod dp;
pub mod error;
pub mod ids;
pub mod job;
pub mod memory;
pub mod message;
pub mod metrics;
pub mod optim;
pub mod output;
pub mod payload;
pub mod ps;
pub mod role;
pub mod roles;
pub mod run;
pub mod stragglers;
pub mod strategy;
pub mod time;
pub mod transport;

pub use concord_workloads::{data, model, profiles, rng};

pub use config::RunConfig;
pub use error::{EngineError, Result};
pub use run::{run, RunOptions, RunResult};
