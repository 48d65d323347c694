//! A region that grows in one direction from its base and places blocks best-fit: the building
//! block of the single best-fit arena and of both ends of GTBM's main arena.
//!
//! Addresses are offsets from the region's base. Below the region's `top` lie live blocks and
//! free holes; a free range that reaches the top is never kept as a hole, the top shrinks
//! instead, so the top is always the end of the highest live block (0 when none is live).

use std::collections::{BTreeMap, BTreeSet};

/// One best-fit region; see the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Region {
    /// End of the highest live block: the bytes the region spans.
    top: u64,
    /// Free holes below the top: start → length.
    holes: BTreeMap<u64, u64>,
    /// The same holes ordered by (length, start), for best-fit with lowest-address ties.
    by_size: BTreeSet<(u64, u64)>,
    /// Live blocks: start → length.
    live: BTreeMap<u64, u64>,
    /// Sum of live block lengths.
    used: u64,
}

impl Region {
    /// The bytes the region spans (live blocks and holes).
    pub(crate) fn top(&self) -> u64 {
        self.top
    }

    /// Bytes held by live blocks.
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// Lengths of the free holes below the top.
    pub(crate) fn hole_sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.holes.values().copied()
    }

    /// The longest hole below the top (0 when there is none).
    pub(crate) fn largest_hole(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    /// Live blocks as (start, length), in address order.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().map(|(&s, &l)| (s, l))
    }

    /// Places `bytes` (> 0) in the smallest hole that holds it (ties: lowest start), else on top
    /// when the top may grow by `bytes` within `room`. Returns the start, or `None` when neither
    /// works (nothing changes then).
    pub(crate) fn place(&mut self, bytes: u64, room: u64) -> Option<u64> {
        debug_assert!(bytes > 0, "zero-byte blocks are handled by the allocators");
        if let Some(&(len, start)) = self.by_size.range((bytes, 0)..).next() {
            self.remove_hole(start, len);
            if len > bytes {
                self.insert_hole(start + bytes, len - bytes);
            }
            self.live.insert(start, bytes);
            self.used += bytes;
            return Some(start);
        }
        if bytes > room {
            return None;
        }
        let start = self.top;
        self.top += bytes;
        self.live.insert(start, bytes);
        self.used += bytes;
        Some(start)
    }

    /// Frees the live block at `start` of length `bytes`, coalescing it with free neighbours and
    /// shrinking the top when the freed range reaches it. Returns false (and changes nothing)
    /// when no such live block exists.
    pub(crate) fn release(&mut self, start: u64, bytes: u64) -> bool {
        if self.live.get(&start) != Some(&bytes) {
            return false;
        }
        self.live.remove(&start);
        self.used -= bytes;
        let (mut lo, mut hi) = (start, start + bytes);
        if let Some((&prev, &len)) = self.holes.range(..start).next_back() {
            if prev + len == lo {
                self.remove_hole(prev, len);
                lo = prev;
            }
        }
        if let Some(&len) = self.holes.get(&hi) {
            self.remove_hole(hi, len);
            hi += len;
        }
        if hi == self.top {
            self.top = lo;
        } else {
            self.insert_hole(lo, hi - lo);
        }
        true
    }

    fn insert_hole(&mut self, start: u64, len: u64) {
        self.holes.insert(start, len);
        self.by_size.insert((len, start));
    }

    fn remove_hole(&mut self, start: u64, len: u64) {
        self.holes.remove(&start);
        self.by_size.remove(&(len, start));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_neighbours_merge_into_one_hole_and_the_top_shrinks() {
        let mut r = Region::default();
        let a = r.place(10, u64::MAX).unwrap();
        let b = r.place(20, u64::MAX).unwrap();
        let c = r.place(30, u64::MAX).unwrap();
        let d = r.place(40, u64::MAX).unwrap();
        assert_eq!((a, b, c, d, r.top()), (0, 10, 30, 60, 100));
        assert!(r.release(a, 10));
        assert!(r.release(c, 30));
        assert_eq!(r.hole_sizes().collect::<Vec<_>>(), vec![10, 30]);
        assert!(r.release(b, 20));
        assert_eq!(r.hole_sizes().collect::<Vec<_>>(), vec![60]);
        assert!(r.release(d, 40));
        assert_eq!((r.top(), r.used(), r.hole_sizes().count()), (0, 0, 0));
    }

    #[test]
    fn a_block_that_is_not_live_is_not_freed() {
        let mut r = Region::default();
        let a = r.place(10, u64::MAX).unwrap();
        assert!(!r.release(a, 11));
        assert!(!r.release(a + 1, 10));
        assert!(r.release(a, 10));
        assert!(!r.release(a, 10));
        assert_eq!((r.top(), r.used()), (0, 0));
    }

    #[test]
    fn growth_beyond_the_room_is_refused_without_change() {
        let mut r = Region::default();
        r.place(10, 10).unwrap();
        assert_eq!(r.place(1, 0), None);
        assert_eq!((r.top(), r.used()), (10, 10));
    }
}
