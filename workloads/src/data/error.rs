//! What can go wrong building a data set: a bad config field, or a file that is missing or not
//! what its header claims.

use std::path::PathBuf;

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
    /// A label is not below the number of classes (declared in `[data]`, or taken from the
    /// training labels).
    #[error(
        "{}: label {label} at index {index} is out of range: labels must be in 0..{classes} ({why})",
        path.display()
    )]
    LabelOutOfRange {
        /// The labels file.
        path: PathBuf,
        /// The label's index in the file (0-based).
        index: usize,
        /// The offending label.
        label: u32,
        /// The number of classes.
        classes: usize,
        /// Where the number of classes comes from.
        why: String,
    },
    /// A half of an IDX split holds no samples: nothing to train on, or nothing to evaluate
    /// (the synthetic data sets refuse `train = 0` and `test = 0` alike).
    #[error(
        "{}: the {half} set holds no images (and {} no labels): the run needs at least one",
        images_path.display(),
        labels_path.display()
    )]
    EmptySplit {
        /// The half that is empty: "training" or "test".
        half: &'static str,
        /// Its images file.
        images_path: PathBuf,
        /// Its labels file.
        labels_path: PathBuf,
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
    /// A click-through CSV file has a bad line: a wrong column count, a label other than 0/1,
    /// a dense value that is not a finite number, an id that is negative, not an integer or
    /// not below its field's rows; or no data lines at all (line 0).
    #[error("{}:{line}: {field}: {reason}", path.display())]
    CtrFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line (0 when the problem is the file as a whole).
        line: u64,
        /// The column at fault: `label`, `dense_<i>`, `id_<k>` (field `k`), or `columns`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}
