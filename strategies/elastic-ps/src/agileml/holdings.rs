//! What a worker holds, in terms of the data tree: the leaves under a node, the largest subtrees
//! a set of leaves covers whole (what a worker sends one sum for), and the leaves a worker has
//! loaded.

use super::ids::{NodeId, WorkerId};
use super::tree::DataTree;
use std::collections::BTreeSet;
use std::ops::Range;

/// The current leaves under `node` (itself if it is a leaf), in item order.
pub fn leaves_under(tree: &DataTree, node: NodeId) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        match tree.node(n).and_then(|x| x.children) {
            Some((l, r)) => {
                stack.push(r);
                stack.push(l);
            }
            None if tree.node(n).is_some() => out.push(n),
            None => {}
        }
    }
    out
}

/// The largest subtrees whose leaves are all in `leaves`, in item order: a worker holding both
/// halves of a split sends one sum for their parent.
pub fn cover_of(tree: &DataTree, leaves: &BTreeSet<NodeId>) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut stack = vec![tree.root()];
    while let Some(n) = stack.pop() {
        let under = leaves_under(tree, n);
        if !under.is_empty() && under.iter().all(|l| leaves.contains(l)) {
            out.push(n);
        } else if let Some((l, r)) = tree.node(n).and_then(|x| x.children) {
            stack.push(r);
            stack.push(l);
        }
    }
    out
}

/// The current leaves whose items `worker` has loaded (loaded for the leaf or for one of its
/// ancestors).
pub fn loaded_leaves(tree: &DataTree, worker: WorkerId) -> Vec<NodeId> {
    leaves_under(tree, tree.root())
        .into_iter()
        .filter(|&leaf| {
            let mut at = Some(leaf);
            while let Some(n) = at {
                let Some(node) = tree.node(n) else {
                    return false;
                };
                if node.loaded.contains(&worker) {
                    return true;
                }
                at = node.parent;
            }
            false
        })
        .collect()
}

/// Whether `ranges` tile the items `0..total` exactly (no gap, no overlap).
pub fn tiles(ranges: impl IntoIterator<Item = Range<u64>>, total: u64) -> bool {
    let mut sorted: Vec<Range<u64>> = ranges.into_iter().collect();
    sorted.sort_by_key(|r| r.start);
    let mut at = 0;
    for r in sorted {
        if r.start != at {
            return false;
        }
        at = r.end;
    }
    at == total
}

/// How one copy of each item is kept when a range of work arrives beside `present` (each with
/// its key): `None` when it lies inside one already there (a recomputed share, dropped); else
/// the keys of those it contains, which it replaces. Servers apply this to the gradient sums
/// of a clock and the controller to its ledger, so both keep the same copy.
pub fn keep_once<K>(
    present: impl IntoIterator<Item = (K, Range<u64>)>,
    new: &Range<u64>,
) -> Option<Vec<K>> {
    let mut replaced = Vec::new();
    for (key, r) in present {
        if r.start <= new.start && new.end <= r.end {
            return None;
        }
        if new.start <= r.start && r.end <= new.end {
            replaced.push(key);
        }
    }
    Some(replaced)
}
