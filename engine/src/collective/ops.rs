//! Broadcast (binomial tree) and alltoall (direct pairwise exchange).

use super::{is_hop, AsyncAlltoall, Group};
use crate::context::RoleContext;
use crate::error::{EngineError, Result};
use crate::message::Message;
use crate::payload::Payload;

/// Broadcasts the root's `buf` to every member of `group` along a binomial tree (⌈log₂ P⌉ rounds;
/// each member receives the whole buffer once). On the root `buf` is sent; elsewhere it is
/// replaced by the root's value.
pub async fn broadcast(
    ctx: &mut RoleContext,
    group: &Group,
    root: usize,
    op: u64,
    buf: &mut Payload,
) -> Result<()> {
    let p = group.size();
    if root >= p {
        return Err(EngineError::protocol(
            ctx.id(),
            format!("broadcast root rank {root} is outside a group of {p} members"),
        ));
    }
    let rank = group.require_rank(ctx.id())?;
    let rel = (rank + p - root) % p;
    let mut mask = 1usize;
    while mask < p {
        if rel & mask != 0 {
            let parent = group.member((rel - mask + root) % p);
            let env = ctx.recv_matching(|e| is_hop(e, parent, op, 0, 0)).await?;
            if let Message::Collective { data, .. } = env.msg {
                *buf = data;
            }
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < p {
            let child = group.member((rel + mask + root) % p);
            ctx.send(
                child,
                Message::Collective {
                    op,
                    part: 0,
                    step: 0,
                    data: buf.clone(),
                },
            );
        }
        mask >>= 1;
    }
    Ok(())
}

/// Alltoall: member r sends `parts[j]` to member j and returns what every member sent it, indexed
/// by source rank (its own part stays local). `parts` must hold one entry per member. Every member
/// sends at once: the asynchronous alltoall ([`AsyncAlltoall`]) driven to completion.
pub async fn alltoall(
    ctx: &mut RoleContext,
    group: &Group,
    op: u64,
    parts: Vec<Payload>,
) -> Result<Vec<Payload>> {
    let mut exchange = AsyncAlltoall::new(ctx, group, op)?;
    exchange.scatter(ctx, parts)?;
    while !exchange.is_done() {
        let env = ctx.recv_matching(|e| exchange.wants(e)).await?;
        exchange.on_message(ctx, env)?;
    }
    Ok(exchange.into_parts())
}
