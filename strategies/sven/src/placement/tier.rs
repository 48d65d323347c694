//! Device/host tiers of embedding rows and the hot/cold split (spec §3.1.3, thesis §6.1.3).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{AccessCounts, PlacementError, ShardPlan};

/// Where an embedding row lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// Device (GPU) memory: fast lookups, small capacity.
    Device,
    /// Host (CPU) memory: slow lookups plus a PCIe copy, large capacity.
    Host,
}

/// The device fraction of rows for the given tier capacities, `α = m_G / (m_G + m_H)`
/// (thesis §6.1.3). Zero capacity in both tiers gives 0, which the placements reject.
pub fn alpha_from_capacity(device_bytes: u64, host_bytes: u64) -> f64 {
    let total = device_bytes as f64 + host_bytes as f64;
    if total == 0.0 {
        0.0
    } else {
        device_bytes as f64 / total
    }
}

/// Checks that `plan` fits ranks with `device_bytes` and `host_bytes` of embedding capacity each:
/// no shard is larger than both tiers, and no rank holds more than both tiers together.
pub fn check_fits(
    plan: &ShardPlan,
    device_bytes: u64,
    host_bytes: u64,
) -> Result<(), PlacementError> {
    for table in 0..plan.tables().len() {
        for s in plan.shards(table) {
            let bytes = s.bytes();
            if bytes > device_bytes && bytes > host_bytes {
                return Err(PlacementError::TableTooLarge {
                    table,
                    rank: s.rank,
                    bytes,
                    device_bytes,
                    host_bytes,
                });
            }
        }
    }
    for rank in 0..plan.ranks() {
        let bytes = plan.rank_bytes(rank);
        if bytes > device_bytes.saturating_add(host_bytes) {
            return Err(PlacementError::RankOverCapacity {
                rank,
                bytes,
                device_bytes,
                host_bytes,
            });
        }
    }
    Ok(())
}

/// Checks `alpha` is in (0, 1].
fn check_alpha(alpha: f64) -> Result<(), PlacementError> {
    if alpha > 0.0 && alpha <= 1.0 {
        Ok(())
    } else {
        Err(PlacementError::Alpha { alpha })
    }
}

/// How many of `total` rows an `alpha` fraction is: the floor, forgiving float error just below
/// an integer (0.7 · 10 is 7, not 6).
fn quota(alpha: f64, total: usize) -> usize {
    ((alpha * total as f64 + 1e-9).floor() as usize).min(total)
}

/// Which rows of every table are device-resident; all others live in the host tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierMap {
    /// Per table, per row: on the device?
    device: Vec<Vec<bool>>,
}

impl TierMap {
    /// Every row of every table in `tier`.
    pub fn all(tables_rows: &[usize], tier: Tier) -> TierMap {
        let on = tier == Tier::Device;
        TierMap {
            device: tables_rows.iter().map(|&r| vec![on; r]).collect(),
        }
    }

    /// Hot placement: the `alpha` fraction of all rows (all tables together, floor) with the most
    /// warm-up accesses on the device. Ties are broken by (table, row) ascending, so the map is
    /// deterministic.
    pub fn hot_top_alpha(counts: &AccessCounts, alpha: f64) -> Result<TierMap, PlacementError> {
        check_alpha(alpha)?;
        let n = quota(alpha, counts.total_rows());
        let mut order: Vec<(u32, usize, usize)> = counts
            .tables_rows()
            .iter()
            .enumerate()
            .flat_map(|(t, _)| {
                counts
                    .table(t)
                    .iter()
                    .enumerate()
                    .map(move |(r, &c)| (c, t, r))
            })
            .collect();
        let key = |&(c, t, r): &(u32, usize, usize)| (std::cmp::Reverse(c), t, r);
        if n < order.len() && n > 0 {
            order.select_nth_unstable_by_key(n - 1, key);
        }
        let mut map = TierMap::all(counts.tables_rows(), Tier::Host);
        for &(_, t, r) in order.iter().take(n) {
            map.device[t][r] = true;
        }
        Ok(map)
    }

    /// Random placement (the baseline): a uniformly random `alpha` fraction of all rows (floor)
    /// on the device, drawn with ChaCha8 from `seed`.
    pub fn random(tables_rows: &[usize], alpha: f64, seed: u64) -> Result<TierMap, PlacementError> {
        check_alpha(alpha)?;
        let total: usize = tables_rows.iter().sum();
        let n = quota(alpha, total);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut map = TierMap::all(tables_rows, Tier::Host);
        let mut starts = Vec::with_capacity(tables_rows.len());
        let mut acc = 0;
        for &r in tables_rows {
            starts.push(acc);
            acc += r;
        }
        for flat in rand::seq::index::sample(&mut rng, total, n) {
            // The table whose range holds `flat`: the last start not after it (an empty table
            // shares its start with the next one, so it is never the last).
            let t = starts.partition_point(|&s| s <= flat) - 1;
            map.device[t][flat - starts[t]] = true;
        }
        Ok(map)
    }

    /// The tier of (`table`, `row`).
    ///
    /// # Panics
    /// If the row is outside the tables (as slice indexing does).
    pub fn tier_of(&self, table: usize, row: usize) -> Tier {
        if self.device[table][row] {
            Tier::Device
        } else {
            Tier::Host
        }
    }

    /// Device-resident rows over all tables.
    pub fn device_rows(&self) -> usize {
        self.device.iter().flatten().filter(|&&d| d).count()
    }

    /// The device-resident row ids of `table`, ascending.
    ///
    /// # Panics
    /// If `table` does not exist.
    pub fn device_rows_of(&self, table: usize) -> Vec<usize> {
        self.device[table]
            .iter()
            .enumerate()
            .filter_map(|(r, &d)| d.then_some(r))
            .collect()
    }

    /// Row count per table.
    pub fn tables_rows(&self) -> Vec<usize> {
        self.device.iter().map(Vec::len).collect()
    }

    /// How many of `ids` (lookups in `table`, repeats counted) hit the device and the host tier,
    /// as `(device, host)`. Fails on an unknown table or an id past its end.
    pub fn hits(&self, table: usize, ids: &[usize]) -> Result<(u64, u64), PlacementError> {
        let rows = self
            .device
            .get(table)
            .ok_or(PlacementError::TableOutOfRange {
                table,
                tables: self.device.len(),
            })?;
        let mut device = 0;
        for &id in ids {
            match rows.get(id) {
                Some(true) => device += 1,
                Some(false) => {}
                None => {
                    return Err(PlacementError::RowOutOfRange {
                        table,
                        row: id,
                        rows: rows.len(),
                    })
                }
            }
        }
        Ok((device, ids.len() as u64 - device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{drifting_zipf, Sharding};

    #[test]
    fn alpha_is_the_device_share_of_capacity() {
        assert_eq!(alpha_from_capacity(1, 3), 0.25);
        assert_eq!(alpha_from_capacity(5, 0), 1.0);
        assert_eq!(alpha_from_capacity(0, 0), 0.0);
        let c = AccessCounts::new(&[10]);
        assert_eq!(
            TierMap::hot_top_alpha(&c, alpha_from_capacity(0, 7)).unwrap_err(),
            PlacementError::Alpha { alpha: 0.0 }
        );
        for bad in [1.5, -0.1, f64::NAN] {
            let err = TierMap::random(&[10], bad, 1).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad}")), "{err}");
        }
    }

    #[test]
    fn hot_top_alpha_takes_the_most_counted_rows_with_ordered_ties() {
        let mut c = AccessCounts::new(&[4, 4]);
        c.record(0, &[3, 3, 3, 1]).unwrap();
        c.record(1, &[0, 0, 0, 2, 2]).unwrap();
        // Counts: t0 = [0,1,0,3], t1 = [3,0,2,0]. Top 4 of 8 (alpha 0.5): (0,3),(1,0) with 3,
        // (1,2) with 2, then (0,1) with 1.
        let m = TierMap::hot_top_alpha(&c, 0.5).unwrap();
        assert_eq!(m.device_rows_of(0), vec![1, 3]);
        assert_eq!(m.device_rows_of(1), vec![0, 2]);
        // Top 3 of 8 with alpha 0.375; top 5 breaks the tie among zero counts by (table, row).
        assert_eq!(TierMap::hot_top_alpha(&c, 0.375).unwrap().device_rows(), 3);
        let m5 = TierMap::hot_top_alpha(&c, 0.625).unwrap();
        assert_eq!(m5.device_rows_of(0), vec![0, 1, 3]);
        assert_eq!(m5.tier_of(1, 1), Tier::Host);
        assert_eq!(
            TierMap::hot_top_alpha(&c, 1.0).unwrap(),
            TierMap::all(&[4, 4], Tier::Device)
        );
    }

    #[test]
    fn random_takes_exactly_the_quota_deterministically() {
        let tables = [0, 7, 0, 13, 30];
        let a = TierMap::random(&tables, 0.3, 9).unwrap();
        assert_eq!(a.device_rows(), 15);
        assert_eq!(a.tables_rows(), tables.to_vec());
        assert_eq!(a, TierMap::random(&tables, 0.3, 9).unwrap());
        assert_ne!(a, TierMap::random(&tables, 0.3, 10).unwrap());
        assert_eq!(TierMap::random(&tables, 1.0, 3).unwrap().device_rows(), 50);
    }

    #[test]
    fn hits_split_lookups_by_tier() {
        let m = TierMap::all(&[3], Tier::Host);
        assert_eq!(m.hits(0, &[0, 1, 1]).unwrap(), (0, 3));
        let m = TierMap::all(&[3], Tier::Device);
        assert_eq!(m.hits(0, &[0, 1, 1]).unwrap(), (3, 0));
        assert_eq!(
            m.hits(0, &[3]).unwrap_err(),
            PlacementError::RowOutOfRange {
                table: 0,
                row: 3,
                rows: 3
            }
        );
        assert!(m.hits(1, &[0]).is_err());
    }

    /// Zipf(1.1) ids per table (each table its own popularity order), warm-up then a fresh sample.
    fn zipf_tables(tables_rows: &[usize], per_table: usize, seed: u64) -> Vec<Vec<usize>> {
        tables_rows
            .iter()
            .enumerate()
            .map(|(t, &rows)| {
                drifting_zipf(rows, 1.1, per_table, 0, seed * 1000 + t as u64)
                    .unwrap()
                    .accesses
                    .iter()
                    .map(|a| a.row)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn hot_placement_hit_rate_far_above_alpha_and_random_near_alpha() {
        // 26 fields as in Criteo, tables of 1 000 to 10 000 rows.
        let tables_rows: Vec<usize> = (0..26).map(|t| 1000 + 360 * t).collect();
        let alpha = 0.1;
        // The permutation of ids inside `drifting_zipf` depends on the seed only, so warm-up and
        // evaluation share a popularity order when they share the stream; take both halves of one.
        let ids = zipf_tables(&tables_rows, 40_000, 1);
        let (warm, eval): (Vec<_>, Vec<_>) = ids.iter().map(|v| v.split_at(20_000)).unzip();
        let mut counts = AccessCounts::new(&tables_rows);
        for (t, w) in warm.iter().enumerate() {
            counts.record(t, w).unwrap();
        }
        let rate = |m: &TierMap| {
            let (mut d, mut h) = (0, 0);
            for (t, e) in eval.iter().enumerate() {
                let (dd, hh) = m.hits(t, e).unwrap();
                d += dd;
                h += hh;
            }
            d as f64 / (d + h) as f64
        };
        let hot = TierMap::hot_top_alpha(&counts, alpha).unwrap();
        let hot_rate = rate(&hot);
        assert!(hot_rate > 3.0 * alpha, "hot placement hit rate {hot_rate}");
        let seeds = 8;
        let random_rate: f64 = (0..seeds)
            .map(|s| rate(&TierMap::random(&tables_rows, alpha, s).unwrap()))
            .sum::<f64>()
            / seeds as f64;
        assert!(
            (random_rate - alpha).abs() < 0.03,
            "random placement hit rate {random_rate}"
        );
        eprintln!("device hit rate at alpha {alpha}: hot {hot_rate:.3}, random {random_rate:.3}");
    }

    #[test]
    fn check_fits_names_the_oversized_table() {
        let plan = ShardPlan::new(Sharding::Table, &[(100, 4), (1000, 8)], 2).unwrap();
        // Table 1 is 32 000 bytes on rank 0; table 0 is 1 600 bytes on rank 1.
        let err = check_fits(&plan, 20_000, 30_000).unwrap_err();
        assert_eq!(
            err,
            PlacementError::TableTooLarge {
                table: 1,
                rank: 0,
                bytes: 32_000,
                device_bytes: 20_000,
                host_bytes: 30_000
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("larger than every tier") && msg.contains("32000"),
            "{msg}"
        );
        assert_eq!(check_fits(&plan, 20_000, 32_000), Ok(()));
        // Column-wise, rank 0 holds 800 + 16 000 bytes: each shard fits the device tier, and
        // the two together fit both tiers together only with 800 host bytes.
        let col = ShardPlan::new(Sharding::Column, &[(100, 4), (1000, 8)], 2).unwrap();
        assert_eq!(check_fits(&col, 16_000, 800), Ok(()));
        assert_eq!(
            check_fits(&col, 16_000, 799).unwrap_err(),
            PlacementError::RankOverCapacity {
                rank: 0,
                bytes: 16_800,
                device_bytes: 16_000,
                host_bytes: 799
            }
        );
    }
}
