//! The IDX file format (as used by MNIST and Fashion-MNIST): reading, and writing for fixtures.
//!
//! An IDX file is a big-endian `u32` magic number — two zero bytes, a type
//! code (`0x08` = `u8`) and the number of dimensions —, one big-endian `u32`
//! per dimension, then the data, row-major. Images are `0x00000803`
//! (`count × rows × cols` bytes), labels `0x00000801` (`count` bytes).
//! Files are read whole and checked strictly: a wrong magic, a short file or
//! trailing bytes are errors naming the path and the byte offset.

use std::path::{Path, PathBuf};

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
    let bytes = read_file(path)?;
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
    let bytes = read_file(path)?;
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

/// Loads the four files of an IDX split; both halves get the same `classes`
/// (one more than the largest label in either) and must share an image size.
pub(super) fn load_idx_split(
    train_images: &Path,
    train_labels: &Path,
    test_images: &Path,
    test_labels: &Path,
) -> Result<Split, DataError> {
    let mut train = read_pair(train_images, train_labels)?;
    let mut test = read_pair(test_images, test_labels)?;
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
    let classes = max_label(&train)
        .max(max_label(&test))
        .map_or(0, |m| m as usize + 1);
    train.classes = classes;
    test.classes = classes;
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
mod tests {
    use super::super::DataConfig;
    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                dir: tempfile::tempdir().unwrap(),
            }
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
            let p = self.path(name);
            std::fs::write(&p, bytes).unwrap();
            p
        }
    }

    fn pixels(count: usize, rows: usize, cols: usize) -> Vec<u8> {
        (0..count * rows * cols)
            .map(|i| (i * 37 % 256) as u8)
            .collect()
    }

    fn config(f: &Fixture) -> DataConfig {
        DataConfig::Idx {
            train_images: f.path("train-images"),
            train_labels: f.path("train-labels"),
            test_images: f.path("test-images"),
            test_labels: f.path("test-labels"),
        }
    }

    fn write_split(f: &Fixture) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
        let (tri, trl) = (pixels(6, 3, 4), vec![0u8, 1, 2, 1, 0, 2]);
        let (tei, tel) = (pixels(2, 3, 4), vec![7u8, 1]);
        write_idx_images(f.path("train-images"), 3, 4, &tri).unwrap();
        write_idx_labels(f.path("train-labels"), &trl).unwrap();
        write_idx_images(f.path("test-images"), 3, 4, &tei).unwrap();
        write_idx_labels(f.path("test-labels"), &tel).unwrap();
        (tri, trl, tei, tel)
    }

    #[test]
    fn round_trip() {
        let f = Fixture::new();
        let (tri, trl, tei, tel) = write_split(&f);
        let split = config(&f).load(0).unwrap();
        // Seed is irrelevant to IDX.
        assert_eq!(split, config(&f).load(99).unwrap());
        for (d, px, lb) in [(&split.train, &tri, &trl), (&split.test, &tei, &tel)] {
            assert_eq!(d.sample_shape, vec![1, 3, 4]);
            assert_eq!(d.sample_len(), 12);
            assert_eq!(d.len(), lb.len());
            // classes = largest label in either split + 1.
            assert_eq!(d.classes, 8);
            let want: Vec<f32> = px.iter().map(|&p| p as f32 / 255.0).collect();
            assert_eq!(d.features, want);
            assert!(d.features.iter().all(|&v| (0.0..=1.0).contains(&v)));
            assert_eq!(d.labels, lb.iter().map(|&l| l as u32).collect::<Vec<_>>());
        }
        assert!(split.train.features.contains(&1.0) || split.train.features.contains(&0.0));
        let imgs = read_idx_images(f.path("train-images")).unwrap();
        assert_eq!((imgs.count(), imgs.rows, imgs.cols), (6, 3, 4));
        assert_eq!(imgs.pixels, tri);
        let one = load_idx(f.path("train-images"), f.path("train-labels")).unwrap();
        assert_eq!(one.classes, 3);
        // Full pixel range maps to [0, 1] exactly.
        write_idx_images(f.path("px"), 1, 2, &[0, 255]).unwrap();
        write_idx_labels(f.path("lb"), &[0]).unwrap();
        assert_eq!(
            load_idx(f.path("px"), f.path("lb")).unwrap().features,
            vec![0.0, 1.0]
        );
    }

    #[test]
    fn empty_files_are_fine() {
        let f = Fixture::new();
        write_idx_images(f.path("i"), 28, 28, &[]).unwrap();
        write_idx_labels(f.path("l"), &[]).unwrap();
        let d = load_idx(f.path("i"), f.path("l")).unwrap();
        assert!(d.is_empty());
        assert_eq!(d.sample_shape, vec![1, 28, 28]);
    }

    fn assert_mentions(err: &DataError, path: &Path, offset: Option<u64>) {
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        if let Some(o) = offset {
            assert!(msg.contains(&format!("offset {o}")), "{msg}");
        }
    }

    #[test]
    fn missing_file_names_path() {
        let f = Fixture::new();
        write_split(&f);
        std::fs::remove_file(f.path("test-labels")).unwrap();
        let err = config(&f).load(0).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }));
        assert_mentions(&err, &f.path("test-labels"), None);
    }

    #[test]
    fn bad_magic_names_path_offset_found_expected() {
        let f = Fixture::new();
        // A labels file where images are expected.
        let p = f.write("x", &encode_idx_labels(&[1, 2, 3]));
        let err = read_idx_images(&p).unwrap_err();
        assert!(matches!(
            err,
            DataError::BadMagic {
                found: 0x801,
                expected: 0x803,
                offset: 0,
                ..
            }
        ));
        assert_mentions(&err, &p, Some(0));
        let msg = err.to_string();
        assert!(
            msg.contains("0x00000801") && msg.contains("0x00000803"),
            "{msg}"
        );
        // And the other way round.
        let p = f.write("y", &encode_idx_images(2, 2, &[0; 8]));
        let err = read_idx_labels(&p).unwrap_err();
        assert!(matches!(err, DataError::BadMagic { found: 0x803, .. }));
        assert_mentions(&err, &p, Some(0));
        // Garbage (e.g. a gzipped file not unpacked).
        let p = f.write(
            "z.gz",
            &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        assert_mentions(&read_idx_images(&p).unwrap_err(), &p, Some(0));
    }

    #[test]
    fn truncated_data_names_path_offset_and_expected_length() {
        let f = Fixture::new();
        let full = encode_idx_images(3, 4, &pixels(5, 3, 4)); // 16 + 60 bytes
        let p = f.write("imgs", &full[..50]);
        let err = read_idx_images(&p).unwrap_err();
        assert!(matches!(
            err,
            DataError::Truncated {
                offset: 50,
                expected: 76,
                what: "data",
                ..
            }
        ));
        assert_mentions(&err, &p, Some(50));
        assert!(err.to_string().contains("76"), "{err}");

        let full = encode_idx_labels(&[1, 2, 3, 4]);
        let p = f.write("lbls", &full[..10]);
        let err = read_idx_labels(&p).unwrap_err();
        assert!(matches!(
            err,
            DataError::Truncated {
                offset: 10,
                expected: 12,
                ..
            }
        ));
        assert_mentions(&err, &p, Some(10));
    }

    #[test]
    fn truncated_header_names_path_and_offset() {
        let f = Fixture::new();
        let full = encode_idx_images(3, 4, &pixels(1, 3, 4));
        let p = f.write("imgs", &full[..10]);
        let err = read_idx_images(&p).unwrap_err();
        assert!(matches!(
            err,
            DataError::Truncated {
                offset: 10,
                expected: 16,
                what: "header",
                ..
            }
        ));
        assert_mentions(&err, &p, Some(10));
        let p = f.write("tiny", &[0, 0]);
        let err = read_idx_labels(&p).unwrap_err();
        assert!(matches!(
            err,
            DataError::Truncated {
                offset: 2,
                what: "header",
                ..
            }
        ));
        assert_mentions(&err, &p, Some(2));
        let p = f.write("empty", &[]);
        assert_mentions(&read_idx_images(&p).unwrap_err(), &p, Some(0));
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let f = Fixture::new();
        let mut bytes = encode_idx_labels(&[1, 2]);
        bytes.push(9);
        let p = f.write("lbls", &bytes);
        let err = read_idx_labels(&p).unwrap_err();
        assert!(matches!(
            err,
            DataError::TrailingData {
                offset: 10,
                actual: 11,
                ..
            }
        ));
        assert_mentions(&err, &p, Some(10));
    }

    #[test]
    fn zero_rows_is_a_bad_dimension() {
        let f = Fixture::new();
        let mut bytes = encode_idx_images(1, 1, &[5]);
        bytes[8..12].copy_from_slice(&0u32.to_be_bytes());
        let p = f.write("imgs", &bytes);
        let err = read_idx_images(&p).unwrap_err();
        assert!(matches!(err, DataError::BadDimension { offset: 8, .. }));
        assert_mentions(&err, &p, Some(8));
    }

    #[test]
    fn huge_header_counts_do_not_allocate() {
        let f = Fixture::new();
        let mut bytes = encode_idx_images(28, 28, &[]);
        bytes[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let p = f.write("imgs", &bytes);
        let err = read_idx_images(&p).unwrap_err();
        assert!(matches!(err, DataError::Truncated { offset: 16, .. }));
    }

    #[test]
    fn count_mismatch_names_both_paths() {
        let f = Fixture::new();
        write_split(&f);
        write_idx_labels(f.path("train-labels"), &[0, 1, 2]).unwrap();
        let err = config(&f).load(0).unwrap_err();
        assert!(matches!(
            err,
            DataError::CountMismatch {
                images: 6,
                labels: 3,
                ..
            }
        ));
        assert_mentions(&err, &f.path("train-images"), None);
        assert_mentions(&err, &f.path("train-labels"), None);
        let msg = err.to_string();
        assert!(msg.contains('6') && msg.contains('3'), "{msg}");
    }

    #[test]
    fn shape_mismatch_names_both_paths() {
        let f = Fixture::new();
        write_split(&f);
        write_idx_images(f.path("test-images"), 4, 3, &pixels(2, 4, 3)).unwrap();
        let err = config(&f).load(0).unwrap_err();
        assert!(matches!(err, DataError::ShapeMismatch { .. }));
        assert_mentions(&err, &f.path("train-images"), None);
        assert_mentions(&err, &f.path("test-images"), None);
    }
}
