//! PipeDream's planner (thesis §5.3.1): from a per-layer profile of the model and a topology of
//! levels, the partition of the layers into stages, each replicated on some workers, that
//! minimises the time of the slowest stage.
//!
//! The public types here are the interface between the planner and the runtime: the runtime
//! only reads a [`PipelinePlan`].

use std::ops::Range;

/// What one layer of the model costs on one worker, for one minibatch.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerProfile {
    /// Forward plus backward compute time of the layer on one minibatch, seconds.
    pub compute_s: f64,
    /// Bytes of the layer's output activations for one minibatch (also the bytes of the
    /// gradient that comes back in the backward pass).
    pub activation_bytes: u64,
    /// Bytes of the layer's weights.
    pub weight_bytes: u64,
}

/// A model's per-layer profile at one minibatch size.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The layers in order (a job's model stages).
    pub layers: Vec<LayerProfile>,
    /// Samples per minibatch the profile was taken at.
    pub batch: u64,
}

/// One level of the topology: `components` units of the level below, joined by links of
/// `bandwidth` bytes per second (level 1: devices of one machine; level 2: machines).
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    /// Units of the level below in one unit of this level.
    pub components: u32,
    /// Link bandwidth between them, bytes per second.
    pub bandwidth: f64,
}

/// The levels of a cluster, lowest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// Levels, lowest first; the product of their `components` is the number of workers.
    pub levels: Vec<Level>,
}

/// One stage of a plan: a run of consecutive layers on `replicas` workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePlan {
    /// The layers (model stages) the stage runs.
    pub layers: Range<usize>,
    /// Workers the stage is replicated on (data parallelism inside the stage).
    pub replicas: u32,
}

/// A pipeline configuration: its stages in order, laid out on workers `0..workers_used()` in
/// that order (stage 0's replicas first).
#[derive(Clone, Debug, PartialEq)]
pub struct PipelinePlan {
    /// The stages, input stage first.
    pub stages: Vec<StagePlan>,
    /// Minibatches the input stage admits before its first backward pass, per input-stage
    /// replica (NOAM = ⌈workers used / input-stage replicas⌉).
    pub noam: u32,
    /// The planner's predicted time per minibatch in steady state (the slowest stage), seconds;
    /// `None` for a plan given by hand.
    pub predicted_s: Option<f64>,
}
