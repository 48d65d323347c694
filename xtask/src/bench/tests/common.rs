//! Helpers shared by the bench tests: a minimal suite, parsing, made-up rows, SVG text.

use crate::bench::error::BenchError;
use crate::bench::report::row::Row;
use crate::bench::suite::schema::Suite;
use std::path::Path;

/// Parses suite text as if read from `bench/test.toml`.
pub fn parse(text: &str) -> Result<Suite, BenchError> {
    Suite::parse(text, Path::new("bench/test.toml"))
}

/// A two-strategy, one-scenario suite with short cells.
pub const MINIMAL: &str = r#"
seeds = [1]
[[strategies]]
label = "bsp"
strategies = ["bsp"]
[[strategies]]
label = "ssp"
strategies = ["ssp"]
options = { ssp = { slack = 2 } }
[[scenarios]]
label = "tiny"
config = { workers = 2, servers = 1, iterations = 12, eval_every = 6, stragglers = [{ pattern = "slow-worker", delay = 1.0 }] }
"#;

/// MINIMAL with a third strategy and a second scenario that runs only some of them.
pub const SUBSETS: &str = r#"
seeds = [1, 2]
[[strategies]]
label = "bsp"
strategies = ["bsp"]
[[strategies]]
label = "ssp"
strategies = ["ssp"]
options = { ssp = { slack = 2 } }
[[strategies]]
label = "asp"
strategies = ["asp"]
[[scenarios]]
label = "all"
config = { workers = 2, servers = 1, iterations = 12 }
[[scenarios]]
label = "some"
strategies = ["asp", "bsp"]
config = { workers = 2, servers = 1, iterations = 12 }
"#;

/// A made-up row of `strategy` with `seed` and time per iteration `tpi` in scenario `s`.
pub fn row(strategy: &str, seed: u64, tpi: f64) -> Row {
    Row {
        suite: "t".into(),
        scenario: "s".into(),
        strategy: strategy.into(),
        seed,
        sweep_key: None,
        sweep_value: None,
        iterations: 10,
        time_per_iteration_s: tpi,
        time_to_target_s: None,
        iterations_to_target: None,
        time_to_target_resolution_s: None,
        iterations_to_target_resolution: None,
        phase_ratio: None,
        per_iteration_delay_s: None,
        steady_time_per_iteration_s: Some(tpi),
        run_time_s: tpi * 10.0,
        final_loss: Some(0.5),
        final_accuracy: None,
        final_auc: None,
        efficiency: 0.5,
        wait_share: 0.1,
        bytes_sent: 1,
        peak_worker_memory_bytes: 1,
        peak_server_memory_bytes: 1,
        throughput_samples_per_s: 1.0,
        figures: String::new(),
    }
}

/// Every `<text>` of an SVG file, after checking that it parses as XML with an `<svg>` root.
pub fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
    assert_eq!(
        doc.root_element().tag_name().name(),
        "svg",
        "{}",
        path.display()
    );
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            n.descendants()
                .filter(|t| t.is_text())
                .filter_map(|t| t.text())
                .collect::<String>()
                .trim()
                .to_string()
        })
        .collect()
}

/// Asserts that every `wanted` text is among an SVG's `texts`.
pub fn assert_has(texts: &[String], wanted: &[&str], path: &Path) {
    for w in wanted {
        assert!(
            texts.iter().any(|t| t == w),
            "{}: no <text> {w:?}; texts: {texts:?}",
            path.display()
        );
    }
}
