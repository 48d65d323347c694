//! Synthetic click-through-rate (CTR) data with a planted teacher, for the DLRM models.
//!
//! # Samples
//!
//! A sample has `D` dense features and one categorical id for each of `K` fields. It is stored
//! in the engine's [`Dataset`] as the `D + K` features `[dense_0 .. dense_{D-1}, id_0 ..
//! id_{K-1}]` (ids as `f32`, exact because every field has at most 2²⁴ rows, see
//! [`MAX_CTR_ROWS`]), label 1 for a click and 0 otherwise, `classes = 2`, and the schema in
//! [`Dataset::ctr`] ([`CtrSchema`]); [`split_ctr`] cuts a batch back into its two parts.
//!
//! # Ids
//!
//! Field `k`'s ids follow a Zipf law over ranks `1..=rows_k` (probability of rank `r`
//! proportional to `r^-s`), and ranks map to ids through a seeded random permutation of
//! `0..rows_k`, so the hot ids are scattered over the table and a placement scheme has to find
//! them by counting ([`ZipfIds`]).
//!
//! # Teacher
//!
//! Dense features are `x ~ N(0, I_D)`. The teacher holds, for every row of every field, a
//! scalar weight `u_k[id]` and a latent vector `v_k[id]` of dimension [`TEACHER_LATENT_DIM`],
//! plus dense weights `w`, and scores a sample by the logit
//!
//! ```text
//! z = w·x + Σ_k u_k[id_k] + Σ_{k<l} <v_k[id_k], v_l[id_l]> + b
//! ```
//!
//! The three terms are scaled to unit variance each: `w ~ N(0, 1/D)`, `u ~ N(0, 1/K)`, and the
//! latent entries `N(0, σ²)` with `σ² = 1 / (2·√P)`, `P = K(K−1)/2` pairs (an inner product of
//! two dimension-4 vectors has variance `4σ⁴`, so the pair sum has variance `4σ⁴·P = 1`).
//! The bias `b` is found by bisection so that the mean click probability over
//! [`CALIBRATION_SAMPLES`] candidate samples (drawn from the same distribution, on their own
//! stream) equals `positive_rate`; each label is then a Bernoulli draw with probability
//! `sigmoid(z)`.
//!
//! Every random quantity comes from its own ChaCha8 stream derived from the run seed, so the
//! same seed gives byte-identical data.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use super::sampling::{fisher_yates, mix_seed};
use super::{DataError, Dataset, Split};

/// Largest number of rows of one field: every id below 2²⁴ is exact as an `f32` feature.
pub const MAX_CTR_ROWS: usize = 1 << 24;
/// Dimension of the teacher's latent vectors (its pairwise-interaction rank).
pub const TEACHER_LATENT_DIM: usize = 4;
/// Candidate samples the teacher's bias is calibrated on.
pub const CALIBRATION_SAMPLES: usize = 8192;

const PERMUTATION_STREAM: u64 = 0x4354_5200_0000_0001; // "CTR" 1
const TEACHER_STREAM: u64 = 0x4354_5200_0000_0002;
const CALIBRATION_STREAM: u64 = 0x4354_5200_0000_0003;
const TRAIN_STREAM: u64 = 0x4354_5200_0000_0004;
const TEST_STREAM: u64 = 0x4354_5200_0000_0005;
const TRAIN_IDS_STREAM: u64 = 0x4354_5200_0000_0006;
const TEST_IDS_STREAM: u64 = 0x4354_5200_0000_0007;
const CALIBRATION_IDS_STREAM: u64 = 0x4354_5200_0000_0008;

/// The layout of a click-through sample: `dense` dense features, then one id per field, field
/// `k` having `rows[k]` rows (its embedding table's size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtrSchema {
    /// Dense features leading each sample.
    pub dense: usize,
    /// Rows of each categorical field, in field order.
    pub rows: Vec<usize>,
}

impl CtrSchema {
    /// Number of categorical fields `K`.
    pub fn fields(&self) -> usize {
        self.rows.len()
    }

    /// Features per sample: `dense + fields`.
    pub fn sample_len(&self) -> usize {
        self.dense + self.rows.len()
    }
}

/// Splits a batch of click-through samples (`[B, dense + K]` row-major, as stored in a
/// [`Dataset`]) into its dense features (`[B, dense]`) and its ids (`[B, K]`).
///
/// Trailing values that do not make a whole sample are ignored; ids are converted with `as`
/// (the data sources guarantee they are exact non-negative integers).
pub fn split_ctr(schema: &CtrSchema, features: &[f32]) -> (Vec<f32>, Vec<u32>) {
    let len = schema.sample_len().max(1);
    let samples = features.len() / len;
    let mut dense = Vec::with_capacity(samples * schema.dense);
    let mut ids = Vec::with_capacity(samples * schema.fields());
    for s in features.chunks_exact(len) {
        dense.extend_from_slice(&s[..schema.dense]);
        ids.extend(s[schema.dense..].iter().map(|&v| v as u32));
    }
    (dense, ids)
}

/// One field's Zipf table: cumulative weights by rank and the rank → id permutation.
#[derive(Debug)]
struct ZipfField {
    /// `cdf[r]` = Σ_{i ≤ r} (i + 1)^-s, unnormalized.
    cdf: Vec<f64>,
    /// `ids[r]` = the id of rank `r + 1`.
    ids: Vec<u32>,
}

/// Per-field Zipf id sampler: rank `r` of field `k` (1-based) has probability
/// `r^-s / H(rows_k, s)`, and ranks map to ids through a seeded permutation of `0..rows_k`.
///
/// The tables (cumulative weights and permutations) are shared between clones and
/// [`ZipfIds::with_draw_seed`] copies, so many independent draw streams over the same hot ids
/// cost one table each.
#[derive(Clone, Debug)]
pub struct ZipfIds {
    fields: Arc<Vec<ZipfField>>,
    rng: ChaCha8Rng,
}

impl ZipfIds {
    /// A sampler over fields of `rows_per_field` rows with Zipf exponent `exponent`; the
    /// permutations and the draw stream both derive from `seed`.
    ///
    /// Errors (naming the `[data]` field): no fields, a field with 0 or more than
    /// [`MAX_CTR_ROWS`] rows, an exponent that is not finite and > 0.
    pub fn new(rows_per_field: &[usize], exponent: f64, seed: u64) -> Result<ZipfIds, DataError> {
        if rows_per_field.is_empty() {
            return Err(invalid("fields", "must be > 0 (got 0)"));
        }
        check_rows(rows_per_field)?;
        if !exponent.is_finite() || exponent <= 0.0 {
            return Err(invalid(
                "zipf",
                format!("must be finite and > 0 (got {exponent})"),
            ));
        }
        let mut prng = ChaCha8Rng::seed_from_u64(mix_seed(seed, PERMUTATION_STREAM));
        let fields = rows_per_field
            .iter()
            .map(|&rows| {
                let mut total = 0.0;
                let cdf = (1..=rows)
                    .map(|r| {
                        total += (r as f64).powf(-exponent);
                        total
                    })
                    .collect();
                let mut ids: Vec<u32> = (0..rows as u32).collect();
                fisher_yates(&mut ids, &mut prng);
                ZipfField { cdf, ids }
            })
            .collect();
        Ok(ZipfIds {
            fields: Arc::new(fields),
            rng: ChaCha8Rng::seed_from_u64(mix_seed(seed, TRAIN_IDS_STREAM)),
        })
    }

    /// The same fields (same hot ids) with an independent draw stream seeded by `seed`.
    pub fn with_draw_seed(&self, seed: u64) -> ZipfIds {
        ZipfIds {
            fields: Arc::clone(&self.fields),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Where the draw stream stands (its position in its ChaCha stream): with
    /// [`ZipfIds::set_draw_position`], a sampler saved at a checkpoint continues its draws
    /// exactly.
    pub fn draw_position(&self) -> u128 {
        self.rng.get_word_pos()
    }

    /// Moves the draw stream to `position` (from [`ZipfIds::draw_position`]).
    pub fn set_draw_position(&mut self, position: u128) {
        self.rng.set_word_pos(position);
    }

    /// Number of fields `K`.
    pub fn fields(&self) -> usize {
        self.fields.len()
    }

    /// Rows of field `field`.
    ///
    /// # Panics
    /// If `field >= fields()`.
    pub fn rows(&self, field: usize) -> usize {
        self.fields[field].ids.len()
    }

    /// The `n` most probable ids of `field`, hottest first (fewer if the field is smaller).
    ///
    /// # Panics
    /// If `field >= fields()`.
    pub fn hottest(&self, field: usize, n: usize) -> &[u32] {
        let ids = &self.fields[field].ids;
        &ids[..n.min(ids.len())]
    }

    /// One id of `field`.
    ///
    /// # Panics
    /// If `field >= fields()`.
    pub fn draw(&mut self, field: usize) -> u32 {
        let f = &self.fields[field];
        let total = f.cdf.last().copied().unwrap_or(0.0);
        let u = self.rng.gen::<f64>() * total;
        let rank = f.cdf.partition_point(|&c| c <= u).min(f.ids.len() - 1);
        f.ids[rank]
    }

    /// Replaces `out` with the ids of `samples` samples, row-major `[samples, K]` (sample by
    /// sample, each drawing field 0 first).
    pub fn fill_batch(&mut self, samples: usize, out: &mut Vec<u32>) {
        out.clear();
        out.reserve(samples * self.fields());
        for _ in 0..samples {
            for k in 0..self.fields() {
                let id = self.draw(k);
                out.push(id);
            }
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> DataError {
    DataError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

/// Every field needs 1 ..= [`MAX_CTR_ROWS`] rows.
pub(super) fn check_rows(rows: &[usize]) -> Result<(), DataError> {
    for (k, &r) in rows.iter().enumerate() {
        if r == 0 || r > MAX_CTR_ROWS {
            return Err(invalid(
                "rows",
                format!(
                    "field {k} has {r} rows; each field needs 1 ..= {MAX_CTR_ROWS} rows (ids must be exact as f32 features)"
                ),
            ));
        }
    }
    Ok(())
}

/// The planted teacher (see the module documentation).
struct Teacher {
    dense_w: Vec<f64>,
    /// Per field, one scalar per row.
    wide: Vec<Vec<f64>>,
    /// Per field, [`TEACHER_LATENT_DIM`] values per row, row-major.
    latent: Vec<Vec<f64>>,
    bias: f64,
}

impl Teacher {
    fn new(rows: &[usize], dense: usize, rng: &mut ChaCha8Rng) -> Teacher {
        let k = rows.len() as f64;
        let pairs = (k * (k - 1.0) / 2.0).max(1.0);
        let mut normal = |sd: f64| -> f64 { rng.sample::<f64, _>(StandardNormal) * sd };
        let dense_w = (0..dense)
            .map(|_| normal((1.0 / dense.max(1) as f64).sqrt()))
            .collect();
        let wide = rows
            .iter()
            .map(|&r| (0..r).map(|_| normal((1.0 / k).sqrt())).collect())
            .collect();
        let latent_sd = (1.0 / (2.0 * pairs.sqrt())).sqrt();
        let latent = rows
            .iter()
            .map(|&r| {
                (0..r * TEACHER_LATENT_DIM)
                    .map(|_| normal(latent_sd))
                    .collect()
            })
            .collect();
        Teacher {
            dense_w,
            wide,
            latent,
            bias: 0.0,
        }
    }

    /// The logit without the bias.
    fn score(&self, dense: &[f64], ids: &[u32]) -> f64 {
        let d = TEACHER_LATENT_DIM;
        let mut z: f64 = self.dense_w.iter().zip(dense).map(|(w, x)| w * x).sum();
        for (k, &id) in ids.iter().enumerate() {
            let id = id as usize;
            z += self.wide[k][id];
            let vk = &self.latent[k][id * d..(id + 1) * d];
            for (l, &other) in ids.iter().enumerate().skip(k + 1) {
                let other = other as usize;
                let vl = &self.latent[l][other * d..(other + 1) * d];
                z += vk.iter().zip(vl).map(|(a, b)| a * b).sum::<f64>();
            }
        }
        z
    }

    /// Sets the bias so the mean click probability over `scores` is `rate` (bisection).
    fn calibrate(&mut self, scores: &[f64], rate: f64) {
        let mean =
            |b: f64| scores.iter().map(|z| sigmoid(z + b)).sum::<f64>() / scores.len() as f64;
        let (mut lo, mut hi) = (-50.0, 50.0);
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if mean(mid) < rate {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.bias = 0.5 * (lo + hi);
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// Draws `n` unbiased teacher scores (dense features from `rng`, ids from `ids`), passing each
/// sample's dense features and ids to `keep`.
fn draw_samples(
    teacher: &Teacher,
    dense: usize,
    n: usize,
    rng: &mut ChaCha8Rng,
    ids: &mut ZipfIds,
    mut keep: impl FnMut(&[f64], &[u32], f64, &mut ChaCha8Rng),
) {
    let mut x = vec![0.0f64; dense];
    let mut row = Vec::with_capacity(ids.fields());
    for _ in 0..n {
        for v in x.iter_mut() {
            *v = rng.sample::<f64, _>(StandardNormal);
        }
        ids.fill_batch(1, &mut row);
        let z = teacher.score(&x, &row);
        keep(&x, &row, z, rng);
    }
}

/// Generates a synthetic click-through split (see the module documentation).
///
/// Arguments must already be valid (see `DataConfig::validate`): at least one field, every
/// field 1 ..= [`MAX_CTR_ROWS`] rows, `dense` ≥ 1, `zipf` finite and > 0, `positive_rate` in
/// (0, 1), `train` and `test` ≥ 1; invalid ones are reported as [`DataError::InvalidConfig`].
pub fn ctr(
    rows: &[usize],
    dense: usize,
    zipf: f64,
    positive_rate: f64,
    train: usize,
    test: usize,
    seed: u64,
) -> Result<Split, DataError> {
    let ids = ZipfIds::new(rows, zipf, seed)?;
    let mut teacher = Teacher::new(
        rows,
        dense,
        &mut ChaCha8Rng::seed_from_u64(mix_seed(seed, TEACHER_STREAM)),
    );
    let mut scores = Vec::with_capacity(CALIBRATION_SAMPLES);
    draw_samples(
        &teacher,
        dense,
        CALIBRATION_SAMPLES,
        &mut ChaCha8Rng::seed_from_u64(mix_seed(seed, CALIBRATION_STREAM)),
        &mut ids.with_draw_seed(mix_seed(seed, CALIBRATION_IDS_STREAM)),
        |_, _, z, _| scores.push(z),
    );
    teacher.calibrate(&scores, positive_rate);

    let schema = CtrSchema {
        dense,
        rows: rows.to_vec(),
    };
    let generate = |n: usize, stream: u64, ids: &mut ZipfIds| {
        let mut features = Vec::with_capacity(n * schema.sample_len());
        let mut labels = Vec::with_capacity(n);
        draw_samples(
            &teacher,
            dense,
            n,
            &mut ChaCha8Rng::seed_from_u64(mix_seed(seed, stream)),
            ids,
            |x, row, z, rng| {
                features.extend(x.iter().map(|&v| v as f32));
                features.extend(row.iter().map(|&id| id as f32));
                let p = sigmoid(z + teacher.bias);
                labels.push(u32::from(rng.gen::<f64>() < p));
            },
        );
        Dataset {
            features,
            sample_shape: vec![schema.sample_len()],
            labels,
            classes: 2,
            ctr: Some(schema.clone()),
        }
    };
    let mut train_ids = ids.clone();
    let mut test_ids = ids.with_draw_seed(mix_seed(seed, TEST_IDS_STREAM));
    Ok(Split {
        train: generate(train, TRAIN_STREAM, &mut train_ids),
        test: generate(test, TEST_STREAM, &mut test_ids),
    })
}

#[cfg(test)]
#[path = "ctr_tests.rs"]
mod tests;
