//! E0 (spec §4.1, §5.3): the static default assignments of this crate reproduce the PSLD paper's
//! Tables 1 and 2 on the engine's ResNet-101 profile, and PSLD's own partition covers the same
//! model.

use concord_elastic_ps::assign::{
    mxnet_default, round_robin, tf_round_robin, unit_blocks, MXNET_BIGARRAY_BOUND,
};
use concord_engine::model::ParamInfo;
use concord_engine::prelude::*;
use concord_engine::profiles::resnet101;
use concord_engine::ps::Block;

/// ResNet-101's trainable tensors in MXNet `list_arguments` order, flattened.
fn resnet101_params() -> Vec<ParamInfo> {
    resnet101()
        .tensors()
        .map(|t| ParamInfo {
            name: t.name.clone(),
            shape: vec![t.elems as usize],
            fan_in: 0,
        })
        .collect()
}

/// Parameters per server in millions, rounded to one decimal as the paper's tables are.
fn millions_per_server(blocks: &[Block], owners: &[ServerId], servers: usize) -> Vec<f64> {
    assert_eq!(blocks.len(), owners.len());
    let mut per = vec![0u64; servers];
    for (b, &r) in blocks.iter().zip(owners) {
        per[r as usize] += b.len as u64;
    }
    per.iter()
        .map(|&p| (p as f64 / 1e5).round() / 10.0)
        .collect()
}

/// Every element of every parameter is in exactly one block, and no block is empty.
fn assert_exact_cover(params: &[ParamInfo], blocks: &[Block], what: &str) {
    let mut next = vec![0usize; params.len()];
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(b.id as usize, i, "{what}: block ids 0..");
        assert!(b.len > 0, "{what}: empty block {b:?}");
        assert_eq!(b.offset, next[b.param], "{what}: gap or overlap at {b:?}");
        next[b.param] += b.len;
    }
    for (p, info) in params.iter().enumerate() {
        assert_eq!(next[p], info.elems(), "{what}: {} not covered", info.name);
    }
}

/// Table 1: ResNet-101, TensorFlow round-robin, parameters per PS (millions).
const TABLE_1: [&[f64]; 6] = [
    &[44.5],
    &[21.6, 22.9],
    &[2.0, 29.0, 13.5],
    &[9.9, 10.3, 11.7, 12.7],
    &[8.5, 7.1, 9.9, 12.2, 6.8],
    &[1.0, 15.2, 6.8, 1.0, 13.9, 6.7],
];

/// Table 2: ResNet-101, MXNet default, parameters per PS (millions).
const TABLE_2: [&[f64]; 6] = [
    &[44.5],
    &[22.3, 22.3],
    &[7.5, 31.1, 5.9],
    &[10.9, 11.0, 11.4, 11.3],
    &[9.7, 8.8, 9.0, 8.3, 8.7],
    &[3.7, 15.6, 3.0, 3.8, 15.6, 2.9],
];

fn assert_within_tenth(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 0.1 + 1e-9,
            "{what}: got {got:?}, paper {want:?}"
        );
    }
}

#[test]
fn e0_tf_round_robin_reproduces_table_1() {
    let params = resnet101_params();
    assert_eq!(params.len(), 310);
    for (i, want) in TABLE_1.iter().enumerate() {
        let m = i + 1;
        let (blocks, owners) = tf_round_robin(&params, m as u32);
        assert_exact_cover(&params, &blocks, "tf");
        assert_eq!(blocks.len(), params.len(), "tf keeps tensors whole");
        let got = millions_per_server(&blocks, &owners, m);
        assert_within_tenth(&got, want, &format!("Table 1, M = {m}"));
        // Spec §1.3 [verified]: exact for every M.
        assert_eq!(got, *want, "Table 1, M = {m}");
    }
}

#[test]
fn e0_mxnet_default_reproduces_table_2() {
    let params = resnet101_params();
    for (i, want) in TABLE_2.iter().enumerate() {
        let m = i + 1;
        let (blocks, owners) = mxnet_default(&params, m as u32, MXNET_BIGARRAY_BOUND);
        assert_exact_cover(&params, &blocks, "mxnet");
        // The 10 tensors of ≥ 1 M elements are cut into M slices each.
        assert_eq!(blocks.len(), 300 + 10 * m, "M = {m}");
        let got = millions_per_server(&blocks, &owners, m);
        assert_within_tenth(&got, want, &format!("Table 2, M = {m}"));
        if m == 5 {
            // Spec §1.3/§4.1 [verified]: PS2/PS3 come out 8.7/9.1 where the paper prints 8.8/9.0.
            assert_eq!(got, [9.7, 8.7, 9.1, 8.3, 8.7]);
        } else {
            assert_eq!(got, *want, "Table 2, M = {m}");
        }
    }
}

#[test]
fn psld_partition_of_resnet101_is_318_blocks_and_round_robin_balances_counts() {
    // Spec §5.1 profile table: 318 blocks at 4 MiB.
    let params = resnet101_params();
    let blocks = unit_blocks(&params, 4 << 20);
    assert_exact_cover(&params, &blocks, "psld");
    assert_eq!(blocks.len(), 318);
    assert!(blocks.iter().all(|b| b.len <= 1 << 20));
    let owners = round_robin(blocks.len(), &[0, 1, 2, 3]);
    let mut count = [0usize; 4];
    for &r in &owners {
        count[r as usize] += 1;
    }
    assert_eq!(count, [80, 80, 79, 79]);
}
