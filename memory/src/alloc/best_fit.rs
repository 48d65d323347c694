//! The single best-fit arena: the memory pool of vDNN (CNMeM) and SuperNeurons, the baseline
//! GTBM is measured against.

use super::region::Region;
use super::{fragmentation, AllocError, AllocStats, Block, DeviceAllocator, Mobility};

/// One arena with addresses from 0. A request takes the smallest free hole that holds it (ties:
/// the lowest address), else extends the top; a freed block coalesces with its free neighbours,
/// and a free range that reaches the top lowers the top. The footprint is the current top, the
/// high-water mark the highest top so far ("max address high-water mark"). Mobility is ignored;
/// every block is in space 0.
///
/// A zero-byte request takes no memory (a block of 0 bytes at offset 0). Freeing a block this
/// allocator did not give out (or already took back) changes nothing.
#[derive(Clone, Debug)]
pub struct BestFit {
    arena: Region,
    capacity: u64,
    high_water: u64,
}

impl BestFit {
    /// An empty arena that may span at most `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            arena: Region::default(),
            capacity,
            high_water: 0,
        }
    }

    /// Live blocks in address order.
    pub fn live_blocks(&self) -> Vec<Block> {
        self.arena
            .live_blocks()
            .map(|(offset, bytes)| Block {
                offset,
                bytes,
                space: 0,
            })
            .collect()
    }

    /// Free bytes between the top and the capacity.
    fn room(&self) -> u64 {
        self.capacity.saturating_sub(self.arena.top())
    }
}

impl DeviceAllocator for BestFit {
    fn name(&self) -> &'static str {
        "best-fit"
    }

    fn alloc(&mut self, bytes: u64, _mobility: Mobility) -> Result<Block, AllocError> {
        if bytes == 0 {
            return Ok(Block {
                offset: 0,
                bytes: 0,
                space: 0,
            });
        }
        let room = self.room();
        match self.arena.place(bytes, room) {
            Some(offset) => {
                self.high_water = self.high_water.max(self.arena.top());
                Ok(Block {
                    offset,
                    bytes,
                    space: 0,
                })
            }
            None => Err(AllocError {
                bytes,
                used: self.arena.used(),
                free: self.capacity.saturating_sub(self.arena.used()),
                largest_hole: self.arena.largest_hole().max(room),
                capacity: self.capacity,
            }),
        }
    }

    fn free(&mut self, block: Block) {
        if block.bytes > 0 && block.space == 0 {
            self.arena.release(block.offset, block.bytes);
        }
    }

    fn stats(&self) -> AllocStats {
        AllocStats {
            used: self.arena.used(),
            footprint: self.arena.top(),
            high_water: self.high_water,
            holes: self.arena.top() - self.arena.used(),
        }
    }

    /// Regions: every hole below the top, and the room from the top up to the capacity.
    fn fragmentation(&self, bytes: u64) -> f64 {
        let room = self.room();
        fragmentation(self.arena.hole_sizes().chain([room]), 0, bytes)
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn reset(&mut self, capacity: u64) {
        *self = Self::new(capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MB: u64 = 1 << 20;
    const M: Mobility = Mobility::Movable;

    #[test]
    fn a_request_takes_the_best_hole_not_the_first() {
        let mut a = BestFit::new(10_000);
        let t0 = a.alloc(100, M).unwrap();
        let _t1 = a.alloc(10, M).unwrap();
        let t2 = a.alloc(50, M).unwrap();
        let _t3 = a.alloc(10, M).unwrap();
        a.free(t0);
        a.free(t2);
        let b = a.alloc(40, M).unwrap();
        assert_eq!(
            b.offset, t2.offset,
            "the 50-byte hole fits 40 better than the 100-byte one"
        );
        // Equal holes: the lower address wins.
        let c = a.alloc(100, M).unwrap();
        assert_eq!(c.offset, 0);
        assert_eq!(a.stats().footprint, 170);
    }

    #[test]
    fn freed_blocks_coalesce_and_serve_a_larger_request_without_growth() {
        let mut a = BestFit::new(10_000);
        let blocks: Vec<_> = [100, 200, 300, 50]
            .iter()
            .map(|&b| a.alloc(b, M).unwrap())
            .collect();
        a.free(blocks[0]);
        a.free(blocks[2]);
        a.free(blocks[1]);
        assert_eq!(a.stats().holes, 600);
        let big = a.alloc(600, M).unwrap();
        assert_eq!(big.offset, 0);
        assert_eq!(a.stats().footprint, 650);
        // Freeing the top block lowers the top to the end of the highest live block.
        a.free(blocks[3]);
        assert_eq!(a.stats().footprint, 600);
        a.free(big);
        assert_eq!(
            a.stats(),
            AllocStats {
                used: 0,
                footprint: 0,
                high_water: 650,
                holes: 0
            }
        );
    }

    /// Fig. 2.7: free holes of 200 MB and 300 MB cannot serve 400 MB, so the pool grows by 400 MB.
    #[test]
    fn thesis_fig_2_7_holes_of_200_and_300_cannot_serve_400() {
        let mut a = BestFit::new(100_000 * MB);
        let t0 = a.alloc(200 * MB, M).unwrap();
        let _t1 = a.alloc(100 * MB, M).unwrap();
        let t2 = a.alloc(300 * MB, M).unwrap();
        let _t3 = a.alloc(100 * MB, M).unwrap();
        a.free(t0);
        a.free(t2);
        let before = a.stats();
        assert_eq!(before.holes, 500 * MB);
        let t4 = a.alloc(400 * MB, M).unwrap();
        assert_eq!(t4.offset, before.footprint);
        assert_eq!(a.stats().footprint, before.footprint + 400 * MB);
        assert_eq!(a.stats().holes, 500 * MB);
    }

    /// Fig. 2.6 (CNMeM): allocate 512, 512 and 1024 MB, free t0 and t2. t2's region merges with
    /// the free top, t0's cannot (t1 sits between), so 1536 MB are free in a 2048 MB pool but a
    /// 1536 MB request fails; 1024 MB still fits.
    #[test]
    fn thesis_fig_2_6_t0s_region_cannot_coalesce_past_t1() {
        let mut a = BestFit::new(2048 * MB);
        let t0 = a.alloc(512 * MB, M).unwrap();
        let t1 = a.alloc(512 * MB, M).unwrap();
        let t2 = a.alloc(1024 * MB, M).unwrap();
        assert_eq!((t0.offset, t1.offset, t2.offset), (0, 512 * MB, 1024 * MB));
        a.free(t0);
        a.free(t2);
        assert_eq!(a.stats().footprint, 1024 * MB);
        let e = a.alloc(1536 * MB, M).unwrap_err();
        assert_eq!(
            e,
            AllocError {
                bytes: 1536 * MB,
                used: 512 * MB,
                free: 1536 * MB,
                largest_hole: 1024 * MB,
                capacity: 2048 * MB,
            }
        );
        // U_f(1536 MB): no region serves it; U_f(1024 MB): the 512 MB hole is a third of the free.
        assert_eq!(a.fragmentation(1536 * MB), 1.0);
        assert!((a.fragmentation(1024 * MB) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(a.alloc(1024 * MB, M).unwrap().offset, 1024 * MB);
    }

    #[test]
    fn fragmentation_is_zero_with_one_free_region_that_serves() {
        let mut a = BestFit::new(1000);
        assert_eq!(a.fragmentation(1000), 0.0);
        a.alloc(400, M).unwrap();
        assert_eq!(a.fragmentation(600), 0.0);
        assert_eq!(a.fragmentation(601), 1.0);
        a.alloc(600, M).unwrap();
        assert_eq!(a.fragmentation(1), 0.0, "nothing free");
    }

    /// Holes of 100 and 300 bytes and 300 bytes of room: 700 free. A 250-byte request is served
    /// by 600 of them, so U_f = 1 − 600/700 = 1/7.
    #[test]
    fn fragmentation_on_a_hand_checked_example() {
        let mut a = BestFit::new(1000);
        let t0 = a.alloc(100, M).unwrap();
        a.alloc(200, M).unwrap();
        let t2 = a.alloc(300, M).unwrap();
        a.alloc(100, M).unwrap();
        a.free(t0);
        a.free(t2);
        assert!((a.fragmentation(250) - 1.0 / 7.0).abs() < 1e-12);
        assert_eq!(a.fragmentation(50), 0.0);
        assert!((a.fragmentation(101) - 1.0 / 7.0).abs() < 1e-12);
        assert_eq!(a.fragmentation(301), 1.0);
    }

    #[test]
    fn out_of_memory_names_the_request_and_the_capacity() {
        let mut a = BestFit::new(1000);
        a.alloc(700, M).unwrap();
        let e = a.alloc(301, M).unwrap_err();
        assert_eq!(
            (e.bytes, e.capacity, e.used, e.free, e.largest_hole),
            (301, 1000, 700, 300, 300)
        );
        let msg = e.to_string();
        assert!(msg.contains("301") && msg.contains("1000"), "{msg}");
        assert_eq!(a.stats().footprint, 700, "a failed request changes nothing");
    }

    #[test]
    fn reset_forgets_blocks_and_high_water_and_takes_the_new_capacity() {
        let mut a = BestFit::new(1000);
        a.alloc(700, M).unwrap();
        a.reset(500);
        assert_eq!(a.stats(), AllocStats::default());
        assert_eq!(a.capacity(), 500);
        assert!(a.alloc(501, M).is_err());
    }
}
