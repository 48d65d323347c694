//! The IDX file format (as used by MNIST and Fashion-MNIST): reading, and writing for fixtures.
//!
//! An IDX file is a big-endian `u32` magic number — two zero bytes, a type
//! code (`0x08` = `u8`) and the number of dimensions —, one big-endian `u32`
//! per dimension, then the data, row-major. Images are `0x00000803`
//! (`count × rows × cols` bytes), labels `0x00000801` (`count` bytes).
//! Files are read whole and checked strictly: a wrong magic, a short file or
//! trailing bytes are errors naming the path and the byte offset.

use std::path::{Path, PathBuf};

use super::labels::{check_labels, ClassCount};
use super::{DataError, Dataset, Split};

/// Magic number of an IDX file of `u8` images (3 dimensions: count, rows, cols).
pub const IDX_IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of `u8` labels (1 dimension: count).
pub const IDX_LABELS_MAGIC: u32 = 0x0000_0801;

/// The contents of an IDX images file: `count()` images of `rows × cols` `u8` pixels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxImages {
    /// Pixel rows per image.
    pub rows: usize,
    /// Pixel columns per image.
    pub cols: usize,
    /// All pixels, image after image, each row-major.
    pub pixels: Vec<u8>,
}

impl IdxImages {
    /// The number of images.
    pub fn count(&self) -> usize {
        self.pixels.len() / (self.rows * self.cols)
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Checks the magic and returns the header's dimensions; `ndims` is implied by `magic`.
fn parse_header(
    path: &Path,
    bytes: &[u8],
    magic: u32,
    what: &'static str,
) -> Result<Vec<u32>, DataError> {
    let ndims = (magic & 0xff) as usize;
    let header_len = 4 + 4 * ndims;
    let truncated_header = || DataError::Truncated {
        path: path.to_path_buf(),
        offset: bytes.len() as u64,
        expected: header_len as u64,
        what: "header",
    };
    if bytes.len() < 4 {
        return Err(truncated_header());
    }
    let found = be_u32(bytes, 0);
    if found != magic {
        return Err(DataError::BadMagic {
            path: path.to_path_buf(),
            offset: 0,
            found,
            expected: magic,
            what,
        });
    }
    if bytes.len() < header_len {
        return Err(truncated_header());
    }
    Ok((0..ndims).map(|d| be_u32(bytes, 4 + 4 * d)).collect())
}

/// Checks the file holds exactly `header_len + data_len` bytes.
fn check_length(
    path: &Path,
    bytes: &[u8],
    header_len: u64,
    data_len: u128,
) -> Result<(), DataError> {
    let total = header_len as u128 + data_len;
    let actual = bytes.len() as u128;
    if actual < total {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            offset: bytes.len() as u64,
            expected: u64::try_from(total).unwrap_or(u64::MAX),
            what: "data",
        });
    }
    if actual > total {
        return Err(DataError::TrailingData {
            path: path.to_path_buf(),
            offset: total as u64,
            actual: bytes.len() as u64,
        });
    }
    Ok(())
}

/// Reads an IDX images file (`u8`, 3 dimensions).
///
/// # Errors
/// [`DataError::Io`] if it cannot be read, [`DataError::BadMagic`],
/// [`DataError::Truncated`], [`DataError::TrailingData`], or
/// [`DataError::BadDimension`] for zero rows or columns.
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<IdxImages, DataError> {
    let path = path.as_ref();
    parse_idx_images(path, read_file(path)?)
}

/// Parses the bytes of an IDX images file; `path` only names it in errors. Nothing is
/// allocated from the header's sizes: the file's length must match them first.
///
/// # Errors
/// Those of [`read_idx_images`] except [`DataError::Io`].
pub fn parse_idx_images(path: &Path, bytes: Vec<u8>) -> Result<IdxImages, DataError> {
    let dims = parse_header(path, &bytes, IDX_IMAGES_MAGIC, "u8 images, 3 dimensions")?;
    let (count, rows, cols) = (dims[0], dims[1], dims[2]);
    for (value, offset, name) in [(rows, 8u64, "rows"), (cols, 12, "columns")] {
        if value == 0 {
            return Err(DataError::BadDimension {
                path: path.to_path_buf(),
                offset,
                reason: format!("images have 0 {name}"),
            });
        }
    }
    check_length(
        path,
        &bytes,
        16,
        count as u128 * rows as u128 * cols as u128,
    )?;
    let mut bytes = bytes;
    bytes.drain(..16);
    Ok(IdxImages {
        rows: rows as usize,
        cols: cols as usize,
        pixels: bytes,
    })
}

/// Reads an IDX labels file (`u8`, 1 dimension).
///
/// # Errors
/// [`DataError::Io`] if it cannot be read, [`DataError::BadMagic`],
/// [`DataError::Truncated`] or [`DataError::TrailingData`].
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Vec<u8>, DataError> {
    let path = path.as_ref();
    parse_idx_labels(path, read_file(path)?)
}

/// Parses the bytes of an IDX labels file; `path` only names it in errors.
///
/// # Errors
/// Those of [`read_idx_labels`] except [`DataError::Io`].
pub fn parse_idx_labels(path: &Path, bytes: Vec<u8>) -> Result<Vec<u8>, DataError> {
    let dims = parse_header(path, &bytes, IDX_LABELS_MAGIC, "u8 labels, 1 dimension")?;
    check_length(path, &bytes, 8, dims[0] as u128)?;
    let mut bytes = bytes;
    bytes.drain(..8);
    Ok(bytes)
}

/// Reads one images/labels pair and checks the counts agree; `classes` is left 0.
fn read_pair(images_path: &Path, labels_path: &Path) -> Result<Dataset, DataError> {
    let images = read_idx_images(images_path)?;
    let labels = read_idx_labels(labels_path)?;
    if images.count() != labels.len() {
        return Err(DataError::CountMismatch {
            images_path: images_path.to_path_buf(),
            images: images.count(),
            labels_path: labels_path.to_path_buf(),
            labels: labels.len(),
        });
    }
    Ok(Dataset {
        features: images.pixels.iter().map(|&p| p as f32 / 255.0).collect(),
        sample_shape: vec![1, images.rows, images.cols],
        labels: labels.iter().map(|&l| l as u32).collect(),
        classes: 0,
        ctr: None,
    })
}

fn max_label(d: &Dataset) -> Option<u32> {
    d.labels.iter().copied().max()
}

/// Loads one IDX images/labels pair as a [`Dataset`].
///
/// Pixels are scaled to `[0, 1]` (divided by 255), samples have shape
/// `[1, rows, cols]` (one channel), and `classes` is one more than the
/// largest label (0 for an empty file).
///
/// # Errors
/// Those of [`read_idx_images`] and [`read_idx_labels`], and
/// [`DataError::CountMismatch`] (naming both paths) if the files hold
/// different numbers of samples.
pub fn load_idx(
    images_path: impl AsRef<Path>,
    labels_path: impl AsRef<Path>,
) -> Result<Dataset, DataError> {
    let mut d = read_pair(images_path.as_ref(), labels_path.as_ref())?;
    d.classes = max_label(&d).map_or(0, |m| m as usize + 1);
    Ok(d)
}

/// Loads the four files of an IDX split. Both halves get the same `classes`: `declared` if
/// given, else one more than the largest training label; every label of both halves must be
/// below it ([`DataError::LabelOutOfRange`] names the file, the label's index and value). The
/// halves must share an image size, and neither may be empty ([`DataError::EmptySplit`]).
pub(super) fn load_idx_split(
    train_images: &Path,
    train_labels: &Path,
    test_images: &Path,
    test_labels: &Path,
    declared: Option<usize>,
) -> Result<Split, DataError> {
    let mut train = read_pair(train_images, train_labels)?;
    let mut test = read_pair(test_images, test_labels)?;
    for (half, images_path, labels_path, set) in [
        ("training", train_images, train_labels, &train),
        ("test", test_images, test_labels, &test),
    ] {
        if set.is_empty() {
            return Err(DataError::EmptySplit {
                half,
                images_path: images_path.to_path_buf(),
                labels_path: labels_path.to_path_buf(),
            });
        }
    }
    if train.sample_shape != test.sample_shape {
        return Err(DataError::ShapeMismatch {
            train_path: PathBuf::from(train_images),
            train_rows: train.sample_shape[1],
            train_cols: train.sample_shape[2],
            test_path: PathBuf::from(test_images),
            test_rows: test.sample_shape[1],
            test_cols: test.sample_shape[2],
        });
    }
    let classes = match declared {
        Some(n) => ClassCount::Declared(n),
        None => ClassCount::FromTraining(max_label(&train).map_or(0, |m| m as usize + 1)),
    };
    check_labels(train_labels, &train.labels, classes)?;
    check_labels(test_labels, &test.labels, classes)?;
    train.classes = classes.count();
    test.classes = classes.count();
    Ok(Split { train, test })
}

/// Encodes images as an IDX images file (test/fixture helper).
///
/// `pixels` holds whole `rows × cols` images back to back.
///
/// # Panics
/// If `rows` or `cols` is 0, `pixels.len()` is not a multiple of
/// `rows * cols`, or a dimension does not fit in a `u32`.
pub fn encode_idx_images(rows: usize, cols: usize, pixels: &[u8]) -> Vec<u8> {
    assert!(rows > 0 && cols > 0, "images need rows and columns");
    assert_eq!(
        pixels.len() % (rows * cols),
        0,
        "pixels must hold whole {rows}x{cols} images"
    );
    let count = pixels.len() / (rows * cols);
    let mut out = Vec::with_capacity(16 + pixels.len());
    for v in [IDX_IMAGES_MAGIC as usize, count, rows, cols] {
        out.extend_from_slice(
            &u32::try_from(v)
                .expect("IDX dimension fits u32")
                .to_be_bytes(),
        );
    }
    out.extend_from_slice(pixels);
    out
}

/// Encodes labels as an IDX labels file (test/fixture helper).
///
/// # Panics
/// If there are more than `u32::MAX` labels.
pub fn encode_idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + labels.len());
    out.extend_from_slice(&IDX_LABELS_MAGIC.to_be_bytes());
    out.extend_from_slice(
        &u32::try_from(labels.len())
            .expect("IDX count fits u32")
            .to_be_bytes(),
    );
    out.extend_from_slice(labels);
    out
}

/// Writes images as an IDX images file at `path` (test/fixture helper).
///
/// Lets tests (this module's and others') build small MNIST-format fixtures
/// in a temporary directory instead of shipping binary files. Panics as
/// [`encode_idx_images`] does.
pub fn write_idx_images(
    path: impl AsRef<Path>,
    rows: usize,
    cols: usize,
    pixels: &[u8],
) -> std::io::Result<()> {
    std::fs::write(path, encode_idx_images(rows, cols, pixels))
}

/// Writes labels as an IDX labels file at `path` (test/fixture helper).
///
/// The companion of [`write_idx_images`] for building MNIST-format fixtures.
pub fn write_idx_labels(path: impl AsRef<Path>, labels: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, encode_idx_labels(labels))
}

#[cfg(test)]
#[path = "idx_tests.rs"]
mod tests;
