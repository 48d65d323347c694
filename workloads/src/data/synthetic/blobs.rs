//! Gaussian blobs: one isotropic Gaussian per class around random centres.

use rand::Rng;

use super::{normal, rng_for};
use crate::data::{Dataset, Split};

/// Stream numbers of the blobs' ChaCha8 streams.
const BLOBS_CENTRES_STREAM: u64 = 0x424c_4f42_5300_0001; // "BLOBS" 1
const BLOBS_TRAIN_STREAM: u64 = 0x424c_4f42_5300_0002;
const BLOBS_TEST_STREAM: u64 = 0x424c_4f42_5300_0003;

/// Gaussian blobs: one isotropic Gaussian per class around random centres.
///
/// Centre coordinates are `N(0, separation²)` (so two centres lie about
/// `separation·√(2·dim)` apart); each sample picks its class uniformly and is
/// its centre plus `N(0, spread²·I)` noise. The ratio `separation / spread`
/// sets how separable the classes are. Train and test share the centres and
/// come from separate ChaCha8 streams.
///
/// Does not validate its arguments (see [`DataConfig::validate`](crate::data::DataConfig::validate)).
pub fn blobs(
    dim: usize,
    classes: usize,
    train: usize,
    test: usize,
    spread: f32,
    separation: f32,
    seed: u64,
) -> Split {
    let mut crng = rng_for(seed, BLOBS_CENTRES_STREAM);
    let centres: Vec<f64> = (0..classes * dim)
        .map(|_| normal(&mut crng) * separation as f64)
        .collect();
    let gen = |n: usize, stream: u64| {
        let mut rng = rng_for(seed, stream);
        let mut features = Vec::with_capacity(n * dim);
        let mut labels = Vec::with_capacity(n);
        for _ in 0..n {
            let c = rng.gen_range(0..classes as u64) as usize;
            let centre = &centres[c * dim..(c + 1) * dim];
            features.extend(
                centre
                    .iter()
                    .map(|&m| (m + normal(&mut rng) * spread as f64) as f32),
            );
            labels.push(c as u32);
        }
        Dataset {
            features,
            sample_shape: vec![dim],
            labels,
            classes,
            ctr: None,
        }
    };
    Split {
        train: gen(train, BLOBS_TRAIN_STREAM),
        test: gen(test, BLOBS_TEST_STREAM),
    }
}
