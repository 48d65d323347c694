//! RapidReassignment's peer-to-peer messages (thesis §3.3.3, spec §4.1.4), the end-of-run
//! statistics a worker sends the coordinator, and the LazyTable-style updates a worker sends the
//! servers.

use concord_engine::prelude::*;

/// Worker → server: additive deltas to blocks (a parameter server's `update_param`, aggregated by
/// `+`, as in the LazyTable family), for the work of `owner`'s clock `clock`. The sender may be
/// another worker that did part of the owner's work (a helper). The deltas travel as the
/// message's tensor payloads, one per block in `blocks`' order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Update {
    /// Clock of the work the deltas come from.
    pub clock: Clock,
    /// The worker whose clock it is.
    pub owner: WorkerId,
    /// Whether this completes the owner's contribution to `clock` (sent by the owner only).
    pub completes_clock: bool,
    /// Whether the sender wants an [`UpdateAck`] once the deltas are received (a flush the
    /// sender must know has landed before it tells anyone).
    pub ack: bool,
    /// The blocks the payloads belong to.
    pub blocks: Vec<BlockId>,
}

impl StrategyMessage for Update {
    const TAG: &'static str = "flexrr.update";
    const BODY_IN_HEADER: bool = true;
}

impl Update {
    /// The message carrying `deltas` as payloads.
    pub fn message(mut self, deltas: Vec<BlockPayload>) -> Result<Message> {
        self.blocks = deltas.iter().map(|d| d.block).collect();
        let payloads = deltas.into_iter().map(|d| d.data).collect();
        Message::strategy_with(&self, payloads)
    }

    /// The update and its deltas; an error if `msg` is not an update or its blocks and payloads
    /// disagree.
    pub fn unpack(me: RoleId, msg: Message) -> Result<(Update, Vec<BlockPayload>)> {
        let (update, payloads) = msg
            .into_strategy::<Update>()?
            .ok_or_else(|| EngineError::protocol(me, "expected a flexrr update"))?;
        if payloads.len() != update.blocks.len() {
            return Err(EngineError::protocol(
                me,
                format!(
                    "an update names {} blocks but carries {} payloads",
                    update.blocks.len(),
                    payloads.len()
                ),
            ));
        }
        let deltas = update
            .blocks
            .iter()
            .zip(payloads)
            .map(|(&block, data)| BlockPayload { block, data })
            .collect();
        Ok((update, deltas))
    }
}

/// Server → worker: an [`Update`] that asked for it has been received and buffered.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateAck {
    /// Clock of the acknowledged update.
    pub clock: Clock,
}

impl StrategyMessage for UpdateAck {
    const TAG: &'static str = "flexrr.update-ack";
    const BODY_IN_HEADER: bool = true;
}

/// Tag of every FlexRR message on the transport.
pub const TAG: &str = "flexrr";

/// A message between workers (or a worker's statistics to the coordinator).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RrMsg {
    /// Potential helper → each of its helpees, once per iteration at the progress checkpoint.
    ProgressReport {
        /// The sender's current iteration.
        iter: u64,
        /// Fraction of that iteration done (the checkpoint, 0.75 by default).
        frac: f64,
        /// The sender's timer when it sent the report.
        timer: f64,
    },
    /// Slow worker → helper: process units `[start, end)` of my iteration `iter`.
    DoThis {
        /// Assignment id, unique per sender.
        id: u64,
        /// The sender's iteration the units belong to.
        iter: u64,
        /// First unit.
        start: u32,
        /// One past the last unit.
        end: u32,
        /// The sender's timer when it sent the offer.
        timer: f64,
    },
    /// Helper → slow worker: I have started assignment `id`.
    BegunHelping {
        /// The assignment.
        id: u64,
    },
    /// Helper → slow worker: assignment `id` is done and its updates are at the servers.
    HelpCompleted {
        /// The assignment.
        id: u64,
    },
    /// Slow worker → helper: drop every offer of mine sent at or before `timer`.
    CancelHelp {
        /// The sender's timer when it cancelled.
        timer: f64,
    },
    /// Helper → slow worker: your cancel of `timer` is seen; I began none of those offers that
    /// I have not already told you about.
    CancelAck {
        /// The timer of the cancel acknowledged.
        timer: f64,
    },
    /// Worker → coordinator: I have finished my last clock (I keep serving my helpees).
    Finished,
    /// Coordinator → every worker: everyone has finished; stop serving.
    Release,
    /// Worker → coordinator at the end of the run.
    Stats(WorkerStats),
}

/// Units of one worker's clock processed in one go by one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Processed {
    /// Whose clock it is.
    pub owner: u32,
    /// The owner's clock.
    pub clock: u64,
    /// First unit.
    pub start: u32,
    /// One past the last unit.
    pub end: u32,
}

/// What a worker did, for the run's figures and the exactly-once check.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Every range of units it processed (its own and others').
    pub processed: Vec<Processed>,
    /// Offers it sent (initial and follow-up).
    pub offers: u64,
    /// Of those, follow-ups.
    pub follow_ups: u64,
    /// Offers a helper began.
    pub accepted: u64,
    /// Offers it cancelled and processed itself.
    pub cancelled: u64,
    /// Offers it received and discarded (cancelled or from a later iteration).
    pub discarded: u64,
    /// Units it processed for others.
    pub help_units: u64,
    /// Inbox polls it made (at most one per unit: checks more frequent than that are charged
    /// their cost but polled once per unit).
    pub polls: u64,
    /// Message checks it made over its clocks.
    pub checks: u64,
    /// Messages it sent and received for reassignment: RapidReassignment's messages to peers,
    /// its flushes of helped ranges to the servers and their acknowledgements.
    pub rr_messages: u64,
    /// Bytes of those messages on the wire.
    pub rr_bytes: u64,
}

impl RrMsg {
    /// As a transport message.
    pub fn encode(&self) -> Result<Message> {
        Message::custom(TAG, self)
    }

    /// Decodes a FlexRR message; other messages give `None`, a malformed one an error naming
    /// the sender.
    pub fn decode(me: RoleId, from: RoleId, msg: &Message) -> Result<Option<RrMsg>> {
        msg.decode_custom(TAG).map_err(|e| {
            EngineError::protocol(me, format!("malformed flexrr message from {from}: {e}"))
        })
    }
}
