//! Fela's messages: all small (ids and counts) except the outputs, gradients and parameters
//! workers pass each other as tensor payloads.

use crate::server::{Token, TokenId};
use concord_engine::prelude::*;

/// Worker → token server: the token it finished (if any) and a request for the next one, in one
/// message (§III-C). Carries the loss summed over the rows of a finished last-level token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The iteration the worker is in.
    pub iter: u64,
    /// The token it finished.
    pub completed: Option<TokenId>,
    /// Σ loss over the finished token's rows (last level, real model).
    pub loss_sum: Option<f64>,
}
impl StrategyMessage for Request {
    const TAG: &'static str = "fela.request";
    const BODY_IN_HEADER: bool = true;
}

/// Token server → worker: a token to train, and who holds its dependencies' outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assign {
    /// The token.
    pub token: Token,
    /// Holder of each dependency, in dependency order.
    pub holders: Vec<(TokenId, WorkerId)>,
}
impl StrategyMessage for Assign {
    const TAG: &'static str = "fela.assign";
}

/// Token server → a dependency holder: send these outputs to `to`, which was just given the
/// token that needs them (§III-C: holders are told at assignment time).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrepareSend {
    /// The iteration.
    pub iter: u64,
    /// The assignee.
    pub to: WorkerId,
    /// The outputs it needs from this holder.
    pub tokens: Vec<TokenId>,
}
impl StrategyMessage for PrepareSend {
    const TAG: &'static str = "fela.prepare-send";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → worker: the output of a token (its rows as the payload).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// The iteration.
    pub iter: u64,
    /// The token whose output this is.
    pub token: TokenId,
    /// The token's level: the output is the input of sub-model `level + 1` (the message may
    /// arrive before the assignment that needs it).
    pub level: usize,
    /// Rows.
    pub rows: u64,
}
impl StrategyMessage for Output {
    const TAG: &'static str = "fela.output";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → the holder of a token: the gradient of that token's output (the payload), from the
/// backward pass of the token that consumed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grad {
    /// The iteration.
    pub iter: u64,
    /// The token whose output the gradient is of.
    pub token: TokenId,
    /// Rows.
    pub rows: u64,
}
impl StrategyMessage for Grad {
    const TAG: &'static str = "fela.grad";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → token server: the backward pass of a token is done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackwardDone {
    /// The iteration.
    pub iter: u64,
    /// The token.
    pub token: TokenId,
}
impl StrategyMessage for BackwardDone {
    const TAG: &'static str = "fela.backward-done";
    const BODY_IN_HEADER: bool = true;
}

/// Token server → every worker: sub-model `level` has no backward pass left this iteration;
/// `members` sum its gradients (the others keep no copy of it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sync {
    /// The iteration.
    pub iter: u64,
    /// The sub-model.
    pub level: usize,
    /// Who keeps and synchronizes it.
    pub members: Vec<WorkerId>,
    /// The iteration's mean training loss (with the last sub-model's sync, real models).
    pub loss: Option<f64>,
}
impl StrategyMessage for Sync {
    const TAG: &'static str = "fela.sync";
}

/// Worker → token server: this worker applied the iteration's update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Synced {
    /// The iteration.
    pub iter: u64,
}
impl StrategyMessage for Synced {
    const TAG: &'static str = "fela.synced";
    const BODY_IN_HEADER: bool = true;
}

/// Token server → a worker of the old CTD subset: give sub-model `level`'s parameters to
/// `to`, which joins the subset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// The sub-model.
    pub level: usize,
    /// The joiners.
    pub to: Vec<WorkerId>,
}
impl StrategyMessage for Handover {
    const TAG: &'static str = "fela.handover";
}

/// Token server → a joiner of the CTD subset: wait for sub-model `level`'s parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Joining {
    /// The sub-model.
    pub level: usize,
}
impl StrategyMessage for Joining {
    const TAG: &'static str = "fela.joining";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → worker: sub-model `level`'s parameters (the payload, its tensors one after another).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// The sub-model.
    pub level: usize,
}
impl StrategyMessage for Params {
    const TAG: &'static str = "fela.params";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → token server at the end: what it moved.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Dependency outputs fetched from other workers.
    pub remote_fetches: u64,
    /// Bytes of those outputs.
    pub remote_fetch_bytes: u64,
    /// Dependency outputs found locally.
    pub local_fetches: u64,
    /// Bytes sent for sub-model synchronization.
    pub sync_bytes: u64,
}
impl StrategyMessage for WorkerStats {
    const TAG: &'static str = "fela.worker-stats";
}
