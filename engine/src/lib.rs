//! # concord-engine
//!
//! The engine of concord: the roles a distributed training job is made of ([`contract::Worker`],
//! [`contract::Server`], [`contract::Coordinator`], [`contract::MemoryPolicy`]), the transport they
//! talk over, a virtual-time simulator and a wall-clock runtime that run the same role code, the cluster
//! and cost model, staged candle models and throughput-mode profiles, data, optimizers with
//! exportable state, straggler injection, metrics, and the slot-based composition of strategies.
//!
//! Start with [`contract`]: every trait a strategy implements, the reports roles return and the
//! assembly a run is built from, in one file. Strategy crates import [`prelude`].
//!
//! The engine never names a strategy: strategies are crates that implement
//! [`contract::Strategy`] and are listed in a [`registry::Registry`].

#![warn(missing_docs)]

pub mod calibrate;
pub mod checkpoint;
pub mod cluster;
pub mod collective;
pub mod config;
pub mod context;
pub mod contract;
pub mod coordinator;
pub mod dp;
pub mod error;
pub mod gpu;
pub mod guard;
pub mod ids;
pub mod job;
pub mod layer_model;
pub mod membership;
pub mod memory;
pub mod message;
pub mod metrics;
pub mod optim;
pub mod output;
pub mod payload;
pub mod prelude;
pub mod process;
pub mod ps;
pub mod registry;
pub mod resume;
pub mod run;
pub mod serve;
pub mod stall;
pub mod submodel;
pub use concord_stragglers as stragglers;
pub mod time;
pub mod trace;
pub mod transport;

pub use concord_workloads::{cost, data, graph, model, profiles, rng};

pub use config::RunConfig;
pub use error::{EngineError, Result};
pub use run::{run, RunOptions, RunResult};
