//! PipeDream's planner (thesis §5.3.1): from a per-layer profile of the model and a topology of
//! levels, the partition of the layers into stages, each replicated on some workers, that
//! minimises the time of the slowest stage.
//!
//! Plans keep replicas from growing along the pipeline (`r_0 ≥ r_1 ≥ … ≥ r_{S−1}`, see
//! [`plan`]): a choice the thesis leaves implicit and its NOAM formula and runtime assume.
//!
//! The public types here are the interface between the planner and the runtime: the runtime
//! only reads a [`PipelinePlan`].

use std::ops::Range;

mod costs;
pub mod dp;
mod error;
pub mod exhaustive;
mod hierarchical;
pub mod profile;
pub mod replay;
pub mod straight;
pub mod topology;

pub use costs::{
    bytes_per_sample, evaluate, evaluate_under, stage_memory_bytes, stage_need, stashing_copies,
    validate_stages, StageNeed,
};
pub use dp::plan;
pub use error::PlanError;
pub use replay::replay;
pub use straight::straight;

/// What one layer of the model costs on one worker, for one minibatch.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerProfile {
    /// Forward plus backward compute time of the layer on one minibatch, seconds.
    pub compute_s: f64,
    /// Bytes of the layer's output activations for one minibatch (also the bytes of the
    /// gradient that comes back in the backward pass): what a stage boundary after it sends.
    pub activation_bytes: u64,
    /// Bytes the layer keeps from its forward pass to its backward pass for one minibatch
    /// (its operators' outputs, not only its own): what a minibatch in flight holds in memory.
    pub kept_bytes: u64,
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

impl StagePlan {
    /// Number of layers the stage runs.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether the stage runs no layer (never, in a valid plan).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl PipelinePlan {
    /// A plan of `stages` with its NOAM computed and no prediction (a plan given by hand).
    pub fn of_stages(stages: Vec<StagePlan>) -> PipelinePlan {
        let noam = noam(&stages);
        PipelinePlan {
            stages,
            noam,
            predicted_s: None,
        }
    }

    /// Workers the plan occupies: the sum of its stages' replicas (workers past these idle).
    pub fn workers_used(&self) -> u32 {
        workers_used(&self.stages)
    }

    /// The configuration in the thesis's notation: replicas per stage joined by `-` ("3-1"
    /// is two stages, the first on 3 workers; "16" is plain data parallelism on 16).
    pub fn config_string(&self) -> String {
        config_string(&self.stages)
    }

    /// Whether the plan is plain data parallelism: one stage holding every layer.
    pub fn is_data_parallel(&self) -> bool {
        self.stages.len() == 1
    }
}

/// Workers `stages` occupy: the sum of their replicas.
pub fn workers_used(stages: &[StagePlan]) -> u32 {
    stages.iter().map(|s| s.replicas).sum()
}

/// NOAM of `stages`: ⌈workers used / input-stage replicas⌉ (0 for no stages).
pub fn noam(stages: &[StagePlan]) -> u32 {
    match stages.first() {
        Some(first) if first.replicas > 0 => workers_used(stages).div_ceil(first.replicas),
        _ => 0,
    }
}

/// `stages` in the thesis's notation, e.g. "3-1".
pub fn config_string(stages: &[StagePlan]) -> String {
    stages
        .iter()
        .map(|s| s.replicas.to_string())
        .collect::<Vec<_>>()
        .join("-")
}

/// Which dynamic programme [`plan`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Search {
    /// One level over all workers (the default). Stage boundaries may fall anywhere, so it
    /// reaches configurations such as "15-1" on two 8-worker machines that the level-wise search
    /// cannot; on a two-level topology it charges each replicated stage's weight sync and each
    /// boundary at the slowest link they span, with the stages on contiguous workers.
    #[default]
    Flat,
    /// The thesis's level-by-level search: the best pipeline inside a machine first, then
    /// across machines; boundaries at upper levels fall on machine boundaries only.
    Hierarchical,
}

/// How the planner charges a stage replicated on `m` workers for its weight sync. The library's
/// default is the thesis's planner; the `pipedream` strategy and `concord plan` default to
/// [`Sync::Ring`], what their runtime does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sync {
    /// The thesis's `T = (1/m)·max(compute, 2(m−1)·|w|/B)` (§5.3.1): the whole volume of the
    /// all-reduce on one link, hidden behind compute (DDP's wait-free backpropagation).
    #[default]
    Thesis,
    /// `(compute + 2(m−1)/m·|w|/B) / m`: what this runtime does — a ring allreduce, where each
    /// replica's link carries `2(m−1)/m·|w|`, after the round's backward passes. It predicts
    /// simulated times far better where a stage is replicated widely (data parallelism on 16
    /// workers: the thesis's term predicts it 7× slower than it runs).
    Ring,
}

/// What [`plan`] searches and under which limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanOptions {
    /// The dynamic programme.
    pub search: Search,
    /// Device memory of one worker, bytes: stages whose estimated need exceeds it are rejected
    /// (see [`stage_memory_bytes`]). `None`: no limit.
    pub memory_bytes: Option<u64>,
    /// The most stages a plan may have. `None`: no limit.
    pub max_stages: Option<usize>,
    /// How replicated stages are charged for their weight sync.
    pub sync: Sync,
    /// Optimizer-state copies of the weights a worker keeps (0 for plain SGD, 1 with momentum,
    /// 2 for Adam), counted in a stage's memory need.
    pub optimizer_slots: u32,
}
