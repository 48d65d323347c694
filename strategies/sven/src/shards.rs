//! What a rank's shards contribute to a batch, for any sharding: the lookups it scatters to the
//! samples' owners, how an owner assembles its samples' embeddings from every rank's splits, the
//! gradients it sends back, and the row-wise update a shard owner applies.
//!
//! A split from rank `j` to rank `i` holds, for each of `j`'s shards in plan order, the shard's
//! columns of `i`'s samples' rows: `[samples of i, shard columns]`, zero where a sample's id is
//! not in a row shard's range. The receiver adds every split into place. Column-wise shards thus
//! send `b × K × width / n` values per pair; table-wise the owned tables' full width; row-wise the
//! full width of every table (partial sums, the thesis's "high forward alltoall volume").

use crate::placement::{Shard, ShardPlan, Tier, TierMap};
use concord_engine::model::{gather_rows, sgd_rows};
use std::ops::Range;

/// The ids of one global batch: `[samples, fields]` row-major.
#[derive(Clone, Debug)]
pub struct BatchIds {
    /// Ids, sample-major.
    pub ids: Vec<u32>,
    /// Fields per sample.
    pub fields: usize,
}

impl BatchIds {
    /// Number of samples.
    pub fn samples(&self) -> usize {
        self.ids.len() / self.fields.max(1)
    }

    /// Field `k`'s ids of samples `range`.
    pub fn field(&self, k: usize, range: Range<usize>) -> Vec<u32> {
        range.map(|m| self.ids[m * self.fields + k]).collect()
    }
}

/// Samples of the global batch owned by rank `i` of `n` (each rank owns `per` consecutive ones).
pub fn owned(i: usize, per: usize) -> Range<usize> {
    i * per..(i + 1) * per
}

/// Rows a rank's shards look up for a batch, by tier: `(device, host, host elements)`.
pub fn lookups(mine: &[(usize, Shard)], ids: &BatchIds, tiers: &TierMap) -> (u64, u64, u64) {
    let (mut dev, mut host, mut host_elems) = (0u64, 0u64, 0u64);
    for (k, shard) in mine {
        for m in 0..ids.samples() {
            let id = ids.ids[m * ids.fields + k] as usize;
            if !shard.rows.contains(&id) {
                continue;
            }
            match tiers.tier_of(*k, id) {
                Tier::Device => dev += 1,
                Tier::Host => {
                    host += 1;
                    host_elems += shard.cols.len() as u64;
                }
            }
        }
    }
    (dev, host, host_elems)
}

/// Elements of the split rank `j` sends each owner of `per` samples.
pub fn split_elems(mine: &[(usize, Shard)], per: usize) -> usize {
    mine.iter().map(|(_, s)| s.cols.len() * per).sum()
}

/// Rank `me`'s forward splits: one per owner `i`, its samples' looked-up columns of every shard
/// of `me` (`tables[k]` is table `k`'s dimension-major values with `rows[k]` rows).
pub fn forward_splits(
    mine: &[(usize, Shard)],
    ids: &BatchIds,
    tables: &[Vec<f32>],
    rows: &[usize],
    ranks: usize,
    per: usize,
) -> Vec<Vec<f32>> {
    (0..ranks)
        .map(|i| {
            let mut out = Vec::with_capacity(split_elems(mine, per));
            for (k, shard) in mine {
                let ids_k = ids.field(*k, owned(i, per));
                let vals = gather_rows(&tables[*k], rows[*k], &ids_k, shard.cols.clone());
                let w = shard.cols.len();
                for (m, &id) in ids_k.iter().enumerate() {
                    let row = &vals[m * w..(m + 1) * w];
                    if shard.rows.contains(&(id as usize)) {
                        out.extend_from_slice(row);
                    } else {
                        out.extend(std::iter::repeat_n(0.0, w));
                    }
                }
            }
            out
        })
        .collect()
}

/// Owner `me`'s embeddings `[per, K, width]` from every rank's forward split (`splits[j]` from
/// rank `j`), added into place in rank order.
pub fn assemble(plan: &ShardPlan, splits: &[Vec<f32>], per: usize, width: usize) -> Vec<f32> {
    let fields = plan.tables().len();
    let mut emb = vec![0.0f32; per * fields * width];
    for (j, split) in splits.iter().enumerate() {
        let mut at = 0;
        for (k, shard) in plan.rank_shards(j) {
            let w = shard.cols.len();
            for m in 0..per {
                let dst = (m * fields + k) * width;
                for (c, col) in shard.cols.clone().enumerate() {
                    emb[dst + col] += split.get(at + m * w + c).copied().unwrap_or(0.0);
                }
            }
            at += per * w;
        }
    }
    emb
}

/// Owner `me`'s backward splits: to each rank `j`, the gradients of `me`'s samples in the columns
/// of `j`'s shards, scaled by `scale` (1/n: the global batch's mean loss).
pub fn backward_splits(
    plan: &ShardPlan,
    emb_grad: &[f32],
    per: usize,
    width: usize,
    scale: f32,
) -> Vec<Vec<f32>> {
    let fields = plan.tables().len();
    (0..plan.ranks())
        .map(|j| {
            let shards = plan.rank_shards(j);
            let mut out = Vec::with_capacity(split_elems(&shards, per));
            for (k, shard) in &shards {
                for m in 0..per {
                    let src = (m * fields + k) * width;
                    out.extend(shard.cols.clone().map(|c| emb_grad[src + c] * scale));
                }
            }
            out
        })
        .collect()
}

/// Applies every owner's backward split (`splits[i]` from owner `i`, in owner order) to `me`'s
/// shards: a row-wise SGD step on the rows the batch looked up, and nothing else.
pub fn apply_sparse(
    mine: &[(usize, Shard)],
    ids: &BatchIds,
    splits: &[Vec<f32>],
    tables: &mut [Vec<f32>],
    rows: &[usize],
    per: usize,
    lr: f32,
) {
    for (i, split) in splits.iter().enumerate() {
        let mut at = 0;
        for (k, shard) in mine {
            let w = shard.cols.len();
            let ids_k = ids.field(*k, owned(i, per));
            let (mut keep_ids, mut keep) = (Vec::new(), Vec::new());
            for (m, &id) in ids_k.iter().enumerate() {
                if shard.rows.contains(&(id as usize)) {
                    keep_ids.push(id);
                    keep.extend_from_slice(&split[at + m * w..at + (m + 1) * w]);
                }
            }
            sgd_rows(
                &mut tables[*k],
                rows[*k],
                &keep_ids,
                &keep,
                shard.cols.clone(),
                lr,
            );
            at += per * w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Sharding;

    /// Two tables (5 and 3 rows, width 4), values `100·k + 10·c + row`.
    fn tables() -> (Vec<Vec<f32>>, Vec<usize>) {
        let rows = vec![5, 3];
        let t = rows
            .iter()
            .enumerate()
            .map(|(k, &r)| {
                (0..4)
                    .flat_map(|c| (0..r).map(move |i| (100 * k + 10 * c + i) as f32))
                    .collect()
            })
            .collect();
        (t, rows)
    }

    #[test]
    fn every_sharding_assembles_the_full_rows_and_updates_only_looked_up_rows() {
        let (tables, rows) = tables();
        // Four samples over two ranks (two each), ids per (sample, field).
        let ids = BatchIds {
            ids: vec![0, 2, 4, 1, 4, 1, 3, 0],
            fields: 2,
        };
        for sharding in [Sharding::Column, Sharding::Row, Sharding::Table] {
            let plan = ShardPlan::new(sharding, &[(5, 4), (3, 4)], 2).unwrap();
            let splits: Vec<Vec<Vec<f32>>> = (0..2)
                .map(|j| forward_splits(&plan.rank_shards(j), &ids, &tables, &rows, 2, 2))
                .collect();
            for i in 0..2 {
                let to_i: Vec<Vec<f32>> = splits.iter().map(|s| s[i].clone()).collect();
                let emb = assemble(&plan, &to_i, 2, 4);
                for m in 0..2 {
                    for k in 0..2 {
                        let id = ids.ids[(i * 2 + m) * 2 + k] as usize;
                        for c in 0..4 {
                            assert_eq!(
                                emb[(m * 2 + k) * 4 + c],
                                (100 * k + 10 * c + id) as f32,
                                "{sharding:?} owner {i} sample {m} field {k} col {c}"
                            );
                        }
                    }
                }
            }
            // Gradients of 1 everywhere: each rank updates its rows, a row once per lookup.
            let mut updated = tables.clone();
            for j in 0..2 {
                let from: Vec<Vec<f32>> = (0..2)
                    .map(|_| backward_splits(&plan, &[1.0; 2 * 2 * 4], 2, 4, 1.0)[j].clone())
                    .collect();
                apply_sparse(
                    &plan.rank_shards(j),
                    &ids,
                    &from,
                    &mut updated,
                    &rows,
                    2,
                    0.5,
                );
            }
            for k in 0..2 {
                for c in 0..4 {
                    for r in 0..rows[k] {
                        let looks = (0..4).filter(|&m| ids.ids[m * 2 + k] as usize == r).count();
                        let before = tables[k][c * rows[k] + r];
                        let after = updated[k][c * rows[k] + r];
                        assert_eq!(
                            after,
                            before - 0.5 * looks as f32,
                            "{sharding:?} {k} {c} {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn row_wise_splits_carry_the_full_width_and_column_wise_a_slice() {
        let col = ShardPlan::new(Sharding::Column, &[(5, 4), (3, 4)], 2).unwrap();
        let row = ShardPlan::new(Sharding::Row, &[(5, 4), (3, 4)], 2).unwrap();
        assert_eq!(split_elems(&col.rank_shards(0), 2), 2 * 2 * 2);
        assert_eq!(split_elems(&row.rank_shards(0), 2), 2 * 2 * 4);
    }
}
