//! The `[data]` config table: which source a run trains on, with each field's default, and
//! [`DataConfig::load`], which turns a config and a seed into a train/test split.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{blobs, ctr, ctr_file, idx, ratings, teacher, DataError, Split};

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

/// Default number of categorical fields of synthetic click-through data.
pub const DEFAULT_CTR_FIELDS: usize = 8;
/// Default rows per categorical field of synthetic click-through data.
pub const DEFAULT_CTR_ROWS: usize = 10_000;
/// Default number of dense features of click-through data (Criteo has 13).
pub const DEFAULT_CTR_DENSE: usize = 13;
/// Default Zipf exponent of the ids of each field.
pub const DEFAULT_CTR_ZIPF: f64 = 1.1;
/// Default target fraction of clicks.
pub const DEFAULT_CTR_POSITIVE_RATE: f64 = 0.1;
/// Default number of synthetic click-through training samples.
pub const DEFAULT_CTR_TRAIN: usize = 50_000;
/// Default number of synthetic click-through test samples.
pub const DEFAULT_CTR_TEST: usize = 10_000;

fn default_ctr_fields() -> usize {
    DEFAULT_CTR_FIELDS
}
fn default_ctr_dense() -> usize {
    DEFAULT_CTR_DENSE
}
fn default_ctr_zipf() -> f64 {
    DEFAULT_CTR_ZIPF
}
fn default_ctr_positive_rate() -> f64 {
    DEFAULT_CTR_POSITIVE_RATE
}
fn default_ctr_train() -> usize {
    DEFAULT_CTR_TRAIN
}
fn default_ctr_test() -> usize {
    DEFAULT_CTR_TEST
}

/// Rows of the categorical fields of synthetic click-through data: one number for every field
/// (`rows = 10000`) or a list with one entry per field (`rows = [1000, 50000, 20]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CtrRows {
    /// Every field has this many rows.
    All(usize),
    /// Field `k` has entry `k` rows; the list's length must equal `fields`.
    PerField(Vec<usize>),
}

impl Default for CtrRows {
    fn default() -> Self {
        CtrRows::All(DEFAULT_CTR_ROWS)
    }
}

impl CtrRows {
    /// Rows per field for `fields` fields; an error naming `rows` when a list's length is not
    /// `fields`, or when a field has 0 or more than 2²⁴ rows.
    pub fn per_field(&self, fields: usize) -> Result<Vec<usize>, DataError> {
        let rows = match self {
            CtrRows::All(r) => vec![*r; fields],
            CtrRows::PerField(list) if list.len() == fields => list.clone(),
            CtrRows::PerField(list) => {
                return Err(DataError::InvalidConfig {
                    field: "rows",
                    reason: format!(
                        "lists {} fields' rows but `fields` = {fields}: give one number for all, or one entry per field",
                        list.len()
                    ),
                })
            }
        };
        ctr::check_rows(&rows)?;
        Ok(rows)
    }
}

/// Serde config, TOML `[data]` table, tagged by `kind`, kebab-case, deny_unknown_fields on each variant.
///
/// (serde takes `deny_unknown_fields` on the enum and applies it to every
/// variant's fields; it has no per-variant form.)
///
/// ```toml
/// [data]
/// kind = "teacher"   # or "blobs", "idx", "ratings", "ctr", "ctr-file"
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
    /// and `classes` is the declared `classes`, else one more than the largest training label.
    /// Every label (training and test) must be below `classes`: an out-of-range label is an
    /// error naming the file, the label's index and value, and the allowed range.
    Idx {
        /// Training images (e.g. `train-images-idx3-ubyte`).
        train_images: PathBuf,
        /// Training labels (e.g. `train-labels-idx1-ubyte`).
        train_labels: PathBuf,
        /// Test images (e.g. `t10k-images-idx3-ubyte`).
        test_images: PathBuf,
        /// Test labels (e.g. `t10k-labels-idx1-ubyte`).
        test_labels: PathBuf,
        /// The number of classes (≥ 2), if declared: labels must lie in `0..classes`. Unset:
        /// taken from the training labels (largest + 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        classes: Option<usize>,
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
    /// Synthetic click-through data with a planted teacher (see [`ctr`](super::ctr)): `dense`
    /// Gaussian features and one Zipf-distributed id per field; pair with `[model] kind =
    /// "dlrm"`.
    Ctr {
        /// Number of categorical fields `K` (≥ 1).
        #[serde(default = "default_ctr_fields")]
        fields: usize,
        /// Rows per field: a number for all fields or one entry per field (each 1 ..= 2²⁴).
        #[serde(default)]
        rows: CtrRows,
        /// Dense features per sample (≥ 1).
        #[serde(default = "default_ctr_dense")]
        dense: usize,
        /// Exponent `s` of each field's Zipf id distribution (finite, > 0).
        #[serde(default = "default_ctr_zipf")]
        zipf: f64,
        /// Target fraction of clicks, in (0, 1).
        #[serde(default = "default_ctr_positive_rate")]
        positive_rate: f64,
        /// Number of training samples.
        #[serde(default = "default_ctr_train")]
        train: usize,
        /// Number of test samples.
        #[serde(default = "default_ctr_test")]
        test: usize,
    },
    /// Click-through data from a CSV file, lines `label,dense...,ids...` (header optional; see
    /// [`load_ctr_file`](super::load_ctr_file)); pair with `[model] kind = "dlrm"`.
    CtrFile {
        /// The CSV file.
        path: PathBuf,
        /// Rows of each field, one entry per id column (each 1 ..= 2²⁴).
        rows: Vec<usize>,
        /// Dense columns per line (≥ 1).
        #[serde(default = "default_ctr_dense")]
        dense: usize,
        /// Fraction of the lines held out for testing, in (0, 1).
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

impl DataConfig {
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
                classes,
            } => idx::load_idx_split(
                train_images,
                train_labels,
                test_images,
                test_labels,
                *classes,
            ),
            DataConfig::Ratings {
                rows,
                cols,
                rank,
                observed,
                noise,
                test_fraction,
            } => Ok(ratings(*rows, *cols, *rank, *observed, *noise, *test_fraction, seed).0),
            DataConfig::Ctr {
                fields,
                rows,
                dense,
                zipf,
                positive_rate,
                train,
                test,
            } => ctr(
                &rows.per_field(*fields)?,
                *dense,
                *zipf,
                *positive_rate,
                *train,
                *test,
                seed,
            ),
            DataConfig::CtrFile {
                path,
                rows,
                dense,
                test_fraction,
            } => ctr_file::load_ctr_file(path, rows, *dense, *test_fraction, seed),
        }
    }

    /// The `kind` tag as written in the TOML (`"teacher"`, `"blobs"`, `"idx"`, `"ratings"`,
    /// `"ctr"`, `"ctr-file"`),
    /// for error messages that pair the data with a model.
    pub fn kind(&self) -> &'static str {
        match self {
            DataConfig::Teacher { .. } => "teacher",
            DataConfig::Blobs { .. } => "blobs",
            DataConfig::Idx { .. } => "idx",
            DataConfig::Ratings { .. } => "ratings",
            DataConfig::Ctr { .. } => "ctr",
            DataConfig::CtrFile { .. } => "ctr-file",
        }
    }

    /// Whether this is click-through data (`ctr` or `ctr-file`), the only data a DLRM trains on.
    pub fn is_ctr(&self) -> bool {
        matches!(self, DataConfig::Ctr { .. } | DataConfig::CtrFile { .. })
    }
}
