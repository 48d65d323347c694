//! Tree-ordered sums: one clock's update summed in the shape of the data split tree, so the result
//! is bit-identical however the leaves are grouped among workers.
//!
//! Floating-point addition is not associative, so a server that adds whatever workers send in
//! arrival or worker order gets a result that changes with membership. Here the value of a node is
//! its contribution if one was sent, else `value(left) + value(right)` elementwise (left first).
//! A worker sums its own leaves with the same rule ([`subtree_sum`]) for each node of its
//! [`cover`](super::DataTree::cover), so a subtree's value is the same whether one worker sent it
//! whole or several workers sent its parts: the root value depends only on the tree and the leaf
//! values. The same walk checks that the contributions tile the clock's items exactly once.

use super::ids::{Clock, NodeId};
use super::tree::DataTree;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use thiserror::Error;

/// Contributions that do not tile the summed range exactly once; each variant names the clock and
/// the item ranges concerned.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TilingError {
    /// A contribution names a node the tree does not have.
    #[error("tree sum at clock {clock}: no node {node}")]
    UnknownNode {
        /// The clock being summed.
        clock: Clock,
        /// The unknown id.
        node: NodeId,
    },
    /// A contribution names a node that does not exist yet at this clock.
    #[error(
        "tree sum at clock {clock}: node {node} (items {range:?}) is not in the tree at this clock"
    )]
    NotAtClock {
        /// The clock being summed.
        clock: Clock,
        /// The node.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
    },
    /// The same node was contributed twice.
    #[error("tree sum at clock {clock}: node {node} (items {range:?}) contributed twice")]
    Twice {
        /// The clock being summed.
        clock: Clock,
        /// The node.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
    },
    /// A node and one of its ancestors were both contributed (their items would count twice).
    #[error(
        "tree sum at clock {clock}: node {node} (items {range:?}) overlaps its contributed ancestor {ancestor} (items {ancestor_range:?})"
    )]
    Overlap {
        /// The clock being summed.
        clock: Clock,
        /// The descendant.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
        /// The contributed ancestor.
        ancestor: NodeId,
        /// The ancestor's items.
        ancestor_range: Range<u64>,
    },
    /// Items no contribution covers (the largest such subtree).
    #[error("tree sum at clock {clock}: items {range:?} (node {node}) have no contribution")]
    Gap {
        /// The clock being summed.
        clock: Clock,
        /// The uncovered subtree.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
    },
    /// Contributions of different lengths.
    #[error(
        "tree sum at clock {clock}: node {node} (items {range:?}) has {got} values, expected {expected}"
    )]
    Length {
        /// The clock being summed.
        clock: Clock,
        /// The node.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
        /// Length of the first contribution.
        expected: usize,
        /// This contribution's length.
        got: usize,
    },
    /// A contribution outside the subtree being summed.
    #[error(
        "tree sum at clock {clock}: node {node} (items {range:?}) is outside the summed subtree {root} (items {root_range:?})"
    )]
    Outside {
        /// The clock being summed.
        clock: Clock,
        /// The stray node.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
        /// The subtree's root.
        root: NodeId,
        /// The subtree's items.
        root_range: Range<u64>,
    },
}

/// The whole clock's sum: [`subtree_sum`] from the root.
pub fn tree_sum(
    tree: &DataTree,
    clock: Clock,
    contributions: &[(NodeId, Vec<f32>)],
) -> Result<Vec<f32>, TilingError> {
    subtree_sum(tree, clock, tree.root(), contributions)
}

/// The value of node `root` at `clock` from contributions that tile its items exactly once:
/// a contributed node's value is its contribution, any other node's is `left + right`
/// elementwise (left first), with the tree as of `clock` (later splits ignored).
pub fn subtree_sum(
    tree: &DataTree,
    clock: Clock,
    root: NodeId,
    contributions: &[(NodeId, Vec<f32>)],
) -> Result<Vec<f32>, TilingError> {
    let range_of = |id: NodeId| tree.node(id).map(|n| n.range.clone()).unwrap_or(0..0);
    let check_node = |id: NodeId| -> Result<(), TilingError> {
        if tree.node(id).is_none() {
            return Err(TilingError::UnknownNode { clock, node: id });
        }
        if !tree.exists_at(id, clock) {
            return Err(TilingError::NotAtClock {
                clock,
                node: id,
                range: range_of(id),
            });
        }
        Ok(())
    };
    check_node(root)?;
    let mut given: BTreeMap<NodeId, &[f32]> = BTreeMap::new();
    let mut expected: Option<usize> = None;
    for (id, v) in contributions {
        let id = *id;
        check_node(id)?;
        if given.insert(id, v).is_some() {
            return Err(TilingError::Twice {
                clock,
                node: id,
                range: range_of(id),
            });
        }
        let want = *expected.get_or_insert(v.len());
        if v.len() != want {
            return Err(TilingError::Length {
                clock,
                node: id,
                range: range_of(id),
                expected: want,
                got: v.len(),
            });
        }
    }
    // Every node on a path from a contribution up to `root`: where the walk must descend.
    let mut touched: BTreeSet<NodeId> = BTreeSet::new();
    for &id in given.keys() {
        touched.insert(id);
        let mut cur = id;
        while cur != root {
            let parent = tree
                .node(cur)
                .and_then(|n| n.parent)
                .ok_or(TilingError::Outside {
                    clock,
                    node: id,
                    range: range_of(id),
                    root,
                    root_range: range_of(root),
                })?;
            if given.contains_key(&parent) {
                return Err(TilingError::Overlap {
                    clock,
                    node: id,
                    range: range_of(id),
                    ancestor: parent,
                    ancestor_range: range_of(parent),
                });
            }
            touched.insert(parent);
            cur = parent;
        }
    }
    value(tree, clock, root, &given, &touched)
}

fn value(
    tree: &DataTree,
    clock: Clock,
    id: NodeId,
    given: &BTreeMap<NodeId, &[f32]>,
    touched: &BTreeSet<NodeId>,
) -> Result<Vec<f32>, TilingError> {
    if let Some(v) = given.get(&id) {
        return Ok(v.to_vec());
    }
    let node = tree
        .node(id)
        .ok_or(TilingError::UnknownNode { clock, node: id })?;
    let gap = || TilingError::Gap {
        clock,
        node: id,
        range: node.range.clone(),
    };
    if !touched.contains(&id) {
        return Err(gap());
    }
    match node.children {
        Some((l, r)) if !node.is_leaf_at(clock) => {
            let mut acc = value(tree, clock, l, given, touched)?;
            let right = value(tree, clock, r, given, touched)?;
            for (a, b) in acc.iter_mut().zip(&right) {
                *a += *b;
            }
            Ok(acc)
        }
        // Touched but neither contributed nor split at this clock: cannot happen (a touched node
        // is an ancestor of a node existing at `clock`), reported as the gap it would be.
        _ => Err(gap()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agileml::ids::WorkerId;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// What every worker sends for `clock`: one subtree sum per node of its cover, from the leaf
    /// values under that node.
    fn worker_contributions(
        t: &DataTree,
        clock: Clock,
        leaf_values: &[(NodeId, Vec<f32>)],
    ) -> Vec<(NodeId, Vec<f32>)> {
        let workers: BTreeSet<WorkerId> = t
            .leaves_at(clock)
            .into_iter()
            .filter_map(|l| t.holder_at(l, clock))
            .collect();
        let mut out = Vec::new();
        for w in workers {
            for c in t.cover(w, clock) {
                let cr = t.node(c).unwrap().range.clone();
                let mine: Vec<(NodeId, Vec<f32>)> = leaf_values
                    .iter()
                    .filter(|(l, _)| {
                        let r = &t.node(*l).unwrap().range;
                        cr.start <= r.start && r.end <= cr.end
                    })
                    .cloned()
                    .collect();
                out.push((c, subtree_sum(t, clock, c, &mine).unwrap()));
            }
        }
        out
    }

    #[test]
    fn sum_follows_the_tree_not_the_item_order() {
        // 4 leaves 0..1, 1..2, 2..3, 3..4 with values 1e8, 1, -1e8, 1. In f32, 1e8 + 1 = 1e8.
        let t = DataTree::new(4, &[1, 2, 3, 4]).unwrap();
        let vals = [1e8f32, 1.0, -1e8, 1.0];
        let contrib: Vec<(NodeId, Vec<f32>)> = t
            .leaves()
            .into_iter()
            .zip(vals)
            .map(|(l, v)| (l, vec![v]))
            .collect();
        // Tree: (1e8 + 1) + (-1e8 + 1) = 1e8 + -1e8 = 0.
        assert_eq!(tree_sum(&t, 0, &contrib).unwrap(), vec![0.0]);
        // The naive left-to-right sum gives ((1e8 + 1) - 1e8) + 1 = 1.
        let naive = vals.iter().fold(0.0f32, |a, v| a + v);
        assert_eq!(naive, 1.0);
        // Grouping {0,1} in one worker and the right half in another: same bits as the leaves.
        let (l, r) = t.node(0).unwrap().children.unwrap();
        let left = subtree_sum(&t, 0, l, &contrib[..2]).unwrap();
        let right = subtree_sum(&t, 0, r, &contrib[2..]).unwrap();
        assert_eq!(
            tree_sum(&t, 0, &[(l, left), (r, right)]).unwrap(),
            vec![0.0]
        );
    }

    #[test]
    fn tiling_errors_name_the_ranges() {
        let t = DataTree::new(8, &[1, 2, 3, 4]).unwrap(); // root 0; 1: 0..4 (2, 3); 4: 4..8 (5, 6)
        let v = |x: f32| vec![x, x];
        let all = |extra: Vec<(NodeId, Vec<f32>)>| {
            let mut c = vec![(2, v(1.0)), (3, v(2.0)), (5, v(3.0)), (6, v(4.0))];
            c.extend(extra);
            c
        };
        assert_eq!(tree_sum(&t, 0, &all(vec![])).unwrap(), v(10.0));
        assert_eq!(
            tree_sum(&t, 0, &all(vec![(3, v(0.0))])),
            Err(TilingError::Twice {
                clock: 0,
                node: 3,
                range: 2..4
            })
        );
        assert_eq!(
            tree_sum(&t, 0, &all(vec![(4, v(0.0))])),
            Err(TilingError::Overlap {
                clock: 0,
                node: 5,
                range: 4..6,
                ancestor: 4,
                ancestor_range: 4..8
            })
        );
        assert_eq!(
            tree_sum(&t, 0, &[(2, v(1.0)), (3, v(1.0))]),
            Err(TilingError::Gap {
                clock: 0,
                node: 4,
                range: 4..8
            })
        );
        assert_eq!(
            tree_sum(&t, 0, &[(1, v(1.0)), (6, v(1.0))]),
            Err(TilingError::Gap {
                clock: 0,
                node: 5,
                range: 4..6
            })
        );
        assert_eq!(
            tree_sum(&t, 0, &[]),
            Err(TilingError::Gap {
                clock: 0,
                node: 0,
                range: 0..8
            })
        );
        assert_eq!(
            tree_sum(&t, 0, &all(vec![(9, v(0.0))])),
            Err(TilingError::UnknownNode { clock: 0, node: 9 })
        );
        assert_eq!(
            tree_sum(&t, 0, &[(1, v(1.0)), (4, vec![1.0])]),
            Err(TilingError::Length {
                clock: 0,
                node: 4,
                range: 4..8,
                expected: 2,
                got: 1
            })
        );
        assert_eq!(
            subtree_sum(&t, 0, 1, &[(2, v(1.0)), (5, v(1.0))]),
            Err(TilingError::Outside {
                clock: 0,
                node: 5,
                range: 4..6,
                root: 1,
                root_range: 0..4
            })
        );
        assert_eq!(
            subtree_sum(&t, 0, 1, &[(2, v(1.0)), (3, v(0.5))]).unwrap(),
            v(1.5)
        );
    }

    #[test]
    fn later_splits_are_ignored_at_earlier_clocks() {
        let mut t = DataTree::new(8, &[1]).unwrap();
        let s = t.split(1, 2, 3).unwrap();
        assert_eq!(tree_sum(&t, 2, &[(0, vec![5.0])]).unwrap(), vec![5.0]);
        assert_eq!(
            tree_sum(&t, 2, &[(s.left, vec![1.0]), (s.right, vec![2.0])]),
            Err(TilingError::NotAtClock {
                clock: 2,
                node: s.left,
                range: 0..4
            })
        );
        assert_eq!(
            tree_sum(&t, 3, &[(s.left, vec![1.0]), (s.right, vec![2.0])]).unwrap(),
            vec![3.0]
        );
    }

    /// A random tree: `workers` initial workers, then up to `splits` splits at random clocks.
    fn random_tree(rng: &mut ChaCha8Rng, total: u64, workers: u32, splits: usize) -> DataTree {
        let ws: Vec<WorkerId> = (0..workers).collect();
        let mut t = DataTree::new(total, &ws).unwrap();
        let mut next = 100;
        for _ in 0..splits {
            let holders: Vec<WorkerId> = t.holders().into_iter().collect();
            let h = holders[rng.gen_range(0..holders.len())];
            if t.split(h, next, rng.gen_range(0..10)).is_ok() {
                next += 1;
            }
        }
        t
    }

    /// Hands every current leaf to one of `pool` random workers (preloading it first).
    fn regroup(rng: &mut ChaCha8Rng, t: &mut DataTree, pool: u32) {
        for l in t.leaves() {
            let w = 1000 + rng.gen_range(0..pool);
            t.preload(w, l).unwrap();
            t.reassign(l, w).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn grouping_never_changes_the_bits(
            seed in any::<u64>(),
            total in 16u64..400,
            workers in 1u32..7,
            splits in 0usize..12,
            clock in 0u64..12,
            dim in 1usize..5,
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let t = random_tree(&mut rng, total, workers, splits);
            let leaf_values: Vec<(NodeId, Vec<f32>)> = t
                .leaves_at(clock)
                .into_iter()
                .map(|l| {
                    let v = (0..dim)
                        .map(|_| rng.gen_range(-1.0f32..1.0) * 10f32.powi(rng.gen_range(0..8)))
                        .collect();
                    (l, v)
                })
                .collect();
            let direct = tree_sum(&t, clock, &leaf_values).unwrap();
            let as_built = tree_sum(&t, clock, &worker_contributions(&t, clock, &leaf_values)).unwrap();
            prop_assert_eq!(bits(&as_built), bits(&direct));
            for pool in [1u32, 2, 3, 5] {
                let mut g = t.clone();
                regroup(&mut rng, &mut g, pool);
                let grouped = tree_sum(&g, clock, &worker_contributions(&g, clock, &leaf_values)).unwrap();
                prop_assert_eq!(bits(&grouped), bits(&direct));
            }
        }
    }

    /// Over random trees and values the naive item-order sum does differ from the tree sum,
    /// which is what the tree order protects against.
    #[test]
    fn naive_order_differs_on_random_inputs() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut differ = 0;
        for _ in 0..200 {
            let t = random_tree(&mut rng, 64, 5, 6);
            let vals: Vec<(NodeId, Vec<f32>)> = t
                .leaves()
                .into_iter()
                .map(|l| {
                    (
                        l,
                        vec![rng.gen_range(-1.0f32..1.0) * 10f32.powi(rng.gen_range(0..8))],
                    )
                })
                .collect();
            let tree = tree_sum(&t, Clock::MAX, &vals).unwrap();
            let naive = vals.iter().fold(0.0f32, |a, (_, v)| a + v[0]);
            if tree[0].to_bits() != naive.to_bits() {
                differ += 1;
            }
        }
        assert!(differ > 0);
    }
}
