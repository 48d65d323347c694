//! Parameter blocks: how the model's parameters are cut into blocks and which server holds each.

use crate::ids::ServerId;
use crate::model::ParamInfo;
use crate::payload::{BlockId, BlockPayload, Payload};
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::ops::Range;

/// A contiguous slice of one parameter tensor (flattened).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// Block id (index in the layout).
    pub id: BlockId,
    /// Index of the parameter in layout order.
    pub param: usize,
    /// First element of the slice.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl Block {
    /// Size in bytes (fp32).
    pub fn bytes(&self) -> u64 {
        self.len as u64 * crate::payload::ELEM_BYTES
    }
}

/// Decides how the parameters are cut into blocks and which server holds each block.
///
/// ```
/// use concord_engine::prelude::*;
/// use concord_engine::model::ParamInfo;
/// use concord_engine::ps::Block;
///
/// /// Every block on server 0.
/// #[derive(Debug)]
/// struct AllOnFirst;
///
/// impl Placement for AllOnFirst {
///     fn name(&self) -> String {
///         "all-on-first".into()
///     }
///     fn assign(&self, _params: &[ParamInfo], blocks: &[Block], _servers: u32) -> Vec<u32> {
///         vec![0; blocks.len()]
///     }
/// }
/// ```
pub trait Placement: Send + Sync + Debug {
    /// Short name for reports.
    fn name(&self) -> String;
    /// Cuts the parameters into blocks (ids `0..`, in order). The default cuts every parameter
    /// into consecutive blocks of at most `max_block_elems`; placements that follow a framework's
    /// own partitioning (whole tensors, one slice per server) override it.
    fn partition(&self, params: &[ParamInfo], max_block_elems: usize, _servers: u32) -> Vec<Block> {
        cut_into_blocks(params, max_block_elems)
    }
    /// Server of each block (indexed by block id).
    fn assign(&self, params: &[ParamInfo], blocks: &[Block], servers: u32) -> Vec<ServerId>;
}

/// Every parameter cut into consecutive blocks of at most `max_block_elems` elements (at least one
/// block per parameter), in parameter order.
pub fn cut_into_blocks(params: &[ParamInfo], max_block_elems: usize) -> Vec<Block> {
    let max = max_block_elems.max(1);
    let mut blocks = Vec::new();
    for (p, info) in params.iter().enumerate() {
        let n = info.elems();
        let mut offset = 0;
        while offset < n || (n == 0 && offset == 0) {
            let len = (n - offset).min(max);
            blocks.push(Block {
                id: blocks.len() as BlockId,
                param: p,
                offset,
                len,
            });
            offset += len.max(1);
        }
    }
    blocks
}

/// The default: blocks dealt to servers in layout order, round-robin.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobinPlacement;

impl Placement for RoundRobinPlacement {
    fn name(&self) -> String {
        "round-robin".into()
    }
    fn assign(&self, _params: &[ParamInfo], blocks: &[Block], servers: u32) -> Vec<ServerId> {
        blocks.iter().map(|b| b.id % servers.max(1)).collect()
    }
}

/// Blocks dealt largest first, each to the server holding the fewest bytes so far (the lower
/// server on a tie; blocks of one size in layout order). Every server then ends within one block
/// of every other's bytes, where round-robin can pile a model's large tensors on one server: a
/// layer's bias and weight alternate in layout order, so with two servers round-robin gives one
/// every bias and the other every weight.
#[derive(Clone, Copy, Debug, Default)]
pub struct BalancedPlacement;

impl Placement for BalancedPlacement {
    fn name(&self) -> String {
        "balanced".into()
    }
    fn assign(&self, _params: &[ParamInfo], blocks: &[Block], servers: u32) -> Vec<ServerId> {
        let servers = servers.max(1) as usize;
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(blocks[i].len), i));
        let mut held = vec![0u64; servers];
        let mut owner = vec![0; blocks.len()];
        for i in order {
            let least = (0..servers).min_by_key(|&s| (held[s], s)).unwrap_or(0);
            held[least] += blocks[i].bytes();
            owner[i] = least as ServerId;
        }
        owner
    }
}

/// The model's parameters cut into blocks of at most `max_block_elems`, with an owner each.
#[derive(Clone, Debug)]
pub struct ParamLayout {
    params: Vec<ParamInfo>,
    blocks: Vec<Block>,
    owner: Vec<ServerId>,
    /// Each server's blocks, by index into `blocks`, in id order: a worker cuts its gradients
    /// per server every clock, and a thousand workers on a hundred servers would otherwise scan
    /// every block once per server.
    held: Vec<Vec<usize>>,
    servers: u32,
}

impl ParamLayout {
    /// Cuts `params` into blocks and places them with `placement` over `servers` servers.
    pub fn new(
        params: Vec<ParamInfo>,
        max_block_elems: usize,
        placement: &dyn Placement,
        servers: u32,
    ) -> ParamLayout {
        let blocks = placement.partition(&params, max_block_elems, servers);
        let owner = placement.assign(&params, &blocks, servers);
        let mut held = vec![Vec::new(); servers as usize];
        for (i, block) in blocks.iter().enumerate() {
            let server = owner.get(block.id as usize).copied();
            if let Some(mine) = server.and_then(|s| held.get_mut(s as usize)) {
                mine.push(i);
            }
        }
        ParamLayout {
            params,
            blocks,
            owner,
            held,
            servers,
        }
    }

    /// The parameters, in layout order.
    pub fn params(&self) -> &[ParamInfo] {
        &self.params
    }

    /// Bytes of one copy of every parameter (fp32): a replica, or its gradients.
    pub fn param_bytes(&self) -> u64 {
        self.params
            .iter()
            .map(|p| p.elems() as u64 * crate::payload::ELEM_BYTES)
            .sum()
    }

    /// All blocks.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Number of servers.
    pub fn servers(&self) -> u32 {
        self.servers
    }

    /// Server holding `block`.
    pub fn owner(&self, block: BlockId) -> ServerId {
        self.owner[block as usize]
    }

    /// Blocks held by `server`, in id order.
    pub fn blocks_of(&self, server: ServerId) -> Vec<&Block> {
        self.held_by(server).collect()
    }

    /// Blocks held by `server`, in id order, without collecting them.
    fn held_by(&self, server: ServerId) -> impl Iterator<Item = &Block> {
        let held = self
            .held
            .get(server as usize)
            .map_or(&[][..], Vec::as_slice);
        held.iter().map(|&i| &self.blocks[i])
    }

    /// Elements held by each server.
    pub fn elems_per_server(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.servers as usize];
        for b in &self.blocks {
            out[self.owner[b.id as usize] as usize] += b.len as u64;
        }
        out
    }

    /// Cuts `server`'s blocks out of full per-parameter values (`None`: virtual payloads).
    pub fn slice_for(&self, server: ServerId, values: Option<&[Vec<f32>]>) -> Vec<BlockPayload> {
        self.slice_part(server, 0..self.params.len(), values)
    }

    /// Cuts `server`'s blocks of parameter tensors `tensors` out of those tensors' values, in
    /// order (`None`: virtual payloads): what a holder of part of the model reports.
    pub fn slice_part(
        &self,
        server: ServerId,
        tensors: Range<usize>,
        values: Option<&[Vec<f32>]>,
    ) -> Vec<BlockPayload> {
        self.held_by(server)
            .filter(|b| tensors.contains(&b.param))
            .map(|b| Self::cut(b, tensors.start, values))
            .collect()
    }

    /// Cuts one block out of full per-parameter values (`None`: a virtual payload); `None` for a
    /// block id the layout does not have.
    pub fn block_payload(
        &self,
        block: BlockId,
        values: Option<&[Vec<f32>]>,
    ) -> Option<BlockPayload> {
        self.blocks
            .get(block as usize)
            .map(|b| Self::cut(b, 0, values))
    }

    /// Block `b` cut from the values of the tensors from `first` on.
    fn cut(b: &Block, first: usize, values: Option<&[Vec<f32>]>) -> BlockPayload {
        BlockPayload {
            block: b.id,
            data: match values {
                Some(v) => Payload::Real(v[b.param - first][b.offset..b.offset + b.len].to_vec()),
                None => Payload::Virtual {
                    elems: b.len as u64,
                },
            },
        }
    }

    /// Writes received blocks into full per-parameter buffers.
    pub fn write_into(&self, blocks: &[BlockPayload], values: &mut [Vec<f32>]) {
        self.write_part(blocks, 0..self.params.len(), values);
    }

    /// Writes the received blocks of parameter tensors `tensors` into those tensors' buffers,
    /// in order; blocks of other tensors are left out.
    pub fn write_part(
        &self,
        blocks: &[BlockPayload],
        tensors: Range<usize>,
        values: &mut [Vec<f32>],
    ) {
        for bp in blocks {
            let mine = self
                .blocks
                .get(bp.block as usize)
                .filter(|b| tensors.contains(&b.param));
            if let (Some(b), Some(v)) = (mine, bp.data.values()) {
                values[b.param - tensors.start][b.offset..b.offset + b.len].copy_from_slice(v);
            }
        }
    }

    /// Zeroed per-parameter buffers.
    pub fn zeros(&self) -> Vec<Vec<f32>> {
        self.params.iter().map(|p| vec![0.0; p.elems()]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Vec<ParamInfo> {
        vec![
            ParamInfo {
                name: "a".into(),
                shape: vec![10],
                fan_in: 0,
            },
            ParamInfo {
                name: "b".into(),
                shape: vec![2, 3],
                fan_in: 3,
            },
        ]
    }

    #[test]
    fn blocks_cover_every_element_once_and_round_trip() {
        let layout = ParamLayout::new(params(), 4, &RoundRobinPlacement, 2);
        let lens: Vec<_> = layout.blocks().iter().map(|b| b.len).collect();
        assert_eq!(lens, vec![4, 4, 2, 4, 2]);
        // Blocks 0, 2, 4 (4 + 2 + 2 elements) on server 0; blocks 1, 3 (4 + 4) on server 1.
        assert_eq!(layout.elems_per_server(), vec![8, 8]);
        let values = vec![
            (0..10).map(|x| x as f32).collect::<Vec<_>>(),
            (0..6).map(|x| -(x as f32)).collect(),
        ];
        let mut back = layout.zeros();
        for s in 0..2 {
            layout.write_into(&layout.slice_for(s, Some(&values)), &mut back);
        }
        assert_eq!(back, values);
    }

    /// An MLP's layout: each layer's bias, then its weight.
    fn mlp(widths: &[usize]) -> Vec<ParamInfo> {
        widths
            .windows(2)
            .enumerate()
            .flat_map(|(i, w)| {
                [
                    ParamInfo {
                        name: format!("s{i:02}.bias"),
                        shape: vec![w[1]],
                        fan_in: 0,
                    },
                    ParamInfo {
                        name: format!("s{i:02}.weight"),
                        shape: vec![w[1], w[0]],
                        fan_in: w[0],
                    },
                ]
            })
            .collect()
    }

    #[test]
    fn balanced_spreads_an_mlps_weights_where_round_robin_piles_them_on_one_server() {
        let params = mlp(&[784, 1024, 1024, 10]);
        let round_robin = ParamLayout::new(params.clone(), 1 << 20, &RoundRobinPlacement, 2);
        // Biases and weights alternate: every weight lands on server 1.
        assert_eq!(round_robin.elems_per_server(), vec![2058, 1_861_632]);
        let balanced = ParamLayout::new(params, 1 << 20, &BalancedPlacement, 2);
        // The 1024×1024 weight alone on one server, every other tensor on the other.
        assert_eq!(balanced.elems_per_server(), vec![1_048_576, 815_114]);
        assert_eq!(balanced.blocks(), round_robin.blocks());
    }

    proptest::proptest! {
        /// Every block has one server, every server ends within one block of every other, the
        /// same blocks always get the same owners, and each server lists exactly its own.
        #[test]
        fn balanced_servers_end_within_one_block_of_each_other(
            sizes in proptest::collection::vec(0usize..5000, 1..40),
            max_block in 1usize..3000,
            servers in 1u32..9,
        ) {
            let params: Vec<ParamInfo> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| ParamInfo { name: format!("p{i}"), shape: vec![n], fan_in: 0 })
                .collect();
            let layout = ParamLayout::new(params.clone(), max_block, &BalancedPlacement, servers);
            let held = layout.elems_per_server();
            proptest::prop_assert_eq!(held.len(), servers as usize);
            proptest::prop_assert_eq!(held.iter().sum::<u64>(), sizes.iter().sum::<usize>() as u64);
            let largest = layout.blocks().iter().map(|b| b.len as u64).max().unwrap_or(0);
            let (lo, hi) = (held.iter().min().copied(), held.iter().max().copied());
            proptest::prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= largest), "{held:?}, largest block {largest}");
            let again = ParamLayout::new(params, max_block, &BalancedPlacement, servers);
            for b in layout.blocks() {
                proptest::prop_assert!(layout.owner(b.id) < servers);
                proptest::prop_assert_eq!(layout.owner(b.id), again.owner(b.id));
            }
            // Each server's blocks are exactly those it owns, in id order, every block once.
            let mut listed = 0;
            for s in 0..servers {
                let mine: Vec<BlockId> = layout.blocks_of(s).iter().map(|b| b.id).collect();
                let owned: Vec<BlockId> = layout
                    .blocks()
                    .iter()
                    .filter(|b| layout.owner(b.id) == s)
                    .map(|b| b.id)
                    .collect();
                proptest::prop_assert_eq!(&mine, &owned);
                listed += mine.len();
            }
            proptest::prop_assert_eq!(listed, layout.blocks().len());
        }
    }
}
