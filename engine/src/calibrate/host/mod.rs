//! Calibrating this machine (`concord calibrate --host`): measure training steps of real candle
//! models through the code a worker runs, what a parameter server does to apply an update, and
//! loopback TCP; fit the per-layer cost model ([`crate::layer_model`]) to the steps; and write
//! the result as a CPU device profile a config can name, so that `sim` charges what this machine
//! takes when every role is one process with one compute thread.
//!
//! The pieces: [`HostModel`] (a model to measure: a config's, or a reference MLP), [`measure_steps`]
//! (median seconds after a warm-up, each step after its parameters arrive) and
//! [`measure_update`] (timed after a [`CacheSweep`]),
//! [`measure_message_copy`] (a role packing and unpacking a message's tensors, just written);
//! [`loopback`] (bandwidth and latency), [`machine_memory_gib`], and [`HostProfile`] (the fitted
//! device and its TOML). The process runtime's own transport is timed by
//! [`crate::process::probe`].

mod copy;
mod machine;
mod model;
mod net;
mod profile;
mod steps;
mod timing;
mod update;

pub use copy::{measure_message_copy, CopyPoint};
pub use machine::{
    compute_threads, last_level_cache_bytes, machine_memory_gib, CacheSweep, ComputeThreads,
    CpuTime,
};
pub use model::HostModel;
pub use net::{loopback, Loopback, PING_BYTES};
pub use profile::{workers_at_once, HostProfile};
pub use steps::{measure_steps, StepPoint};
pub use timing::Repeats;
pub use update::{measure_update, UpdatePoint};

/// Why this machine could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A model cannot be measured on the host (a throughput-mode profile has no real network;
    /// matrix factorization has no per-layer facts to fit).
    #[error("{model}: cannot measure: {reason}")]
    Model {
        /// The model (its config file, or its name).
        model: String,
        /// Why not.
        reason: String,
    },
    /// The model's data could not be loaded, or the model does not fit its data.
    #[error("{model}: {source}")]
    Setup {
        /// The model (its config file, or its name).
        model: String,
        /// The cause.
        source: Box<crate::EngineError>,
    },
    /// A training step failed.
    #[error("{model}: training step at batch {batch}: {source}")]
    Step {
        /// The model.
        model: String,
        /// The batch size.
        batch: u32,
        /// The cause.
        source: Box<concord_workloads::WorkloadError>,
    },
    /// The loopback measurement failed.
    #[error("loopback TCP: cannot {what}: {source}")]
    Loopback {
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
}

use super::fit::Limits;
use super::Measurement;
use crate::layer_model::{LayerRates, Precision};

/// The batch sizes measured: 8 to 256 in powers of two, or 8, 32 and 128 with `quick`.
pub fn batches(quick: bool) -> Vec<u32> {
    if quick {
        vec![8, 32, 128]
    } else {
        vec![8, 16, 32, 64, 128, 256]
    }
}

/// The turns the steps are timed in ([`measure_steps`]): 3, or 1 with `quick` (whose few runs
/// would not share out).
pub fn step_passes(quick: bool) -> usize {
    if quick {
        1
    } else {
        3
    }
}

/// `points` of `model` as fp32 measurements of its cost sheet, for the fit.
pub fn measurements(model: &HostModel, points: &[StepPoint]) -> Vec<Measurement> {
    let layers = std::sync::Arc::new(model.layers());
    points
        .iter()
        .map(|p| {
            Measurement::of_sheet(
                &model.name,
                Precision::Fp32,
                p.batch,
                p.seconds * 1e3,
                layers.clone(),
            )
        })
        .collect()
}

/// The fp32 rates that best explain `points`, within a CPU's limits ([`Limits::cpu`]);
/// `None` without fp32 points.
pub fn fit(points: &[Measurement]) -> Option<LayerRates> {
    super::calibrate_within(points, |_| Limits::cpu())
        .rates(Precision::Fp32)
        .copied()
}
