//! Datasets for concord's simulated training runs.
//!
//! The sources, chosen by the TOML `[data]` table ([`DataConfig`]):
//!
//! * **teacher** (the default): Gaussian inputs labelled by a fixed random
//!   two-layer tanh network, keeping only samples the teacher is confident
//!   about, so a small student network can learn the task quickly;
//! * **blobs**: one isotropic Gaussian per class around random centres;
//! * **idx**: local files in the IDX (MNIST) format;
//! * **ratings**: observed entries of a synthetic low-rank matrix with
//!   Gaussian noise, for matrix factorization (a regression task; each sample
//!   is an entry `[row, col, value]`, see [`ratings`]);
//! * **ctr**: synthetic click-through data (dense features and Zipf-distributed categorical
//!   ids labelled by a planted teacher, see [`ctr`]), and **ctr-file**, the same layout read
//!   from a CSV file ([`load_ctr_file`]); for the DLRM models.
//!
//! Synthetic data is generated from a `u64` seed with ChaCha8 streams, so the
//! same seed gives byte-identical data on every run. Batch sampling
//! ([`SampleStream`]) is a pure function of `(seed, iteration, batch layout)`:
//! workers share no state, and any split of an iteration's global batch among
//! workers sees exactly the samples one worker with the whole batch would.
//!
//! The module is pure Rust (no tensor library): the engine converts the
//! row-major `f32` features into tensors itself.

mod config;
mod ctr;
mod ctr_file;
mod dataset;
mod error;
mod idx;
mod labels;
mod ratings;
mod sampling;
mod synthetic;
mod validate;

pub use config::{
    CtrRows, DataConfig, DEFAULT_CLASSES, DEFAULT_CTR_DENSE, DEFAULT_CTR_FIELDS,
    DEFAULT_CTR_POSITIVE_RATE, DEFAULT_CTR_ROWS, DEFAULT_CTR_TEST, DEFAULT_CTR_TRAIN,
    DEFAULT_CTR_ZIPF, DEFAULT_DIM, DEFAULT_HIDDEN, DEFAULT_MARGIN, DEFAULT_RATINGS_COLS,
    DEFAULT_RATINGS_NOISE, DEFAULT_RATINGS_OBSERVED, DEFAULT_RATINGS_RANK, DEFAULT_RATINGS_ROWS,
    DEFAULT_RATINGS_TEST_FRACTION, DEFAULT_SEPARATION, DEFAULT_SPREAD, DEFAULT_TEST, DEFAULT_TRAIN,
};
pub use ctr::{
    ctr, split_ctr, CtrSchema, ZipfIds, CALIBRATION_SAMPLES, MAX_CTR_ROWS, TEACHER_LATENT_DIM,
};
pub use ctr_file::load_ctr_file;
pub use dataset::{Dataset, Split};
pub use error::DataError;
pub use idx::{
    encode_idx_images, encode_idx_labels, load_idx, parse_idx_images, parse_idx_labels,
    read_idx_images, read_idx_labels, write_idx_images, write_idx_labels, IdxImages,
    IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC,
};
pub use ratings::{ratings, ratings_counts, LowRankFactors, MAX_RATINGS_DIM, RATINGS_SAMPLE_LEN};
pub use sampling::{fisher_yates, mix_seed, shard_range, splitmix64, SampleStream};
pub use synthetic::{blobs, teacher, TeacherStats, MAX_ATTEMPTS_PER_SAMPLE};

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
