//! Parameter partitions and the static assignments PSLD is compared with (spec §1.3, §2).
//!
//! PSLD cuts every tensor into blocks of at most `U` bytes and starts them round-robin
//! ([`unit_blocks`], [`round_robin`]). The frameworks' defaults place whole tensors
//! ([`tf_round_robin`]) or M-way slices of the big ones ([`mxnet_default`]) and never move them.
//! The proportional strawman ([`strawman`]) reassigns PSLD's blocks in proportion to measured
//! speeds. Blocks use the engine's [`Block`] (element ranges of one parameter, fp32), ids `0..` in
//! parameter order, offsets ascending, and never empty unless the parameter itself is.

use concord_engine::model::ParamInfo;
use concord_engine::prelude::*;
use concord_engine::ps::Block;
use std::collections::BTreeMap;

/// Bytes per element (parameters are fp32).
pub const ELEM_BYTES: u64 = 4;

/// MXNet's `MXNET_KVSTORE_BIGARRAY_BOUND` default: arrays of at least this many elements are
/// sliced over all servers.
pub const MXNET_BIGARRAY_BOUND: u64 = 1_000_000;

/// PSLD partition: params in order, each cut into blocks of ≤ unit_bytes (⌈size/U⌉ blocks), offsets ascending; ids 0..
///
/// The unit is rounded down to whole elements (at least one), so for a unit that is a multiple
/// of 4 bytes a tensor of `b` bytes gives exactly `⌈b/U⌉` blocks, all full except the last. A
/// tensor with no elements keeps one empty block, as the engine's
/// [`ParamLayout`](concord_engine::ps::ParamLayout) does, so block ids agree with a layout cut at
/// `unit_bytes / 4` elements.
pub fn unit_blocks(params: &[ParamInfo], unit_bytes: u64) -> Vec<Block> {
    let unit = usize::try_from((unit_bytes / ELEM_BYTES).max(1)).unwrap_or(usize::MAX);
    let mut blocks = Vec::new();
    for (p, info) in params.iter().enumerate() {
        let n = info.elems();
        if n == 0 {
            push_block(&mut blocks, p, 0, 0);
        }
        let mut offset = 0;
        while offset < n {
            let len = (n - offset).min(unit);
            push_block(&mut blocks, p, offset, len);
            offset += len;
        }
    }
    blocks
}

/// Block j → servers[j mod len] (PSLD's initial assignment).
/// Empty when `servers` is empty.
pub fn round_robin(blocks: usize, servers: &[ServerId]) -> Vec<ServerId> {
    if servers.is_empty() {
        return Vec::new();
    }
    (0..blocks).map(|j| servers[j % servers.len()]).collect()
}

/// TensorFlow default: whole tensors, tensor key mod M (by count).
/// One block per tensor; `key` is the tensor's index in `params`. Zero servers count as one.
pub fn tf_round_robin(params: &[ParamInfo], servers: u32) -> (Vec<Block>, Vec<ServerId>) {
    let m = u64::from(servers.max(1));
    let mut blocks = Vec::with_capacity(params.len());
    let mut owners = Vec::with_capacity(params.len());
    for (key, info) in params.iter().enumerate() {
        push_block(&mut blocks, key, 0, info.elems());
        owners.push(server_of(key as u64 % m));
    }
    (blocks, owners)
}

/// MXNet default: tensors of ≥ bound_elems (1,000,000) cut into M nearly equal contiguous slices
/// part_i = round(n/M·(i+1)) − round(n/M·i), slice i on server i; smaller ones whole on (key·9973) mod M.
///
/// This is `KVStoreDist::EncodeDefaultKey` of MXNet's `kvstore_dist.h`: the slice bounds are
/// C's `round` (half away from zero, as `f64::round`) of `n as double / M * i`, and a small array
/// goes to `(key * 9973) % M`. Slices that come out with no elements (only possible when
/// `n < M`, i.e. with a tiny bound) get no block; a tensor with no elements is placed whole.
/// Zero servers count as one.
pub fn mxnet_default(
    params: &[ParamInfo],
    servers: u32,
    bound_elems: u64,
) -> (Vec<Block>, Vec<ServerId>) {
    let m = u64::from(servers.max(1));
    let mut blocks = Vec::new();
    let mut owners = Vec::new();
    for (key, info) in params.iter().enumerate() {
        let n = info.elems();
        if n as u64 >= bound_elems && n > 0 {
            let step = n as f64 / m as f64;
            let bound = |i: u64| ((step * i as f64).round() as usize).min(n);
            for i in 0..m {
                let (lo, hi) = (bound(i), bound(i + 1));
                if hi > lo {
                    push_block(&mut blocks, key, lo, hi - lo);
                    owners.push(server_of(i));
                }
            }
        } else {
            push_block(&mut blocks, key, 0, n);
            owners.push(server_of((key as u64).wrapping_mul(9973) % m));
        }
    }
    (blocks, owners)
}

/// Proportional strawman (§2 item 2): targets T_r = share_r · total by speed; blocks largest first to the largest remaining deficit T_r − A_r, ties → lower id; returns the owner per block (input order).
///
/// `share_r = speed_r / Σ speed` over `servers` (deduplicated): the strawman always uses every
/// server. A server without a positive finite speed in `speeds` gets the mean of the known
/// speeds (as PSLD predicts a new server), and with no known speed at all the shares are equal.
/// Among blocks of equal size the earlier one is placed first. Every server ends within one
/// (largest) block of its target. Empty when `servers` is empty.
pub fn strawman(
    block_bytes: &[u64],
    servers: &[ServerId],
    speeds: &BTreeMap<ServerId, f64>,
) -> Vec<ServerId> {
    let mut ids = servers.to_vec();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Vec::new();
    }
    let known: Vec<f64> = ids
        .iter()
        .filter_map(|r| speeds.get(r).copied())
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    let fill = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    let speed: Vec<f64> = ids
        .iter()
        .map(|r| match speeds.get(r) {
            Some(&s) if s.is_finite() && s > 0.0 => s,
            _ => fill,
        })
        .collect();
    let sum: f64 = speed.iter().sum();
    let total: f64 = block_bytes.iter().map(|&b| b as f64).sum();
    let mut deficit: Vec<f64> = speed.iter().map(|s| s / sum * total).collect();

    let mut order: Vec<usize> = (0..block_bytes.len()).collect();
    order.sort_by(|&a, &b| block_bytes[b].cmp(&block_bytes[a]).then(a.cmp(&b)));
    let mut owners = vec![ids[0]; block_bytes.len()];
    for j in order {
        // Largest deficit; `>` keeps the lower id on ties.
        let mut best = 0;
        for (k, &d) in deficit.iter().enumerate().skip(1) {
            if d > deficit[best] {
                best = k;
            }
        }
        deficit[best] -= block_bytes[j] as f64;
        owners[j] = ids[best];
    }
    owners
}

/// Bytes of `block` (fp32).
pub fn block_bytes(block: &Block) -> u64 {
    block.len as u64 * ELEM_BYTES
}

fn push_block(blocks: &mut Vec<Block>, param: usize, offset: usize, len: usize) {
    blocks.push(Block {
        id: blocks.len() as BlockId,
        param,
        offset,
        len,
    });
}

fn server_of(i: u64) -> ServerId {
    ServerId::try_from(i).unwrap_or(ServerId::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_engine::ps::{ParamLayout, RoundRobinPlacement};

    fn param(name: &str, elems: usize) -> ParamInfo {
        ParamInfo {
            name: name.into(),
            shape: vec![elems],
            fan_in: 0,
        }
    }

    #[test]
    fn unit_blocks_cut_at_the_unit_and_match_the_engine_layout() {
        let params = vec![param("a", 10), param("b", 0), param("c", 8), param("d", 3)];
        let blocks = unit_blocks(&params, 16); // 4 elements
        let got: Vec<(usize, usize, usize)> =
            blocks.iter().map(|b| (b.param, b.offset, b.len)).collect();
        assert_eq!(
            got,
            vec![
                (0, 0, 4),
                (0, 4, 4),
                (0, 8, 2),
                (1, 0, 0),
                (2, 0, 4),
                (2, 4, 4),
                (3, 0, 3)
            ]
        );
        assert!(blocks.iter().enumerate().all(|(i, b)| b.id as usize == i));
        let layout = ParamLayout::new(params.clone(), 4, &RoundRobinPlacement, 2);
        assert_eq!(layout.blocks(), blocks.as_slice());
        // A 4 MiB + 1 element tensor at U = 4 MiB: two blocks, ⌈size/U⌉.
        let big = unit_blocks(&[param("w", (1 << 20) + 1)], 4 << 20);
        assert_eq!(big.iter().map(|b| b.len).collect::<Vec<_>>(), [1 << 20, 1]);
        assert_eq!(block_bytes(&big[0]), 4 << 20);
    }

    #[test]
    fn round_robin_deals_blocks_in_order() {
        assert_eq!(round_robin(5, &[3, 7]), vec![3, 7, 3, 7, 3]);
        assert!(round_robin(5, &[]).is_empty());
    }

    #[test]
    fn tf_round_robin_is_by_tensor_count() {
        let params = vec![param("a", 100), param("b", 1), param("c", 7)];
        let (blocks, owners) = tf_round_robin(&params, 2);
        assert_eq!(owners, vec![0, 1, 0]);
        assert_eq!(
            blocks.iter().map(|b| b.len).collect::<Vec<_>>(),
            [100, 1, 7]
        );
        assert_eq!(tf_round_robin(&params, 0).1, vec![0, 0, 0]);
    }

    #[test]
    fn mxnet_slices_big_arrays_and_hashes_small_ones() {
        // 10 elements over 4 servers: bounds round(2.5 i) = 0, 3 (2.5 → 3), 5, 8 (7.5 → 8), 10.
        let params = vec![param("big", 10), param("s1", 2), param("s2", 2)];
        let (blocks, owners) = mxnet_default(&params, 4, 5);
        let got: Vec<(usize, usize, usize)> =
            blocks.iter().map(|b| (b.param, b.offset, b.len)).collect();
        assert_eq!(
            got,
            vec![
                (0, 0, 3),
                (0, 3, 2),
                (0, 5, 3),
                (0, 8, 2),
                (1, 0, 2),
                (2, 0, 2)
            ]
        );
        // key 1 → 9973 mod 4 = 1, key 2 → 19946 mod 4 = 2.
        assert_eq!(owners, vec![0, 1, 2, 3, 1, 2]);
        // M = 8: 5·key mod 8 for small arrays.
        let smalls: Vec<ParamInfo> = (0..4).map(|k| param(&format!("p{k}"), 1)).collect();
        assert_eq!(mxnet_default(&smalls, 8, 100).1, vec![0, 5, 2, 7]);
        // n < M: empty slices produce no block, every element still placed once.
        let (blocks, owners) = mxnet_default(&[param("t", 3)], 6, 1);
        assert!(blocks.iter().all(|b| b.len > 0));
        assert_eq!(blocks.iter().map(|b| b.len).sum::<usize>(), 3);
        assert_eq!(blocks.len(), owners.len());
    }

    #[test]
    fn strawman_is_proportional_to_speed() {
        // Mixed block sizes (1..=4 MiB), speeds 1:1:2.
        let blocks: Vec<u64> = (0..90u64).map(|i| (i % 4 + 1) << 20).collect();
        let speeds: BTreeMap<ServerId, f64> = [(0, 1.0), (1, 1.0), (2, 2.0)].into_iter().collect();
        let owners = strawman(&blocks, &[0, 1, 2], &speeds);
        let total: u64 = blocks.iter().sum();
        let largest = *blocks.iter().max().unwrap_or(&0) as f64;
        let mut load = [0u64; 3];
        for (b, &r) in blocks.iter().zip(&owners) {
            load[r as usize] += b;
        }
        for (r, share) in [0.25, 0.25, 0.5].into_iter().enumerate() {
            let target = share * total as f64;
            assert!(
                (load[r] as f64 - target).abs() <= largest,
                "server {r}: {} bytes, target {target}",
                load[r]
            );
        }
        // A server with no measured speed gets the mean speed; no speeds at all → equal shares.
        let owners = strawman(&[4, 4, 4, 4], &[0, 1], &[(0, 3.0)].into_iter().collect());
        assert_eq!(owners, vec![0, 1, 0, 1]);
        assert_eq!(strawman(&[4, 4], &[5, 2], &BTreeMap::new()), vec![2, 5]);
        assert!(strawman(&[4], &[], &speeds).is_empty());
    }
}
