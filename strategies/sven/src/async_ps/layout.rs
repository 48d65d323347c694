//! Where the parameter servers keep the model: every embedding table cut row-wise over the
//! servers, every dense tensor whole on one server (round-robin by tensor), and a parameter
//! layout whose blocks each lie inside one server's holding, so that the servers' reports cover
//! the model exactly once.

use crate::layout::{shard_blocks, tables_of};
use crate::placement::{ShardPlan, Sharding};
use concord_engine::model::ParamInfo;
use concord_engine::prelude::*;
use concord_engine::ps::{cut_into_blocks, Block};
use std::ops::Range;

/// The row-wise plan of `tables` over `servers` servers (`None` for no servers or an empty
/// table).
pub fn server_plan(tables: &[(usize, usize)], servers: usize) -> Option<ShardPlan> {
    ShardPlan::new(Sharding::Row, tables, servers).ok()
}

/// The server holding dense tensor `param` (an index into the model's parameters, after the
/// `tables` tables): round-robin by tensor.
pub fn dense_owner(param: usize, tables: usize, servers: usize) -> usize {
    param.saturating_sub(tables) % servers.max(1)
}

/// The rows of `table` that `server` holds (empty when the table has fewer rows than there are
/// servers and this one got none).
pub fn rows_of(plan: &ShardPlan, table: usize, server: usize) -> Range<usize> {
    plan.shards(table)
        .iter()
        .find(|s| s.rank == server)
        .map_or(0..0, |s| s.rows.clone())
}

/// The parameter servers' layout: tables cut at their row shards' boundaries, dense tensors on
/// the server [`dense_owner`] names.
#[derive(Debug, Default)]
pub struct ServerTables;

impl Placement for ServerTables {
    fn name(&self) -> String {
        "row-wise embedding shards, dense tensors round-robin".into()
    }

    fn partition(&self, params: &[ParamInfo], max_block_elems: usize, servers: u32) -> Vec<Block> {
        let tables = tables_of(params);
        let Some(plan) = server_plan(&tables, servers as usize) else {
            return cut_into_blocks(params, max_block_elems);
        };
        shard_blocks(&plan, params, max_block_elems)
    }

    fn assign(&self, params: &[ParamInfo], blocks: &[Block], servers: u32) -> Vec<ServerId> {
        let tables = tables_of(params);
        let plan = server_plan(&tables, servers as usize);
        blocks
            .iter()
            .map(|b| match (&plan, tables.get(b.param)) {
                (Some(plan), Some(&(rows, _))) if rows > 0 => {
                    plan.owner_of(b.param, b.offset % rows, b.offset / rows) as ServerId
                }
                _ => dense_owner(b.param, tables.len(), servers as usize) as ServerId,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_engine::ps::ParamLayout;

    fn params() -> Vec<ParamInfo> {
        let p = |name: &str, shape: Vec<usize>| ParamInfo {
            name: name.into(),
            shape,
            fan_in: 1,
        };
        vec![
            p("emb.00", vec![3, 10]),
            p("emb.01", vec![3, 1]),
            p("bottom.0.weight", vec![4, 2]),
            p("bottom.0.bias", vec![4]),
            p("out.weight", vec![1, 4]),
        ]
    }

    /// Every element lies in exactly one block, and each block's server holds all of it: the
    /// table's row shard, or the dense tensor's server.
    #[test]
    fn every_block_lies_in_its_servers_holding() {
        for servers in [1u32, 2, 3] {
            let layout = ParamLayout::new(params(), 4, &ServerTables, servers);
            let plan = server_plan(&tables_of(&params()), servers as usize).unwrap();
            let mut seen: Vec<Vec<u32>> = params().iter().map(|p| vec![0; p.elems()]).collect();
            for b in layout.blocks() {
                let owner = layout.owner(b.id) as usize;
                let covered = seen[b.param].iter_mut().enumerate();
                for (i, n) in covered.skip(b.offset).take(b.len) {
                    *n += 1;
                    if b.param < 2 {
                        let rows = plan.tables()[b.param].0;
                        assert!(rows_of(&plan, b.param, owner).contains(&(i % rows)));
                    } else {
                        assert_eq!(owner, dense_owner(b.param, 2, servers as usize));
                    }
                }
            }
            assert!(
                seen.iter().flatten().all(|&n| n == 1),
                "{servers}: {seen:?}"
            );
        }
        // Dense tensors go round-robin by tensor.
        assert_eq!(
            (2..5).map(|p| dense_owner(p, 2, 2)).collect::<Vec<_>>(),
            vec![0, 1, 0]
        );
    }
}
