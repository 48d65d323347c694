//! A bounded device tier with eviction (spec §3.1.3 and S8): rows are admitted on a miss and,
//! when the tier is full, the lowest-importance, least recently used or a random row is demoted.

use std::collections::{BTreeSet, HashMap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::importance::ScoreKey;
use super::{AccessStream, Importance};

/// The seed [`simulate`] draws random evictions from.
pub const SIMULATE_SEED: u64 = 0x5eed;

/// Which resident row a full cache gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Eviction {
    /// The lowest importance score (thesis §6.1.3); equal scores go by (table, row) ascending.
    Importance,
    /// The least recently accessed.
    Lru,
    /// A uniformly random resident.
    Random,
}

/// Hits and misses of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CacheStats {
    /// Accesses found resident.
    pub hits: u64,
    /// Accesses not resident (then admitted).
    pub misses: u64,
    /// hits / (hits + misses); 0 with no access.
    pub hit_rate: f64,
}

/// A resident row's place in the resident list and its eviction-order key.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Resident {
    slot: usize,
    key: ScoreKey,
}

/// A device tier bounded to `capacity` rows; serializable, so a rank's tier continues exactly
/// after a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceCache {
    capacity: usize,
    eviction: Eviction,
    importance: Importance,
    rng: ChaCha8Rng,
    /// Accesses so far (the recency clock for LRU).
    tick: u64,
    hits: u64,
    misses: u64,
    resident: HashMap<(usize, usize), Resident>,
    /// Residents in any order (random eviction draws from it).
    slots: Vec<(usize, usize)>,
    /// Residents by eviction order, lowest first (importance and LRU).
    order: BTreeSet<(ScoreKey, usize, usize)>,
}

impl DeviceCache {
    /// An empty cache of `capacity` rows with default importance scores and random seed 0.
    /// A cache of 0 rows never admits.
    pub fn new(capacity: usize, eviction: Eviction) -> DeviceCache {
        DeviceCache {
            capacity,
            eviction,
            importance: Importance::default(),
            rng: ChaCha8Rng::seed_from_u64(0),
            tick: 0,
            hits: 0,
            misses: 0,
            resident: HashMap::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            order: BTreeSet::new(),
        }
    }

    /// The same, scoring rows with `importance` (its parameters; any scores it holds are kept).
    pub fn with_importance(mut self, importance: Importance) -> DeviceCache {
        self.importance = importance;
        self
    }

    /// The same, drawing random evictions from `seed`.
    pub fn with_seed(mut self, seed: u64) -> DeviceCache {
        self.rng = ChaCha8Rng::seed_from_u64(seed);
        self
    }

    /// Capacity in rows.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Resident rows.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no row is resident.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether (`table`, `row`) is resident.
    pub fn contains(&self, table: usize, row: usize) -> bool {
        self.resident.contains_key(&(table, row))
    }

    /// The importance scores (updated by every access when evicting by importance).
    pub fn importance(&self) -> &Importance {
        &self.importance
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        let n = self.hits + self.misses;
        CacheStats {
            hits: self.hits,
            misses: self.misses,
            hit_rate: if n == 0 {
                0.0
            } else {
                self.hits as f64 / n as f64
            },
        }
    }

    /// The eviction-order key of (`table`, `row`) now.
    fn key(&self, table: usize, row: usize) -> ScoreKey {
        match self.eviction {
            Eviction::Importance => self.importance.key(table, row),
            Eviction::Lru | Eviction::Random => ScoreKey::ordinal(self.tick),
        }
    }

    /// One lookup of (`table`, `row`) by a sample labelled `positive`; true on a hit. A miss admits
    /// the row, evicting one resident first if the cache is full.
    pub fn access(&mut self, table: usize, row: usize, positive: bool) -> bool {
        self.tick += 1;
        if self.eviction == Eviction::Importance {
            self.importance.record(table, row, positive);
        }
        let id = (table, row);
        if let Some(&Resident { slot, key }) = self.resident.get(&id) {
            self.hits += 1;
            if self.eviction != Eviction::Random {
                let new = self.key(table, row);
                self.order.remove(&(key, table, row));
                self.order.insert((new, table, row));
                self.resident.insert(id, Resident { slot, key: new });
            }
            return true;
        }
        self.misses += 1;
        if self.capacity == 0 {
            return false;
        }
        if self.slots.len() >= self.capacity {
            self.evict();
        }
        let key = self.key(table, row);
        self.resident.insert(
            id,
            Resident {
                slot: self.slots.len(),
                key,
            },
        );
        self.slots.push(id);
        if self.eviction != Eviction::Random {
            self.order.insert((key, table, row));
        }
        false
    }

    /// Demotes one resident by the eviction policy.
    fn evict(&mut self) {
        let victim = match self.eviction {
            Eviction::Importance | Eviction::Lru => self.order.first().map(|&(_, t, r)| (t, r)),
            Eviction::Random => {
                if self.slots.is_empty() {
                    None
                } else {
                    Some(self.slots[self.rng.gen_range(0..self.slots.len())])
                }
            }
        };
        let Some(victim) = victim else { return };
        let Some(Resident { slot, key }) = self.resident.remove(&victim) else {
            return;
        };
        self.order.remove(&(key, victim.0, victim.1));
        self.slots.swap_remove(slot);
        if let Some(&moved) = self.slots.get(slot) {
            if let Some(m) = self.resident.get_mut(&moved) {
                m.slot = slot;
            }
        }
    }

    /// Closes an iteration: importance scores decay once per iteration.
    pub fn end_iteration(&mut self) {
        self.importance.end_iteration();
    }
}

/// Replays `stream` through an empty cache of `capacity` rows, ending an iteration every
/// `stream.batch` accesses; random evictions draw from [`SIMULATE_SEED`].
pub fn simulate(stream: &AccessStream, capacity: usize, eviction: Eviction) -> CacheStats {
    let mut cache = DeviceCache::new(capacity, eviction).with_seed(SIMULATE_SEED);
    for batch in stream.iterations() {
        for a in batch {
            cache.access(a.table, a.row, a.positive);
        }
        cache.end_iteration();
    }
    cache.stats()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{drifting_zipf, Access};

    #[test]
    fn lru_evicts_the_least_recent() {
        let mut c = DeviceCache::new(2, Eviction::Lru);
        assert!(!c.access(0, 1, false));
        assert!(!c.access(0, 2, false));
        assert!(c.access(0, 1, false));
        assert!(!c.access(0, 3, false)); // evicts 2
        assert!(c.contains(0, 1) && c.contains(0, 3) && !c.contains(0, 2));
        assert!(!c.access(0, 2, false)); // evicts 1
        assert!(!c.contains(0, 1));
        assert_eq!(c.len(), 2);
        let s = c.stats();
        assert_eq!((s.hits, s.misses), (1, 4));
        assert_eq!(s.hit_rate, 0.2);
    }

    #[test]
    fn importance_evicts_the_lowest_score_even_if_recent() {
        let mut c = DeviceCache::new(2, Eviction::Importance);
        // Row 1: three positives; row 2: one negative, later.
        for _ in 0..3 {
            c.access(0, 1, true);
        }
        c.end_iteration();
        c.access(0, 2, false);
        c.end_iteration();
        // Row 3 misses: row 2 (0.1·0.1 = 0.01) goes, not row 1 (0.3·0.81 after decay).
        assert!(!c.access(0, 3, true));
        assert!(c.contains(0, 1) && c.contains(0, 3) && !c.contains(0, 2));
        // LRU would have evicted row 1.
        let mut l = DeviceCache::new(2, Eviction::Lru);
        for (r, p) in [(1, true), (1, true), (1, true), (2, false), (3, true)] {
            l.access(0, r, p);
        }
        assert!(!l.contains(0, 1) && l.contains(0, 2));
    }

    #[test]
    fn a_full_cache_stays_at_capacity_and_consistent() {
        let stream = drifting_zipf(300, 0.8, 5000, 1000, 2).unwrap();
        for eviction in [Eviction::Importance, Eviction::Lru, Eviction::Random] {
            let mut c = DeviceCache::new(40, eviction).with_seed(1);
            let mut seen = std::collections::HashSet::new();
            for (i, a) in stream.accesses.iter().enumerate() {
                let was = c.contains(a.table, a.row);
                assert_eq!(c.access(a.table, a.row, a.positive), was);
                assert!(c.contains(a.table, a.row));
                seen.insert(a.row);
                assert_eq!(c.len(), seen.len().min(40));
                if i % 100 == 99 {
                    c.end_iteration();
                }
            }
            for (slot, id) in c.slots.iter().enumerate() {
                assert_eq!(c.resident[id].slot, slot);
            }
            if eviction != Eviction::Random {
                assert_eq!(c.order.len(), 40);
            }
            let s = c.stats();
            assert_eq!(s.hits + s.misses, 5000);
        }
        let zero = simulate(&stream, 0, Eviction::Lru);
        assert_eq!((zero.hits, zero.misses), (0, 5000));
    }

    #[test]
    fn importance_beats_random_and_keeps_up_with_lru_on_a_drifting_hot_set() {
        let rows = 10_000;
        let stream = drifting_zipf(rows, 1.1, 200_000, 20_000, 42).unwrap();
        let capacity = rows / 20;
        let imp = simulate(&stream, capacity, Eviction::Importance).hit_rate;
        let lru = simulate(&stream, capacity, Eviction::Lru).hit_rate;
        let rnd = simulate(&stream, capacity, Eviction::Random).hit_rate;
        eprintln!("hit rate at 5 % capacity: importance {imp:.4}, lru {lru:.4}, random {rnd:.4}");
        assert!(imp > rnd, "importance {imp} vs random {rnd}");
        assert!(imp >= 0.9 * lru, "importance {imp} vs lru {lru}");
    }

    #[test]
    fn simulate_counts_every_access() {
        let stream = AccessStream {
            accesses: [1, 2, 1, 1, 3, 2]
                .iter()
                .map(|&row| Access {
                    table: 0,
                    row,
                    positive: false,
                })
                .collect(),
            batch: 2,
        };
        // Capacity 2 LRU: miss 1, miss 2, hit 1, hit 1, miss 3 (evicts 2), miss 2.
        let s = simulate(&stream, 2, Eviction::Lru);
        assert_eq!((s.hits, s.misses), (2, 4));
    }
}
