//! Deterministic batch sampling and seed mixing.
//!
//! Everything here is a pure function of its arguments: a worker needs only
//! the run seed and its place in the iteration's global batch to know which
//! samples to take, so workers share no state and any number of them agree
//! with a single worker holding the whole batch.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The splitmix64 finaliser (Steele, Lea & Flood): a fixed bijective scramble of a `u64`.
///
/// Used for all seed mixing instead of `std`'s `DefaultHasher`, whose output
/// is not guaranteed to stay the same across Rust releases.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Derives the seed of an independent random stream from a run seed and a stream number.
///
/// `mix_seed(seed, stream) = splitmix64(splitmix64(seed) ^ stream)`. For a
/// fixed `seed` distinct `stream`s give distinct results (and vice versa),
/// so e.g. the teacher weights, the training inputs and each epoch's
/// permutation get unrelated ChaCha8 streams from one run seed.
pub fn mix_seed(seed: u64, stream: u64) -> u64 {
    splitmix64(splitmix64(seed) ^ stream)
}

/// Shuffles `items` in place with the Fisher–Yates algorithm driven by `rng`.
///
/// Implemented here rather than with `rand`'s `SliceRandom::shuffle` so the
/// order is pinned to this code: for `i` from `len - 1` down to 1, swap
/// `items[i]` with `items[j]`, `j = rng.gen_range(0..=i as u64)` (a `u64`
/// draw so 32- and 64-bit targets agree).
pub fn fisher_yates<T>(items: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.gen_range(0..=i as u64) as usize;
        items.swap(i, j);
    }
}

/// Stream number separating sampling permutations from the data generators' streams.
const SAMPLING_STREAM: u64 = 0x5341_4d50_4c45_0000; // "SAMPLE\0\0"

/// How many epoch permutations a [`SampleStream`] keeps cached: enough for workers some clocks
/// apart (SSP, FlexRR help for earlier clocks) when a clock is about an epoch.
const CACHED_EPOCHS: usize = 8;

/// The order samples are drawn in: a global stream, reshuffled each epoch from the seed, so that any split of an iteration's global batch among workers sees exactly the samples a single worker with the whole batch would see.
///
/// Epoch `e` visits every sample once, in the order of a Fisher–Yates
/// permutation ([`fisher_yates`]) driven by a ChaCha8 stream seeded with
/// `mix_seed(mix_seed(seed, SAMPLING), e)`. The epochs' permutations are
/// concatenated into one endless stream; iteration `iter` consumes the next
/// `global_batch` positions of it. A global batch may straddle an epoch
/// boundary (or span several epochs if it is larger than the dataset).
///
/// The last few epoch permutations are cached behind a mutex, so
/// repeated calls cost `O(count)`; the cache never changes the result, and
/// the stream is `Send + Sync`.
pub struct SampleStream {
    len: usize,
    seed: u64,
    cache: Mutex<Vec<(u64, Arc<[usize]>)>>,
}

impl SampleStream {
    /// A stream over `len` samples (indices `0..len`) seeded with `seed`.
    pub fn new(len: usize, seed: u64) -> Self {
        SampleStream {
            len,
            seed,
            cache: Mutex::new(Vec::with_capacity(CACHED_EPOCHS)),
        }
    }

    /// The number of samples the stream permutes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the stream is over no samples (and so can produce none).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The seed the stream was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The permutation of `0..len` that epoch `epoch` visits samples in.
    pub fn permutation(&self, epoch: u64) -> Arc<[usize]> {
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, p)) = cache.iter().find(|(e, _)| *e == epoch) {
                return Arc::clone(p);
            }
        }
        let mut perm: Vec<usize> = (0..self.len).collect();
        let mut rng =
            ChaCha8Rng::seed_from_u64(mix_seed(mix_seed(self.seed, SAMPLING_STREAM), epoch));
        fisher_yates(&mut perm, &mut rng);
        let perm: Arc<[usize]> = perm.into();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED_EPOCHS {
            cache.remove(0);
        }
        cache.push((epoch, Arc::clone(&perm)));
        perm
    }

    /// The sample indices a worker takes in one iteration: the global batch of iteration `iter` is the run of `global_batch` samples starting at position iter*global_batch of the concatenated per-epoch permutations (epoch e permutation from (seed, e)); the worker takes [offset, offset+count) of that run.
    ///
    /// # Panics
    /// If `offset + count > global_batch`, or if `count > 0` on an empty stream.
    pub fn indices(
        &self,
        iter: u64,
        global_batch: usize,
        offset: usize,
        count: usize,
    ) -> Vec<usize> {
        assert!(
            offset
                .checked_add(count)
                .is_some_and(|end| end <= global_batch),
            "worker slice [{offset}, {offset}+{count}) exceeds the global batch of {global_batch}"
        );
        self.range(iter as u128 * global_batch as u128 + offset as u128, count)
    }

    /// The `count` samples at absolute positions `[start, start + count)` of the stream (the
    /// concatenated per-epoch permutations). Strategies with variable batches address the stream
    /// by position, so a global batch split any way among workers draws the same samples.
    ///
    /// # Panics
    /// If `count > 0` on an empty stream.
    pub fn range(&self, start: u128, count: usize) -> Vec<usize> {
        if count == 0 {
            return Vec::new();
        }
        assert!(self.len > 0, "cannot sample from an empty dataset");
        let len = self.len as u128;
        let mut out = Vec::with_capacity(count);
        let mut pos = start;
        let end = start + count as u128;
        while pos < end {
            let epoch = u64::try_from(pos / len).expect("epoch number overflows u64");
            let within = (pos % len) as usize;
            let take = ((len - within as u128).min(end - pos)) as usize;
            let perm = self.permutation(epoch);
            out.extend_from_slice(&perm[within..within + take]);
            pos += take as u128;
        }
        out
    }
}

impl Clone for SampleStream {
    /// A stream with the same `len` and `seed` (and an empty cache).
    fn clone(&self) -> Self {
        SampleStream::new(self.len, self.seed)
    }
}

impl std::fmt::Debug for SampleStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleStream")
            .field("len", &self.len)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// Contiguous equal partition of `len` items over `n` workers (the first len % n workers get one more), for item-owning strategies.
///
/// Worker `w` owns `shard_range(len, n, w)`; the ranges of workers `0..n`
/// are disjoint, in order, and cover `0..len`.
///
/// # Panics
/// If `n == 0` or `w >= n`.
pub fn shard_range(len: usize, n: usize, w: usize) -> Range<usize> {
    assert!(n > 0, "shard_range over zero workers");
    assert!(w < n, "worker {w} out of range for {n} workers");
    let base = len / n;
    let rem = len % n;
    let start = w * base + w.min(rem);
    let end = start + base + usize::from(w < rem);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn splitmix64_known_values() {
        // Reference values of splitmix64 seeded with 0 (first outputs of the generator).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn mix_seed_separates_streams_and_seeds() {
        let a: HashSet<u64> = (0..1000).map(|s| mix_seed(7, s)).collect();
        assert_eq!(a.len(), 1000);
        let b: HashSet<u64> = (0..1000).map(|s| mix_seed(s, 7)).collect();
        assert_eq!(b.len(), 1000);
    }

    #[test]
    fn permutation_is_a_permutation_and_changes_per_epoch() {
        let s = SampleStream::new(1000, 3);
        let p0 = s.permutation(0);
        let p1 = s.permutation(1);
        for p in [&p0, &p1] {
            let mut v = p.to_vec();
            v.sort_unstable();
            assert_eq!(v, (0..1000).collect::<Vec<_>>());
        }
        assert_ne!(p0, p1);
        assert_ne!(p0.to_vec(), (0..1000).collect::<Vec<_>>());
        // Same seed → same order, different seed → different order.
        assert_eq!(SampleStream::new(1000, 3).permutation(0), p0);
        assert_ne!(SampleStream::new(1000, 4).permutation(0), p0);
        // Cache eviction does not change results.
        for e in 0..5 {
            s.permutation(e);
        }
        assert_eq!(s.permutation(0), p0);
    }

    #[test]
    fn four_workers_union_equals_one_worker() {
        // len not a multiple of the batch, so global batches straddle epoch boundaries.
        let len = 1003;
        let b = 37;
        let workers = SampleStream::new(len, 42);
        let single = SampleStream::new(len, 42);
        let mut crossed = 0;
        for iter in 0..200u64 {
            let whole = single.indices(iter, 4 * b, 0, 4 * b);
            let mut union = Vec::new();
            for w in 0..4 {
                union.extend(workers.indices(iter, 4 * b, w * b, b));
            }
            assert_eq!(union, whole, "iteration {iter}");
            let start = iter as usize * 4 * b;
            if start / len != (start + 4 * b - 1) / len {
                crossed += 1;
            }
        }
        assert!(crossed >= 10, "the test must cross epoch boundaries");
    }

    #[test]
    fn uneven_worker_slices_agree_too() {
        let s = SampleStream::new(100, 9);
        for iter in 0..50 {
            let whole = s.indices(iter, 30, 0, 30);
            let parts = [(0, 7), (7, 13), (20, 10)];
            let union: Vec<usize> = parts
                .iter()
                .flat_map(|&(o, c)| s.indices(iter, 30, o, c))
                .collect();
            assert_eq!(union, whole);
        }
    }

    #[test]
    fn no_repeats_within_an_epoch() {
        let len = 500;
        let s = SampleStream::new(len, 1);
        // Batch 50 divides len: 10 iterations per epoch.
        for epoch in 0..3u64 {
            let mut seen = HashSet::new();
            for it in 0..10 {
                for i in s.indices(epoch * 10 + it, 50, 0, 50) {
                    assert!(seen.insert(i), "sample {i} repeated in epoch {epoch}");
                }
            }
            assert_eq!(seen.len(), len);
        }
        // And with a batch that doesn't divide len: positions 0..len are one epoch.
        let flat: Vec<usize> = (0..20).flat_map(|it| s.indices(it, 33, 0, 33)).collect();
        for chunk in flat.chunks(len).filter(|c| c.len() == len) {
            let set: HashSet<_> = chunk.iter().collect();
            assert_eq!(set.len(), len);
        }
    }

    #[test]
    fn batch_larger_than_dataset_spans_epochs() {
        let s = SampleStream::new(10, 5);
        let v = s.indices(0, 25, 0, 25);
        assert_eq!(v.len(), 25);
        assert_eq!(&v[..10], &s.permutation(0)[..]);
        assert_eq!(&v[10..20], &s.permutation(1)[..]);
        assert_eq!(&v[20..], &s.permutation(2)[..5]);
    }

    #[test]
    fn huge_iteration_numbers_work() {
        let s = SampleStream::new(7, 5);
        let v = s.indices(u64::MAX / 2, 3, 1, 2);
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|&i| i < 7));
    }

    #[test]
    fn zero_count_is_empty() {
        assert!(SampleStream::new(0, 1).indices(5, 8, 8, 0).is_empty());
    }

    #[test]
    #[should_panic(expected = "exceeds the global batch")]
    fn slice_outside_batch_panics() {
        SampleStream::new(10, 1).indices(0, 8, 4, 5);
    }

    #[test]
    fn shard_range_covers_all_items_once() {
        for len in [0usize, 1, 5, 7, 100, 101, 1023] {
            for n in 1..=9 {
                let mut next = 0;
                let mut sizes = Vec::new();
                for w in 0..n {
                    let r = shard_range(len, n, w);
                    assert_eq!(r.start, next, "len {len} n {n} w {w}");
                    next = r.end;
                    sizes.push(r.len());
                }
                assert_eq!(next, len);
                let max = *sizes.iter().max().unwrap();
                let min = *sizes.iter().min().unwrap();
                assert!(max - min <= 1);
                // The first len % n workers get the extra item.
                for (w, &sz) in sizes.iter().enumerate() {
                    assert_eq!(sz, len / n + usize::from(w < len % n));
                }
            }
        }
    }
}
