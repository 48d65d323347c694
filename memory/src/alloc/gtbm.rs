//! GTBM, Dymem's Group-Tensors-By-Mobility allocator (thesis §4.1.3, Algorithm 4).
//!
//! Best-fit in one arena fragments on nonlinear nets: a fork output or a tensor waiting for a
//! join lives across many later operations, and when it is placed between short-lived tensors
//! their freed regions cannot coalesce around it. GTBM keeps the two kinds apart, so the
//! short-lived tensors come and go in a region no long-lived tensor splits.

use super::region::Region;
use super::{fragmentation, AllocError, AllocStats, Block, DeviceAllocator, Mobility};
use serde::Serialize;

/// Space of [`Mobility::Movable`] blocks: the main arena's low end.
const LOW: u8 = 0;
/// Space of [`Mobility::Temporary`] blocks: the main arena's high end.
const HIGH: u8 = 1;
/// Space of [`Mobility::Reclaimed`] blocks: the incremental stack.
const INCREMENTAL: u8 = 2;

/// Dymem's allocator: three spaces whose extents together must fit the capacity.
///
/// - **Low end** (space 0, [`Mobility::Movable`]): best-fit from address 0 upward, exactly like
///   [`super::BestFit`].
/// - **High end** (space 1, [`Mobility::Temporary`]): grows downward from the top of the main
///   arena. A block's `offset` is measured downward from that top: a block at offset `o` of `b`
///   bytes occupies the `b` bytes ending `o` bytes below the top. A request takes the smallest
///   free hole of the high end (ties: nearest the top), else extends the high end downward; frees
///   coalesce, and a free range at the bottom of the high end shrinks it. When Temporary tensors
///   are freed in LIFO order, as the thesis orders them, the high end stays contiguous; best-fit
///   among its holes covers any other order.
/// - **Incremental space** (space 2, [`Mobility::Reclaimed`]): a stack. A request goes on top; a
///   block below the top may be freed, it stays as a hole until every block above it is freed,
///   then the stack pops down to the highest live block.
///
/// The footprint is `low_extent + high_extent + incremental_extent`: the gap between the two
/// ends of the main arena is whatever the capacity leaves after the incremental space, so a
/// request fails when, after trying the holes of its space, the growth it needs would take the
/// footprint over the capacity. The high-water mark is the maximum over time of that sum, the
/// memory that must fit at every instant. The thesis's `max_t(low_extent + high_extent) +
/// incremental_peak` (the sum of the two maxima) can only be larger; [`Gtbm::peaks`] reports both.
///
/// A zero-byte request takes no memory (a block of 0 bytes at offset 0 of its space). Freeing a
/// block this allocator did not give out (or already took back) changes nothing.
#[derive(Clone, Debug)]
pub struct Gtbm {
    low: Region,
    high: Region,
    incremental: Stack,
    capacity: u64,
    high_water: u64,
    peak_main: u64,
    peak_incremental: u64,
}

/// How far each of GTBM's spaces reaches now, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GtbmExtents {
    /// Top of the low end (Movable).
    pub low: u64,
    /// Depth of the high end below the main arena's top (Temporary).
    pub high: u64,
    /// Top of the incremental stack (Reclaimed).
    pub incremental: u64,
}

/// GTBM's peaks since the last reset, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GtbmPeaks {
    /// `max_t(low_extent + high_extent)`: the main arena the iteration needed.
    pub main: u64,
    /// `max_t(incremental_extent)`.
    pub incremental: u64,
    /// `max_t(low + high + incremental)`: the high-water mark (≤ `main + incremental`).
    pub footprint: u64,
}

impl Gtbm {
    /// An empty allocator whose three spaces may span at most `capacity` bytes together.
    pub fn new(capacity: u64) -> Self {
        Self {
            low: Region::default(),
            high: Region::default(),
            incremental: Stack::default(),
            capacity,
            high_water: 0,
            peak_main: 0,
            peak_incremental: 0,
        }
    }

    /// How far each space reaches now.
    pub fn extents(&self) -> GtbmExtents {
        GtbmExtents {
            low: self.low.top(),
            high: self.high.top(),
            incremental: self.incremental.top,
        }
    }

    /// The peaks since the last reset.
    pub fn peaks(&self) -> GtbmPeaks {
        GtbmPeaks {
            main: self.peak_main,
            incremental: self.peak_incremental,
            footprint: self.high_water,
        }
    }

    /// Live blocks, by space and then address.
    pub fn live_blocks(&self) -> Vec<Block> {
        let region = |r: &Region, space| {
            r.live_blocks()
                .map(move |(offset, bytes)| Block {
                    offset,
                    bytes,
                    space,
                })
                .collect::<Vec<_>>()
        };
        let mut all = region(&self.low, LOW);
        all.extend(region(&self.high, HIGH));
        all.extend(
            self.incremental
                .entries
                .iter()
                .filter(|e| e.live)
                .map(|e| Block {
                    offset: e.offset,
                    bytes: e.bytes,
                    space: INCREMENTAL,
                }),
        );
        all
    }

    fn footprint(&self) -> u64 {
        self.low.top() + self.high.top() + self.incremental.top
    }

    fn used(&self) -> u64 {
        self.low.used() + self.high.used() + self.incremental.used
    }

    /// The gap the capacity leaves: the room any space may still grow into.
    fn room(&self) -> u64 {
        self.capacity.saturating_sub(self.footprint())
    }
}

impl DeviceAllocator for Gtbm {
    fn name(&self) -> &'static str {
        "gtbm"
    }

    fn alloc(&mut self, bytes: u64, mobility: Mobility) -> Result<Block, AllocError> {
        let space = match mobility {
            Mobility::Movable => LOW,
            Mobility::Temporary => HIGH,
            Mobility::Reclaimed => INCREMENTAL,
        };
        if bytes == 0 {
            return Ok(Block {
                offset: 0,
                bytes: 0,
                space,
            });
        }
        let room = self.room();
        let placed = match mobility {
            Mobility::Movable => self.low.place(bytes, room),
            Mobility::Temporary => self.high.place(bytes, room),
            Mobility::Reclaimed => (bytes <= room).then(|| self.incremental.push(bytes)),
        };
        let Some(offset) = placed else {
            let largest_hole = match mobility {
                Mobility::Movable => self.low.largest_hole(),
                Mobility::Temporary => self.high.largest_hole(),
                Mobility::Reclaimed => 0,
            };
            return Err(AllocError {
                bytes,
                used: self.used(),
                free: self.capacity.saturating_sub(self.used()),
                largest_hole: largest_hole.max(room),
                capacity: self.capacity,
            });
        };
        self.high_water = self.high_water.max(self.footprint());
        self.peak_main = self.peak_main.max(self.low.top() + self.high.top());
        self.peak_incremental = self.peak_incremental.max(self.incremental.top);
        Ok(Block {
            offset,
            bytes,
            space,
        })
    }

    fn free(&mut self, block: Block) {
        if block.bytes == 0 {
            return;
        }
        match block.space {
            LOW => {
                self.low.release(block.offset, block.bytes);
            }
            HIGH => {
                self.high.release(block.offset, block.bytes);
            }
            INCREMENTAL => {
                self.incremental.release(block.offset, block.bytes);
            }
            _ => {}
        }
    }

    fn stats(&self) -> AllocStats {
        let (used, footprint) = (self.used(), self.footprint());
        AllocStats {
            used,
            footprint,
            high_water: self.high_water,
            holes: footprint - used,
        }
    }

    /// Regions: the holes of the low end and of the high end, and the gap between the two ends
    /// (the capacity less the footprint), one region either end may grow into. Holes of the
    /// incremental stack count as free but never serve: a stack only places on its top.
    fn fragmentation(&self, bytes: u64) -> f64 {
        let usable = self
            .low
            .hole_sizes()
            .chain(self.high.hole_sizes())
            .chain([self.room()]);
        fragmentation(usable, self.incremental.top - self.incremental.used, bytes)
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn reset(&mut self, capacity: u64) {
        *self = Self::new(capacity);
    }
}

/// The incremental space: blocks in address order, allocated on top, popped once freed and on
/// top.
#[derive(Clone, Debug, Default)]
struct Stack {
    /// Blocks from the bottom up (freed ones below a live one stay until it is freed).
    entries: Vec<StackEntry>,
    /// End of the highest live block.
    top: u64,
    /// Sum of live block lengths.
    used: u64,
}

#[derive(Clone, Copy, Debug)]
struct StackEntry {
    offset: u64,
    bytes: u64,
    live: bool,
}

impl Stack {
    /// Places `bytes` (> 0) on top; returns its offset.
    fn push(&mut self, bytes: u64) -> u64 {
        let offset = self.top;
        self.entries.push(StackEntry {
            offset,
            bytes,
            live: true,
        });
        self.top += bytes;
        self.used += bytes;
        offset
    }

    /// Frees the live block at `offset` of `bytes`, then pops every freed block off the top.
    /// Returns false (and changes nothing) when no such live block exists.
    fn release(&mut self, offset: u64, bytes: u64) -> bool {
        let Ok(i) = self.entries.binary_search_by_key(&offset, |e| e.offset) else {
            return false;
        };
        let entry = &mut self.entries[i];
        if !entry.live || entry.bytes != bytes {
            return false;
        }
        entry.live = false;
        self.used -= bytes;
        while self.entries.last().is_some_and(|e| !e.live) {
            self.entries.pop();
        }
        self.top = self.entries.last().map_or(0, |e| e.offset + e.bytes);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mobility::{Movable, Reclaimed, Temporary};

    #[test]
    fn each_mobility_has_its_space_and_the_extents_add_up() {
        let mut g = Gtbm::new(1000);
        let m = g.alloc(100, Movable).unwrap();
        let t = g.alloc(200, Temporary).unwrap();
        let r = g.alloc(50, Reclaimed).unwrap();
        assert_eq!((m.space, t.space, r.space), (0, 1, 2));
        assert_eq!((m.offset, t.offset, r.offset), (0, 0, 0));
        assert_eq!(
            g.extents(),
            GtbmExtents {
                low: 100,
                high: 200,
                incremental: 50
            }
        );
        assert_eq!(g.stats().footprint, 350);
        let t2 = g.alloc(30, Temporary).unwrap();
        assert_eq!(
            t2.offset, 200,
            "the high end grows downward, away from its top"
        );
    }

    #[test]
    fn the_high_end_reuses_its_best_hole_and_shrinks_from_the_bottom() {
        let mut g = Gtbm::new(10_000);
        let t: Vec<_> = [100, 10, 50, 10]
            .iter()
            .map(|&b| g.alloc(b, Temporary).unwrap())
            .collect();
        g.free(t[0]);
        g.free(t[2]);
        assert_eq!(g.alloc(40, Temporary).unwrap().offset, t[2].offset);
        g.free(t[3]);
        assert_eq!(
            g.extents().high,
            150,
            "the bottom block freed: the high end shrinks"
        );
    }

    #[test]
    fn the_incremental_stack_pops_only_once_the_top_is_free() {
        let mut g = Gtbm::new(1000);
        let a = g.alloc(10, Reclaimed).unwrap();
        let b = g.alloc(20, Reclaimed).unwrap();
        let c = g.alloc(30, Reclaimed).unwrap();
        g.free(b);
        assert_eq!((g.extents().incremental, g.stats().holes), (60, 20));
        // A stack does not reuse its hole: the next block goes on top.
        let d = g.alloc(5, Reclaimed).unwrap();
        assert_eq!(d.offset, 60);
        g.free(d);
        g.free(c);
        assert_eq!(
            g.extents().incremental,
            10,
            "c and the hole below it popped"
        );
        g.free(a);
        assert_eq!(
            g.stats(),
            AllocStats {
                used: 0,
                footprint: 0,
                high_water: 65,
                holes: 0
            }
        );
        assert_eq!(g.peaks().incremental, 65);
    }

    #[test]
    fn a_request_fails_when_the_spaces_together_would_pass_the_capacity() {
        let mut g = Gtbm::new(1000);
        g.alloc(400, Movable).unwrap();
        g.alloc(300, Temporary).unwrap();
        g.alloc(200, Reclaimed).unwrap();
        let e = g.alloc(101, Movable).unwrap_err();
        assert_eq!(
            (e.bytes, e.used, e.free, e.largest_hole, e.capacity),
            (101, 900, 100, 100, 1000)
        );
        assert!(g.alloc(101, Temporary).is_err());
        assert!(g.alloc(101, Reclaimed).is_err());
        assert_eq!(g.alloc(100, Reclaimed).unwrap().offset, 200);
        assert_eq!(g.stats().footprint, 1000);
    }

    #[test]
    fn a_hole_of_the_other_end_does_not_serve() {
        let mut g = Gtbm::new(1000);
        let m = g.alloc(500, Movable).unwrap();
        g.alloc(100, Movable).unwrap();
        g.free(m);
        // 500 free at the low end, 400 in the gap: a Temporary 450 cannot use the low hole.
        let e = g.alloc(450, Temporary).unwrap_err();
        assert_eq!(e.largest_hole, 400);
        assert_eq!(g.alloc(450, Movable).unwrap().offset, 0);
    }

    /// Low holes 100 and 300, a high hole of 50, 150 bytes of gap and a 40-byte hole stranded
    /// in the stack: 640 free. A request of 120 is served by 300 + 150 = 450 of them.
    #[test]
    fn fragmentation_on_a_hand_checked_example() {
        let mut g = Gtbm::new(900);
        let l0 = g.alloc(100, Movable).unwrap();
        g.alloc(100, Movable).unwrap();
        let l2 = g.alloc(300, Movable).unwrap();
        g.alloc(50, Movable).unwrap();
        let h0 = g.alloc(50, Temporary).unwrap();
        g.alloc(50, Temporary).unwrap();
        let r0 = g.alloc(40, Reclaimed).unwrap();
        g.alloc(60, Reclaimed).unwrap();
        g.free(l0);
        g.free(l2);
        g.free(h0);
        g.free(r0);
        assert_eq!(g.stats().footprint, 750);
        assert!((g.fragmentation(120) - (1.0 - 450.0 / 640.0)).abs() < 1e-12);
        assert!((g.fragmentation(10) - 40.0 / 640.0).abs() < 1e-12);
        assert_eq!(g.fragmentation(301), 1.0);
        assert_eq!(Gtbm::new(1000).fragmentation(1000), 0.0);
    }

    #[test]
    fn high_water_is_the_max_of_the_sum_and_peaks_report_the_sum_of_maxima() {
        let mut g = Gtbm::new(1000);
        let m = g.alloc(300, Movable).unwrap();
        g.free(m);
        let t = g.alloc(200, Temporary).unwrap();
        g.free(t);
        g.alloc(100, Reclaimed).unwrap();
        assert_eq!(
            g.peaks(),
            GtbmPeaks {
                main: 300,
                incremental: 100,
                footprint: 300
            }
        );
        assert_eq!(g.stats().high_water, 300);
    }
}
