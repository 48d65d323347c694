//! Parameter layouts that follow the embedding shards: every layout block lies inside one
//! holder's shard (a rank's, or a parameter server's), so that the holders' reports cover the
//! model exactly once.

use crate::placement::{ShardPlan, Sharding};
use concord_engine::model::ParamInfo;
use concord_engine::prelude::*;
use concord_engine::ps::{cut_into_blocks, Block, Placement};

/// `(rows, width)` of the embedding tables among `params`: the leading `emb.*` parameters of
/// shape `[width, rows]`.
pub fn tables_of(params: &[ParamInfo]) -> Vec<(usize, usize)> {
    params
        .iter()
        .take_while(|p| p.name.starts_with("emb.") && p.shape.len() == 2)
        .map(|p| (p.shape[1], p.shape[0]))
        .collect()
}

/// The blocks of `params`: each table cut at `plan`'s shard boundaries, the other parameters as
/// usual, every piece in blocks of at most `max_block_elems`.
pub fn shard_blocks(plan: &ShardPlan, params: &[ParamInfo], max_block_elems: usize) -> Vec<Block> {
    let max = max_block_elems.max(1);
    let mut blocks = Vec::new();
    let mut push = |param: usize, offset: usize, len: usize| {
        let mut at = 0;
        while at < len || (len == 0 && at == 0) {
            let l = (len - at).min(max);
            blocks.push(Block {
                id: blocks.len() as BlockId,
                param,
                offset: offset + at,
                len: l,
            });
            at += l.max(1);
        }
    };
    let tables = plan.tables().len();
    for (table, offset, len, _) in plan.blocks() {
        push(table, offset, len);
    }
    for (p, info) in params.iter().enumerate().skip(tables) {
        push(p, 0, info.elems());
    }
    blocks
}

/// The parameter layout of a Sven run: every table cut at its shards' boundaries (so each layout
/// block lies in one rank's shard, and the ranks' reports cover the model exactly once), the
/// dense part as usual.
#[derive(Debug)]
pub struct ShardedTables {
    sharding: Sharding,
    ranks: usize,
}

impl ShardedTables {
    /// The workers' layout: tables cut by `sharding` over `ranks` ranks.
    pub fn new(sharding: Sharding, ranks: usize) -> ShardedTables {
        ShardedTables { sharding, ranks }
    }
}

impl Placement for ShardedTables {
    fn name(&self) -> String {
        format!("{:?}-wise embedding shards", self.sharding).to_lowercase()
    }

    fn partition(&self, params: &[ParamInfo], max_block_elems: usize, _servers: u32) -> Vec<Block> {
        let Some(plan) = ShardPlan::new(self.sharding, &tables_of(params), self.ranks).ok() else {
            return cut_into_blocks(params, max_block_elems);
        };
        shard_blocks(&plan, params, max_block_elems)
    }

    fn assign(&self, _params: &[ParamInfo], blocks: &[Block], servers: u32) -> Vec<ServerId> {
        (0..blocks.len() as u32)
            .map(|i| i % servers.max(1))
            .collect()
    }
}
