//! Synthetic low-rank "ratings" for matrix factorization (MF), the thesis's MF workload.
//!
//! The matrix is `X = U Vᵀ + noise` with true factors `U` (`rows × rank`) and
//! `V` (`cols × rank`) whose entries are `N(0, 1/√rank)` (variance), so every
//! noise-free value `U_i · V_j` has variance 1 and the values are O(1). A
//! fraction `observed` of the cells is observed (exactly
//! `round(observed · rows · cols)` distinct cells, chosen uniformly), each
//! with independent Gaussian noise `N(0, noise²)`; a fraction `test_fraction`
//! of the observed entries is held out as the test set.
//!
//! # Representation
//!
//! The engine's [`Dataset`] holds classification samples (`f32` features, a
//! `u32` label). A ratings sample is one observed entry `(i, j, x_ij)`, stored
//! as the three features `[i, j, x_ij]` (sample shape `[3]`) with label 0 and
//! `classes = 1`. Indices are exact in `f32` below 2²⁴, which
//! [`MAX_RATINGS_DIM`] enforces. Keeping the classification layout means
//! batching, sampling and sharding work unchanged for MF.
//!
//! Everything is drawn from separate ChaCha8 streams derived from the run
//! seed (factors, cell choice and split, noise), so the same seed always gives
//! byte-identical data.

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use super::sampling::{fisher_yates, mix_seed};
use super::{Dataset, Split};

/// Largest `rows` / `cols`: every index below 2²⁴ is exact in an `f32` feature.
pub const MAX_RATINGS_DIM: usize = 1 << 24;
/// Features per ratings sample: row index, column index, value.
pub const RATINGS_SAMPLE_LEN: usize = 3;

const FACTORS_STREAM: u64 = 0x5241_5449_4e47_0001; // "RATING" 1
const CELLS_STREAM: u64 = 0x5241_5449_4e47_0002;
const NOISE_STREAM: u64 = 0x5241_5449_4e47_0003;

/// The true factors the ratings were generated from (row-major `f32`).
///
/// Returned alongside the data so tests can check that the model's loss is
/// ~0 at the truth on noise-free data.
#[derive(Clone, Debug, PartialEq)]
pub struct LowRankFactors {
    /// Number of matrix rows.
    pub rows: usize,
    /// Number of matrix columns.
    pub cols: usize,
    /// Rank of the factorization.
    pub rank: usize,
    /// `U`, `rows × rank`.
    pub u: Vec<f32>,
    /// `V`, `cols × rank`.
    pub v: Vec<f32>,
}

/// How many entries are observed and how many of those are held out for testing:
/// `(observed, test)` with `observed = round(observed_fraction · rows · cols)` and
/// `test = round(test_fraction · observed)`; the training set gets the rest.
pub fn ratings_counts(
    rows: usize,
    cols: usize,
    observed_fraction: f64,
    test_fraction: f64,
) -> (usize, usize) {
    let cells = rows as f64 * cols as f64;
    let observed = (observed_fraction * cells).round().min(cells) as usize;
    let test = (test_fraction * observed as f64).round() as usize;
    (observed, test.min(observed))
}

/// Generates the ratings split and its true factors.
///
/// Arguments must already be valid (see `DataConfig::validate`): sizes ≥ 1,
/// `rows`, `cols` ≤ [`MAX_RATINGS_DIM`], `observed` in (0, 1], `noise` ≥ 0,
/// `test_fraction` in (0, 1) leaving at least one entry on each side.
pub fn ratings(
    rows: usize,
    cols: usize,
    rank: usize,
    observed: f64,
    noise: f64,
    test_fraction: f64,
    seed: u64,
) -> (Split, LowRankFactors) {
    let scale = (rank as f64).powf(-0.25);
    let mut frng = ChaCha8Rng::seed_from_u64(mix_seed(seed, FACTORS_STREAM));
    let mut factor = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| frng.sample::<f64, _>(StandardNormal) * scale)
            .collect()
    };
    let u = factor(rows * rank);
    let v = factor(cols * rank);

    // Floyd's algorithm: `count` distinct cells out of rows·cols, O(count) memory; the set keeps
    // them sorted, then one shuffle decides the order and the test/train split.
    let (count, test) = ratings_counts(rows, cols, observed, test_fraction);
    let cells = rows as u64 * cols as u64;
    let mut crng = ChaCha8Rng::seed_from_u64(mix_seed(seed, CELLS_STREAM));
    let mut chosen = BTreeSet::new();
    for j in cells - count as u64..cells {
        let t = crng.gen_range(0..=j);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    let mut cells: Vec<u64> = chosen.into_iter().collect();
    fisher_yates(&mut cells, &mut crng);

    let mut nrng = ChaCha8Rng::seed_from_u64(mix_seed(seed, NOISE_STREAM));
    let mut entry = |cell: u64| -> [f32; RATINGS_SAMPLE_LEN] {
        let (i, j) = ((cell / cols as u64) as usize, (cell % cols as u64) as usize);
        let clean: f64 = (0..rank).map(|k| u[i * rank + k] * v[j * rank + k]).sum();
        let x = clean + noise * nrng.sample::<f64, _>(StandardNormal);
        [i as f32, j as f32, x as f32]
    };
    let dataset = |entries: &[u64], entry: &mut dyn FnMut(u64) -> [f32; 3]| Dataset {
        features: entries.iter().flat_map(|&c| entry(c)).collect(),
        sample_shape: vec![RATINGS_SAMPLE_LEN],
        labels: vec![0; entries.len()],
        classes: 1,
        ctr: None,
    };
    let test_set = dataset(&cells[..test], &mut entry);
    let train_set = dataset(&cells[test..], &mut entry);
    let to_f32 = |x: Vec<f64>| x.into_iter().map(|v| v as f32).collect();
    (
        Split {
            train: train_set,
            test: test_set,
        },
        LowRankFactors {
            rows,
            cols,
            rank,
            u: to_f32(u),
            v: to_f32(v),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::DataConfig;

    fn cfg(rows: usize, cols: usize, observed: f64, test_fraction: f64) -> DataConfig {
        DataConfig::Ratings {
            rows,
            cols,
            rank: 3,
            observed,
            noise: 0.1,
            test_fraction,
        }
    }

    /// Same seed, same bytes; another seed, other data; split sizes as configured; entries are
    /// distinct, in range and integer-indexed.
    #[test]
    fn ratings_are_deterministic_and_split_as_configured() {
        let c = cfg(200, 100, 0.05, 0.1);
        let a = c.load(3).unwrap();
        assert_eq!(a, c.load(3).unwrap());
        assert_ne!(a, c.load(4).unwrap());
        assert_eq!((a.train.len(), a.test.len()), (900, 100));
        assert_eq!(a.train.sample_shape, vec![3]);
        assert_eq!(a.train.classes, 1);
        let mut cells = std::collections::BTreeSet::new();
        for d in [&a.train, &a.test] {
            assert!(d.labels.iter().all(|&l| l == 0));
            for s in d.features.chunks_exact(3) {
                assert!(s[0] >= 0.0 && s[0] < 200.0 && s[0].fract() == 0.0);
                assert!(s[1] >= 0.0 && s[1] < 100.0 && s[1].fract() == 0.0);
                assert!(cells.insert((s[0] as u32, s[1] as u32)), "repeated cell");
            }
        }
        // Fully observed: every cell once.
        let full = cfg(7, 5, 1.0, 0.2).load(0).unwrap();
        assert_eq!((full.train.len(), full.test.len()), (28, 7));
    }

    /// Noise-free values are exactly the true factors' products, of unit variance.
    #[test]
    fn noise_free_values_are_the_factor_products() {
        let (split, f) = ratings(300, 200, 4, 0.1, 0.0, 0.1, 9);
        let mut sq = 0.0f64;
        for s in split.train.features.chunks_exact(3) {
            let (i, j) = (s[0] as usize, s[1] as usize);
            let p: f64 = (0..4)
                .map(|k| f.u[i * 4 + k] as f64 * f.v[j * 4 + k] as f64)
                .sum();
            assert!((p - s[2] as f64).abs() < 1e-5);
            sq += p * p;
        }
        let var = sq / split.train.len() as f64;
        assert!((0.8..1.2).contains(&var), "value variance {var}");
    }

    /// Bad fields are rejected, naming the field.
    #[test]
    fn bad_ratings_fields_name_the_field() {
        let field = |c: DataConfig| c.validate().unwrap_err().to_string();
        let with = |f: &dyn Fn(&mut DataConfig)| {
            let mut c = cfg(100, 50, 0.05, 0.1);
            f(&mut c);
            c
        };
        let set = |name: &'static str, v: f64| {
            with(&move |c| {
                if let DataConfig::Ratings {
                    rows,
                    rank,
                    observed,
                    noise,
                    test_fraction,
                    ..
                } = c
                {
                    match name {
                        "rows" => *rows = v as usize,
                        "rank" => *rank = v as usize,
                        "observed" => *observed = v,
                        "noise" => *noise = v,
                        _ => *test_fraction = v,
                    }
                }
            })
        };
        for (name, v) in [
            ("rows", 0.0),
            ("rows", (MAX_RATINGS_DIM + 1) as f64),
            ("rank", 0.0),
            ("observed", 0.0),
            ("observed", 1.5),
            ("observed", f64::NAN),
            ("observed", 1e-6),
            ("noise", -0.1),
            ("test_fraction", 0.0),
            ("test_fraction", 1.0),
            ("test_fraction", 1e-5),
        ] {
            let e = field(set(name, v));
            assert!(e.contains(&format!("`{name}`")), "{name} = {v}: {e}");
        }
        assert!(cfg(100, 50, 0.05, 0.1).validate().is_ok());
    }
}
