//! Tests of the IDX reader: round trips, and errors naming the file and the byte offset.
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
        classes: None,
    }
}

fn write_split(f: &Fixture) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let (tri, trl) = (pixels(6, 3, 4), vec![0u8, 1, 2, 1, 0, 2]);
    let (tei, tel) = (pixels(2, 3, 4), vec![2u8, 1]);
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
        // classes = largest training label + 1.
        assert_eq!(d.classes, 3);
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

fn with_classes(f: &Fixture, n: usize) -> DataConfig {
    match config(f) {
        DataConfig::Idx {
            train_images,
            train_labels,
            test_images,
            test_labels,
            ..
        } => DataConfig::Idx {
            train_images,
            train_labels,
            test_images,
            test_labels,
            classes: Some(n),
        },
        _ => unreachable!(),
    }
}

#[test]
fn a_declared_class_count_holds_for_both_halves() {
    let f = Fixture::new();
    write_split(&f);
    // More classes than the labels use: the declared count wins.
    let split = with_classes(&f, 10).load(0).unwrap();
    assert_eq!((split.train.classes, split.test.classes), (10, 10));
    // A training label of 200 among 0..10.
    write_idx_labels(f.path("train-labels"), &[0, 1, 2, 200, 0, 2]).unwrap();
    let err = with_classes(&f, 10).load(0).unwrap_err();
    assert!(matches!(
        err,
        DataError::LabelOutOfRange {
            index: 3,
            label: 200,
            classes: 10,
            ..
        }
    ));
    assert_mentions(&err, &f.path("train-labels"), None);
    assert!(err.to_string().contains("0..10"), "{err}");
    // A test label at the declared count.
    write_split(&f);
    write_idx_labels(f.path("test-labels"), &[1, 10]).unwrap();
    let err = with_classes(&f, 10).load(0).unwrap_err();
    assert!(matches!(
        err,
        DataError::LabelOutOfRange {
            index: 1,
            label: 10,
            ..
        }
    ));
    assert_mentions(&err, &f.path("test-labels"), None);
}

#[test]
fn a_test_label_above_the_training_classes_is_rejected() {
    let f = Fixture::new();
    write_split(&f);
    write_idx_labels(f.path("test-labels"), &[7, 1]).unwrap();
    let err = config(&f).load(0).unwrap_err();
    assert!(matches!(
        err,
        DataError::LabelOutOfRange {
            index: 0,
            label: 7,
            classes: 3,
            ..
        }
    ));
    assert_mentions(&err, &f.path("test-labels"), None);
    let msg = err.to_string();
    assert!(
        msg.contains("0..3") && msg.contains("training labels"),
        "{msg}"
    );
}

#[test]
fn a_declared_class_count_below_two_is_a_config_error() {
    let f = Fixture::new();
    let err = with_classes(&f, 1).validate().unwrap_err();
    assert!(matches!(
        err,
        DataError::InvalidConfig {
            field: "classes",
            ..
        }
    ));
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

/// A split half of zero samples is refused by name, as `train = 0` and `test = 0` are for the
/// synthetic sets: an empty training set has nothing to draw a batch from, and an empty test set
/// would report an accuracy of nothing.
#[test]
fn an_empty_half_of_a_split_is_refused_naming_its_files() {
    for (half, images, labels) in [
        ("training", "train-images", "train-labels"),
        ("test", "test-images", "test-labels"),
    ] {
        let f = Fixture::new();
        write_split(&f);
        write_idx_images(f.path(images), 3, 4, &[]).unwrap();
        write_idx_labels(f.path(labels), &[]).unwrap();
        let err = config(&f).load(0).unwrap_err();
        assert!(
            matches!(err, DataError::EmptySplit { half: h, .. } if h == half),
            "{err}"
        );
        assert_mentions(&err, &f.path(images), None);
        assert_mentions(&err, &f.path(labels), None);
        assert!(err.to_string().contains(half), "{err}");
    }
}
