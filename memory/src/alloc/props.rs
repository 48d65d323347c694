//! Properties both allocators keep on random alloc/free sequences.

use super::{AllocStats, BestFit, Block, DeviceAllocator, Gtbm, Mobility};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64, Mobility),
    /// Frees the live block at this index (modulo the number of live blocks).
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let mobility = prop_oneof![
        Just(Mobility::Movable),
        Just(Mobility::Temporary),
        Just(Mobility::Reclaimed)
    ];
    prop_oneof![
        (0u64..400, mobility).prop_map(|(b, m)| Op::Alloc(b, m)),
        any::<usize>().prop_map(Op::Free),
    ]
}

/// No two live blocks of one space overlap.
fn disjoint(mut blocks: Vec<Block>) -> Result<(), TestCaseError> {
    blocks.retain(|b| b.bytes > 0);
    blocks.sort_by_key(|b| (b.space, b.offset));
    for w in blocks.windows(2) {
        if w[0].space == w[1].space {
            prop_assert!(
                w[0].offset + w[0].bytes <= w[1].offset,
                "{:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    Ok(())
}

/// Runs `ops` and checks the invariants after each; `blocks` lists the allocator's live blocks,
/// `extra` checks what is particular to it.
fn check<A: DeviceAllocator>(
    mut a: A,
    ops: &[Op],
    blocks: impl Fn(&A) -> Vec<Block>,
    extra: impl Fn(&A) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut live: Vec<Block> = Vec::new();
    for op in ops {
        let before = a.stats();
        match *op {
            Op::Alloc(bytes, m) => match a.alloc(bytes, m) {
                Ok(b) => {
                    prop_assert_eq!(b.bytes, bytes);
                    live.push(b);
                }
                Err(e) => {
                    prop_assert_eq!(a.stats(), before, "a failed request changes nothing");
                    prop_assert!(e.largest_hole < bytes && e.bytes == bytes);
                    prop_assert_eq!(e.capacity, a.capacity());
                }
            },
            Op::Free(i) if !live.is_empty() => {
                let b = live.swap_remove(i % live.len());
                a.free(b);
            }
            Op::Free(_) => {}
        }
        let s = a.stats();
        let mut placed = blocks(&a);
        prop_assert_eq!(placed.len(), live.iter().filter(|b| b.bytes > 0).count());
        let mut expected: Vec<Block> = live.iter().copied().filter(|b| b.bytes > 0).collect();
        placed.sort_by_key(|b| (b.space, b.offset));
        expected.sort_by_key(|b| (b.space, b.offset));
        prop_assert_eq!(&placed, &expected);
        disjoint(placed)?;
        prop_assert_eq!(s.used, live.iter().map(|b| b.bytes).sum::<u64>());
        prop_assert!(s.footprint >= s.used);
        prop_assert!(s.footprint <= a.capacity());
        prop_assert!(s.high_water >= s.footprint && s.high_water >= before.high_water);
        prop_assert_eq!(s.holes, s.footprint - s.used);
        for probe in [1, 50, 400] {
            let uf = a.fragmentation(probe);
            prop_assert!((0.0..=1.0).contains(&uf));
        }
        extra(&a)?;
    }
    for b in live.drain(..) {
        a.free(b);
    }
    let s = a.stats();
    prop_assert_eq!((s.used, s.footprint, s.holes), (0, 0, 0));
    prop_assert_eq!(a.fragmentation(a.capacity().max(1)), 0.0);
    a.reset(a.capacity());
    prop_assert_eq!(a.stats(), AllocStats::default());
    Ok(())
}

proptest! {
    #[test]
    fn best_fit_keeps_blocks_apart_and_accounts_every_byte(
        capacity in 200u64..4000,
        ops in prop::collection::vec(op(), 0..120),
    ) {
        check(BestFit::new(capacity), &ops, BestFit::live_blocks, |a| {
            // Every block lies below the top.
            let top = a.stats().footprint;
            prop_assert!(a.live_blocks().iter().all(|b| b.offset + b.bytes <= top));
            Ok(())
        })?;
    }

    #[test]
    fn gtbm_keeps_blocks_apart_and_accounts_every_byte(
        capacity in 200u64..4000,
        ops in prop::collection::vec(op(), 0..120),
    ) {
        check(Gtbm::new(capacity), &ops, Gtbm::live_blocks, |g| {
            // Each block lies within its space's extent, and the extents together fit the
            // capacity, so the low and high ends never meet.
            let x = g.extents();
            let extent = [x.low, x.high, x.incremental];
            for b in g.live_blocks() {
                prop_assert!(b.offset + b.bytes <= extent[usize::from(b.space)], "{b:?} {x:?}");
            }
            prop_assert_eq!(x.low + x.high + x.incremental, g.stats().footprint);
            let p = g.peaks();
            prop_assert!(p.footprint <= p.main + p.incremental);
            Ok(())
        })?;
    }
}
