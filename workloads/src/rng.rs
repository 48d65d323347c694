//! Counter-based seeding: independent, reproducible random streams keyed by what they are for.
//!
//! A stream is derived from (run seed, purpose, index) through SplitMix64, never from call order,
//! so roles that share no state still agree, and adding a stream elsewhere changes nothing here.

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// One SplitMix64 step: a fixed, well-mixed 64-bit permutation.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// FNV-1a hash of a string: stable across Rust versions and platforms (unlike std's hasher).
pub fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A ChaCha8 stream for (seed, purpose, index).
pub fn seeded(seed: u64, purpose: u64, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(splitmix64(splitmix64(seed ^ splitmix64(purpose)) ^ index))
}
