//! The wire conventions of RNA-H's averaging, shared by the workers and the averaging server:
//! the collective operation ids (tagged apart from ring rounds), the binomial broadcast tree over
//! a group, and the layout of a group's first push under `merge = "delta"`.

/// Tag bit of the collective operations of the PS averaging (ring rounds use the round id).
pub const SYNC_OP: u64 = 1 << 62;

/// The collective operation id of group `group`'s averaging after round `round`.
pub fn sync_op(group: u32, round: u64) -> u64 {
    SYNC_OP | (u64::from(group) << 40) | (round & ((1 << 40) - 1))
}

/// Whether `op` is an averaging operation.
pub fn is_sync_op(op: u64) -> bool {
    op & SYNC_OP != 0
}

/// The group of an averaging operation.
pub fn sync_group(op: u64) -> u32 {
    ((op & !SYNC_OP) >> 40) as u32
}

/// Parent and children of `rank` in the binomial broadcast tree rooted at `root` over `p` ranks
/// (the tree of [`concord_engine::collective::broadcast`]; children in sending order).
pub fn tree(rank: usize, root: usize, p: usize) -> (Option<usize>, Vec<usize>) {
    let rel = (rank + p - root) % p;
    let mut mask = 1usize;
    let mut parent = None;
    while mask < p {
        if rel & mask != 0 {
            parent = Some((rel - mask + root) % p);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let mut children = Vec::new();
    while mask > 0 {
        if rel + mask < p {
            children.push((rel + mask + root) % p);
        }
        mask >>= 1;
    }
    (parent, children)
}

/// `part` of a group's first push under [`Merge::Delta`](crate::options::Merge::Delta): the
/// payload is its parameters followed by the model the group started from (the server's baseline
/// for that group).
pub const PUSH_WITH_BASE: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_ops_and_tree() {
        let op = sync_op(3, 17);
        assert!(is_sync_op(op) && !is_sync_op(17));
        assert_eq!(sync_group(op), 3);
        // Every non-root rank has exactly one parent, and is the child of that parent.
        for p in 1..9 {
            for root in 0..p {
                for r in 0..p {
                    let (parent, _) = tree(r, root, p);
                    assert_eq!(parent.is_none(), r == root);
                    if let Some(q) = parent {
                        assert!(tree(q, root, p).1.contains(&r));
                    }
                }
            }
        }
    }
}
