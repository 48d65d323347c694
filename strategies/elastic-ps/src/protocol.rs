//! The control messages of elastic scaling and live reassignment (§1.10's unified protocol).
//!
//! Data travels in the engine's typed messages: a worker's [`Message::Push`] of one block is also
//! its pull (the server answers with the block's new value in a [`Message::Params`] once every
//! worker's push of that clock is applied), and blocks move between servers in
//! [`Migrate`], which carries the block's values and optimizer state as tensor payloads. The
//! control plane below travels as [`Message::Custom`] bodies; the paper names
//! only `ADD_SERVER` and `DEL_SERVER`, the other names follow the spec.

use crate::telemetry::PeriodReport;
use concord_engine::optim::OptState;
use concord_engine::prelude::*;
use serde::de::DeserializeOwned;

/// Worker → scheduler, every report period: the per-server telemetry of the period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerfReport {
    /// Report period index (periods of `report_every` iterations, from 0).
    pub period: u64,
    /// Last completed iteration.
    pub completed: Clock,
    /// Mean iteration time over the period, seconds.
    pub iteration_s: f64,
    /// Samples (size, time) per server.
    pub samples: PeriodReport,
    /// When it was sent (run time), for the scheduler's round-trip estimate.
    pub sent_at: f64,
}

/// Server → worker: the worker's push of `block` for `clock` has been received and aggregated
/// (PS-Lite answers every push request). The worker times the push from when it left its NIC to
/// `processed_at`: the server's ingress queue, the transfer and the server's service queue —
/// everything that is the server's doing, nothing that is the worker's own queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PushAck {
    /// The clock.
    pub clock: Clock,
    /// The block.
    pub block: BlockId,
    /// When the server finished aggregating the push (run time).
    pub processed_at: f64,
}

/// Scheduler → standby server: start (the launcher's spawn); it registers after `start_s`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// Seconds the server takes to start.
    pub start_s: f64,
}

/// Scheduler → server: the operator wants it gone (preemption, scale-in); it answers with
/// `DEL_SERVER`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Leave;

/// Server → scheduler: a new server is up (`ADD_SERVER`) or one is leaving (`DEL_SERVER`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Membership {
    /// The server.
    pub server: ServerId,
}

/// Scheduler → workers: finish iteration `switch_after`, then block and ask for the new map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReassignCmd {
    /// Reassignment epoch.
    pub epoch: u64,
    /// Last iteration run on the old assignment.
    pub switch_after: Clock,
}

/// Worker → scheduler, every iteration: how far it is (the scheduler picks switch steps ahead of
/// every worker).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Last completed iteration.
    pub completed: Clock,
    /// When it was sent (run time), for the scheduler's round-trip estimate.
    pub sent_at: f64,
}

/// Worker → scheduler: blocked after `completed` (`REASSIGN_REQ`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReassignReq {
    /// Reassignment epoch.
    pub epoch: u64,
    /// Last completed iteration.
    pub completed: Clock,
}

/// Scheduler → servers: the moves of an epoch, effective once the blocks reach `at_version`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigratePlan {
    /// Reassignment epoch.
    pub epoch: u64,
    /// Version (last applied clock) at which blocks move.
    pub at_version: i64,
    /// Blocks this server sends, with their destination.
    pub out: Vec<(BlockId, ServerId)>,
    /// Blocks this server receives, with their source.
    pub inc: Vec<(BlockId, ServerId)>,
}

/// Server → server: a parameter block moving to a new owner with its optimizer state, as of
/// `version` (live migration and scaling). Its values and each optimizer state slot travel as the
/// message's tensor payloads, in that order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Migrate {
    /// The reassignment epoch the move belongs to.
    pub epoch: u64,
    /// Which block.
    pub block: BlockId,
    /// Last clock applied to the block.
    pub version: i64,
    /// Optimizer updates applied to the block so far.
    pub step: u64,
}

impl StrategyMessage for Migrate {
    const TAG: &'static str = "elastic-ps.migrate";
    const BODY_IN_HEADER: bool = true;
}

impl Migrate {
    /// The message moving `value` and its optimizer state `opt`.
    pub fn message(self, value: Payload, opt: OptState) -> Result<Message> {
        let mut payloads = vec![value];
        payloads.extend(opt.slots.into_iter().map(Payload::Real));
        Message::strategy_with(&self, payloads)
    }

    /// The move, the block's values and its optimizer state; an error if `msg` is not a
    /// migration or carries no values.
    pub fn unpack(me: RoleId, msg: Message) -> Result<(Migrate, Payload, OptState)> {
        let bad = || EngineError::protocol(me, "expected a block migration with its values");
        let (moved, payloads) = msg.into_strategy::<Migrate>()?.ok_or_else(bad)?;
        let mut payloads = payloads.into_iter();
        let value = payloads.next().ok_or_else(bad)?;
        let slots = payloads
            .map(|p| match p {
                Payload::Real(v) => Ok(v),
                Payload::Virtual { .. } => Err(EngineError::protocol(
                    me,
                    format!(
                        "block {} migrated with virtual optimizer state",
                        moved.block
                    ),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        let opt = OptState {
            step: moved.step,
            slots,
        };
        Ok((moved, value, opt))
    }
}

/// Server → server: a migrated block was installed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrateAck {
    /// Reassignment epoch.
    pub epoch: u64,
    /// The block.
    pub block: BlockId,
}

/// Server → scheduler: all of this server's moves of the epoch are done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrateDone {
    /// Reassignment epoch.
    pub epoch: u64,
}

/// Scheduler → workers: the new block → server map; continue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// Reassignment epoch.
    pub epoch: u64,
    /// Owner of every block.
    pub owners: Vec<ServerId>,
}

/// Scheduler → a departing server: its blocks have moved, it may stop (`SHUTDOWN_OK`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShutdownOk;

/// Message tags.
pub mod tag {
    /// [`super::PushAck`].
    pub const PUSH_ACK: &str = "elastic-ps.push-ack";
    /// [`super::PerfReport`].
    pub const PERF_REPORT: &str = "elastic-ps.perf-report";
    /// [`super::Launch`].
    pub const LAUNCH: &str = "elastic-ps.launch";
    /// [`super::Leave`].
    pub const LEAVE: &str = "elastic-ps.leave";
    /// [`super::Membership`] of a new server.
    pub const ADD_SERVER: &str = "elastic-ps.add-server";
    /// [`super::Membership`] of a departing server.
    pub const DEL_SERVER: &str = "elastic-ps.del-server";
    /// [`super::ReassignCmd`].
    pub const REASSIGN_CMD: &str = "elastic-ps.reassign-cmd";
    /// [`super::ReassignReq`] of a worker blocked at the step.
    pub const REASSIGN_REQ: &str = "elastic-ps.reassign-req";
    /// [`super::Progress`].
    pub const PROGRESS: &str = "elastic-ps.progress";
    /// [`super::MigratePlan`].
    pub const MIGRATE_PLAN: &str = "elastic-ps.migrate-plan";
    /// [`super::MigrateAck`].
    pub const MIGRATE_ACK: &str = "elastic-ps.migrate-ack";
    /// [`super::MigrateDone`].
    pub const MIGRATE_DONE: &str = "elastic-ps.migrate-done";
    /// [`super::Resume`].
    pub const RESUME: &str = "elastic-ps.resume";
    /// [`super::ShutdownOk`].
    pub const SHUTDOWN_OK: &str = "elastic-ps.shutdown-ok";
}

/// Encodes a control message.
pub fn encode<T: Serialize>(tag: &str, value: &T) -> Result<Message> {
    Message::custom(tag, value)
}

/// Decodes a control message body, naming the tag and the receiving role on failure.
pub fn decode<T: DeserializeOwned>(role: RoleId, tag: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| EngineError::protocol(role, format!("malformed `{tag}` message: {e}")))
}
