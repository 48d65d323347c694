//! The messages between pipeline stages, keyed by minibatch: a stage's output activations going
//! forward and the gradient of its input going back (the tensor is the payload), and each
//! worker's end-of-run statistics for the coordinator's figures.

use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};

/// A minibatch's activations, from stage `stage − 1` to the replica of stage `stage` that runs
/// it (round-robin on the minibatch id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Act {
    /// The minibatch.
    pub minibatch: u64,
    /// The receiving stage.
    pub stage: u32,
    /// Rows (samples).
    pub rows: u64,
    /// Vertical sync: the minibatches whose updates the input stage's weights held when this
    /// minibatch entered the pipeline; every stage runs it on its version with that watermark.
    pub watermark: Option<u64>,
}
impl StrategyMessage for Act {
    const TAG: &'static str = "pipeline.act";
    const BODY_IN_HEADER: bool = true;
}

/// The gradient of a minibatch's activations, from stage `stage + 1` back to the replica of
/// stage `stage` that ran its forward pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grad {
    /// The minibatch.
    pub minibatch: u64,
    /// The receiving stage.
    pub stage: u32,
    /// Rows (samples).
    pub rows: u64,
}
impl StrategyMessage for Grad {
    const TAG: &'static str = "pipeline.grad";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → coordinator at the end of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageStats {
    /// The worker's stage.
    pub stage: u32,
    /// Seconds computing over the run.
    pub busy_s: f64,
    /// Seconds from its first operation's start to its last one's end.
    pub span_s: f64,
    /// Share of the steady state (from the end of its first backward pass to the start of its
    /// last forward pass) spent computing; `None` when the schedule has no steady state.
    pub steady_utilisation: Option<f64>,
    /// Most weight versions held at once (the latest included).
    pub max_versions: u32,
    /// Bytes of activations and gradients sent to other stages.
    pub boundary_bytes: u64,
    /// Bytes sent by the replicas' gradient averaging.
    pub sync_bytes: u64,
}
impl StrategyMessage for StageStats {
    const TAG: &'static str = "pipeline.stats";
    const BODY_IN_HEADER: bool = true;
}

impl Keyed for Act {
    /// The minibatch.
    type Key = u64;
    fn key(&self) -> u64 {
        self.minibatch
    }
}
impl Keyed for Grad {
    /// The minibatch.
    type Key = u64;
    fn key(&self) -> u64 {
        self.minibatch
    }
}
