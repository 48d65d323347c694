//! The controller's messages (serializable, tagged [`concord_engine::message::Message::Custom`]).

use serde::{Deserialize, Serialize};

/// Controller → worker: answer when you have a ready gradient (round `round`).
pub const PROBE: &str = "rna.probe";
/// Worker → controller: I am ready for round `round`.
pub const PROBE_REPLY: &str = "rna.probe-reply";
/// Controller → group: round `round` starts now (external activation), `initiator` triggered it.
pub const ACTIVATE: &str = "rna.activate";
/// Initiator → controller: round `round` is applied; `weight` = Σw.
pub const ROUND_DONE: &str = "rna.round-done";
/// Worker → controller at the end: its staleness histogram and drop count.
pub const WORKER_STATS: &str = "rna.worker-stats";

/// Worker → controller (hierarchical mode): mean seconds of its first timed local steps.
pub const PROFILE: &str = "rna.profile";
/// Controller → worker (hierarchical mode): the groups formed from the profiles, sent between
/// two rounds of the flat warm-up.
pub const GROUPS: &str = "rna.groups";

/// Body of [`PROFILE`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Mean compute seconds per local step over the profiling warm-up.
    pub mean_step_s: f64,
}

/// Body of [`GROUPS`]: worker ids per group, group id = index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Groups {
    /// Members of each group, ascending.
    pub groups: Vec<Vec<u32>>,
    /// The first round the groups run (the flat warm-up ran the rounds before it).
    pub start_round: u64,
}

/// A round-tagged message body.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// Group the round belongs to (0 in flat mode).
    pub group: u32,
    /// Round id within the group.
    pub round: u64,
}

/// Body of [`ACTIVATE`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Activate {
    /// Group and round.
    pub round: Round,
    /// The worker whose reply triggered it.
    pub initiator: u32,
}

/// Body of [`ROUND_DONE`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundDone {
    /// Group and round.
    pub round: Round,
    /// Σw: contributors.
    pub weight: f64,
}

/// Body of [`WORKER_STATS`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Gradients used, by staleness k − t (index = staleness).
    pub staleness: Vec<u64>,
    /// Gradients dropped by the bound.
    pub dropped: u64,
    /// Mean compute seconds per local step.
    pub mean_step_s: f64,
    /// Digest of the replica's parameters after each round (replicas must agree, R8 ii).
    pub digests: Vec<u64>,
    /// The worker's group (0 in flat mode); replicas agree within a group.
    #[serde(default)]
    pub group: u32,
    /// The worker's id.
    #[serde(default)]
    pub worker: u32,
    /// Whether the run evaluates this worker's model (one worker per run).
    #[serde(default)]
    pub evaluated: bool,
}
