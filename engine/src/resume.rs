//! Where a run stopped, and everything needed to continue it exactly: a [`ResumePoint`].
//!
//! A checkpoint is a **consistent cut** at a clock boundary: every worker has finished the clocks
//! before it, every update they sent has been applied, and no role has started the next clock.
//! Each role hands back its own state ([`RoleCheckpoint`]): the model part it holds with its
//! optimizer state, its strategy state ([`RoleState`], opaque to the engine), its straggler
//! patterns' state, and the run time at which it stopped. The run's accumulated figures (rows,
//! records, traffic, memory peaks) travel with it ([`History`]); the servers' read records (a
//! diagnostic of the run result, not of the run folder, and its largest part at scale) do not: a
//! resumed run's [`crate::RunResult::reads`] start at its checkpoint.
//!
//! A run resumed from a point rebuilds every role as for a fresh run, gives each its checkpoint
//! through the job ([`crate::job::Job::resumed`]), restarts each at its own stop time, and runs
//! the clocks that remain. The sample stream is a function of the clock, so it continues by
//! itself; straggler patterns are counter-based on the clock and the run time, except the few
//! that keep state, which they save.
//!
//! Under a rule that lets workers run ahead (SSP, ASP) the cut is a barrier: the workers ahead
//! wait at the checkpoint clock for the others, as if the slack were zero for that one clock.

use crate::cluster::ProcessorClocks;
use crate::contract::ModelState;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::metrics::{IterRecord, IterationRow, TimedEvaluation};
use crate::payload::BlockId;
use crate::transport::{LinkTraffic, RoleQueues};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A role's own state at a checkpoint, beyond the model part it holds: what it needs to continue
/// exactly (a predictor's weights, a counter, a pending directive). The role encodes and decodes
/// its own type; the engine only stores the bytes.
///
/// Stored as a byte string (one byte per byte in a checkpoint, where a sequence of integers took
/// up to two); checkpoints written as a sequence still read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleState(#[serde(with = "serde_bytes")] Vec<u8>);

impl RoleState {
    /// Encodes `value` (MessagePack: exact for every float, NaN and infinities included).
    pub fn encode<T: Serialize>(value: &T) -> Result<RoleState> {
        rmp_serde::to_vec_named(value)
            .map(RoleState)
            .map_err(|e| EngineError::Encode {
                tag: "role state".into(),
                reason: e.to_string(),
            })
    }

    /// Decodes the state a role saved with [`RoleState::encode`].
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        rmp_serde::from_slice(&self.0).map_err(|e| EngineError::Decode {
            tag: "role state".into(),
            reason: e.to_string(),
        })
    }
}

/// One role at a checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RoleCheckpoint {
    /// Run time at which the role stopped: it restarts there.
    pub at_s: f64,
    /// The model part it holds, with its optimizer state (no snapshots).
    pub model: Option<ModelState>,
    /// Its strategy state.
    pub state: Option<RoleState>,
    /// Its straggler patterns' state, in the config's order of the patterns that apply to it.
    pub stragglers: Vec<Option<serde_json::Value>>,
}

impl RoleCheckpoint {
    /// The strategy state `role` saved ([`RoleState::encode`]), decoded; `what` names it in the
    /// error when the checkpoint holds none (a checkpoint of a strategy that did not save it).
    pub fn decode_state<T: DeserializeOwned>(&self, role: RoleId, what: &str) -> Result<T> {
        self.state
            .as_ref()
            .ok_or_else(|| EngineError::protocol(role, format!("its checkpoint holds no {what}")))?
            .decode()
    }

    /// The model part `role` held at the checkpoint, checked against what it holds now: as many
    /// blocks (`count`), each one it holds with as many elements (`elems` of a block id: `None`
    /// for a block it does not hold). A parameter server restores its blocks from it.
    pub fn checked_blocks(
        &self,
        role: RoleId,
        count: usize,
        elems: impl Fn(BlockId) -> Option<u64>,
    ) -> Result<&ModelState> {
        let bad = |reason: String| EngineError::protocol(role, reason);
        let model = self
            .model
            .as_ref()
            .ok_or_else(|| bad("its checkpoint holds no blocks".into()))?;
        if model.blocks.len() != count {
            return Err(bad(format!(
                "its checkpoint holds {} blocks, the layout gives it {count}",
                model.blocks.len()
            )));
        }
        for bp in &model.blocks {
            match elems(bp.block) {
                None => return Err(bad(format!("block {} is not this server's", bp.block))),
                Some(n) if n != bp.data.elems() => {
                    return Err(bad(format!("block {} changed size", bp.block)))
                }
                Some(_) => {}
            }
        }
        Ok(model)
    }
}

/// The network's queues at a checkpoint: when each machine's NIC and each role's bus port is free
/// again, and how many transfers each role has made (the wire's slowdown patterns count them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkState {
    /// Per machine: run time at which its egress is free.
    pub egress_free: Vec<f64>,
    /// Per machine: run time at which its ingress is free.
    pub ingress_free: Vec<f64>,
    /// Per role: transfers made so far.
    pub transfers: BTreeMap<RoleId, u64>,
    /// Per role: when its port on its machine's bus and its message handling queues are free
    /// (empty without buses, copy rates or per-message overheads, and in checkpoints written
    /// before they existed).
    #[serde(default, skip_serializing_if = "RoleQueues::is_empty")]
    pub bus: RoleQueues,
    /// What each processor of a host that machines share is busy with (empty without
    /// `cluster.hosts`, and in checkpoints written before hosts existed).
    #[serde(default, skip_serializing_if = "ProcessorClocks::is_empty")]
    pub processors: ProcessorClocks,
}

/// What the run accumulated up to a checkpoint: the part of its result that the clocks after it
/// extend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// The metrics rows so far, with the evaluations made during the run (not the end-of-run
    /// evaluation, which belongs to the run's last row only).
    pub rows: Vec<IterationRow>,
    /// Each worker's clock records.
    pub worker_records: Vec<Vec<IterRecord>>,
    /// Each worker's (FLOPs, compute seconds).
    pub capacity: Vec<(f64, f64)>,
    /// Traffic per directed role pair.
    pub traffic: Vec<(RoleId, RoleId, LinkTraffic)>,
    /// The highest memory each role accounted.
    pub peak_memory: BTreeMap<String, u64>,
    /// The model evaluated at fixed run times.
    pub evaluations: Vec<TimedEvaluation>,
    /// The network's queues.
    pub network: NetworkState,
}

/// A consistent cut of a run: where it stopped and everything needed to continue.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ResumePoint {
    /// Clocks completed: the resumed run starts at this clock.
    pub clock: u64,
    /// Every role's checkpoint.
    pub roles: BTreeMap<RoleId, RoleCheckpoint>,
    /// What the run accumulated.
    pub history: History,
}

impl ResumePoint {
    /// The run time of the cut: when the last role stopped.
    pub fn time_s(&self) -> f64 {
        self.roles.values().map(|r| r.at_s).fold(0.0, f64::max)
    }

    /// The earliest time a role stopped: where the resumed run's clock starts.
    pub fn earliest_s(&self) -> f64 {
        self.roles
            .values()
            .map(|r| r.at_s)
            .fold(f64::INFINITY, f64::min)
            .min(self.time_s())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A role state's bytes are one byte string in a checkpoint (2048 bytes take 2048 and a
    /// header, where a sequence of integers took up to twice that), and a checkpoint written
    /// with the sequence still reads.
    #[test]
    fn role_state_is_stored_as_bytes_and_reads_the_older_sequence() {
        let state = RoleState(vec![0xFF; 2048]);
        let written = rmp_serde::to_vec_named(&state).unwrap();
        assert!(written.len() <= 2048 + 8, "{} bytes", written.len());
        let back: RoleState = rmp_serde::from_slice(&written).unwrap();
        assert_eq!(back, state);

        #[derive(Serialize)]
        struct Older(Vec<u8>);
        let older = rmp_serde::to_vec_named(&Older(state.0.clone())).unwrap();
        assert!(older.len() >= 2 * 2048, "{} bytes", older.len());
        let read: RoleState = rmp_serde::from_slice(&older).unwrap();
        assert_eq!(read, state);
    }
}
