//! Synthetic datasets generated from a seed: the teacher task and Gaussian blobs.
//!
//! Each generator draws from separate ChaCha8 streams derived with
//! [`mix_seed`](super::mix_seed) from the run seed (one for the model —
//! teacher weights or blob centres —, one for the training samples, one for
//! the test samples). So the test set does not depend on the training set's
//! size, train and test samples are distinct draws, and the same seed always
//! gives byte-identical data. Gaussians come from `rand_distr`'s
//! `StandardNormal` (`f64`), features are stored as `f32`.

mod blobs;
mod teacher;
#[cfg(test)]
mod tests;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use super::sampling::mix_seed;

pub use blobs::blobs;
pub use teacher::{teacher, TeacherStats, MAX_ATTEMPTS_PER_SAMPLE};

/// The ChaCha8 stream `stream` of the run seed `seed`.
fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix_seed(seed, stream))
}

/// One standard normal draw (`f64`).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    rng.sample::<f64, _>(StandardNormal)
}
