//! Fuzzing the CSV trace reader with a fixed budget: random bytes and mutated valid traces
//! never panic; a parsed trace is sorted with finite factors > 0; every error is a typed CSV
//! error naming the file; the job check rejects exactly the rows naming roles outside the job.
//!
//! Each target tries [`CASES`] cases (`PROPTEST_CASES` overrides it) from the fixed seed
//! [`SEED`], so every run (and CI) tries the same inputs.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use crate::patterns::csv_trace::{check_rows, parse_rows};
use crate::{JobShape, StragglerError};

/// Cases each target tries unless `PROPTEST_CASES` says otherwise.
const CASES: u32 = 512;
/// The seed every run starts from.
const SEED: u64 = 0xC5F_7ACE;

fn runner(target: &str) -> TestRunner {
    concord_fuzz_support::runner(target, CASES, SEED)
}

const PATH: &str = "fuzzed.csv";

/// Parses `text`; checks what any outcome must satisfy.
fn check_parse(text: &[u8]) -> Result<(), TestCaseError> {
    match parse_rows(PATH, text) {
        Ok(rows) => {
            let mut prev = f64::NEG_INFINITY;
            for row in &rows {
                prop_assert!(row.line >= 2, "data row on line {}", row.line);
                prop_assert!(row.time.is_finite() && row.time >= prev);
                prop_assert!(row.factor.is_finite() && row.factor > 0.0);
                prev = row.time;
            }
        }
        Err(e) => {
            prop_assert!(
                matches!(e, StragglerError::CsvRow { .. }) && e.to_string().contains(PATH),
                "{e}"
            );
        }
    }
    Ok(())
}

/// One row of a valid trace: a role kind, an id, a time step and a factor.
fn row() -> impl Strategy<Value = (u8, u32, f64, f64)> {
    (0u8..3, 0u32..12, 0.0f64..5.0, 0.01f64..10.0)
}

/// A valid trace (sorted by time) as text.
fn valid_trace() -> impl Strategy<Value = String> {
    vec(row(), 0..8).prop_map(|rows| {
        let mut text = String::from("time,role,factor\n");
        let mut time = 0.0;
        for (kind, id, step, factor) in rows {
            time += step;
            let kind = ["worker", "server", "machine"][kind as usize];
            text.push_str(&format!("{time},{kind}:{id},{factor}\n"));
        }
        text
    })
}

/// `text` with a few characters replaced, inserted or removed.
fn mutated_trace() -> impl Strategy<Value = Vec<u8>> {
    let edit = (
        0u8..3,
        any::<prop::sample::Index>(),
        prop::sample::select(b"0123456789,:.-\n\r\" eEwmsx".to_vec()),
    );
    (valid_trace(), vec(edit, 1..4)).prop_map(|(text, edits)| {
        let mut bytes = text.into_bytes();
        for (op, at, b) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = b,
                1 => bytes.insert(i, b),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.push(b),
            }
        }
        bytes
    })
}

#[test]
fn fuzz_csv_random_bytes() {
    let text = prop_oneof![
        vec(any::<u8>(), 0..64),
        "time,role,factor\n[0-9a-z:,.\n -]{0,60}".prop_map(String::into_bytes),
    ];
    runner("csv random bytes")
        .run(&text, |t| check_parse(&t))
        .unwrap();
}

#[test]
fn fuzz_csv_mutated_traces() {
    runner("csv mutated traces")
        .run(&mutated_trace(), |t| check_parse(&t))
        .unwrap();
}

#[test]
fn fuzz_csv_job_check() {
    let input = (valid_trace(), 1u32..12, 1u32..12, 1u32..12);
    runner("csv job check")
        .run(&input, |(text, workers, servers, machines)| {
            let job = JobShape {
                workers,
                servers,
                machines,
            };
            let rows = parse_rows(PATH, text.as_bytes()).map_err(|e| {
                TestCaseError::fail(format!("a valid trace fails to parse: {e}\n{text}"))
            })?;
            // The first data row naming a role outside the job, by line (header = line 1).
            let first_bad = text.lines().skip(1).position(|line| {
                let role = line.split(',').nth(1).unwrap_or("");
                let (kind, id) = role.split_once(':').unwrap_or(("", ""));
                let id: u32 = id.parse().unwrap_or(0);
                let count = match kind {
                    "worker" => workers,
                    "server" => servers,
                    _ => machines,
                };
                id >= count
            });
            match (check_rows(PATH, &rows, &job), first_bad) {
                (Ok(()), None) => {}
                (Err(StragglerError::CsvRow { line, column, .. }), Some(i)) => {
                    prop_assert_eq!(line, i as u64 + 2);
                    prop_assert_eq!(column, "role");
                }
                (other, want) => prop_assert!(false, "{other:?} for first bad row {want:?}"),
            }
            Ok(())
        })
        .unwrap();
}
