//! The messages roles exchange over the transport.
//!
//! Every message is serializable (DESIGN rule): the same strategy code can run in one process,
//! across processes, or over a GPU fabric. Engine-level protocols (parameter server, control)
//! have typed variants; a strategy's own protocol travels as [`Message::Custom`]: a tagged body
//! and tensor payloads, defined by the strategy as a
//! [`StrategyMessage`](crate::contract::StrategyMessage).

use crate::error::EngineError;
use crate::ids::Clock;
use crate::membership::MembershipEvent;
use crate::payload::{blocks_bytes, BlockPayload, Payload};
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
    /// The engine tells the coordinator that machines joined, were warned of an eviction, were
    /// evicted or failed ([`crate::membership`]): the cloud provider's notice, free on the wire.
    Membership(MembershipEvent),
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
    /// A strategy's own message: its tag, an encoded body and tensor payloads (see
    /// [`StrategyMessage`](crate::contract::StrategyMessage)).
    Custom(CustomMessage),
}

impl Message {
    /// Size charged on the wire: header plus payload.
    pub fn wire_bytes(&self) -> u64 {
        HEADER_BYTES
            + match self {
                Message::Push { grads, .. } => blocks_bytes(grads),
                Message::Params { blocks, .. } => blocks_bytes(blocks),
                Message::Collective { data, .. } => data.bytes(),
                Message::Custom(m) => m.bytes(),
                Message::Directive(_) | Message::Report(_) => 64,
                Message::Pull { .. }
                | Message::WorkerDone
                | Message::Shutdown
                | Message::Membership(_) => 0,
            }
    }

    /// Bytes of the tensors it carries, real or virtual: what a role copies out of its tensors to
    /// send it and into them on receipt (see
    /// [`DeviceProfile::message_copy_gbps`](crate::cluster::DeviceProfile::message_copy_gbps)).
    pub fn payload_bytes(&self) -> u64 {
        self.sum_over_payloads(Payload::bytes)
    }

    /// Bytes of the tensors its receiver copies out of it on receipt: every payload but a
    /// push's, whose gradients a server folds straight into its sum as it aggregates them (work
    /// it charges as its own). What `sim` charges the receiver at
    /// [`DeviceProfile::message_copy_gbps`](crate::cluster::DeviceProfile::message_copy_gbps).
    pub fn unpacked_bytes(&self) -> u64 {
        match self {
            Message::Push { .. } => 0,
            _ => self.payload_bytes(),
        }
    }

    /// Bytes of the virtual payloads it carries (throughput mode's stand-ins): what a real wire
    /// must still move for the message to cost what it would.
    pub fn virtual_bytes(&self) -> u64 {
        self.sum_over_payloads(|p| match p {
            Payload::Virtual { elems } => elems * crate::payload::ELEM_BYTES,
            Payload::Real(_) => 0,
        })
    }

    /// `bytes` summed over every tensor payload the message carries (0 for messages without).
    fn sum_over_payloads(&self, bytes: impl Fn(&Payload) -> u64) -> u64 {
        self.payloads().into_iter().map(bytes).sum()
    }

    /// Every tensor payload the message carries, in the order it carries them.
    pub fn payloads(&self) -> Vec<&Payload> {
        match self {
            Message::Push { grads: b, .. } | Message::Params { blocks: b, .. } => {
                b.iter().map(|x| &x.data).collect()
            }
            Message::Collective { data, .. } => vec![data],
            Message::Custom(m) => m.payloads.iter().collect(),
            _ => Vec::new(),
        }
    }

    /// Wraps a serializable value as a [`Message::Custom`] with the given tag and no tensors: for
    /// protocols that give one body type several tags.
    pub fn custom<T: Serialize>(tag: &str, value: &T) -> Result<Message, EngineError> {
        Message::custom_with(tag, value, Vec::new())
    }

    /// Wraps a serializable value and the tensors it carries as a [`Message::Custom`] with the
    /// given tag; the tensors are charged on the wire by their size.
    pub fn custom_with<T: Serialize>(
        tag: &str,
        value: &T,
        payloads: Vec<Payload>,
    ) -> Result<Message, EngineError> {
        Ok(Message::Custom(CustomMessage::encode(
            tag, value, payloads,
        )?))
    }

    /// The strategy message this is, if its tag is `want`: `Ok(None)` for other messages, an error
    /// naming the tag if the body does not decode.
    pub fn decode_custom<T: DeserializeOwned>(&self, want: &str) -> Result<Option<T>, EngineError> {
        match self {
            Message::Custom(m) if m.tag == want => m.body().map(Some),
            _ => Ok(None),
        }
    }

    /// Whether this is a strategy message tagged `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        matches!(self, Message::Custom(m) if m.tag == tag)
    }
}

/// The wire form of a strategy message: its tag, its body (JSON-encoded bytes, opaque to the
/// engine) and the tensors it carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CustomMessage {
    /// What kind of message it is (the strategy's own vocabulary).
    pub tag: String,
    /// The encoded body.
    pub body: Vec<u8>,
    /// Whether the body rides in the header (see
    /// [`StrategyMessage::BODY_IN_HEADER`](crate::contract::StrategyMessage::BODY_IN_HEADER)).
    pub body_in_header: bool,
    /// Tensors carried beside the body, real or virtual.
    pub payloads: Vec<Payload>,
}

impl CustomMessage {
    /// Encodes `value` under `tag`, with `payloads`.
    pub fn encode<T: Serialize>(
        tag: &str,
        value: &T,
        payloads: Vec<Payload>,
    ) -> Result<CustomMessage, EngineError> {
        let body = serde_json::to_vec(value).map_err(|e| EngineError::Encode {
            tag: tag.to_string(),
            reason: e.to_string(),
        })?;
        Ok(CustomMessage {
            tag: tag.to_string(),
            body,
            body_in_header: false,
            payloads,
        })
    }

    /// Decodes the body, naming the tag if it does not decode.
    pub fn body<T: DeserializeOwned>(&self) -> Result<T, EngineError> {
        serde_json::from_slice(&self.body).map_err(|e| EngineError::Decode {
            tag: self.tag.clone(),
            reason: e.to_string(),
        })
    }

    /// Bytes charged on the wire beyond the header: the body (unless it rides in the header) and
    /// every payload's true size.
    pub fn bytes(&self) -> u64 {
        let body = if self.body_in_header {
            0
        } else {
            self.body.len() as u64
        };
        body + self.payloads.iter().map(Payload::bytes).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_message_is_charged_its_body_and_payloads() {
        let payloads = vec![Payload::Real(vec![1.0; 10]), Payload::Virtual { elems: 6 }];
        let msg = Message::custom_with("t.probe", &7u32, payloads).expect("encodes");
        // Body "7" (1 byte) + 16 elements of 4 bytes.
        assert_eq!(msg.wire_bytes(), HEADER_BYTES + 1 + 64);
        assert_eq!(
            msg.decode_custom::<u32>("t.probe").expect("decodes"),
            Some(7)
        );
        assert_eq!(
            msg.decode_custom::<u32>("t.other").expect("other tag"),
            None
        );
        let err = msg
            .decode_custom::<String>("t.probe")
            .expect_err("a number is not a string");
        assert!(err.to_string().contains("t.probe"), "{err}");
    }
}
