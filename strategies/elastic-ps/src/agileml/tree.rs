//! The data split tree: which worker processes which items of a clock's global batch, and who
//! has which items loaded (spec §5.1.4).
//!
//! The items of one clock are the positions `0..total` of its global batch. The tree starts
//! balanced, one leaf per worker. A newcomer pairs with an existing worker: that worker's largest
//! leaf splits at its midpoint, the old holder keeps the left half and the newcomer works on the
//! right half, but the newcomer loads the whole parent range ("loads the whole of that worker's
//! data but works on half"). Both siblings therefore keep the parent range loaded, so when either
//! leaves the other takes its range over at once, with no reload from storage.
//!
//! Splits take effect at a clock (`split_at`): a worker still finishing an earlier clock uses the
//! tree as it was then, so every clock has one exact tiling of its items ([`DataTree::leaves_at`]).
//! The holder of a node that is a leaf at an earlier clock is the holder of its left-most current
//! descendant: the worker that kept the left half at each split (or whoever took that half over).
//!
//! Membership changes never restructure the tree; they only change holders and loaded sets, so
//! node ids stay valid for the run and servers can sum updates over the same shape
//! ([`tree_sum`](super::tree_sum)).

use super::ids::{Clock, NodeId, WorkerId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::Range;
use thiserror::Error;

/// What can go wrong building or changing a [`DataTree`]; every variant names the node, its item
/// range or the worker concerned.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TreeError {
    /// The initial tree needs at least one worker.
    #[error("data tree: no workers to assign items to")]
    NoWorkers,
    /// Every initial leaf must hold at least one item.
    #[error("data tree: {total} items cannot give each of {workers} workers at least one")]
    TooFewItems {
        /// Items per clock.
        total: u64,
        /// Workers asked for.
        workers: usize,
    },
    /// A worker was listed twice for the initial tree.
    #[error("data tree: worker {worker} listed twice")]
    DuplicateWorker {
        /// The repeated worker.
        worker: WorkerId,
    },
    /// A split was asked of a worker that holds nothing.
    #[error("data tree: worker {worker} holds no items to split")]
    NotAHolder {
        /// The worker asked to split.
        worker: WorkerId,
    },
    /// The newcomer of a split already holds items (or is the holder itself).
    #[error("data tree: newcomer {worker} already holds items")]
    NewcomerHolds {
        /// The newcomer.
        worker: WorkerId,
    },
    /// A leaf of one item cannot be halved.
    #[error("data tree: leaf {node} (items {range:?}) has fewer than 2 items and cannot be split")]
    LeafTooSmall {
        /// The leaf.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
    },
    /// A split would take effect before the leaf itself exists.
    #[error(
        "data tree: leaf {node} (items {range:?}) exists from clock {created}; it cannot split at clock {at}"
    )]
    SplitBeforeCreation {
        /// The leaf.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
        /// The clock its parent split at (0 for initial leaves).
        created: Clock,
        /// The clock asked for.
        at: Clock,
    },
    /// No node has this id.
    #[error("data tree: no node {node}")]
    UnknownNode {
        /// The id asked for.
        node: NodeId,
    },
    /// The operation needs a current leaf.
    #[error("data tree: node {node} (items {range:?}) is not a leaf")]
    NotALeaf {
        /// The node.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
    },
    /// Work can only be reassigned to a worker that has the items loaded.
    #[error("data tree: worker {worker} has not loaded items {range:?} of node {node}")]
    NotLoaded {
        /// The intended holder.
        worker: WorkerId,
        /// The leaf.
        node: NodeId,
        /// Its items.
        range: Range<u64>,
    },
    /// Every known worker is gone.
    #[error("data tree: no worker survives the removal of {gone:?}")]
    NoSurvivor {
        /// The workers removed.
        gone: Vec<WorkerId>,
    },
}

/// One node of the split tree: an item range, its children once split and, for leaves, the
/// worker that processes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// This node's id (its index in the tree).
    pub id: NodeId,
    /// The items (positions in a clock's global batch) it covers.
    pub range: Range<u64>,
    /// The node it was split from; `None` for the root.
    pub parent: Option<NodeId>,
    /// Left and right halves, once split.
    pub children: Option<(NodeId, NodeId)>,
    /// Children exist for clocks ≥ `split_at`; for a leaf, the clock it was created at.
    pub split_at: Clock,
    /// The worker processing this range (current leaves only).
    pub holder: Option<WorkerId>,
    /// Workers that have this node's whole range loaded.
    pub loaded: BTreeSet<WorkerId>,
}

impl Node {
    /// Number of items covered.
    pub fn items(&self) -> u64 {
        self.range.end - self.range.start
    }

    /// Whether the node has no children as of `clock` (its split, if any, comes later).
    pub fn is_leaf_at(&self, clock: Clock) -> bool {
        match self.children {
            None => true,
            Some(_) => self.split_at > clock,
        }
    }
}

/// The result of [`DataTree::split`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// The holder's leaf that was split.
    pub parent: NodeId,
    /// The left half, kept by the holder.
    pub left: NodeId,
    /// The right half, given to the newcomer.
    pub right: NodeId,
    /// What the newcomer must load: the whole parent range.
    pub load_items: Range<u64>,
}

/// The result of [`DataTree::remove`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    /// Every leaf that changed holder: (leaf, gone holder, new holder), in item order.
    pub moves: Vec<(NodeId, WorkerId, WorkerId)>,
    /// The subset of `moves` whose new holder had no copy and must load the range from storage:
    /// (leaf, new holder).
    pub reloads: Vec<(NodeId, WorkerId)>,
}

/// The data split tree of one training job (serializable, so servers can be sent its shape).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataTree {
    total: u64,
    nodes: Vec<Node>,
}

impl DataTree {
    /// A balanced tree over `total` items with one leaf per worker, in the order given.
    ///
    /// A node covering `k` workers splits into ⌈k/2⌉ and ⌊k/2⌋ workers with ranges proportional
    /// to those counts; leaf `i` covers `⌊total·i/n⌋..⌊total·(i+1)/n⌋`, so leaves differ by at
    /// most one item. Each leaf is loaded by its holder only; every split is at clock 0.
    pub fn new(total: u64, workers: &[WorkerId]) -> Result<Self, TreeError> {
        if workers.is_empty() {
            return Err(TreeError::NoWorkers);
        }
        let mut seen = BTreeSet::new();
        for &w in workers {
            if !seen.insert(w) {
                return Err(TreeError::DuplicateWorker { worker: w });
            }
        }
        if total < workers.len() as u64 {
            return Err(TreeError::TooFewItems {
                total,
                workers: workers.len(),
            });
        }
        let mut tree = DataTree {
            total,
            nodes: Vec::with_capacity(2 * workers.len()),
        };
        tree.build(None, workers, 0, workers.len());
        Ok(tree)
    }

    /// First item of worker slot `i` of `n` in the initial tree.
    fn bound(&self, i: usize, n: usize) -> u64 {
        // total·i/n ≤ total, so the quotient fits in u64.
        (u128::from(self.total) * i as u128 / n as u128) as u64
    }

    fn build(
        &mut self,
        parent: Option<NodeId>,
        workers: &[WorkerId],
        lo: usize,
        hi: usize,
    ) -> NodeId {
        let id = self.nodes.len() as NodeId;
        let n = workers.len();
        let range = self.bound(lo, n)..self.bound(hi, n);
        let leaf_holder = (hi - lo == 1).then(|| workers[lo]);
        self.nodes.push(Node {
            id,
            range,
            parent,
            children: None,
            split_at: 0,
            holder: leaf_holder,
            loaded: leaf_holder.into_iter().collect(),
        });
        if leaf_holder.is_none() {
            let mid = lo + (hi - lo).div_ceil(2);
            let left = self.build(Some(id), workers, lo, mid);
            let right = self.build(Some(id), workers, mid, hi);
            self.nodes[id as usize].children = Some((left, right));
        }
        id
    }

    /// Items per clock.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The root node's id (always 0).
    pub fn root(&self) -> NodeId {
        0
    }

    /// The node with this id, if any.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id as usize)
    }

    /// Every node, indexed by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn get(&self, id: NodeId) -> Result<&Node, TreeError> {
        self.node(id).ok_or(TreeError::UnknownNode { node: id })
    }

    /// The clock from which `id` exists: its parent's split clock (0 for the root).
    fn created(&self, id: NodeId) -> Clock {
        self.nodes[id as usize]
            .parent
            .map_or(0, |p| self.nodes[p as usize].split_at)
    }

    /// Whether node `id` is part of the tree as of `clock` (every ancestor's split has happened).
    pub fn exists_at(&self, id: NodeId, clock: Clock) -> bool {
        let mut cur = self.node(id);
        while let Some(n) = cur {
            match n.parent {
                None => return true,
                Some(p) => {
                    let parent = &self.nodes[p as usize];
                    if parent.split_at > clock {
                        return false;
                    }
                    cur = Some(parent);
                }
            }
        }
        false
    }

    /// The leaves as of `clock` (splits with `split_at > clock` ignored), sorted by range start.
    pub fn leaves_at(&self, clock: Clock) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut stack = vec![self.root()];
        while let Some(id) = stack.pop() {
            let n = &self.nodes[id as usize];
            match n.children {
                Some((l, r)) if !n.is_leaf_at(clock) => {
                    stack.push(r);
                    stack.push(l);
                }
                _ => out.push(id),
            }
        }
        out
    }

    /// The current leaves (every split applied), sorted by range start.
    pub fn leaves(&self) -> Vec<NodeId> {
        self.leaves_at(Clock::MAX)
    }

    /// The holder of the left-most current leaf under `id`: who processes `id` at a clock where
    /// it is still a leaf.
    fn effective_holder(&self, mut id: NodeId) -> Option<WorkerId> {
        loop {
            let n = &self.nodes[id as usize];
            match n.children {
                None => return n.holder,
                Some((l, _)) => id = l,
            }
        }
    }

    /// Who processes node `id` at `clock`: `None` unless `id` is a leaf as of `clock`. For a node
    /// whose split comes later, the holder of its left-most current descendant.
    pub fn holder_at(&self, id: NodeId, clock: Clock) -> Option<WorkerId> {
        let n = self.node(id)?;
        if !self.exists_at(id, clock) || !n.is_leaf_at(clock) {
            return None;
        }
        self.effective_holder(id)
    }

    /// Workers holding at least one current leaf.
    pub fn holders(&self) -> BTreeSet<WorkerId> {
        self.leaves()
            .into_iter()
            .filter_map(|l| self.nodes[l as usize].holder)
            .collect()
    }

    /// Every worker the tree knows: holders and workers with something loaded.
    pub fn known_workers(&self) -> BTreeSet<WorkerId> {
        let mut out = self.holders();
        for n in &self.nodes {
            out.extend(n.loaded.iter().copied());
        }
        out
    }

    /// Items per clock assigned to `worker` (current leaves).
    pub fn items_of(&self, worker: WorkerId) -> u64 {
        self.leaves_of(worker)
            .into_iter()
            .map(|l| self.nodes[l as usize].items())
            .sum()
    }

    /// The current leaves held by `worker`, sorted by range start.
    pub fn leaves_of(&self, worker: WorkerId) -> Vec<NodeId> {
        self.leaves()
            .into_iter()
            .filter(|&l| self.nodes[l as usize].holder == Some(worker))
            .collect()
    }

    /// Whether `worker` has the whole range of node `id` loaded.
    pub fn has_loaded(&self, worker: WorkerId, id: NodeId) -> bool {
        self.node(id).is_some_and(|n| n.loaded.contains(&worker))
    }

    /// The worker a newcomer pairs with: the one with the most items (ties: lowest id).
    pub fn partner(&self) -> Option<WorkerId> {
        let mut best: Option<(u64, WorkerId)> = None;
        for w in self.holders() {
            let items = self.items_of(w);
            // Holders iterate in ascending id, so only a strictly larger count replaces.
            if best.is_none_or(|(b, _)| items > b) {
                best = Some((items, w));
            }
        }
        best.map(|(_, w)| w)
    }

    /// Splits `holder`'s largest leaf (ties: lowest range start) at its midpoint from clock `at`:
    /// the holder keeps the left half, `newcomer` takes the right half and loads the whole
    /// parent range, which the holder keeps loaded too.
    pub fn split(
        &mut self,
        holder: WorkerId,
        newcomer: WorkerId,
        at: Clock,
    ) -> Result<Split, TreeError> {
        if !self.leaves_of(newcomer).is_empty() {
            return Err(TreeError::NewcomerHolds { worker: newcomer });
        }
        let mut chosen: Option<NodeId> = None;
        for l in self.leaves_of(holder) {
            let items = self.nodes[l as usize].items();
            if chosen.is_none_or(|c| items > self.nodes[c as usize].items()) {
                chosen = Some(l);
            }
        }
        let parent = chosen.ok_or(TreeError::NotAHolder { worker: holder })?;
        let p = &self.nodes[parent as usize];
        let range = p.range.clone();
        if p.items() < 2 {
            return Err(TreeError::LeafTooSmall {
                node: parent,
                range,
            });
        }
        let created = self.created(parent);
        if at < created {
            return Err(TreeError::SplitBeforeCreation {
                node: parent,
                range,
                created,
                at,
            });
        }
        let mid = range.start + (range.end - range.start) / 2;
        let mut loaded = p.loaded.clone();
        loaded.insert(holder);
        loaded.insert(newcomer);
        let left = self.nodes.len() as NodeId;
        let right = left + 1;
        for (id, r, h) in [
            (left, range.start..mid, holder),
            (right, mid..range.end, newcomer),
        ] {
            self.nodes.push(Node {
                id,
                range: r,
                parent: Some(parent),
                children: None,
                split_at: at,
                holder: Some(h),
                loaded: loaded.clone(),
            });
        }
        let p = &mut self.nodes[parent as usize];
        p.children = Some((left, right));
        p.split_at = at;
        p.holder = None;
        p.loaded = loaded;
        Ok(Split {
            parent,
            left,
            right,
            load_items: range,
        })
    }

    /// Marks `worker` as having node `id`'s whole range loaded (and so every descendant's);
    /// returns the items it must load.
    pub fn preload(&mut self, worker: WorkerId, id: NodeId) -> Result<Range<u64>, TreeError> {
        let range = self.get(id)?.range.clone();
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            let node = &mut self.nodes[n as usize];
            node.loaded.insert(worker);
            if let Some((l, r)) = node.children {
                stack.push(l);
                stack.push(r);
            }
        }
        Ok(range)
    }

    /// Gives current leaf `leaf` to `to`, which must have it loaded (stage 2→3 moves work from
    /// reliable workers to transient ones that preloaded it; 3→2 gives it back). Returns the
    /// previous holder.
    pub fn reassign(&mut self, leaf: NodeId, to: WorkerId) -> Result<WorkerId, TreeError> {
        let n = self.get(leaf)?;
        let range = n.range.clone();
        let from = match (n.children, n.holder) {
            (None, Some(h)) => h,
            _ => return Err(TreeError::NotALeaf { node: leaf, range }),
        };
        if !n.loaded.contains(&to) {
            return Err(TreeError::NotLoaded {
                worker: to,
                node: leaf,
                range,
            });
        }
        self.nodes[leaf as usize].holder = Some(to);
        Ok(from)
    }

    /// How close `worker`'s own work is to `leaf`: the smallest `k ≥ 1` such that it holds a
    /// current leaf under the `k`-th ancestor of `leaf` (1: the sibling's subtree), or
    /// `usize::MAX` when it holds nothing there.
    fn kinship(&self, worker: WorkerId, leaf: NodeId) -> usize {
        let held: Vec<Range<u64>> = self
            .leaves_of(worker)
            .into_iter()
            .map(|l| self.nodes[l as usize].range.clone())
            .collect();
        let mut k = 1;
        let mut cur = self.nodes[leaf as usize].parent;
        while let Some(a) = cur {
            let ar = &self.nodes[a as usize].range;
            if held.iter().any(|r| ar.start <= r.start && r.end <= ar.end) {
                return k;
            }
            k += 1;
            cur = self.nodes[a as usize].parent;
        }
        usize::MAX
    }

    /// Removes the `gone` workers: each leaf they held goes to a surviving worker that has its
    /// range loaded, nearest in the tree first (the sibling's holder, then holders under the
    /// nearest ancestor, then any other loader; ties: fewest items, then lowest id). A leaf no
    /// survivor has loaded goes to the surviving worker with the fewest items (ties: lowest id)
    /// and is listed as a reload. Gone workers are dropped from every loaded set; ids in `gone`
    /// the tree does not know are ignored.
    pub fn remove(&mut self, gone: &BTreeSet<WorkerId>) -> Result<Removal, TreeError> {
        let survivors: BTreeSet<WorkerId> =
            self.known_workers().difference(gone).copied().collect();
        if survivors.is_empty() {
            return Err(TreeError::NoSurvivor {
                gone: gone.iter().copied().collect(),
            });
        }
        let mut removal = Removal::default();
        for leaf in self.leaves() {
            let Some(from) = self.nodes[leaf as usize].holder else {
                continue;
            };
            if !gone.contains(&from) {
                continue;
            }
            let loaders: Vec<WorkerId> = self.nodes[leaf as usize]
                .loaded
                .iter()
                .copied()
                .filter(|w| survivors.contains(w))
                .collect();
            let to = loaders
                .iter()
                .copied()
                .min_by_key(|&w| (self.kinship(w, leaf), self.items_of(w), w));
            let to = match to {
                Some(w) => w,
                None => {
                    let w = survivors
                        .iter()
                        .copied()
                        .min_by_key(|&w| (self.items_of(w), w))
                        .ok_or(TreeError::NoSurvivor {
                            gone: gone.iter().copied().collect(),
                        })?;
                    self.nodes[leaf as usize].loaded.insert(w);
                    removal.reloads.push((leaf, w));
                    w
                }
            };
            self.nodes[leaf as usize].holder = Some(to);
            removal.moves.push((leaf, from, to));
        }
        for n in &mut self.nodes {
            n.loaded.retain(|w| !gone.contains(w));
        }
        Ok(removal)
    }

    /// Whether every leaf under `id` as of `clock` is processed by `worker`.
    fn all_held(&self, id: NodeId, worker: WorkerId, clock: Clock) -> bool {
        let n = &self.nodes[id as usize];
        match n.children {
            Some((l, r)) if !n.is_leaf_at(clock) => {
                self.all_held(l, worker, clock) && self.all_held(r, worker, clock)
            }
            _ => self.effective_holder(id) == Some(worker),
        }
    }

    fn cover_from(&self, id: NodeId, worker: WorkerId, clock: Clock, out: &mut Vec<NodeId>) {
        if self.all_held(id, worker, clock) {
            out.push(id);
            return;
        }
        let n = &self.nodes[id as usize];
        if let Some((l, r)) = n.children.filter(|_| !n.is_leaf_at(clock)) {
            self.cover_from(l, worker, clock, out);
            self.cover_from(r, worker, clock, out);
        }
    }

    /// The maximal subtrees, as of `clock`, all of whose leaves `worker` processes, sorted by
    /// range start: the nodes it sends one summed update for.
    pub fn cover(&self, worker: WorkerId, clock: Clock) -> Vec<NodeId> {
        let mut out = Vec::new();
        self.cover_from(self.root(), worker, clock, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(t: &DataTree, ids: &[NodeId]) -> Vec<Range<u64>> {
        ids.iter()
            .map(|&i| t.node(i).unwrap().range.clone())
            .collect()
    }

    fn set(ws: &[WorkerId]) -> BTreeSet<WorkerId> {
        ws.iter().copied().collect()
    }

    #[test]
    fn initial_tree_is_balanced_and_proportional() {
        let t = DataTree::new(10, &[7, 8, 9]).unwrap();
        // 3 workers: left 2 (items ⌊10·2/3⌋ = 6), right 1; left splits 3 | 3.
        assert_eq!(ranges(&t, &t.leaves()), vec![0..3, 3..6, 6..10]);
        let root = t.node(0).unwrap();
        assert_eq!(root.range, 0..10);
        let (l, r) = root.children.unwrap();
        assert_eq!(t.node(l).unwrap().range, 0..6);
        assert_eq!(t.node(r).unwrap().range, 6..10);
        assert_eq!(t.leaves_of(7), vec![2]);
        assert_eq!(t.items_of(9), 4);
        for l in t.leaves() {
            let n = t.node(l).unwrap();
            assert_eq!(n.loaded, n.holder.into_iter().collect());
        }
        assert!(t.node(0).unwrap().loaded.is_empty());
    }

    #[test]
    fn initial_leaves_differ_by_at_most_one_item() {
        for workers in 1..=17u32 {
            let ws: Vec<WorkerId> = (0..workers).collect();
            for total in u64::from(workers)..60 {
                let t = DataTree::new(total, &ws).unwrap();
                let sizes: Vec<u64> = t
                    .leaves()
                    .iter()
                    .map(|&l| t.node(l).unwrap().items())
                    .collect();
                assert_eq!(sizes.len(), workers as usize);
                assert_eq!(sizes.iter().sum::<u64>(), total);
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "total {total} workers {workers}: {sizes:?}");
            }
        }
    }

    #[test]
    fn new_rejects_bad_inputs() {
        assert_eq!(DataTree::new(5, &[]), Err(TreeError::NoWorkers));
        assert_eq!(
            DataTree::new(2, &[1, 2, 3]),
            Err(TreeError::TooFewItems {
                total: 2,
                workers: 3
            })
        );
        assert_eq!(
            DataTree::new(9, &[1, 2, 1]),
            Err(TreeError::DuplicateWorker { worker: 1 })
        );
    }

    /// The thesis's toy example (Fig. 4.4): 40 items on machines 1 and 2; machines 3 and 4 join,
    /// each loads 20 and works on 10; evicting 1 and 2 hands their halves to 3 and 4.
    #[test]
    fn toy_example_split_and_eviction() {
        let mut t = DataTree::new(40, &[1, 2]).unwrap();
        assert_eq!(t.partner(), Some(1)); // 20 each: lowest id
        let s = t.split(1, 3, 5).unwrap();
        assert_eq!(s.load_items, 0..20);
        assert_eq!(t.node(s.left).unwrap().range, 0..10);
        assert_eq!(t.node(s.right).unwrap().range, 10..20);
        assert_eq!(t.node(s.left).unwrap().holder, Some(1));
        assert_eq!(t.node(s.right).unwrap().holder, Some(3));
        assert_eq!(t.node(s.parent).unwrap().loaded, set(&[1, 3]));
        assert_eq!(t.node(s.parent).unwrap().holder, None);
        assert_eq!(t.partner(), Some(2));
        let s2 = t.split(2, 4, 5).unwrap();
        assert_eq!(s2.load_items, 20..40);
        assert_eq!(
            (t.items_of(1), t.items_of(2), t.items_of(3), t.items_of(4)),
            (10, 10, 10, 10)
        );
        let r = t.remove(&set(&[1, 2])).unwrap();
        assert_eq!(r.moves, vec![(s.left, 1, 3), (s2.left, 2, 4)]);
        assert!(r.reloads.is_empty());
        assert_eq!((t.items_of(3), t.items_of(4)), (20, 20));
        assert_eq!(t.holders(), set(&[3, 4]));
        assert!(t
            .nodes()
            .iter()
            .all(|n| !n.loaded.contains(&1) && !n.loaded.contains(&2)));
    }

    #[test]
    fn split_picks_largest_leaf_lowest_start_and_odd_midpoint() {
        let mut t = DataTree::new(9, &[1, 2]).unwrap(); // 1: 0..4, 2: 4..9
        let s = t.split(2, 3, 0).unwrap();
        assert_eq!(ranges(&t, &[s.left, s.right]), vec![4..6, 6..9]);
        // Worker 1 takes over 3's leaf by reassigning after a preload, then holds 0..4 and 6..9.
        t.preload(1, s.right).unwrap();
        t.reassign(s.right, 1).unwrap();
        assert_eq!(ranges(&t, &t.leaves_of(1)), vec![0..4, 6..9]);
        // Two leaves of 4 and 3 items: the 4-item one (lowest start among the largest) splits.
        let s2 = t.split(1, 4, 1).unwrap();
        assert_eq!(s2.load_items, 0..4);
        // Equal sizes: lowest start wins.
        let mut u = DataTree::new(8, &[1, 2]).unwrap();
        u.preload(1, 2).unwrap();
        u.reassign(2, 1).unwrap();
        assert_eq!(u.split(1, 5, 0).unwrap().load_items, 0..4);
    }

    #[test]
    fn split_errors() {
        let mut t = DataTree::new(3, &[1, 2]).unwrap(); // 1: 0..1, 2: 1..3
        assert_eq!(
            t.split(1, 3, 0),
            Err(TreeError::LeafTooSmall {
                node: 1,
                range: 0..1
            })
        );
        assert_eq!(t.split(9, 3, 0), Err(TreeError::NotAHolder { worker: 9 }));
        assert_eq!(
            t.split(2, 1, 0),
            Err(TreeError::NewcomerHolds { worker: 1 })
        );
        assert_eq!(t.split(2, 3, 4).unwrap().load_items, 1..3);
        let mut u = DataTree::new(16, &[1]).unwrap();
        let s = u.split(1, 2, 6).unwrap();
        assert_eq!(
            u.split(1, 3, 5),
            Err(TreeError::SplitBeforeCreation {
                node: s.left,
                range: 0..8,
                created: 6,
                at: 5
            })
        );
    }

    #[test]
    fn splits_are_invisible_before_their_clock() {
        let mut t = DataTree::new(16, &[1]).unwrap();
        let s = t.split(1, 2, 10).unwrap();
        assert_eq!(t.leaves_at(9), vec![0]);
        assert_eq!(t.leaves_at(10), vec![s.left, s.right]);
        // Before the split the old holder processes (and covers) the whole range.
        assert_eq!(t.holder_at(0, 9), Some(1));
        assert_eq!(t.holder_at(0, 10), None);
        assert_eq!(t.holder_at(s.right, 9), None);
        assert_eq!(t.cover(1, 9), vec![0]);
        assert!(t.cover(2, 9).is_empty());
        assert_eq!(t.cover(1, 10), vec![s.left]);
        assert_eq!(t.cover(2, 10), vec![s.right]);
        assert!(!t.exists_at(s.left, 9));
        assert!(t.exists_at(s.left, 10));
    }

    #[test]
    fn cover_is_the_maximal_held_subtrees() {
        // 8 items, 4 workers: leaves 0..2 1, 2..4 2, 4..6 3, 6..8 4.
        let mut t = DataTree::new(8, &[1, 2, 3, 4]).unwrap();
        let leaves = t.leaves();
        t.preload(1, leaves[1]).unwrap();
        t.reassign(leaves[1], 1).unwrap();
        t.preload(1, leaves[3]).unwrap();
        t.reassign(leaves[3], 1).unwrap();
        // Worker 1 holds 0..4 (a whole subtree) and 6..8.
        let (l, _) = t.node(0).unwrap().children.unwrap();
        assert_eq!(t.cover(1, 0), vec![l, leaves[3]]);
        assert_eq!(ranges(&t, &t.cover(1, 0)), vec![0..4, 6..8]);
        assert_eq!(t.cover(3, 0), vec![leaves[2]]);
        assert!(t.cover(2, 0).is_empty());
        // Everything held by one worker: the root.
        t.preload(1, leaves[2]).unwrap();
        t.reassign(leaves[2], 1).unwrap();
        assert_eq!(t.cover(1, 0), vec![0]);
    }

    #[test]
    fn reassign_needs_a_loaded_current_leaf() {
        let mut t = DataTree::new(8, &[1, 2]).unwrap();
        assert_eq!(
            t.reassign(1, 2),
            Err(TreeError::NotLoaded {
                worker: 2,
                node: 1,
                range: 0..4
            })
        );
        assert_eq!(
            t.reassign(0, 2),
            Err(TreeError::NotALeaf {
                node: 0,
                range: 0..8
            })
        );
        assert_eq!(t.reassign(7, 2), Err(TreeError::UnknownNode { node: 7 }));
        assert_eq!(t.preload(3, 0).unwrap(), 0..8);
        // A preload of the root covers every descendant.
        assert!(t.has_loaded(3, 1) && t.has_loaded(3, 2));
        assert_eq!(t.reassign(1, 3), Ok(1));
        assert_eq!(t.items_of(3), 4);
        assert_eq!(t.items_of(1), 0);
    }

    #[test]
    fn removal_prefers_sibling_then_ancestor_then_loader_then_reload() {
        // 16 items, workers 1..4: 0..4 1, 4..8 2, 8..12 3, 12..16 4.
        let mut t = DataTree::new(16, &[1, 2, 3, 4]).unwrap();
        let l = t.leaves();
        // 5 splits 1's leaf: 0..2 1, 2..4 5 (both loaded 0..4).
        let s = t.split(1, 5, 0).unwrap();
        // Worker 6 preloads 2's leaf only (a transient worker preloading a reliable one's data).
        t.preload(6, l[1]).unwrap();
        // Losing 1 and 5 together: 0..2 and 2..4 have no surviving loader → reloads, to the
        // fewest-items survivor (6 holds nothing), then lowest id among the rest.
        let mut a = t.clone();
        let r = a.remove(&set(&[1, 5])).unwrap();
        assert_eq!(r.moves, vec![(s.left, 1, 6), (s.right, 5, 6)]);
        assert_eq!(r.reloads, vec![(s.left, 6), (s.right, 6)]);
        // Losing 1 only: its sibling's holder 5 takes 0..2.
        let mut b = t.clone();
        let r = b.remove(&set(&[1])).unwrap();
        assert_eq!(r.moves, vec![(s.left, 1, 5)]);
        assert!(r.reloads.is_empty());
        // Losing 2: only 6 has 4..8 loaded.
        let mut c = t.clone();
        let r = c.remove(&set(&[2])).unwrap();
        assert_eq!(r.moves, vec![(l[1], 2, 6)]);
        assert!(r.reloads.is_empty());
        // 2 is forgotten: only 6 survives losing everyone else, and takes everything.
        assert!(c.remove(&set(&[1, 3, 4, 5])).is_ok());
        assert_eq!(c.holders(), set(&[6]));
        assert_eq!(c.items_of(6), 16);
        assert_eq!(
            c.remove(&set(&[6])),
            Err(TreeError::NoSurvivor { gone: vec![6] })
        );
    }

    #[test]
    fn removal_prefers_the_nearer_ancestor_holder() {
        // One worker split three times: 1: 0..4; 2 splits: 0..2 1, 2..4 2; 3 splits 2's leaf:
        // 2..3 2, 3..4 3. Worker 4 preloads everything and holds nothing.
        let mut t = DataTree::new(4, &[1]).unwrap();
        let a = t.split(1, 2, 0).unwrap();
        let b = t.split(2, 3, 0).unwrap();
        t.preload(4, 0).unwrap();
        // Losing 2 and 3: 2..3's loaders among survivors are 1 (loaded 0..4) and 4. Worker 1
        // holds 0..2 under the grandparent; 4 holds nothing: 1 wins despite more items.
        let r = t.remove(&set(&[2, 3])).unwrap();
        assert_eq!(r.moves, vec![(b.left, 2, 1), (b.right, 3, 1)]);
        assert_eq!(t.leaves_of(1), vec![a.left, b.left, b.right]);
        assert_eq!(t.cover(1, 0), vec![0]);
    }

    #[test]
    fn tree_serializes_round_trip() {
        let mut t = DataTree::new(100, &[3, 1, 2]).unwrap();
        t.split(1, 9, 4).unwrap();
        let json = serde_json::to_string(&t).unwrap();
        let back: DataTree = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
    }
}
