//! Where each row of a rank's shards lives when a batch looks it up (§6.1.3): a static split —
//! the warm-up's top-α rows, a random α fraction, or every row on one tier — or a bounded device
//! tier that admits a row on a miss and evicts the lowest importance score, the least recently
//! used row, or a random one.

use crate::placement::{DeviceCache, Shard, TierMap};
use crate::shards::{self, BatchIds};

/// A batch's lookups on this rank, by tier.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Lookups {
    /// Rows found on the device tier.
    pub device: u64,
    /// Rows read from the host tier.
    pub host: u64,
    /// Elements of the host-tier rows (what crosses PCIe).
    pub host_elems: u64,
}

/// The rank's residency rule.
pub(super) enum Residency {
    /// A fixed split (changed only when the warm-up ends).
    Static(TierMap),
    /// A bounded device tier with eviction.
    Cache(Box<DeviceCache>),
}

impl Residency {
    /// Looks up `ids` in `mine` shards; `clicks[m]` is whether sample `m` of the batch was a
    /// click (importance scores weigh clicks; empty in throughput mode). A cache admits and
    /// evicts as it goes, and ages its scores once per batch.
    pub(super) fn lookups(
        &mut self,
        mine: &[(usize, Shard)],
        ids: &BatchIds,
        clicks: &[bool],
    ) -> Lookups {
        match self {
            Residency::Static(tiers) => {
                let (device, host, host_elems) = shards::lookups(mine, ids, tiers);
                Lookups {
                    device,
                    host,
                    host_elems,
                }
            }
            Residency::Cache(cache) => {
                let mut l = Lookups::default();
                for (k, shard) in mine {
                    for m in 0..ids.samples() {
                        let id = ids.ids[m * ids.fields + k] as usize;
                        if !shard.rows.contains(&id) {
                            continue;
                        }
                        let click = clicks.get(m).copied().unwrap_or(false);
                        if cache.access(*k, id, click) {
                            l.device += 1;
                        } else {
                            l.host += 1;
                            l.host_elems += shard.cols.len() as u64;
                        }
                    }
                }
                cache.end_iteration();
                l
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{Eviction, ShardPlan, Sharding, Tier};

    #[test]
    fn a_cache_admits_on_a_miss_and_a_static_split_follows_its_map() {
        let plan = ShardPlan::new(Sharding::Column, &[(10, 2)], 1).unwrap();
        let mine = plan.rank_shards(0);
        let ids = BatchIds {
            ids: vec![3, 3, 4, 3],
            fields: 1,
        };
        let mut cache = Residency::Cache(Box::new(DeviceCache::new(1, Eviction::Lru)));
        // 3 misses then hits; 4 evicts it; 3 misses again.
        let l = cache.lookups(&mine, &ids, &[]);
        assert_eq!((l.device, l.host, l.host_elems), (1, 3, 6));
        let mut all = Residency::Static(TierMap::all(&[10], Tier::Device));
        let l = all.lookups(&mine, &ids, &[]);
        assert_eq!((l.device, l.host), (4, 0));
    }
}
