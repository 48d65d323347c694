//! Alltoall as state machines a role progresses between other events: Sven's asynchronous
//! scatter alltoall and the blocking, NCCL-style alltoall it is measured against.
//!
//! An alltoall among P members is P independent point-to-point scatters: member r sends split j
//! to member j. The two variants differ only in *when* a member sends:
//!
//! * [`AsyncAlltoall`] (Sven, thesis §6.1.1): a member scatters as soon as its producing
//!   computation is done, at its own arrival. A split that reaches a member which has not yet
//!   arrived itself waits in a staging buffer (its bytes are counted: staging doubles the memory
//!   the operation needs) and is copied into place when that member arrives; the rest land
//!   directly. The operation is done for a member once it has arrived and holds all P splits.
//! * [`BlockingAlltoall`] (NCCL's semantics): a member that arrives announces it to every peer and
//!   posts its sends only once every member has arrived, so the slowest arrival starts the
//!   exchange for all. The announcement is a header-only hop on the link model.
//!
//! Both carry their splits as [`Message::Collective`] hops tagged with the operation id, so the
//! cost of the exchange emerges from the transport's link model (latency per message, NIC
//! queues), as for every other collective.

use super::{is_hop_of, Group};
use crate::context::RoleContext;
use crate::error::{EngineError, Result};
use crate::message::Message;
use crate::payload::Payload;
use crate::transport::Envelope;

/// Step tag of a hop carrying a split.
const DATA: u32 = 1;
/// Step tag of a blocking alltoall's arrival announcement.
const ARRIVED: u32 = 0;

/// The splits of one member's side of an alltoall, by source rank.
#[derive(Debug)]
struct Inbox {
    op: u64,
    rank: usize,
    parts: Vec<Option<Payload>>,
    received: usize,
}

impl Inbox {
    fn new(group: &Group, rank: usize, op: u64) -> Inbox {
        Inbox {
            op,
            rank,
            parts: vec![None; group.size()],
            received: 0,
        }
    }

    /// Stores the split `src` sent; a second split from the same member is a protocol error.
    fn store(&mut self, ctx: &RoleContext, src: usize, data: Payload) -> Result<u64> {
        let bytes = data.bytes();
        let slot = &mut self.parts[src];
        if slot.is_some() {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("alltoall {}: a second split from rank {src}", self.op),
            ));
        }
        *slot = Some(data);
        self.received += 1;
        Ok(bytes)
    }

    fn complete(&self) -> bool {
        self.received == self.parts.len()
    }

    fn into_parts(self) -> Vec<Payload> {
        self.parts
            .into_iter()
            .map(|p| p.unwrap_or(Payload::Virtual { elems: 0 }))
            .collect()
    }
}

/// Sends split j of `splits` to member j, in ring order from the right neighbour (so sends fan
/// out over the NICs); returns this member's own split.
fn scatter(
    ctx: &RoleContext,
    group: &Group,
    rank: usize,
    op: u64,
    splits: Vec<Payload>,
) -> Result<Payload> {
    let p = group.size();
    if splits.len() != p {
        return Err(EngineError::protocol(
            ctx.id(),
            format!(
                "alltoall {op} with {} splits in a group of {p} members",
                splits.len()
            ),
        ));
    }
    let mut splits: Vec<Option<Payload>> = splits.into_iter().map(Some).collect();
    let own = splits[rank].take().unwrap_or(Payload::Virtual { elems: 0 });
    for k in 1..p {
        let j = (rank + k) % p;
        let data = splits[j].take().unwrap_or(Payload::Virtual { elems: 0 });
        ctx.send(
            group.member(j),
            Message::Collective {
                op,
                part: 0,
                step: DATA,
                data,
            },
        );
    }
    Ok(own)
}

/// One member's side of Sven's asynchronous alltoall (see the module docs).
///
/// Create it when either happens first: this member arrives ([`AsyncAlltoall::scatter`]) or a
/// split of the operation reaches it ([`AsyncAlltoall::wants`], [`AsyncAlltoall::on_message`]).
#[derive(Debug)]
pub struct AsyncAlltoall {
    group: Group,
    inbox: Inbox,
    arrived_at: Option<f64>,
    staged_bytes: u64,
    received_bytes: u64,
}

impl AsyncAlltoall {
    /// The operation `op` (equal on every member, unique among operations in flight between
    /// them) as `ctx`'s role in `group`, before anything was sent or received.
    pub fn new(ctx: &RoleContext, group: &Group, op: u64) -> Result<AsyncAlltoall> {
        let rank = group.require_rank(ctx.id())?;
        Ok(AsyncAlltoall {
            group: group.clone(),
            inbox: Inbox::new(group, rank, op),
            arrived_at: None,
            staged_bytes: 0,
            received_bytes: 0,
        })
    }

    /// This member arrives: it sends split j of `splits` to member j at once and keeps its own;
    /// from now on splits land directly in the destination instead of the staging buffer.
    pub fn scatter(&mut self, ctx: &RoleContext, splits: Vec<Payload>) -> Result<()> {
        if self.arrived_at.is_some() {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("alltoall {}: scattered twice", self.inbox.op),
            ));
        }
        let own = scatter(ctx, &self.group, self.inbox.rank, self.inbox.op, splits)?;
        self.inbox.store(ctx, self.inbox.rank, own)?;
        self.arrived_at = Some(ctx.now());
        Ok(())
    }

    /// Whether `env` is a split of this operation.
    pub fn wants(&self, env: &Envelope) -> bool {
        is_hop_of(env, self.inbox.op, DATA)
    }

    /// Takes a split: staged if this member has not arrived yet, in place otherwise.
    pub fn on_message(&mut self, ctx: &RoleContext, env: Envelope) -> Result<()> {
        let src = self.group.require_rank(env.from)?;
        let Message::Collective { data, .. } = env.msg else {
            return Err(not_a_hop(ctx, self.inbox.op));
        };
        let bytes = self.inbox.store(ctx, src, data)?;
        self.received_bytes += bytes;
        if self.arrived_at.is_none() {
            self.staged_bytes += bytes;
        }
        Ok(())
    }

    /// Whether this member has arrived and holds every split.
    pub fn is_done(&self) -> bool {
        self.arrived_at.is_some() && self.inbox.complete()
    }

    /// When this member arrived (scattered), if it has.
    pub fn arrived_at(&self) -> Option<f64> {
        self.arrived_at
    }

    /// Bytes of the splits that arrived before this member did: held in the staging buffer and
    /// copied into place on arrival.
    pub fn staged_bytes(&self) -> u64 {
        self.staged_bytes
    }

    /// Bytes received from the other members so far.
    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    /// The splits by source rank (call once [`AsyncAlltoall::is_done`]).
    pub fn into_parts(self) -> Vec<Payload> {
        self.inbox.into_parts()
    }
}

/// One member's side of a blocking, NCCL-style alltoall (see the module docs).
#[derive(Debug)]
pub struct BlockingAlltoall {
    group: Group,
    inbox: Inbox,
    /// This member's splits, held from its arrival until every member has arrived.
    held: Option<Vec<Payload>>,
    arrived: Vec<bool>,
    started_at: Option<f64>,
}

impl BlockingAlltoall {
    /// The operation `op` as `ctx`'s role in `group`, before anything was sent or received.
    pub fn new(ctx: &RoleContext, group: &Group, op: u64) -> Result<BlockingAlltoall> {
        let rank = group.require_rank(ctx.id())?;
        Ok(BlockingAlltoall {
            group: group.clone(),
            inbox: Inbox::new(group, rank, op),
            held: None,
            arrived: vec![false; group.size()],
            started_at: None,
        })
    }

    /// This member arrives with its `splits`: it tells every peer so, and the exchange starts
    /// once all have.
    pub fn arrive(&mut self, ctx: &RoleContext, splits: Vec<Payload>) -> Result<()> {
        let rank = self.inbox.rank;
        if self.arrived[rank] {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("alltoall {}: arrived twice", self.inbox.op),
            ));
        }
        if splits.len() != self.group.size() {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "alltoall {} with {} splits in a group of {} members",
                    self.inbox.op,
                    splits.len(),
                    self.group.size()
                ),
            ));
        }
        self.arrived[rank] = true;
        self.held = Some(splits);
        for k in 1..self.group.size() {
            let j = (rank + k) % self.group.size();
            ctx.send(
                self.group.member(j),
                Message::Collective {
                    op: self.inbox.op,
                    part: 0,
                    step: ARRIVED,
                    data: Payload::Virtual { elems: 0 },
                },
            );
        }
        self.start_if_all_arrived(ctx)
    }

    /// Whether `env` is an arrival or a split of this operation.
    pub fn wants(&self, env: &Envelope) -> bool {
        is_hop_of(env, self.inbox.op, ARRIVED) || is_hop_of(env, self.inbox.op, DATA)
    }

    /// Takes a peer's arrival announcement or split.
    pub fn on_message(&mut self, ctx: &RoleContext, env: Envelope) -> Result<()> {
        let src = self.group.require_rank(env.from)?;
        let Message::Collective { step, data, .. } = env.msg else {
            return Err(not_a_hop(ctx, self.inbox.op));
        };
        if step == ARRIVED {
            if std::mem::replace(&mut self.arrived[src], true) {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("alltoall {}: rank {src} arrived twice", self.inbox.op),
                ));
            }
            return self.start_if_all_arrived(ctx);
        }
        self.inbox.store(ctx, src, data).map(|_| ())
    }

    fn start_if_all_arrived(&mut self, ctx: &RoleContext) -> Result<()> {
        if self.started_at.is_some() || !self.arrived.iter().all(|&a| a) {
            return Ok(());
        }
        let Some(splits) = self.held.take() else {
            return Ok(());
        };
        self.started_at = Some(ctx.now());
        let own = scatter(ctx, &self.group, self.inbox.rank, self.inbox.op, splits)?;
        self.inbox.store(ctx, self.inbox.rank, own).map(|_| ())
    }

    /// Whether the exchange has run and this member holds every split.
    pub fn is_done(&self) -> bool {
        self.started_at.is_some() && self.inbox.complete()
    }

    /// When this member learnt that every member had arrived and posted its sends.
    pub fn started_at(&self) -> Option<f64> {
        self.started_at
    }

    /// The splits by source rank (call once [`BlockingAlltoall::is_done`]).
    pub fn into_parts(self) -> Vec<Payload> {
        self.inbox.into_parts()
    }
}

fn not_a_hop(ctx: &RoleContext, op: u64) -> EngineError {
    EngineError::protocol(
        ctx.id(),
        format!("a non-collective message was fed to alltoall {op}"),
    )
}
