//! Counter-based, version-stable seeding.
//!
//! Every random decision in this crate is derived from a key such as
//! `(run seed, stream name, worker, iteration)` through [`key_hash`], a fixed
//! chain of splitmix64 finalisers. The result does not depend on which role asks
//! first, on how often the engine probes, or on the Rust version (std's
//! `DefaultHasher` is deliberately not used: its output is unspecified across
//! releases). `ChaCha8Rng` (rand_chacha 0.3) is value-stable, so a given seed
//! replays bit-identically.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The splitmix64 finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer.
/// Used as the fixed, explicit hash of every RNG key so that seeds are stable forever.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a stream name: a stable way to turn a label into 64 bits.
fn stream_id(stream: &str) -> u64 {
    stream.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// Hashes `(seed, stream, keys...)` into one 64-bit value with splitmix64 chaining.
/// Distinct streams keep the draws of different patterns / purposes independent.
pub fn key_hash(seed: u64, stream: &str, keys: &[u64]) -> u64 {
    let mut h = splitmix64(seed ^ splitmix64(stream_id(stream)));
    for &k in keys {
        h = splitmix64(h ^ splitmix64(k.wrapping_add(0xD1B5_4A32_D192_ED03)));
    }
    h
}

/// A ChaCha8 generator for the key `(seed, stream, a, b)`; the counter-based RNG the
/// crate uses so that e.g. every worker of a machine sees the same disruption draw
/// without sharing any object.
pub fn rng_for(seed: u64, stream: &str, a: u64, b: u64) -> ChaCha8Rng {
    rng_for_keys(seed, stream, &[a, b])
}

/// Like [`rng_for`] with any number of key words (e.g. worker, iteration, probe point).
pub fn rng_for_keys(seed: u64, stream: &str, keys: &[u64]) -> ChaCha8Rng {
    let mut x = key_hash(seed, stream, keys);
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_exact_mut(8) {
        x = splitmix64(x);
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    ChaCha8Rng::from_seed(bytes)
}

/// The seed handed to the `i`-th pattern of a [`crate::StragglerSet`]: every pattern gets its
/// own stream, yet all roles building the same config list agree on it.
pub fn pattern_seed(seed: u64, position: usize) -> u64 {
    key_hash(seed, "pattern-position", &[position as u64])
}
