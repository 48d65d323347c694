//! Fuzzing the IDX reader and the label check with a fixed budget: random byte strings and
//! mutated valid files never panic, never yield more data than the file holds (nothing is
//! allocated from a header's sizes), and fail with a typed error naming the file.
//!
//! Each target tries [`CASES`] cases (`PROPTEST_CASES` overrides it) from the fixed seed
//! [`SEED`], so every run (and CI) tries the same inputs.

use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::labels::{check_labels, ClassCount};
use super::{encode_idx_images, encode_idx_labels, parse_idx_images, parse_idx_labels, DataError};

/// Cases each target tries unless `PROPTEST_CASES` says otherwise.
const CASES: u32 = 512;
/// The seed every run starts from.
const SEED: u64 = 0x1D8_F022;

fn runner(target: &str) -> TestRunner {
    concord_fuzz_support::runner(target, CASES, SEED)
}

const PATH: &str = "fuzzed-file";

/// A valid images file: `count` images of `rows × cols`.
fn valid_images() -> impl Strategy<Value = Vec<u8>> {
    (1usize..5, 1usize..5, 0usize..4).prop_flat_map(|(rows, cols, count)| {
        vec(any::<u8>(), rows * cols * count).prop_map(move |px| encode_idx_images(rows, cols, &px))
    })
}

fn valid_labels() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..12).prop_map(|l| encode_idx_labels(&l))
}

/// `bytes` with some bytes overwritten (headers included), then cut or extended.
fn mutated(valid: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (
        valid,
        vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        prop_oneof![Just(None), (0usize..40).prop_map(Some)],
        vec(any::<u8>(), 0..3),
    )
        .prop_map(|(mut bytes, edits, cut, tail)| {
            if !bytes.is_empty() {
                for (at, b) in edits {
                    let i = at.index(bytes.len());
                    bytes[i] = b;
                }
            }
            if let Some(n) = cut {
                bytes.truncate(n);
            }
            bytes.extend(tail);
            bytes
        })
}

fn is_typed_format_error(e: &DataError) -> bool {
    matches!(
        e,
        DataError::BadMagic { .. }
            | DataError::Truncated { .. }
            | DataError::TrailingData { .. }
            | DataError::BadDimension { .. }
    ) && e.to_string().contains(PATH)
}

fn check_images(bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let len = bytes.len();
    match parse_idx_images(Path::new(PATH), bytes) {
        Ok(images) => {
            prop_assert_eq!(images.pixels.len() + 16, len);
            prop_assert!(images.rows > 0 && images.cols > 0);
            prop_assert_eq!(images.pixels.len() % (images.rows * images.cols), 0);
        }
        Err(e) => prop_assert!(is_typed_format_error(&e), "{e}"),
    }
    Ok(())
}

fn check_labels_file(bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let len = bytes.len();
    match parse_idx_labels(Path::new(PATH), bytes) {
        Ok(labels) => prop_assert_eq!(labels.len() + 8, len),
        Err(e) => prop_assert!(is_typed_format_error(&e), "{e}"),
    }
    Ok(())
}

#[test]
fn fuzz_idx_random_bytes() {
    runner("idx random bytes")
        .run(&vec(any::<u8>(), 0..48), |bytes| {
            check_images(bytes.clone())?;
            check_labels_file(bytes)
        })
        .unwrap();
}

#[test]
fn fuzz_idx_mutated_images() {
    runner("idx mutated images")
        .run(&mutated(valid_images()), check_images)
        .unwrap();
}

#[test]
fn fuzz_idx_mutated_labels() {
    runner("idx mutated labels")
        .run(&mutated(valid_labels()), check_labels_file)
        .unwrap();
}

#[test]
fn fuzz_label_check() {
    let input = (vec(any::<u8>(), 0..16), 0usize..300, any::<bool>());
    runner("label check")
        .run(&input, |(labels, classes, declared)| {
            let labels: Vec<u32> = labels.into_iter().map(u32::from).collect();
            let count = if declared {
                ClassCount::Declared(classes)
            } else {
                ClassCount::FromTraining(classes)
            };
            let first_bad = labels.iter().position(|&l| l as usize >= classes);
            match (check_labels(Path::new(PATH), &labels, count), first_bad) {
                (Ok(()), None) => {}
                (Err(DataError::LabelOutOfRange { index, label, .. }), Some(i)) => {
                    prop_assert_eq!(index, i);
                    prop_assert_eq!(label, labels[i]);
                }
                (other, want) => prop_assert!(false, "{other:?} for first bad {want:?}"),
            }
            Ok(())
        })
        .unwrap();
}
