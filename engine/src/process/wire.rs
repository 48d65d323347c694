//! What travels between the processes of a job: [`Frame`]s, each a MessagePack body behind a
//! 4-byte length (tokio-util's length-delimited codec), tagged with the job they belong to.
//!
//! A connection opens with a [`Frame::Hello`] carrying the job id, the shared token, the sender's
//! rank and the world size; anything else, or a hello for another job, world or token, closes the
//! connection without touching the run. After the handshake every frame still carries the job's
//! tag, and one that does not decode or carries another tag is dropped and logged, never applied.

use super::pieces::{self, TensorBytes, ZEROS};
pub use super::pieces::{recycle, Encoded, PIECE};
use crate::context::RoleStats;
use crate::contract::{CoordinatorReport, ServerReport, WorkerReport};
use crate::guard::StopReason;
use crate::ids::RoleId;
use crate::message::Message;
use crate::metrics::{IterRecord, TraceEvent};
use crate::payload::Payload;
use crate::resume::ResumePoint;
use crate::transport::LinkTraffic;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::codec::LengthDelimitedCodec;

/// Version of the frame format; processes of different versions refuse each other.
pub const WIRE_VERSION: u32 = 3;

/// Why a frame or a handshake was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    /// The bytes are not a frame of this format.
    #[error("malformed frame ({len} bytes): {reason}")]
    Malformed {
        /// Frame length.
        len: usize,
        /// The decoder's complaint.
        reason: String,
    },
    /// The frame carries another job's tag.
    #[error("frame of another job (tag {got:016x}, this job's is {want:016x})")]
    OtherJob {
        /// Tag received.
        got: u64,
        /// This job's tag.
        want: u64,
    },
    /// The first frame of a connection was not a hello.
    #[error("the connection did not open with a hello (got {0})")]
    NoHello(&'static str),
    /// The hello does not match this job.
    #[error("hello refused: {0}")]
    Refused(String),
}

/// The identity every frame of a job is checked against: the job id, the shared token, and the
/// digest of the resolved configuration (processes started with different configs refuse each
/// other instead of training different jobs together).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobIdentity {
    /// The job id (from the launcher; see [`super::World::job_id`]).
    pub job_id: String,
    /// Digest of the shared token (`CONCORD_TOKEN`, empty when unset) and the config.
    pub secret: [u8; 32],
    /// Short tag on every frame: the first 8 bytes of the digest of job id and secret.
    pub tag: u64,
}

impl JobIdentity {
    /// The identity of job `job_id` run with `token` and the resolved config text `config`.
    pub fn new(job_id: &str, token: &str, config: &str) -> JobIdentity {
        let secret: [u8; 32] = Sha256::new()
            .chain_update(b"concord-token\0")
            .chain_update(token.as_bytes())
            .chain_update(b"\0")
            .chain_update(config.as_bytes())
            .finalize()
            .into();
        let tagged: [u8; 32] = Sha256::new()
            .chain_update(job_id.as_bytes())
            .chain_update(b"\0")
            .chain_update(secret)
            .finalize()
            .into();
        let mut first = [0u8; 8];
        first.copy_from_slice(&tagged[..8]);
        JobIdentity {
            job_id: job_id.to_string(),
            secret,
            tag: u64::from_le_bytes(first),
        }
    }

    /// The hello `rank` of a `world`-process job sends, announcing its listening port.
    pub fn hello(&self, rank: u32, world: u32, listen_port: u16) -> Frame {
        Frame::Hello {
            version: WIRE_VERSION,
            job_id: self.job_id.clone(),
            secret: self.secret.to_vec(),
            rank,
            world,
            listen_port,
        }
    }

    /// Checks a peer's first frame; its rank and listening port when it belongs to this job.
    pub fn check_hello(&self, frame: &Frame, world: u32) -> Result<(u32, u16), WireError> {
        let Frame::Hello {
            version,
            job_id,
            secret,
            rank,
            world: their_world,
            listen_port,
        } = frame
        else {
            return Err(WireError::NoHello(frame.kind()));
        };
        if *version != WIRE_VERSION {
            return Err(WireError::Refused(format!(
                "frame version {version}, this process speaks {WIRE_VERSION}"
            )));
        }
        if *job_id != self.job_id {
            return Err(WireError::Refused(format!(
                "job \"{job_id}\", this is job \"{}\"",
                self.job_id
            )));
        }
        if secret.as_slice() != self.secret.as_slice() {
            return Err(WireError::Refused(
                "wrong token or a different config (every process must run the same config \
                 with the same CONCORD_TOKEN)"
                    .into(),
            ));
        }
        if *their_world != world {
            return Err(WireError::Refused(format!(
                "world size {their_world}, this job has {world}"
            )));
        }
        if *rank >= world {
            return Err(WireError::Refused(format!(
                "rank {rank} outside a world of {world}"
            )));
        }
        Ok((*rank, *listen_port))
    }
}

/// What one process hands rank 0 at the end: everything its roles returned.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProcessOutputs {
    /// Its workers' outputs.
    pub workers: Vec<RemoteOutput<WorkerReport>>,
    /// Its servers' outputs.
    pub servers: Vec<RemoteOutput<ServerReport>>,
    /// The coordinator's output, on the process that ran it.
    pub coordinator: Option<RemoteOutput<CoordinatorReport>>,
    /// Traffic its roles sent, per directed role pair.
    pub traffic: Vec<((RoleId, RoleId), LinkTraffic)>,
}

/// One role's output as it crosses to rank 0 (a role that failed aborts the run instead).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoteOutput<T> {
    /// The role.
    pub role: RoleId,
    /// What its `run` returned.
    pub report: T,
    /// Its compute totals.
    pub stats: RoleStats,
    /// Its timeline, where kept.
    pub trace: Option<Vec<TraceEvent>>,
    /// Peak bytes its memory policy accounted.
    pub peak_memory: u64,
    /// Run time at which it returned.
    pub end_s: f64,
    /// Its straggler patterns' state.
    pub stragglers: Vec<Option<serde_json::Value>>,
}

/// One frame between two processes of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Frame {
    /// The first frame of every connection.
    Hello {
        /// [`WIRE_VERSION`] of the sender.
        version: u32,
        /// The job id.
        job_id: String,
        /// The job's secret ([`JobIdentity::secret`]).
        secret: Vec<u8>,
        /// The sender's rank.
        rank: u32,
        /// The world size it was started with.
        world: u32,
        /// Port the sender accepts peers on.
        listen_port: u16,
    },
    /// Rank 0 to every rank after the rendezvous: where every rank listens, by rank.
    Roster {
        /// `host:port` per rank.
        addrs: Vec<String>,
    },
    /// The sender has built its roles and starts them once every process has.
    Ready,
    /// A follower to rank 0, before its roles start: what does your run clock read?
    ClockProbe {
        /// The probe's number, which the echo repeats.
        probe: u32,
    },
    /// Rank 0's answer to a [`Frame::ClockProbe`]: its run clock when it read the probe.
    ClockEcho {
        /// The probe answered.
        probe: u32,
        /// Rank 0's run time, seconds.
        leader_s: f64,
    },
    /// A follower to rank 0: its run clock is set by rank 0's, so its roles may start.
    ClockSet,
    /// A role's message to a role of the receiving process.
    Deliver {
        /// Sender.
        from: RoleId,
        /// Receiver.
        to: RoleId,
        /// Run time it was sent at.
        sent_at: f64,
        /// The message.
        msg: Message,
        /// As many bytes as the message's virtual payloads stand for (throughput mode), so a
        /// message costs on a real wire what it would carry.
        pad: Padding,
    },
    /// Still alive, with the most clocks any of the sender's workers has completed.
    Heartbeat {
        /// Clocks completed (what a failure report names as the last iteration).
        iteration: u64,
    },
    /// A worker of the sender completed a clock (to rank 0, for its progress display).
    Progress {
        /// The worker.
        worker: u32,
        /// Clocks it has completed.
        clocks: u64,
    },
    /// Every worker of the sender has finished.
    WorkersDone,
    /// The sender's role outputs, to rank 0.
    Outputs(Box<ProcessOutputs>),
    /// Rank 0 to every other rank before each stretch of clocks (the whole run, or the clocks up
    /// to the next checkpoint): where the stretch starts. `None`: at clock 0; otherwise the cut
    /// the stretch continues from, with the receiver's roles' checkpoints only.
    Segment(Option<Box<ResumePoint>>),
    /// Every role of the sender has returned at the end of a stretch: nothing it sent during that
    /// stretch is still on the way behind this frame.
    SegmentEnd,
    /// The sender's divergence guard stopped the run; its workers' records so far.
    Diverged {
        /// Why (`summary.json`'s `stopped`); carried as itself, since JSON cannot hold the
        /// non-finite loss that usually trips the guard.
        reason: StopReason,
        /// The sender's workers' records.
        records: Vec<(u32, Vec<IterRecord>)>,
    },
    /// The sender's part of the run failed: every process stops.
    Abort {
        /// Why, naming the role, machine and iteration where known.
        reason: String,
    },
    /// Nothing more follows on this connection: a close after it is not a failure.
    Bye,
}

impl Frame {
    /// The frame's kind, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello { .. } => "hello",
            Frame::Roster { .. } => "roster",
            Frame::Ready => "ready",
            Frame::ClockProbe { .. } => "clock-probe",
            Frame::ClockEcho { .. } => "clock-echo",
            Frame::ClockSet => "clock-set",
            Frame::Deliver { .. } => "deliver",
            Frame::Heartbeat { .. } => "heartbeat",
            Frame::Progress { .. } => "progress",
            Frame::WorkersDone => "workers-done",
            Frame::Outputs(_) => "outputs",
            Frame::Segment(_) => "segment",
            Frame::SegmentEnd => "segment-end",
            Frame::Diverged { .. } => "diverged",
            Frame::Abort { .. } => "abort",
            Frame::Bye => "bye",
        }
    }
}

/// Filler bytes on the wire: written as that many zero bytes (in pieces of one shared zero
/// block, so no buffer of their size is ever made), read back as their count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Padding(pub u64);

impl Serialize for Padding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let block = ZEROS.len() as u64;
        let pieces = (0..self.0.div_ceil(block)).map(|i| {
            let len = (self.0 - i * block).min(block) as usize;
            serde_bytes_ref(&ZEROS[..len])
        });
        s.collect_seq(pieces)
    }
}

/// A byte slice that serializes as bytes (not as a list of numbers).
fn serde_bytes_ref(b: &[u8]) -> BytesRef<'_> {
    BytesRef(b)
}

struct BytesRef<'a>(&'a [u8]);

impl Serialize for BytesRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

/// The length of one piece of filler, read without copying it.
struct PieceLen(u64);

impl<'de> Deserialize<'de> for PieceLen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PieceLen, D::Error> {
        struct Len;
        impl serde::de::Visitor<'_> for Len {
            type Value = PieceLen;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("filler bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<PieceLen, E> {
                Ok(PieceLen(b.len() as u64))
            }
        }
        d.deserialize_bytes(Len)
    }
}

impl<'de> Deserialize<'de> for Padding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Padding, D::Error> {
        struct Pieces;
        impl<'de> serde::de::Visitor<'de> for Pieces {
            type Value = Padding;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of filler pieces")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Padding, A::Error> {
                let mut total = 0u64;
                while let Some(PieceLen(n)) = seq.next_element()? {
                    total += n;
                }
                Ok(Padding(total))
            }
        }
        d.deserialize_seq(Pieces)
    }
}

/// A frame with the tag of the job it belongs to.
#[derive(Serialize, Deserialize)]
struct Tagged<F> {
    tag: u64,
    frame: F,
}

/// Encodes `frame` for the job tagged `tag`.
pub fn encode(tag: u64, frame: &Frame) -> Result<Bytes, WireError> {
    rmp_serde::to_vec(&Tagged { tag, frame })
        .map(Bytes::from)
        .map_err(|e| WireError::Malformed {
            len: 0,
            reason: format!("cannot encode a {} frame: {e}", frame.kind()),
        })
}

/// Encodes `frame` for the job tagged `tag` behind its length, ready for the socket, every byte
/// copied (control frames, and frames sent to several peers).
pub fn encode_framed(tag: u64, frame: &Frame) -> Result<Encoded, WireError> {
    pieces::encode_copied(&Tagged { tag, frame }).map_err(|e| cut_error(e, frame))
}

/// Encodes `frame`, which the sender gives away, like [`encode_framed`] but with the tensors it
/// carries left where they are: the pieces that carry them point into the frame, kept alive
/// until they have been written. A large message then reaches the socket without a copy.
pub fn encode_framed_owned(tag: u64, frame: Frame) -> Result<Encoded, WireError> {
    let frame = std::sync::Arc::new(frame);
    let tagged = Tagged {
        tag,
        frame: &*frame,
    };
    pieces::encode_in_place(std::sync::Arc::clone(&frame), &tagged)
        .map_err(|e| cut_error(e, &frame))
}

fn cut_error(e: pieces::CutError, frame: &Frame) -> WireError {
    match e {
        pieces::CutError::Encode(e) => WireError::Malformed {
            len: 0,
            reason: format!("cannot encode a {} frame: {e}", frame.kind()),
        },
        pieces::CutError::TooLong(len) => WireError::Malformed {
            len,
            reason: "a frame longer than 4 GiB cannot be sent".into(),
        },
    }
}

impl TensorBytes for Frame {
    fn tensor_bytes(&self) -> Vec<&[u8]> {
        match self {
            Frame::Deliver { msg, .. } => msg
                .payloads()
                .into_iter()
                .filter_map(Payload::values)
                .map(bytemuck::cast_slice)
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Decodes a frame of the job tagged `tag` from `bytes`.
pub fn decode(tag: u64, bytes: &[u8]) -> Result<Frame, WireError> {
    let tagged: Tagged<Frame> = rmp_serde::from_slice(bytes).map_err(|e| WireError::Malformed {
        len: bytes.len(),
        reason: e.to_string(),
    })?;
    if tagged.tag != tag {
        return Err(WireError::OtherJob {
            got: tagged.tag,
            want: tag,
        });
    }
    Ok(tagged.frame)
}

/// The length-delimited codec of every connection, refusing frames over `max_bytes`.
pub fn codec(max_bytes: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_type::<u32>()
        .max_frame_length(max_bytes)
        .new_codec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{BlockPayload, Payload};

    fn identity() -> JobIdentity {
        JobIdentity::new("job-1", "secret", "workers = 2\n")
    }

    fn push() -> Frame {
        Frame::Deliver {
            from: RoleId::Worker(1),
            to: RoleId::Server(0),
            sent_at: 0.25,
            msg: Message::Push {
                clock: 3,
                samples: 32,
                completes_clock: true,
                grads: vec![BlockPayload {
                    block: 7,
                    data: Payload::Real(vec![1.5, -0.0, f32::MIN_POSITIVE, 3.0e38]),
                }],
            },
            pad: Padding(0),
        }
    }

    #[test]
    fn a_frame_round_trips_with_its_payload_bits() {
        let id = identity();
        let bytes = encode(id.tag, &push()).unwrap();
        let Frame::Deliver { msg, from, .. } = decode(id.tag, &bytes).unwrap() else {
            panic!("not a deliver frame");
        };
        assert_eq!(from, RoleId::Worker(1));
        let Frame::Deliver { msg: sent, .. } = push() else {
            unreachable!()
        };
        assert_eq!(msg, sent);
    }

    #[test]
    fn a_divergence_report_keeps_its_non_finite_loss() {
        use crate::guard::Cause;
        let id = identity();
        let reason = StopReason::diverged("bsp", RoleId::Worker(1), 8, f64::NAN, Cause::NonFinite);
        let frame = Frame::Diverged {
            reason: reason.clone(),
            records: Vec::new(),
        };
        let bytes = encode(id.tag, &frame).unwrap();
        let Frame::Diverged { reason: got, .. } = decode(id.tag, &bytes).unwrap() else {
            panic!("not a divergence report");
        };
        assert!(got.loss.is_nan());
        assert_eq!((got.role, got.iteration), (reason.role, reason.iteration));
    }

    /// A small message with `pad` bytes of filler.
    fn padded(pad: u64) -> Frame {
        Frame::Deliver {
            from: RoleId::Worker(0),
            to: RoleId::Worker(1),
            sent_at: 0.0,
            msg: Message::WorkerDone,
            pad: Padding(pad),
        }
    }

    #[test]
    fn virtual_payloads_travel_as_their_true_size() {
        let id = identity();
        let frame = padded(1 << 20);
        let bytes = encode(id.tag, &frame).unwrap();
        assert!(bytes.len() > 1 << 20, "{} bytes", bytes.len());
        let Frame::Deliver { pad, .. } = decode(id.tag, &bytes).unwrap() else {
            panic!("not a deliver frame")
        };
        assert_eq!(pad, Padding(1 << 20));
    }

    #[test]
    fn a_framed_encoding_is_its_length_then_the_plain_encoding_in_pieces() {
        let id = identity();
        let frame = padded(3 * PIECE as u64 + 5);
        let framed = encode_framed(id.tag, &frame).unwrap();
        assert!(framed.pieces().all(|p| p.len() <= PIECE));
        let all: Vec<u8> = framed.pieces().flat_map(|p| p.iter().copied()).collect();
        let plain = encode(id.tag, &frame).unwrap();
        assert_eq!(&all[..4], &(plain.len() as u32).to_be_bytes());
        assert_eq!(&all[4..], &plain[..]);
        assert_eq!(framed.body_len(), plain.len());
    }

    #[test]
    fn a_frame_given_away_goes_out_with_its_tensors_and_filler_uncopied() {
        let id = identity();
        let values: Vec<f32> = (0..(3 << 20)).map(|i| i as f32 * 0.5).collect();
        let small = vec![1.0f32; 10];
        let frame = Frame::Deliver {
            from: RoleId::Worker(0),
            to: RoleId::Server(1),
            sent_at: 1.5,
            msg: Message::Push {
                clock: 2,
                samples: 8,
                completes_clock: true,
                grads: vec![
                    BlockPayload {
                        block: 0,
                        data: Payload::Real(values.clone()),
                    },
                    BlockPayload {
                        block: 1,
                        data: Payload::Real(small),
                    },
                    BlockPayload {
                        block: 2,
                        data: Payload::Virtual { elems: 1 << 20 },
                    },
                ],
            },
            pad: Padding(4 << 20),
        };
        let plain = encode(id.tag, &frame).unwrap();
        let copied = encode_framed(id.tag, &frame).unwrap();
        let owned = encode_framed_owned(id.tag, frame).unwrap();
        let join =
            |e: &Encoded| -> Vec<u8> { e.pieces().flat_map(|p| p.iter().copied()).collect() };
        assert_eq!(join(&owned), join(&copied));
        assert_eq!(&join(&owned)[4..], &plain[..]);
        assert_eq!(copied.in_place_len(), 0);
        // The large tensor and the filler are not copied; the 40-byte tensor is.
        assert_eq!(owned.in_place_len(), values.len() * 4 + (4 << 20));
        let Frame::Deliver { msg, pad, .. } = decode(id.tag, &plain).unwrap() else {
            panic!("not a deliver frame")
        };
        assert_eq!(pad, Padding(4 << 20));
        let Message::Push { grads, .. } = msg else {
            panic!("not a push")
        };
        assert_eq!(grads[0].data, Payload::Real(values));
    }

    #[test]
    fn real_payloads_stay_numbers_in_json() {
        let p = Payload::Real(vec![0.5, 2.0]);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, r#"{"Real":[0.5,2.0]}"#);
        assert_eq!(serde_json::from_str::<Payload>(&json).unwrap(), p);
    }

    #[test]
    fn a_frame_of_another_job_is_refused() {
        let other = JobIdentity::new("job-2", "secret", "workers = 2\n");
        let bytes = encode(other.tag, &push()).unwrap();
        let err = decode(identity().tag, &bytes).unwrap_err();
        assert!(matches!(err, WireError::OtherJob { .. }), "{err}");
    }

    #[test]
    fn truncated_and_garbage_frames_are_malformed() {
        let id = identity();
        let bytes = encode(id.tag, &push()).unwrap();
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            let err = decode(id.tag, &bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, WireError::Malformed { .. }),
                "cut {cut}: {err}"
            );
        }
        let err = decode(id.tag, b"\xc1\xff garbage").unwrap_err();
        assert!(matches!(err, WireError::Malformed { .. }), "{err}");
    }

    #[test]
    fn a_hello_must_match_job_token_config_and_world() {
        let id = identity();
        assert_eq!(id.check_hello(&id.hello(1, 4, 9000), 4), Ok((1, 9000)));
        let cases = [
            (
                JobIdentity::new("job-1", "other", "workers = 2\n"),
                4,
                "token",
            ),
            (
                JobIdentity::new("job-1", "secret", "workers = 3\n"),
                4,
                "config",
            ),
            (
                JobIdentity::new("job-9", "secret", "workers = 2\n"),
                4,
                "job",
            ),
        ];
        for (them, world, what) in cases {
            let err = id.check_hello(&them.hello(1, world, 1), 4).unwrap_err();
            assert!(matches!(err, WireError::Refused(_)), "{what}: {err}");
        }
        let err = id.check_hello(&id.hello(1, 3, 1), 4).unwrap_err();
        assert!(err.to_string().contains("world size 3"), "{err}");
        let err = id.check_hello(&id.hello(4, 4, 1), 4).unwrap_err();
        assert!(err.to_string().contains("rank 4"), "{err}");
        let err = id.check_hello(&Frame::Bye, 4).unwrap_err();
        assert_eq!(err, WireError::NoHello("bye"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Arbitrary bytes never decode into a frame of this job by accident, and never panic.
        #[test]
        fn arbitrary_bytes_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let id = identity();
            proptest::prop_assert!(decode(id.tag, &bytes).is_err());
        }
    }
}
