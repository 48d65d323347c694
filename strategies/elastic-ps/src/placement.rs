//! The initial layout of each policy, as the engine's [`Placement`]: how parameters are cut into
//! blocks and where each block starts.

use crate::assign;
use crate::options::PolicyKind;
use concord_engine::model::ParamInfo;
use concord_engine::prelude::*;
use concord_engine::ps::{cut_into_blocks, Block};

/// Initial partition and assignment of an elastic-ps policy.
#[derive(Clone, Copy, Debug)]
pub struct ElasticPlacement {
    kind: PolicyKind,
    bigarray_bound: u64,
}

impl ElasticPlacement {
    /// The layout `kind` starts from; `bigarray_bound` is MXNet's split threshold in elements.
    pub fn new(kind: PolicyKind, bigarray_bound: u64) -> ElasticPlacement {
        ElasticPlacement {
            kind,
            bigarray_bound,
        }
    }
}

impl Placement for ElasticPlacement {
    fn name(&self) -> String {
        self.kind.name().to_string()
    }

    /// MXNet: big tensors in one slice per server, small ones whole; TensorFlow: whole tensors;
    /// the others: blocks of at most U (`block_bytes`).
    fn partition(&self, params: &[ParamInfo], max_block_elems: usize, servers: u32) -> Vec<Block> {
        match self.kind {
            PolicyKind::Mxnet => assign::mxnet_default(params, servers, self.bigarray_bound).0,
            PolicyKind::Tf => assign::tf_round_robin(params, servers).0,
            _ => cut_into_blocks(params, max_block_elems),
        }
    }

    fn assign(&self, params: &[ParamInfo], blocks: &[Block], servers: u32) -> Vec<ServerId> {
        match self.kind {
            PolicyKind::Mxnet => assign::mxnet_default(params, servers, self.bigarray_bound).1,
            PolicyKind::Tf => assign::tf_round_robin(params, servers).1,
            _ => {
                let all: Vec<ServerId> = (0..servers.max(1)).collect();
                assign::round_robin(blocks.len(), &all)
            }
        }
    }
}
