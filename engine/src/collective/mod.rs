//! Collectives over a group of roles: ring allreduce, broadcast, alltoall, tensor fusion.
//!
//! Decentralized strategies (allreduce data parallelism, RNA, Sven) exchange tensors among the
//! workers themselves instead of through parameter servers. The collectives here run on the
//! engine's transport like any other protocol: every hop is a [`Message::Collective`] on the
//! link model, so what a collective costs in `sim` (α + 2(P−1)/P · bytes/BW for a ring allreduce
//! on uncontended links, more when NICs are shared or slowed) *emerges* from the messages; nothing
//! is charged by formula.
//!
//! * [`Group`]: an ordered list of distinct roles (ranks), any subset of the job, with `split`.
//! * [`RingAllreduce`]: the bandwidth-optimal ring (reduce-scatter, then allgather; each member
//!   sends 2(P−1) chunks of ≈ n/P elements) as a state machine, so a role can progress it between
//!   other events (RNA's communication thread); [`allreduce_sum`] drives it to completion.
//!   Each chunk is summed in a fixed order along the ring, so results are deterministic and every
//!   member ends with bit-identical values.
//! * [`broadcast`] (binomial tree) and [`alltoall`] (direct pairwise exchange); [`AsyncAlltoall`]
//!   (Sven's scatter at each member's own arrival, with staging) and [`BlockingAlltoall`] (NCCL's
//!   wait-for-all) as state machines.
//! * [`Allreduce`]: the allreduce the job's `collective` key asks for: the ring above, or NCCL on
//!   the members' GPUs (the `nccl` feature), whose communicator id travels over the transport.
//! * [`Fusion`]: tensor fusion: many tensors (plus trailing scalars such as RNA's contribution
//!   weight) flattened into one buffer cut into buckets of whole tensors.
//! * [`LocalModel`]: a replica's parameters and optimizer state held by a worker, updated in the
//!   same order on every member, reported at the end like a server's blocks.

mod alltoall;
mod backend;
mod fusion;
mod local;
#[cfg(feature = "nccl")]
pub(crate) mod nccl;
mod ops;
mod resident;
mod ring;

#[cfg(test)]
mod tests;

pub use alltoall::{AsyncAlltoall, BlockingAlltoall};
pub use backend::Allreduce;
pub use fusion::Fusion;
pub use local::LocalModel;
pub use ops::{alltoall, broadcast};
pub use resident::{Gradient, HostTraffic, ResidentParams, UpdateRule};
pub use ring::{allreduce_sum, RingAllreduce};

use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::message::Message;
use crate::payload::Payload;
use crate::transport::Envelope;
use std::collections::BTreeMap;

/// An ordered set of distinct roles taking part in a collective; a member's index is its rank.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    members: Vec<RoleId>,
}

impl Group {
    /// A group of `members` in rank order; empty or with a role listed twice is an error.
    pub fn new(members: Vec<RoleId>) -> Result<Group> {
        if members.is_empty() {
            return Err(EngineError::Composition(
                "a collective group needs at least one member".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &members {
            if !seen.insert(*m) {
                return Err(EngineError::Composition(format!(
                    "{m} is listed twice in a collective group"
                )));
            }
        }
        Ok(Group { members })
    }

    /// Workers `0..n`, in index order.
    pub fn workers(n: u32) -> Result<Group> {
        Group::new((0..n).map(RoleId::Worker).collect())
    }

    /// Number of members P.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Members in rank order.
    pub fn members(&self) -> &[RoleId] {
        &self.members
    }

    /// The role at `rank`.
    pub fn member(&self, rank: usize) -> RoleId {
        self.members[rank % self.members.len()]
    }

    /// The rank of `role`, if it is a member.
    pub fn rank_of(&self, role: RoleId) -> Option<usize> {
        self.members.iter().position(|&m| m == role)
    }

    /// The members at `ranks` (in that order) as a group of their own: allreduce on a subset.
    pub fn subset(&self, ranks: &[usize]) -> Result<Group> {
        let mut members = Vec::with_capacity(ranks.len());
        for &r in ranks {
            members.push(*self.members.get(r).ok_or_else(|| {
                EngineError::Composition(format!(
                    "rank {r} is outside a group of {} members",
                    self.members.len()
                ))
            })?);
        }
        Group::new(members)
    }

    /// Splits the group by `key(rank)`: one group per key, in key order, members in rank order.
    pub fn split<K: Ord>(&self, key: impl Fn(usize) -> K) -> Vec<Group> {
        let mut by: BTreeMap<K, Vec<RoleId>> = BTreeMap::new();
        for (rank, &m) in self.members.iter().enumerate() {
            by.entry(key(rank)).or_default().push(m);
        }
        by.into_values().map(|members| Group { members }).collect()
    }

    /// The rank of `role` or a protocol error naming it.
    pub(crate) fn require_rank(&self, role: RoleId) -> Result<usize> {
        self.rank_of(role).ok_or_else(|| {
            EngineError::protocol(role, "takes part in a collective of a group it is not in")
        })
    }
}

/// The read rule of a run without parameter servers (decentralized strategies): nothing is read
/// from a server, so nothing waits. Such a strategy fills the consistency slot with it so that no
/// PS rule (BSP, SSP) is composed with it by default.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoServer;

impl crate::contract::Consistency for NoServer {
    fn name(&self) -> String {
        "none (no parameter server)".into()
    }
    fn min_version(&self, _clock: crate::ids::Clock) -> Option<i64> {
        None
    }
    fn staleness_bound(&self) -> Option<u64> {
        None
    }
}

/// A digest of parameter values (their bits, in order): equal replicas give equal digests.
pub fn digest(params: &[Vec<f32>]) -> u64 {
    params.iter().flatten().fold(0x9E37_79B9_7F4A_7C15, |h, x| {
        crate::stragglers::splitmix64(h ^ u64::from(x.to_bits()))
    })
}

/// Whether `env` is hop `(op, part, step)` of a collective, sent by `from`.
pub fn is_hop(env: &Envelope, from: RoleId, op: u64, part: u32, step: u32) -> bool {
    env.from == from
        && matches!(&env.msg, Message::Collective { op: o, part: p, step: s, .. }
            if *o == op && *p == part && *s == step)
}

/// Whether `env` is a hop of collective operation `op` at `step`, from any member.
pub fn is_hop_of(env: &Envelope, op: u64, step: u32) -> bool {
    matches!(&env.msg, Message::Collective { op: o, step: s, .. } if *o == op && *s == step)
}

/// The elements `[start, end)` of a payload (a virtual payload gives a virtual piece).
pub(crate) fn piece(buf: &Payload, start: usize, end: usize) -> Payload {
    match buf {
        Payload::Real(v) => Payload::Real(v[start..end].to_vec()),
        Payload::Virtual { .. } => Payload::Virtual {
            elems: (end - start) as u64,
        },
    }
}

/// Bounds of chunk `c` when `n` elements are cut into `p` chunks as evenly as possible (the first
/// `n mod p` chunks hold one element more).
pub fn chunk_bounds(n: usize, p: usize, c: usize) -> (usize, usize) {
    let (base, extra) = (n / p, n % p);
    let start = c * base + c.min(extra);
    let len = base + usize::from(c < extra);
    (start, start + len)
}
