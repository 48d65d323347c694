//! The communication lane's operations: the alltoalls (Sven's asynchronous one or the blocking
//! baseline), created by whichever comes first — this rank starting them or a peer's hop — and
//! the dense allreduce, whose early hops wait until this rank starts it.

use crate::options::AlltoallKind;
use crate::protocol::OpKind;
use concord_engine::collective::{AsyncAlltoall, BlockingAlltoall, Group, RingAllreduce};
use concord_engine::prelude::*;
use std::collections::BTreeMap;

/// One alltoall, of either kind.
#[derive(Debug)]
pub enum Exchange {
    /// Sven's.
    Async(AsyncAlltoall),
    /// NCCL-style.
    Blocking(BlockingAlltoall),
}

impl Exchange {
    fn new(ctx: &RoleContext, group: &Group, op: u64, kind: AlltoallKind) -> Result<Exchange> {
        Ok(match kind {
            AlltoallKind::Async => Exchange::Async(AsyncAlltoall::new(ctx, group, op)?),
            AlltoallKind::Blocking => Exchange::Blocking(BlockingAlltoall::new(ctx, group, op)?),
        })
    }

    /// This rank arrives with its splits.
    pub fn arrive(&mut self, ctx: &RoleContext, splits: Vec<Payload>) -> Result<()> {
        match self {
            Exchange::Async(a) => a.scatter(ctx, splits),
            Exchange::Blocking(b) => b.arrive(ctx, splits),
        }
    }

    fn on_message(&mut self, ctx: &RoleContext, env: Envelope) -> Result<()> {
        match self {
            Exchange::Async(a) => a.on_message(ctx, env),
            Exchange::Blocking(b) => b.on_message(ctx, env),
        }
    }

    /// Whether this rank holds every split.
    pub fn is_done(&self) -> bool {
        match self {
            Exchange::Async(a) => a.is_done(),
            Exchange::Blocking(b) => b.is_done(),
        }
    }

    /// Bytes that waited in the staging buffer (Sven's only).
    pub fn staged_bytes(&self) -> u64 {
        match self {
            Exchange::Async(a) => a.staged_bytes(),
            Exchange::Blocking(_) => 0,
        }
    }

    /// The splits by source rank.
    pub fn into_parts(self) -> Vec<Payload> {
        match self {
            Exchange::Async(a) => a.into_parts(),
            Exchange::Blocking(b) => b.into_parts(),
        }
    }
}

/// Every collective of this rank in flight or waiting to start.
#[derive(Debug, Default)]
pub struct Collectives {
    exchanges: BTreeMap<u64, Exchange>,
    rings: BTreeMap<u64, RingAllreduce>,
    early_ring_hops: BTreeMap<u64, Vec<Envelope>>,
}

impl Collectives {
    /// Takes a collective hop addressed to one of Sven's operations.
    pub fn on_hop(
        &mut self,
        ctx: &RoleContext,
        group: &Group,
        kind: AlltoallKind,
        env: Envelope,
    ) -> Result<()> {
        let Message::Collective { op, .. } = &env.msg else {
            return Err(unexpected(ctx, &env));
        };
        let op = *op;
        match OpKind::parse(op) {
            Some((OpKind::Allreduce, _)) => match self.rings.get_mut(&op) {
                Some(ring) => ring.on_message(ctx, env),
                None => {
                    self.early_ring_hops.entry(op).or_default().push(env);
                    Ok(())
                }
            },
            Some(_) => {
                let ex = match self.exchanges.entry(op) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(Exchange::new(ctx, group, op, kind)?)
                    }
                };
                ex.on_message(ctx, env)
            }
            None => Err(unexpected(ctx, &env)),
        }
    }

    /// This rank arrives at alltoall `op` with `splits`.
    pub fn arrive(
        &mut self,
        ctx: &RoleContext,
        group: &Group,
        kind: AlltoallKind,
        op: u64,
        splits: Vec<Payload>,
    ) -> Result<()> {
        let ex = match self.exchanges.entry(op) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(Exchange::new(ctx, group, op, kind)?)
            }
        };
        ex.arrive(ctx, splits)
    }

    /// Whether alltoall `op` is done here.
    pub fn exchange_done(&self, op: u64) -> bool {
        self.exchanges.get(&op).is_some_and(Exchange::is_done)
    }

    /// Takes a finished alltoall's splits and its staged bytes.
    pub fn take_exchange(&mut self, op: u64) -> Option<(Vec<Payload>, u64)> {
        let ex = self.exchanges.remove(&op)?;
        let staged = ex.staged_bytes();
        Some((ex.into_parts(), staged))
    }

    /// Starts allreduce `op` of `buf`, feeding it the hops that came before.
    pub fn start_ring(
        &mut self,
        ctx: &RoleContext,
        group: &Group,
        op: u64,
        buf: Payload,
    ) -> Result<()> {
        let mut ring = RingAllreduce::start(ctx, group, op, buf, &[])?;
        for env in self.early_ring_hops.remove(&op).unwrap_or_default() {
            ring.on_message(ctx, env)?;
        }
        self.rings.insert(op, ring);
        Ok(())
    }

    /// Whether allreduce `op` is done here.
    pub fn ring_done(&self, op: u64) -> bool {
        self.rings.get(&op).is_some_and(RingAllreduce::is_done)
    }

    /// Takes a finished allreduce's sum and the bytes this rank sent for it.
    pub fn take_ring(&mut self, op: u64) -> Option<(Payload, u64)> {
        let ring = self.rings.remove(&op)?;
        let bytes = ring.bytes_sent();
        Some((ring.into_result(), bytes))
    }
}
