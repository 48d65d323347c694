//! Shard plans: which rank holds which rows and columns of each embedding table.
//!
//! Sven shards embedding tables model-parallel over the ranks (spec §3.1.3, Fig 6.3): whole tables
//! (table-wise), slices of rows (row-wise) or slices of the embedding dimension (column-wise, the
//! finest grain and Sven's choice for the device-resident hot part).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::PlacementError;

/// Bytes per stored element (f32).
pub const ELEMENT_BYTES: u64 = 4;

/// How tables are cut over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharding {
    /// Each table whole on one rank; tables balanced over ranks by bytes.
    Table,
    /// Each table's rows cut as evenly as possible over all ranks.
    Row,
    /// Each table's columns (embedding dimension) cut as evenly as possible over all ranks.
    Column,
}

/// One rectangular piece of a table held by one rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shard {
    /// The rank holding it.
    pub rank: usize,
    /// The table rows it covers.
    pub rows: Range<usize>,
    /// The table columns it covers.
    pub cols: Range<usize>,
}

impl Shard {
    /// Elements in the shard.
    pub fn elements(&self) -> u64 {
        (self.rows.len() as u64) * (self.cols.len() as u64)
    }

    /// Bytes of the shard (f32 elements).
    pub fn bytes(&self) -> u64 {
        self.elements() * ELEMENT_BYTES
    }

    /// Whether the shard holds element (`row`, `col`).
    pub fn contains(&self, row: usize, col: usize) -> bool {
        self.rows.contains(&row) && self.cols.contains(&col)
    }
}

/// A contiguous range of one table's flat, dimension-major values held by one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Block {
    /// The table index.
    pub table: usize,
    /// First flat index (element (col, row) sits at `col * rows + row`).
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
    /// The rank holding it.
    pub rank: usize,
}

/// Which rank holds which piece of every table.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPlan {
    sharding: Sharding,
    ranks: usize,
    /// (rows, width) per table.
    tables: Vec<(usize, usize)>,
    /// Shards per table, in row then column order; empty pieces are left out.
    shards: Vec<Vec<Shard>>,
}

/// Cuts `0..n` into `parts` ranges whose lengths differ by at most one (longer ones first).
fn even_cuts(n: usize, parts: usize) -> Vec<Range<usize>> {
    let base = n / parts;
    let extra = n % parts;
    let mut start = 0;
    (0..parts)
        .map(|p| {
            let len = base + usize::from(p < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Greedy byte balance: biggest table first to the least-loaded rank; ties go to the lower table
/// index and the lower rank, so the result is deterministic.
fn table_owners(tables: &[(usize, usize)], ranks: usize) -> Vec<usize> {
    let bytes = |t: usize| (tables[t].0 as u64) * (tables[t].1 as u64) * ELEMENT_BYTES;
    let mut order: Vec<usize> = (0..tables.len()).collect();
    order.sort_by(|&a, &b| bytes(b).cmp(&bytes(a)).then(a.cmp(&b)));
    let mut load = vec![0u64; ranks];
    let mut owner = vec![0usize; tables.len()];
    for t in order {
        let (rank, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(r, &l)| (l, r))
            .unwrap_or((0, &0));
        owner[t] = rank;
        load[rank] += bytes(t);
    }
    owner
}

impl ShardPlan {
    /// Plans `tables` (`(rows, width)` each) over `ranks` ranks with the given sharding.
    ///
    /// Fails on zero ranks, on an empty table, and on column-wise sharding of a table narrower
    /// than the rank count. Row-wise tables with fewer rows than ranks leave some ranks without a
    /// piece of that table.
    pub fn new(
        sharding: Sharding,
        tables: &[(usize, usize)],
        ranks: usize,
    ) -> Result<ShardPlan, PlacementError> {
        if ranks == 0 {
            return Err(PlacementError::NoRanks);
        }
        for (table, &(rows, width)) in tables.iter().enumerate() {
            if rows == 0 || width == 0 {
                return Err(PlacementError::EmptyTable { table, rows, width });
            }
            if sharding == Sharding::Column && width < ranks {
                return Err(PlacementError::MoreRanksThanColumns {
                    table,
                    width,
                    ranks,
                });
            }
        }
        let shards = match sharding {
            Sharding::Table => {
                let owners = table_owners(tables, ranks);
                tables
                    .iter()
                    .zip(owners)
                    .map(|(&(rows, width), rank)| {
                        vec![Shard {
                            rank,
                            rows: 0..rows,
                            cols: 0..width,
                        }]
                    })
                    .collect()
            }
            Sharding::Row => tables
                .iter()
                .map(|&(rows, width)| {
                    even_cuts(rows, ranks)
                        .into_iter()
                        .enumerate()
                        .filter(|(_, r)| !r.is_empty())
                        .map(|(rank, rows)| Shard {
                            rank,
                            rows,
                            cols: 0..width,
                        })
                        .collect()
                })
                .collect(),
            Sharding::Column => tables
                .iter()
                .map(|&(rows, width)| {
                    even_cuts(width, ranks)
                        .into_iter()
                        .enumerate()
                        .map(|(rank, cols)| Shard {
                            rank,
                            rows: 0..rows,
                            cols,
                        })
                        .collect()
                })
                .collect(),
        };
        Ok(ShardPlan {
            sharding,
            ranks,
            tables: tables.to_vec(),
            shards,
        })
    }

    /// The sharding the plan was built with.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// `(rows, width)` of every table.
    pub fn tables(&self) -> &[(usize, usize)] {
        &self.tables
    }

    /// The shards of `table`.
    ///
    /// # Panics
    /// If `table` is not a table of the plan.
    pub fn shards(&self, table: usize) -> &[Shard] {
        &self.shards[table]
    }

    /// The rank holding element (`row`, `col`) of `table`.
    ///
    /// # Panics
    /// If the element is outside the table (as slice indexing does).
    pub fn owner_of(&self, table: usize, row: usize, col: usize) -> usize {
        match self.shards[table].iter().find(|s| s.contains(row, col)) {
            Some(s) => s.rank,
            None => panic!(
                "placement: element (row {row}, col {col}) is outside table {table} of shape {:?}",
                self.tables[table]
            ),
        }
    }

    /// All shards `rank` holds, as `(table, shard)`, in table order.
    pub fn rank_shards(&self, rank: usize) -> Vec<(usize, Shard)> {
        self.shards
            .iter()
            .enumerate()
            .flat_map(|(t, ss)| {
                ss.iter()
                    .filter(move |s| s.rank == rank)
                    .map(move |s| (t, s.clone()))
            })
            .collect()
    }

    /// Bytes of embeddings `rank` holds (4 bytes per element).
    pub fn rank_bytes(&self, rank: usize) -> u64 {
        self.shards
            .iter()
            .flatten()
            .filter(|s| s.rank == rank)
            .map(Shard::bytes)
            .sum()
    }

    /// The shards as contiguous ranges of each table's flat values stored dimension-major
    /// (`[width, rows]`, element (col, row) at `col * rows + row`), as
    /// `(table, offset, len, rank)`, ordered by table then offset.
    ///
    /// A column or table shard is one range; a row shard is one range per column.
    pub fn blocks(&self) -> Vec<(usize, usize, usize, usize)> {
        let mut out: Vec<Block> = Vec::new();
        for (table, ss) in self.shards.iter().enumerate() {
            let rows = self.tables[table].0;
            for s in ss {
                if s.rows == (0..rows) {
                    out.push(Block {
                        table,
                        offset: s.cols.start * rows,
                        len: s.cols.len() * rows,
                        rank: s.rank,
                    });
                } else {
                    out.extend(s.cols.clone().map(|c| Block {
                        table,
                        offset: c * rows + s.rows.start,
                        len: s.rows.len(),
                        rank: s.rank,
                    }));
                }
            }
        }
        out.sort();
        out.into_iter()
            .map(|b| (b.table, b.offset, b.len, b.rank))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: [(usize, usize); 5] = [(1000, 16), (37, 8), (5000, 4), (3, 16), (250, 12)];

    fn all_plans(ranks: usize) -> Vec<ShardPlan> {
        [Sharding::Table, Sharding::Row, Sharding::Column]
            .into_iter()
            .map(|s| ShardPlan::new(s, &TABLES, ranks).unwrap())
            .collect()
    }

    #[test]
    fn blocks_tile_every_table_exactly_once() {
        for ranks in [1, 2, 3, 4] {
            for plan in all_plans(ranks) {
                let blocks = plan.blocks();
                let mut sorted = blocks.clone();
                sorted.sort();
                assert_eq!(
                    blocks,
                    sorted,
                    "{:?}: blocks not in (table, offset) order",
                    plan.sharding()
                );
                for (t, &(rows, width)) in TABLES.iter().enumerate() {
                    let mut covered = vec![0u8; rows * width];
                    for &(bt, off, len, rank) in &blocks {
                        if bt != t {
                            continue;
                        }
                        assert!(len > 0);
                        for (i, c) in covered[off..off + len].iter_mut().enumerate() {
                            *c += 1;
                            let flat = off + i;
                            let (col, row) = (flat / rows, flat % rows);
                            assert_eq!(plan.owner_of(t, row, col), rank);
                        }
                    }
                    assert!(
                        covered.iter().all(|&c| c == 1),
                        "{:?}, {ranks} ranks: table {t} not tiled exactly once",
                        plan.sharding()
                    );
                }
            }
        }
    }

    #[test]
    fn rank_bytes_sum_to_the_tables() {
        let total: u64 = TABLES.iter().map(|&(r, w)| (r * w) as u64 * 4).sum();
        for plan in all_plans(3) {
            let per_rank: u64 = (0..3).map(|r| plan.rank_bytes(r)).sum();
            assert_eq!(per_rank, total);
            let from_shards: u64 = (0..3)
                .flat_map(|r| plan.rank_shards(r))
                .map(|(_, s)| s.bytes())
                .sum();
            assert_eq!(from_shards, total);
        }
    }

    #[test]
    fn row_and_column_cuts_are_even() {
        let plan = ShardPlan::new(Sharding::Row, &[(10, 4)], 3).unwrap();
        let rows: Vec<_> = plan.shards(0).iter().map(|s| s.rows.clone()).collect();
        assert_eq!(rows, vec![0..4, 4..7, 7..10]);
        let plan = ShardPlan::new(Sharding::Column, &[(5, 16)], 3).unwrap();
        let cols: Vec<_> = plan.shards(0).iter().map(|s| s.cols.clone()).collect();
        assert_eq!(cols, vec![0..6, 6..11, 11..16]);
        assert!(plan.shards(0).iter().all(|s| s.rows == (0..5)));
        // Fewer rows than ranks: the extra ranks hold nothing of the table.
        let plan = ShardPlan::new(Sharding::Row, &[(2, 4)], 4).unwrap();
        assert_eq!(plan.shards(0).len(), 2);
        assert_eq!(plan.rank_bytes(3), 0);
    }

    #[test]
    fn table_wise_balances_bytes_greedily() {
        // Elements 100, 75, 50, 50, 25. Greedy: t0 -> r0 (100); t1 -> r1 (75); t2 -> r1 (125);
        // t3 -> r0 (150); t4 -> r1 (150). Round-robin would give 175 vs 125 elements.
        let tables = [(25, 4), (75, 1), (50, 1), (25, 2), (25, 1)];
        let plan = ShardPlan::new(Sharding::Table, &tables, 2).unwrap();
        let owners: Vec<usize> = (0..5).map(|t| plan.shards(t)[0].rank).collect();
        assert_eq!(owners, vec![0, 1, 1, 0, 1]);
        assert_eq!(plan.rank_bytes(0), 150 * 4);
        assert_eq!(plan.rank_bytes(1), 150 * 4);
        // Same input, same plan.
        assert_eq!(plan, ShardPlan::new(Sharding::Table, &tables, 2).unwrap());
    }

    #[test]
    fn bad_plans_are_named_errors() {
        let err = ShardPlan::new(Sharding::Column, &[(10, 16), (10, 4)], 8).unwrap_err();
        assert_eq!(
            err,
            PlacementError::MoreRanksThanColumns {
                table: 1,
                width: 4,
                ranks: 8
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("width 4") && msg.contains("8 ranks"), "{msg}");
        assert_eq!(
            ShardPlan::new(Sharding::Row, &[(10, 4)], 0).unwrap_err(),
            PlacementError::NoRanks
        );
        assert_eq!(
            ShardPlan::new(Sharding::Table, &[(10, 4), (0, 4)], 2).unwrap_err(),
            PlacementError::EmptyTable {
                table: 1,
                rows: 0,
                width: 4
            }
        );
    }

    #[test]
    fn sharding_is_kebab_case_in_toml() {
        #[derive(Serialize, Deserialize)]
        struct Cfg {
            sharding: Sharding,
        }
        let cfg: Cfg = toml::from_str("sharding = \"column\"").unwrap();
        assert_eq!(cfg.sharding, Sharding::Column);
        let out = toml::to_string(&Cfg {
            sharding: Sharding::Table,
        })
        .unwrap();
        assert_eq!(out.trim(), "sharding = \"table\"");
        assert!(toml::from_str::<Cfg>("sharding = \"Row\"").is_err());
    }
}
