//! Fuzzing the configuration layers with a fixed budget: random `--set` strings and random
//! TOML files through `concord::config::load` never panic, and every error names what it is
//! about (the argument, a key, or the file).
//!
//! Each target tries `CASES` cases (`PROPTEST_CASES` overrides it) from a fixed seed, so every
//! run (and CI) tries the same inputs.

use concord::config::{load, ConfigError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// Cases each target tries unless `PROPTEST_CASES` says otherwise.
const CASES: u32 = 256;
/// The seed every run starts from.
const SEED: u64 = 0xC0_2F16;

fn runner(target: &str) -> TestRunner {
    concord_fuzz_support::runner(target, CASES, SEED)
}

/// Keys of the config (some nested, some kinds' fields) and a few that do not exist.
const KEYS: [&str; 24] = [
    "seed",
    "runtime",
    "workers",
    "servers",
    "batch",
    "iterations",
    "eval_every",
    "eval_every_s",
    "block_bytes",
    "progress_points",
    "time_limit_s",
    "strategies",
    "memory",
    "model",
    "model.kind",
    "model.hidden",
    "data",
    "data.kind",
    "data.classes",
    "optimizer.lr",
    "optimizer.kind",
    "cluster.default_device",
    "stragglers",
    "strategy.ssp.slack",
];

/// TOML-ish values: numbers at and past the edges, strings, arrays, tables, junk.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        prop::sample::select(vec![
            "0",
            "-1",
            "1",
            "4294967296",
            "1e400",
            "nan",
            "inf",
            "-0.0",
            "true",
            "\"\"",
            "\"sim\"",
            "\"wall\"",
            "\"mlp\"",
            "\"idx\"",
            "\"teacher\"",
            "\"profile\"",
            "[]",
            "[1, 2]",
            "[\"bsp\"]",
            "{}",
            "{kind=\"blobs\"}",
            "{kind=\"cnn\"}",
            "{kind=\"adam\", lr=-1}",
            "[{pattern=\"jitter\"}]",
            "[{pattern=\"nope\"}]",
            "{kind=3}",
            "=",
            "[",
            "{",
            "\"",
        ])
        .prop_map(String::from),
        "[ -~]{0,12}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYS.to_vec()).prop_map(String::from),
        1 => "[a-z_.]{0,10}",
    ]
}

/// What every error must do: name the argument, a key or the file, and quote names once (no
/// doubled backticks outside what the user wrote, in `input`).
fn names_its_subject(e: &ConfigError, sets: &[String], input: &str) -> bool {
    let msg = e.to_string();
    let mut ours = msg.clone();
    for piece in input.lines().chain(sets.iter().map(String::as_str)) {
        ours = ours.replace(&format!("{piece:?}"), "").replace(piece, "");
    }
    let user_backticks = input.contains('`') || sets.iter().any(|s| s.contains('`'));
    (user_backticks || !ours.contains("``"))
        && match e {
            ConfigError::BadSet { arg } => sets.contains(arg) && msg.contains(&format!("{arg:?}")),
            ConfigError::File { path, .. } => msg.contains(&path.display().to_string()),
            ConfigError::Invalid(_) => msg.contains("key `") || msg.contains("(in "),
            ConfigError::Range { .. } => msg.contains("set by"),
            ConfigError::Engine(_) => msg.contains('`') || msg.contains("field"),
        }
}

#[test]
fn fuzz_config_set_arguments() {
    let sets = vec(
        prop_oneof![
            4 => (key(), value()).prop_map(|(k, v)| format!("{k}={v}")),
            1 => "[ -~]{0,16}",
        ],
        0..4,
    );
    runner("config --set")
        .run(&sets, |sets| {
            if let Err(e) = load(None, &sets) {
                prop_assert!(names_its_subject(&e, &sets, ""), "{sets:?}: {e}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_config_files() {
    let doc = vec((key(), value()), 0..5).prop_map(|lines| {
        lines
            .into_iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect::<String>()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzzed.toml");
    runner("config files")
        .run(&doc, |doc| {
            std::fs::write(&path, &doc).unwrap();
            if let Err(e) = load(Some(&path), &[]) {
                prop_assert!(names_its_subject(&e, &[], &doc), "{doc}: {e}");
            }
            Ok(())
        })
        .unwrap();
}

/// Found by `fuzz_config_set_arguments`: figment quoted serde's list of allowed fields in a
/// second pair of backticks (``one of `seed`, ...``).
#[test]
fn an_unknown_field_quotes_each_name_once() {
    let e = load(None, &["wrokers=3".into()]).unwrap_err().to_string();
    assert!(
        e.contains("unknown field `wrokers`, expected one of `seed`, `runtime`")
            && !e.contains("``"),
        "{e}"
    );
    let e = load(None, &["data.kind=\"\"".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown variant \"\" (an empty name), expected one of `teacher`")
            && !e.contains("``"),
        "{e}"
    );
}

/// Found by `fuzz_config_set_arguments`: `--set .=0` reached the config as an empty key.
#[test]
fn a_set_key_with_an_empty_part_is_malformed() {
    for arg in [".=0", "a..b=1", "model.=2", " . =3"] {
        let e = load(None, &[arg.into()]).unwrap_err();
        assert!(matches!(e, ConfigError::BadSet { .. }), "{arg}: {e}");
    }
}
