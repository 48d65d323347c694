//! The messages roles exchange over the transport.
//!
//! Every message is serializable (DESIGN rule): the same strategy code can run in one process,
//! across processes, or over a GPU fabric. Engine-level protocols (parameter server, control)
//! have typed variants; a strategy's own protocol travels as [`Message::Custom`].

use crate::error::EngineError;
use crate::ids::{Clock, WorkerId};
use crate::optim::OptState;
use crate::payload::{blocks_bytes, BlockId, BlockPayload, Payload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Fixed per-message header size charged on the wire, in bytes.
pub const HEADER_BYTES: u64 = 64;

/// What a coordinator tells a worker to do in one clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Directive {
    /// The clock this directive is for.
    pub clock: Clock,
    /// Number of samples the worker processes this clock.
    pub batch: u64,
    /// Position in the run's global sample stream where this worker's samples start.
    pub stream_offset: u64,
    /// The global batch of the clock (sum over workers), for weighting.
    pub global_batch: u64,
}

/// What a worker tells the coordinator after each clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The clock just finished.
    pub clock: Clock,
    /// Samples processed.
    pub samples: u64,
    /// Seconds of compute (as charged, including slowdowns).
    pub compute_s: f64,
    /// Seconds blocked waiting for parameters (consistency wait).
    pub wait_s: f64,
    /// Seconds of communication not overlapped with compute.
    pub comm_s: f64,
    /// Mean training loss over the batch (NaN in throughput mode).
    pub loss: f64,
    /// Processing speed in samples per second of compute.
    pub speed: f64,
    /// Resource signals (CPU load share, memory pressure, in [0, 1]) read at the start of the
    /// next clock, where the straggler injector exposes them (LB-BSP's NARX inputs).
    pub next_signals: Option<(f64, f64)>,
}

/// A message between roles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Worker → server: gradients (sample-mean) of some blocks for a clock.
    Push {
        /// Clock the gradients belong to.
        clock: Clock,
        /// Samples they were computed on (aggregation weight).
        samples: u64,
        /// Whether this push completes the sender's contribution to `clock`.
        completes_clock: bool,
        /// Gradient blocks.
        grads: Vec<BlockPayload>,
    },
    /// Worker → server: additive deltas to blocks (a parameter server's `update_param`, aggregated
    /// by `+`, as in the LazyTable family), for the work of `owner`'s clock `clock`. The sender may
    /// be another worker that did part of the owner's work (FlexRR's helpers).
    Update {
        /// Clock of the work the deltas come from.
        clock: Clock,
        /// The worker whose clock it is.
        owner: WorkerId,
        /// Whether this completes the owner's contribution to `clock` (sent by the owner only).
        completes_clock: bool,
        /// Whether the sender wants an [`Message::UpdateAck`] once the deltas are received (a
        /// flush the sender must know has landed before it tells anyone).
        ack: bool,
        /// Delta blocks.
        deltas: Vec<BlockPayload>,
    },
    /// Server → worker: an [`Message::Update`] that asked for it has been received and buffered.
    UpdateAck {
        /// Clock of the acknowledged update.
        clock: Clock,
    },
    /// Worker → server: read the server's blocks once their version is at least `min_version`.
    Pull {
        /// Clock the reader is working on.
        clock: Clock,
        /// Minimum version the reply must reflect (`None`: any).
        min_version: Option<i64>,
    },
    /// Server → worker: parameter values at `version` (all clocks `<= version` applied).
    Params {
        /// Version of the values.
        version: i64,
        /// Virtual time at which the server answered (to split wait from transfer).
        served_at: f64,
        /// Parameter blocks.
        blocks: Vec<BlockPayload>,
    },
    /// Coordinator → worker.
    Directive(Directive),
    /// Worker → coordinator.
    Report(Report),
    /// A worker has finished all its clocks.
    WorkerDone,
    /// The engine asks a role to finish (servers and coordinators run until told).
    Shutdown,
    /// Server → server: a parameter block moving to a new owner with its optimizer state, as of
    /// `version` (elastic parameter servers: live migration and scaling).
    Migrate {
        /// The reassignment epoch the move belongs to.
        epoch: u64,
        /// Which block.
        block: BlockId,
        /// Last clock applied to the block.
        version: i64,
        /// Its values.
        value: Payload,
        /// Its optimizer state.
        opt: OptState,
    },
    /// One hop of an engine collective ([`crate::collective`]): a piece of a buffer moving between
    /// two members of a group. Only its payload and the header travel on the wire.
    Collective {
        /// The operation it belongs to (chosen by the caller, equal on every member).
        op: u64,
        /// The fused bucket of the operation it carries.
        part: u32,
        /// The step of the algorithm (ring step, tree level, ...).
        step: u32,
        /// The values.
        data: Payload,
    },
    /// A strategy's own message: a tag and a serialized body.
    Custom {
        /// What kind of message it is (the strategy's own vocabulary).
        tag: String,
        /// JSON-encoded body.
        body: Vec<u8>,
        /// Bytes this message stands for on the wire, beyond the body (e.g. tensors it models).
        extra_bytes: u64,
    },
}

impl Message {
    /// Size charged on the wire: header plus payload.
    pub fn wire_bytes(&self) -> u64 {
        HEADER_BYTES
            + match self {
                Message::Push { grads, .. } => blocks_bytes(grads),
                Message::Update { deltas, .. } => blocks_bytes(deltas),
                Message::Params { blocks, .. } => blocks_bytes(blocks),
                Message::Migrate { value, opt, .. } => value.bytes() + opt.bytes(),
                Message::Collective { data, .. } => data.bytes(),
                Message::Custom {
                    body, extra_bytes, ..
                } => body.len() as u64 + extra_bytes,
                Message::Directive(_) | Message::Report(_) => 64,
                Message::Pull { .. }
                | Message::UpdateAck { .. }
                | Message::WorkerDone
                | Message::Shutdown => 0,
            }
    }

    /// Wraps a strategy's serializable value as a [`Message::Custom`].
    pub fn custom<T: Serialize>(tag: &str, value: &T) -> Result<Message, EngineError> {
        let body = serde_json::to_vec(value).map_err(|e| EngineError::Encode {
            tag: tag.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Message::Custom {
            tag: tag.to_string(),
            body,
            extra_bytes: 0,
        })
    }

    /// Decodes a [`Message::Custom`] body with the given tag; `None` for other messages.
    pub fn decode_custom<T: DeserializeOwned>(&self, want: &str) -> Option<T> {
        match self {
            Message::Custom { tag, body, .. } if tag == want => serde_json::from_slice(body).ok(),
            _ => None,
        }
    }
}
