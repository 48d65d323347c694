//! Sven's own messages (the alltoalls and the allreduce travel as engine collective hops) and the
//! ids of its collective operations.

use crate::schedule::Kind;
use concord_engine::prelude::*;

/// Worker → its input service: send the pre-sharded batch of `clock` (the worker keeps at most
/// two requested and not yet taken: the bounded queue of capacity 2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Want {
    /// The batch wanted.
    pub clock: u64,
}
impl StrategyMessage for Want {
    const TAG: &'static str = "sven.want";
    const BODY_IN_HEADER: bool = true;
}

/// Input service → worker: one chunk of the batch of `clock`, pre-sharded for this rank (the
/// payloads stand for the ids its shards look up and its own samples' dense features and labels,
/// by size; the values themselves are the job's data, read by the rank). A batch travels in
/// `chunks` messages, as an RPC stream does, so that it shares the links with the ranks' own
/// traffic instead of holding a NIC for the whole batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    /// The batch.
    pub clock: u64,
    /// This chunk's index.
    pub chunk: u32,
    /// Chunks of the batch.
    pub chunks: u32,
}
impl StrategyMessage for Shard {
    const TAG: &'static str = "sven.shard";
    const BODY_IN_HEADER: bool = true;
}

/// High bits of every Sven collective operation id, apart from other collectives' ids.
const OP_BASE: u64 = 0x5356_0000_0000_0000;

/// Which collective of a batch an operation id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    /// Input re-distribution, value lengths.
    InputLengths,
    /// Input re-distribution, indices.
    InputIndices,
    /// Forward alltoall of lookups.
    Fwd,
    /// Backward alltoall of embedding gradients.
    Bwd,
    /// Dense gradients' allreduce.
    Allreduce,
}

impl OpKind {
    const ALL: [OpKind; 5] = [
        OpKind::InputLengths,
        OpKind::InputIndices,
        OpKind::Fwd,
        OpKind::Bwd,
        OpKind::Allreduce,
    ];

    /// The collective a communication task starts with.
    pub fn first_of(kind: Kind) -> Option<OpKind> {
        match kind {
            Kind::Input => Some(OpKind::InputLengths),
            Kind::FwdA2a => Some(OpKind::Fwd),
            Kind::BwdA2a => Some(OpKind::Bwd),
            Kind::Allreduce => Some(OpKind::Allreduce),
            _ => None,
        }
    }

    /// The operation id of this collective for `batch`.
    pub fn op(self, batch: u64) -> u64 {
        OP_BASE | ((self as u64) << 40) | (batch & ((1 << 40) - 1))
    }

    /// The collective and batch an operation id names, if it is Sven's.
    pub fn parse(op: u64) -> Option<(OpKind, u64)> {
        if op & 0xFFFF_0000_0000_0000 != OP_BASE {
            return None;
        }
        let kind = OpKind::ALL.get(((op >> 40) & 0xFF) as usize).copied()?;
        Some((kind, op & ((1 << 40) - 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_ids_round_trip_and_differ() {
        let mut seen = std::collections::BTreeSet::new();
        for k in OpKind::ALL {
            for b in [0, 1, 77, (1 << 40) - 1] {
                assert_eq!(OpKind::parse(k.op(b)), Some((k, b)));
                assert!(seen.insert(k.op(b)));
            }
        }
        assert_eq!(OpKind::parse(12), None);
    }
}
