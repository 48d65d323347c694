//! Datasets for concord's simulated training runs.
//!
//! Three sources, chosen by the TOML `[data]` table ([`DataConfig`]):
//!
//! * **teacher** (the default): Gaussian inputs labelled by a fixed random
//!   two-layer tanh network, keeping only samples the teacher is confident
//!   about, so a small student network can learn the task quickly;
//! * **blobs**: one isotropic Gaussian per class around random centres;
//! * **idx**: local files in the IDX (MNIST) format;
//! * **ratings**: observed entries of a synthetic low-rank matrix with
//!   Gaussian noise, for matrix factorization (a regression task; each sample
//!   is an entry `[row, col, value]`, see [`ratings`]).
//!
//! Synthetic data is generated from a `u64` seed with ChaCha8 streams, so the
//! same seed gives byte-identical data on every run. Batch sampling
//! ([`SampleStream`]) is a pure function of `(seed, iteration, batch layout)`:
//! workers share no state, and any split of an iteration's global batch among
//! workers sees exactly the samples one worker with the whole batch would.
//!
//! The module is pure Rust (no tensor library): the engine converts the
//! row-major `f32` features into tensors itself.

mod idx;
mod ratings;
mod sampling;
mod synthetic;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use idx::{
    encode_idx_images, encode_idx_labels, load_idx, read_idx_images, read_idx_labels,
    write_idx_images, write_idx_labels, IdxImages, IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC,
};
pub use ratings::{ratings, ratings_counts, LowRankFactors, MAX_RATINGS_DIM, RATINGS_SAMPLE_LEN};
pub use sampling::{fisher_yates, mix_seed, shard_range, splitmix64, SampleStream};
pub use synthetic::{blobs, teacher, TeacherStats, MAX_ATTEMPTS_PER_SAMPLE};

/// A dataset held in memory: row-major f32 features, one u32 label per sample.
///
/// Classification data uses the label; ratings data (matrix factorization)
/// stores each observed entry as the features `[row, col, value]` with label 0
/// and `classes = 1` (see [`ratings`]).
///
/// Sample `i` occupies `features[i * sample_len() .. (i + 1) * sample_len()]`,
/// laid out in `sample_shape` row-major order; its label is `labels[i]`, which
/// is always `< classes`. Kept as flat vectors so the engine can hand a batch
/// to any tensor library without copies per sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// All samples' features, concatenated row-major (`len() * sample_len()` values).
    pub features: Vec<f32>,
    /// The shape of one sample, e.g. `[32]` for vectors or `[1, 28, 28]` for images.
    pub sample_shape: Vec<usize>,
    /// One class label per sample, each `< classes`.
    pub labels: Vec<u32>,
    /// The number of classes (the width of a classifier's output).
    pub classes: usize,
}

impl Dataset {
    /// The number of samples (one per label).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the dataset holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The number of `f32` values in one sample: the product of `sample_shape`.
    pub fn sample_len(&self) -> usize {
        self.sample_shape.iter().product()
    }

    /// The features of sample `i`, `sample_len()` values.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn features_of(&self, i: usize) -> &[f32] {
        assert!(
            i < self.len(),
            "sample index {i} out of range for a dataset of {} samples",
            self.len()
        );
        let n = self.sample_len();
        &self.features[i * n..(i + 1) * n]
    }

    /// Gather a batch (features concatenated, labels) by sample indices.
    ///
    /// The features come back concatenated in `idx` order (`idx.len() *
    /// sample_len()` values), ready to become a `[batch, sample_shape..]`
    /// tensor; indices may repeat.
    ///
    /// # Panics
    /// If any index is `>= len()`.
    pub fn gather(&self, idx: &[usize]) -> (Vec<f32>, Vec<u32>) {
        let mut features = Vec::with_capacity(idx.len() * self.sample_len());
        let mut labels = Vec::with_capacity(idx.len());
        for &i in idx {
            features.extend_from_slice(self.features_of(i));
            labels.push(self.labels[i]);
        }
        (features, labels)
    }

    /// How many samples carry each label: a vector of length `classes`.
    ///
    /// Useful to check class balance (and to report it in run summaries).
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.classes];
        for &l in &self.labels {
            counts[l as usize] += 1;
        }
        counts
    }
}

/// Train and test split.
///
/// Both halves share `sample_shape` and `classes`; their samples are disjoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// The samples training draws its batches from.
    pub train: Dataset,
    /// The held-out samples accuracy is measured on.
    pub test: Dataset,
}

/// Default input dimension of synthetic data.
pub const DEFAULT_DIM: usize = 32;
/// Default number of classes of synthetic data.
pub const DEFAULT_CLASSES: usize = 10;
/// Default hidden width of the teacher network.
pub const DEFAULT_HIDDEN: usize = 64;
/// Default number of synthetic training samples.
pub const DEFAULT_TRAIN: usize = 20_000;
/// Default number of synthetic test samples.
pub const DEFAULT_TEST: usize = 2_000;
/// Default teacher margin: the minimum gap between the teacher's top two
/// logits for a sample to be kept.
///
/// With the default shapes (32 → 64 → 10, weights `N(0, 1/fan_in)`) the
/// teacher's logits have a standard deviation of about 0.6, and this margin
/// rejects about 48% of the candidate inputs (measured by the test
/// `teacher_default_rejection_rate_and_balance`: 0.473–0.482 over seeds
/// 0–2; margin 0.2 would reject 40%, 0.3 55%). Measured on seed 0: plain
/// softmax regression (3 epochs, batch 32) reaches 0.955 test accuracy
/// — the tanh teacher is close to linear on most inputs —, and a plain-Rust
/// 32-64-10 tanh MLP student with SGD (batch 256, lr 0.5) reaches 0.94
/// after 100 steps and 0.95 after 400 (0.90 after 200 steps at lr 0.1);
/// see the test `student_mlp_reaches_target`. Every class keeps at
/// least ~4% of the samples.
pub const DEFAULT_MARGIN: f32 = 0.25;
/// Default standard deviation of each Gaussian blob.
pub const DEFAULT_SPREAD: f32 = 1.0;
/// Default scale of the blob centres (each centre coordinate is `N(0, separation²)`).
pub const DEFAULT_SEPARATION: f32 = 0.5;

fn default_dim() -> usize {
    DEFAULT_DIM
}
fn default_classes() -> usize {
    DEFAULT_CLASSES
}
fn default_hidden() -> usize {
    DEFAULT_HIDDEN
}
fn default_train() -> usize {
    DEFAULT_TRAIN
}
fn default_test() -> usize {
    DEFAULT_TEST
}
fn default_margin() -> f32 {
    DEFAULT_MARGIN
}
fn default_spread() -> f32 {
    DEFAULT_SPREAD
}
fn default_separation() -> f32 {
    DEFAULT_SEPARATION
}

/// Default number of rows of the ratings matrix (the thesis's MF stand-in: 2,000 × 1,000).
pub const DEFAULT_RATINGS_ROWS: usize = 2000;
/// Default number of columns of the ratings matrix.
pub const DEFAULT_RATINGS_COLS: usize = 1000;
/// Default rank of the true factors.
pub const DEFAULT_RATINGS_RANK: usize = 10;
/// Default fraction of observed cells.
pub const DEFAULT_RATINGS_OBSERVED: f64 = 0.05;
/// Default standard deviation of the noise on each observed value (noise floor σ² = 0.01).
pub const DEFAULT_RATINGS_NOISE: f64 = 0.1;
/// Default fraction of observed entries held out as the test set.
pub const DEFAULT_RATINGS_TEST_FRACTION: f64 = 0.1;

fn default_ratings_rows() -> usize {
    DEFAULT_RATINGS_ROWS
}
fn default_ratings_cols() -> usize {
    DEFAULT_RATINGS_COLS
}
fn default_ratings_rank() -> usize {
    DEFAULT_RATINGS_RANK
}
fn default_ratings_observed() -> f64 {
    DEFAULT_RATINGS_OBSERVED
}
fn default_ratings_noise() -> f64 {
    DEFAULT_RATINGS_NOISE
}
fn default_ratings_test_fraction() -> f64 {
    DEFAULT_RATINGS_TEST_FRACTION
}

/// Serde config, TOML `[data]` table, tagged by `kind`, kebab-case, deny_unknown_fields on each variant.
///
/// (serde takes `deny_unknown_fields` on the enum and applies it to every
/// variant's fields; it has no per-variant form.)
///
/// ```toml
/// [data]
/// kind = "teacher"   # or "blobs", "idx", "ratings"
/// dim = 32
/// margin = 0.25
/// ```
///
/// Every synthetic field has a default, so `kind = "teacher"` alone is a
/// complete table; misspelt fields are rejected rather than silently ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DataConfig {
    /// Default: a random "teacher" network labels Gaussian inputs.
    ///
    /// Inputs `x ~ N(0, I_dim)`; the teacher is a fixed random
    /// `dim → hidden → classes` tanh MLP (no biases, weights `N(0, 1/fan_in)`)
    /// and the label is the argmax of its logits. Samples whose top-1 minus
    /// top-2 logit is below `margin` are rejected and redrawn.
    Teacher {
        /// Input dimension (sample shape `[dim]`).
        #[serde(default = "default_dim")]
        dim: usize,
        /// Number of classes (teacher outputs), at least 2.
        #[serde(default = "default_classes")]
        classes: usize,
        /// Hidden width of the teacher network.
        #[serde(default = "default_hidden")]
        hidden: usize,
        /// Number of training samples.
        #[serde(default = "default_train")]
        train: usize,
        /// Number of test samples.
        #[serde(default = "default_test")]
        test: usize,
        /// Minimum top-1 minus top-2 teacher logit gap of a kept sample (≥ 0).
        #[serde(default = "default_margin")]
        margin: f32,
    },
    /// Gaussian blobs: one isotropic Gaussian per class around random centres.
    ///
    /// Centre coordinates are `N(0, separation²)`; each sample picks a class
    /// uniformly and adds `N(0, spread²)` noise to that class's centre.
    Blobs {
        /// Input dimension (sample shape `[dim]`).
        #[serde(default = "default_dim")]
        dim: usize,
        /// Number of classes (blobs), at least 2.
        #[serde(default = "default_classes")]
        classes: usize,
        /// Number of training samples.
        #[serde(default = "default_train")]
        train: usize,
        /// Number of test samples.
        #[serde(default = "default_test")]
        test: usize,
        /// Standard deviation of each blob (≥ 0).
        #[serde(default = "default_spread")]
        spread: f32,
        /// Scale of the centres: each centre coordinate is `N(0, separation²)` (> 0).
        #[serde(default = "default_separation")]
        separation: f32,
    },
    /// Local IDX files (MNIST format): four paths; pixels scaled to `[0, 1]`.
    ///
    /// Images must be `u8` 3-dimensional IDX (`0x00000803`), labels `u8`
    /// 1-dimensional IDX (`0x00000801`); samples get shape `[1, rows, cols]`
    /// and `classes` is one more than the largest label in either split.
    Idx {
        /// Training images (e.g. `train-images-idx3-ubyte`).
        train_images: PathBuf,
        /// Training labels (e.g. `train-labels-idx1-ubyte`).
        train_labels: PathBuf,
        /// Test images (e.g. `t10k-images-idx3-ubyte`).
        test_images: PathBuf,
        /// Test labels (e.g. `t10k-labels-idx1-ubyte`).
        test_labels: PathBuf,
    },
    /// Synthetic low-rank ratings for matrix factorization: `X = U Vᵀ + noise`.
    ///
    /// True factor entries are `N(0, 1/√rank)` (values have variance 1); a
    /// fraction `observed` of the cells is observed with `N(0, noise²)` noise,
    /// and `test_fraction` of the observed entries is held out. Samples are
    /// entries `[row, col, value]` (see [`ratings`]); pair with `[model] kind = "mf"`.
    Ratings {
        /// Matrix rows (≤ 2²⁴).
        #[serde(default = "default_ratings_rows")]
        rows: usize,
        /// Matrix columns (≤ 2²⁴).
        #[serde(default = "default_ratings_cols")]
        cols: usize,
        /// Rank of the true factors.
        #[serde(default = "default_ratings_rank")]
        rank: usize,
        /// Fraction of cells observed, in (0, 1].
        #[serde(default = "default_ratings_observed")]
        observed: f64,
        /// Standard deviation of the Gaussian noise on each observed value (≥ 0).
        #[serde(default = "default_ratings_noise")]
        noise: f64,
        /// Fraction of the observed entries held out for testing, in (0, 1).
        #[serde(default = "default_ratings_test_fraction")]
        test_fraction: f64,
    },
}

impl Default for DataConfig {
    /// The teacher task with all default fields.
    fn default() -> Self {
        DataConfig::Teacher {
            dim: DEFAULT_DIM,
            classes: DEFAULT_CLASSES,
            hidden: DEFAULT_HIDDEN,
            train: DEFAULT_TRAIN,
            test: DEFAULT_TEST,
            margin: DEFAULT_MARGIN,
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> DataError {
    DataError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

fn check_positive(field: &'static str, v: usize) -> Result<(), DataError> {
    if v == 0 {
        Err(invalid(field, "must be > 0 (got 0)"))
    } else {
        Ok(())
    }
}

fn check_classes(v: usize) -> Result<(), DataError> {
    if v < 2 {
        Err(invalid("classes", format!("must be ≥ 2 (got {v})")))
    } else if v > u32::MAX as usize {
        Err(invalid("classes", format!("must fit in a u32 (got {v})")))
    } else {
        Ok(())
    }
}

/// Checks that `count * dim` features can be held (no overflow).
fn check_volume(field: &'static str, count: usize, dim: usize) -> Result<(), DataError> {
    match count.checked_mul(dim) {
        Some(n) if n <= isize::MAX as usize / std::mem::size_of::<f32>() => Ok(()),
        _ => Err(invalid(
            field,
            format!("{count} samples of {dim} features do not fit in memory"),
        )),
    }
}

fn check_path(field: &'static str, p: &std::path::Path) -> Result<(), DataError> {
    if p.as_os_str().is_empty() {
        Err(invalid(field, "must be a non-empty path"))
    } else {
        Ok(())
    }
}

impl DataConfig {
    /// Checks the config without generating or reading anything.
    ///
    /// Sizes, dimensions and widths must be > 0, `classes` ≥ 2, `margin`
    /// finite and ≥ 0, `spread` finite and ≥ 0, `separation` finite and > 0,
    /// IDX paths non-empty (their existence is checked by [`load`]), and for
    /// ratings `rows`, `cols` ≤ 2²⁴, `observed` in (0, 1], `noise` ≥ 0 and
    /// `test_fraction` in (0, 1) leaving at least one test and one training entry.
    /// The error ([`DataError::InvalidConfig`]) names the offending field, so
    /// a run fails at startup with a message pointing into the TOML.
    ///
    /// [`load`]: DataConfig::load
    pub fn validate(&self) -> Result<(), DataError> {
        match self {
            DataConfig::Teacher {
                dim,
                classes,
                hidden,
                train,
                test,
                margin,
            } => {
                check_positive("dim", *dim)?;
                check_classes(*classes)?;
                check_positive("hidden", *hidden)?;
                check_positive("train", *train)?;
                check_positive("test", *test)?;
                check_volume("train", *train, *dim)?;
                check_volume("test", *test, *dim)?;
                if !margin.is_finite() || *margin < 0.0 {
                    return Err(invalid(
                        "margin",
                        format!("must be finite and ≥ 0 (got {margin})"),
                    ));
                }
                Ok(())
            }
            DataConfig::Blobs {
                dim,
                classes,
                train,
                test,
                spread,
                separation,
            } => {
                check_positive("dim", *dim)?;
                check_classes(*classes)?;
                check_positive("train", *train)?;
                check_positive("test", *test)?;
                check_volume("train", *train, *dim)?;
                check_volume("test", *test, *dim)?;
                if !spread.is_finite() || *spread < 0.0 {
                    return Err(invalid(
                        "spread",
                        format!("must be finite and ≥ 0 (got {spread})"),
                    ));
                }
                if !separation.is_finite() || *separation <= 0.0 {
                    return Err(invalid(
                        "separation",
                        format!("must be finite and > 0 (got {separation})"),
                    ));
                }
                Ok(())
            }
            DataConfig::Idx {
                train_images,
                train_labels,
                test_images,
                test_labels,
            } => {
                check_path("train_images", train_images)?;
                check_path("train_labels", train_labels)?;
                check_path("test_images", test_images)?;
                check_path("test_labels", test_labels)?;
                Ok(())
            }
            DataConfig::Ratings {
                rows,
                cols,
                rank,
                observed,
                noise,
                test_fraction,
            } => {
                for (field, v) in [("rows", *rows), ("cols", *cols)] {
                    check_positive(field, v)?;
                    if v > MAX_RATINGS_DIM {
                        return Err(invalid(
                            field,
                            format!(
                                "must be ≤ {MAX_RATINGS_DIM} so indices are exact as f32 features (got {v})"
                            ),
                        ));
                    }
                }
                check_positive("rank", *rank)?;
                check_volume("rows", *rows, *rank)?;
                check_volume("cols", *cols, *rank)?;
                if !observed.is_finite() || *observed <= 0.0 || *observed > 1.0 {
                    return Err(invalid(
                        "observed",
                        format!("must be in (0, 1] (got {observed})"),
                    ));
                }
                if !noise.is_finite() || *noise < 0.0 {
                    return Err(invalid(
                        "noise",
                        format!("must be finite and ≥ 0 (got {noise})"),
                    ));
                }
                if !test_fraction.is_finite() || *test_fraction <= 0.0 || *test_fraction >= 1.0 {
                    return Err(invalid(
                        "test_fraction",
                        format!("must be in (0, 1) (got {test_fraction})"),
                    ));
                }
                let (count, test) = ratings_counts(*rows, *cols, *observed, *test_fraction);
                if count < 2 {
                    return Err(invalid(
                        "observed",
                        format!(
                            "gives {count} observed entries of a {rows} x {cols} matrix; need at least 2 (one to train on, one to test)"
                        ),
                    ));
                }
                if test == 0 || test == count {
                    return Err(invalid(
                        "test_fraction",
                        format!(
                            "holds out {test} of {count} observed entries; need at least one test and one training entry"
                        ),
                    ));
                }
                check_volume("observed", count, RATINGS_SAMPLE_LEN)?;
                Ok(())
            }
        }
    }

    /// Validates the config, then builds the train/test split.
    ///
    /// Synthetic kinds are a pure function of `(config, seed)`: the same seed
    /// gives byte-identical data, a different seed different data. The IDX
    /// kind ignores `seed` and reads the four files.
    pub fn load(&self, seed: u64) -> Result<Split, DataError> {
        self.validate()?;
        match self {
            DataConfig::Teacher {
                dim,
                classes,
                hidden,
                train,
                test,
                margin,
            } => teacher(*dim, *classes, *hidden, *train, *test, *margin, seed)
                .map(|(split, _stats)| split),
            DataConfig::Blobs {
                dim,
                classes,
                train,
                test,
                spread,
                separation,
            } => Ok(blobs(
                *dim,
                *classes,
                *train,
                *test,
                *spread,
                *separation,
                seed,
            )),
            DataConfig::Idx {
                train_images,
                train_labels,
                test_images,
                test_labels,
            } => idx::load_idx_split(train_images, train_labels, test_images, test_labels),
            DataConfig::Ratings {
                rows,
                cols,
                rank,
                observed,
                noise,
                test_fraction,
            } => Ok(ratings(*rows, *cols, *rank, *observed, *noise, *test_fraction, seed).0),
        }
    }

    /// The `kind` tag as written in the TOML (`"teacher"`, `"blobs"`, `"idx"`, `"ratings"`),
    /// for error messages that pair the data with a model.
    pub fn kind(&self) -> &'static str {
        match self {
            DataConfig::Teacher { .. } => "teacher",
            DataConfig::Blobs { .. } => "blobs",
            DataConfig::Idx { .. } => "idx",
            DataConfig::Ratings { .. } => "ratings",
        }
    }
}

/// Everything that can go wrong building a dataset.
///
/// Every message names what is wrong and where: the config field, or for
/// files the path and the byte offset.
#[derive(thiserror::Error, Debug)]
pub enum DataError {
    /// A config field is out of range.
    #[error("invalid [data] config: field `{field}` {reason}")]
    InvalidConfig {
        /// The offending field, as spelt in the TOML table.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be opened or read (missing, unreadable, ...).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An IDX file starts with the wrong magic number (wrong file or format).
    #[error(
        "{}: bad IDX magic at byte offset {offset}: found {found:#010x}, expected {expected:#010x} ({what})",
        path.display()
    )]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// Where the magic number sits (always 0).
        offset: u64,
        /// The magic number read.
        found: u32,
        /// The magic number required.
        expected: u32,
        /// What the file should hold ("u8 images, 3 dimensions" or "u8 labels, 1 dimension").
        what: &'static str,
    },
    /// An IDX file ends before its header or data does.
    #[error(
        "{}: truncated IDX {what}: data runs out at byte offset {offset}, expected {expected} bytes",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the data ran out (the file's length).
        offset: u64,
        /// The file length the header calls for (or the header length, for a truncated header).
        expected: u64,
        /// The part that is cut short: "header" or "data".
        what: &'static str,
    },
    /// An IDX file has bytes after its data (probably not the file the header describes).
    #[error(
        "{}: unexpected trailing bytes at byte offset {offset}: the header calls for exactly {offset} bytes, the file has {actual}",
        path.display()
    )]
    TrailingData {
        /// The file.
        path: PathBuf,
        /// Where the described data ends.
        offset: u64,
        /// The file's actual length.
        actual: u64,
    },
    /// An IDX header dimension is unusable (zero rows/columns, or too large).
    #[error("{}: bad IDX dimension at byte offset {offset}: {reason}", path.display())]
    BadDimension {
        /// The file.
        path: PathBuf,
        /// The offset of the offending dimension in the header.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An images file and its labels file hold different numbers of samples.
    #[error(
        "IDX count mismatch: {} holds {images} images but {} holds {labels} labels",
        images_path.display(),
        labels_path.display()
    )]
    CountMismatch {
        /// The images file.
        images_path: PathBuf,
        /// Its image count.
        images: usize,
        /// The labels file.
        labels_path: PathBuf,
        /// Its label count.
        labels: usize,
    },
    /// Train and test images have different sizes.
    #[error(
        "IDX shape mismatch: {} holds {train_rows}x{train_cols} images but {} holds {test_rows}x{test_cols}",
        train_path.display(),
        test_path.display()
    )]
    ShapeMismatch {
        /// The training images file.
        train_path: PathBuf,
        /// Its image rows.
        train_rows: usize,
        /// Its image columns.
        train_cols: usize,
        /// The test images file.
        test_path: PathBuf,
        /// Its image rows.
        test_rows: usize,
        /// Its image columns.
        test_cols: usize,
    },
    /// The teacher margin rejects (nearly) every sample, so generation gave up.
    #[error(
        "[data] field `margin` = {margin} is too strict: only {accepted} of {wanted} samples accepted after {attempts} draws"
    )]
    MarginTooStrict {
        /// The configured margin.
        margin: f32,
        /// Samples accepted before giving up.
        accepted: usize,
        /// Samples wanted.
        wanted: usize,
        /// Candidate inputs drawn.
        attempts: u64,
    },
}

#[cfg(test)]
mod tests;
