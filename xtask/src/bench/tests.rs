//! Tests of the bench: suite parsing and errors, sweep expansion, determinism of a real cell,
//! claims, and that the report's plots are valid SVG with titles, axis labels and legends.

use super::plot::{self, Bars, Labels, Line, Reference};
use super::report::{self, check_claim, Row};
use super::runner::{self, fnv1a, RunSettings};
use super::suite::{self, set_path, Suite};
use std::path::Path;

fn parse(text: &str) -> Result<Suite, super::BenchError> {
    Suite::parse(text, Path::new("bench/test.toml"))
}

const MINIMAL: &str = r#"
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

#[test]
fn every_suite_file_parses_and_resolves() {
    let files = suite::suite_files(&suite::bench_dir()).expect("bench/ is readable");
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    for wanted in ["smoke", "stragglers", "scaling", "paper"] {
        assert!(
            names.iter().any(|n| n == wanted),
            "bench/{wanted}.toml is missing: {names:?}"
        );
    }
    for file in files {
        let s = Suite::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let scenarios = s.scenarios_expanded();
        let cells = s.cells(&scenarios).unwrap_or_else(|e| panic!("{e}"));
        let per_scenario: usize = scenarios
            .iter()
            .map(|sc| s.scenario_strategies(&sc.spec).len())
            .sum();
        assert_eq!(
            cells.len(),
            per_scenario * s.seeds.len(),
            "{}",
            file.display()
        );
        for c in &cells {
            assert_eq!(c.config.runtime, concord_engine::context::RuntimeKind::Sim);
        }
    }
}

#[test]
fn the_stragglers_suite_covers_every_pattern_file_at_8_and_32_workers() {
    let s = Suite::load_named("stragglers").expect("stragglers suite");
    let dir = suite::workspace_root().join("configs/stragglers");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("configs/stragglers")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .filter_map(|p| {
            p.file_name()
                .map(|n| format!("configs/stragglers/{}", n.to_string_lossy()))
        })
        .collect();
    files.sort();
    for f in &files {
        assert!(
            s.scenarios
                .iter()
                .any(|sc| sc.file.as_deref() == Some(f.as_str())
                    && sc.config.get("stragglers").is_none()),
            "no scenario runs {f}"
        );
    }
    let labels: Vec<&str> = s.strategies.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, ["bsp", "ssp", "asp"]);
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let workers: std::collections::BTreeSet<u32> = cells.iter().map(|c| c.config.workers).collect();
    assert_eq!(workers.into_iter().collect::<Vec<_>>(), [8, 32]);
}

#[test]
fn an_unknown_key_is_an_error_naming_it_and_the_file() {
    let e = parse(&format!("sedes = [2]\n{MINIMAL}")).expect_err("unknown top-level key");
    let msg = e.to_string();
    assert!(
        msg.contains("sedes") && msg.contains("bench/test.toml"),
        "{msg}"
    );

    let text = MINIMAL.replace(
        "label = \"tiny\"",
        "label = \"tiny\"\ntarget = { acuracy = 0.5 }",
    );
    let msg = parse(&text).expect_err("unknown target key").to_string();
    assert!(
        msg.contains("acuracy") && msg.contains("scenarios[0].target"),
        "{msg}"
    );

    // A config key is checked when the cells are resolved, against the engine's schema.
    let text = MINIMAL.replace("workers = 2,", "wrokers = 2,");
    let s = parse(&text).expect("suite schema is fine");
    let msg = s
        .cells(&s.scenarios_expanded())
        .expect_err("unknown config key")
        .to_string();
    assert!(
        msg.contains("wrokers") && msg.contains("bench/test.toml"),
        "{msg}"
    );

    // An unknown strategy fails before anything runs, naming the key.
    let text = MINIMAL.replace("strategies = [\"ssp\"]", "strategies = [\"sps\"]");
    let s = parse(&text).expect("suite schema is fine");
    let msg = s
        .cells(&s.scenarios_expanded())
        .expect_err("unknown strategy")
        .to_string();
    assert!(
        msg.contains("strategies[1].strategies") && msg.contains("sps"),
        "{msg}"
    );
}

#[test]
fn bad_claims_targets_and_labels_are_rejected() {
    let with =
        |extra: &str| MINIMAL.replace("label = \"tiny\"", &format!("label = \"tiny\"\n{extra}"));
    let claim = |body: &str| {
        with(&format!("claim = {{ text = \"t\", strategy = \"ssp\", baseline = \"bsp\", expect = \"less\", {body} }}"))
    };
    let msg = parse(&claim("metric = \"speed\""))
        .expect_err("bad metric")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claim.metric") && msg.contains("time_per_iteration_s"),
        "{msg}"
    );
    let msg = parse(&claim("metric = \"efficiency\", by_at_least = -1.5"))
        .expect_err("negative")
        .to_string();
    assert!(msg.contains("by_at_least"), "{msg}");
    let bad_baseline = with("claim = { text = \"t\", metric = \"efficiency\", strategy = \"ssp\", baseline = \"asp\", expect = \"greater\" }");
    let msg = parse(&bad_baseline)
        .expect_err("unknown baseline")
        .to_string();
    assert!(
        msg.contains("claim.baseline") && msg.contains("asp"),
        "{msg}"
    );
    let msg = parse(&with("target = { accuracy = 0.5, loss = 0.1 }"))
        .expect_err("two targets")
        .to_string();
    assert!(msg.contains("scenarios[0].target"), "{msg}");
    let msg = parse(&with("target = { test_loss = 0.5 }"))
        .and_then(|s| s.cells(&s.scenarios_expanded()))
        .expect_err("no timed evaluations")
        .to_string();
    assert!(
        msg.contains("target.test_loss") && msg.contains("eval_every_s"),
        "{msg}"
    );
    let twice = format!("{MINIMAL}\n[[strategies]]\nlabel = \"bsp\"\nstrategies = [\"bsp\"]\n");
    let msg = parse(&twice).expect_err("duplicate label").to_string();
    assert!(msg.contains("strategies[2].label"), "{msg}");
}

#[test]
fn a_sweep_makes_one_scenario_per_value() {
    let text = MINIMAL.replace(
        "label = \"tiny\"",
        "label = \"tiny\"\nsweep = { key = \"stragglers.0.delay\", values = [0.5, 2.0, 4.0] }",
    );
    let s = parse(&text).expect("suite");
    let scenarios = s.scenarios_expanded();
    let labels: Vec<&str> = scenarios.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        ["tiny delay=0.5", "tiny delay=2.0", "tiny delay=4.0"]
    );
    assert!(scenarios.iter().all(|s| s.group == "tiny"));
    let cells = s.cells(&scenarios).expect("cells");
    assert_eq!(cells.len(), 3 * 2);
    let delays: Vec<String> = cells
        .iter()
        .map(|c| format!("{:?}", c.config.stragglers[0]))
        .collect();
    assert!(
        delays[0].contains("delay: 0.5") && delays[5].contains("delay: 4.0"),
        "{delays:?}"
    );
    // Strategy options reach the run config.
    assert_eq!(cells[1].config.strategies, ["ssp"]);
    assert_eq!(
        cells[1]
            .config
            .strategy
            .get("ssp")
            .and_then(|t| t.get("slack"))
            .and_then(|v| v.as_integer()),
        Some(2)
    );

    // A suite-level sweep applies to scenarios without their own.
    let text = format!("{MINIMAL}\n[sweep]\nkey = \"workers\"\nvalues = [2, 4]\n");
    let s = parse(&text).expect("suite");
    let cells = s.cells(&s.scenarios_expanded()).expect("cells");
    let workers: Vec<u32> = cells.iter().map(|c| c.config.workers).collect();
    assert_eq!(workers, [2, 2, 4, 4]);
}

#[test]
fn set_path_walks_tables_and_array_indices() {
    let mut t: toml::Table =
        toml::from_str("[[stragglers]]\npattern = \"jitter\"\nsigma = 0.1").expect("toml");
    set_path(&mut t, "stragglers.0.sigma", toml::Value::Float(0.3)).expect("set");
    set_path(
        &mut t,
        "cluster.devices.core.nic_gbps",
        toml::Value::Float(1.0),
    )
    .expect("set");
    set_path(&mut t, "workers", toml::Value::Integer(16)).expect("set");
    assert_eq!(t["stragglers"][0]["sigma"].as_float(), Some(0.3));
    assert_eq!(
        t["cluster"]["devices"]["core"]["nic_gbps"].as_float(),
        Some(1.0)
    );
    assert_eq!(t["workers"].as_integer(), Some(16));
    let e = set_path(&mut t, "stragglers.3.sigma", toml::Value::Float(0.3)).expect_err("index");
    assert!(e.contains("no index 3"), "{e}");
    let e = set_path(&mut t, "workers.x", toml::Value::Float(0.3)).expect_err("not a table");
    assert!(e.contains("`workers`"), "{e}");
}

#[test]
fn fnv1a_is_the_reference_hash() {
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn two_runs_of_the_same_cell_give_the_same_row() {
    let s = parse(MINIMAL).expect("suite");
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let cell = &cells[1]; // ssp under Slow Worker
    let a = runner::run_cell(&cell.config).expect("first run");
    let b = runner::run_cell(&cell.config).expect("second run");
    assert_eq!(a, b, "metrics and curves differ between two runs");
    let rows_a = report::rows(&s, &scenarios, &cells[1..2], &[Some(a)]);
    let rows_b = report::rows(&s, &scenarios, &cells[1..2], &[Some(b)]);
    assert_eq!(rows_a, rows_b);
    assert_eq!(rows_a.len(), 1);
    assert_eq!(rows_a[0].iterations, 12);
    assert!(rows_a[0].time_per_iteration_s > 0.0);
    // Same config and version, same cache key; another seed, another key.
    let key = runner::cache_key("v", &cell.config);
    assert_eq!(key, runner::cache_key("v", &cell.config.clone()));
    let mut other = cell.config.clone();
    other.seed += 1;
    assert_ne!(key, runner::cache_key("v", &other));
    assert_ne!(key, runner::cache_key("w", &cell.config));
}

fn row(strategy: &str, seed: u64, tpi: f64) -> Row {
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
        phase_ratio: None,
        steady_time_per_iteration_s: Some(tpi),
        run_time_s: tpi * 10.0,
        final_loss: Some(0.5),
        final_accuracy: None,
        efficiency: 0.5,
        wait_share: 0.1,
        bytes_sent: 1,
        peak_worker_memory_bytes: 1,
        peak_server_memory_bytes: 1,
        throughput_samples_per_s: 1.0,
        figures: String::new(),
    }
}

#[test]
fn a_claim_is_checked_on_direction_and_size() {
    let rows = vec![
        row("bsp", 1, 1.0),
        row("bsp", 2, 1.0),
        row("ssp", 1, 0.5),
        row("ssp", 2, 0.7),
    ];
    let claim = |by_at_least: f64, by_at_most: Option<f64>, expect: &str| {
        let text = format!(
            "text = \"c\"\nmetric = \"time_per_iteration_s\"\nstrategy = \"ssp\"\nbaseline = \"bsp\"\nexpect = \"{expect}\"\nby_at_least = {by_at_least}\n{}",
            by_at_most.map_or(String::new(), |m| format!("by_at_most = {m}"))
        );
        toml::from_str::<suite::Claim>(&text).expect("claim")
    };
    let check = check_claim(&rows, "s", &claim(0.35, None, "less")).expect("data");
    assert!(
        (check.relative - 0.4).abs() < 1e-12 && check.holds,
        "{check:?}"
    );
    assert!(
        !check_claim(&rows, "s", &claim(0.5, None, "less"))
            .expect("data")
            .holds
    );
    assert!(
        !check_claim(&rows, "s", &claim(0.1, Some(0.3), "less"))
            .expect("data")
            .holds
    );
    assert!(
        check_claim(&rows, "s", &claim(0.35, Some(0.53), "less"))
            .expect("data")
            .holds
    );
    assert!(
        !check_claim(&rows, "s", &claim(0.0, None, "greater"))
            .expect("data")
            .holds
    );
    assert!(check_claim(&rows, "other", &claim(0.0, None, "less")).is_none());
}

/// A cell result as the cache stores it, with `iterations` and an empty curve (and, as before
/// time-indexed evaluations existed, no `evals` key).
fn cached_result(iterations: u64) -> runner::CellResult {
    serde_json::from_value(serde_json::json!({
        "metrics": {"iterations": iterations, "run_time_s": iterations as f64,
            "time_per_iteration_s": 1.0, "throughput_samples_per_s": 1.0, "ideal_time_s": 1.0,
            "efficiency": 0.3, "wait_share": 0.0, "final_loss": 0.1, "final_accuracy": 0.9,
            "final_test_loss": null, "bytes_sent": 0, "messages_sent": 0,
            "peak_worker_memory_bytes": 0, "peak_server_memory_bytes": 0, "figures": {}},
        "curve": []
    }))
    .expect("cached result")
}

#[test]
fn time_to_target_is_the_first_time_reached() {
    use runner::{CellResult, CurvePoint};
    let r = cached_result(3);
    let r = CellResult {
        curve: vec![
            CurvePoint {
                iteration: 1,
                time_s: 1.0,
                loss: Some(0.9),
                test_accuracy: Some(0.4),
                test_loss: None,
            },
            CurvePoint {
                iteration: 2,
                time_s: 2.0,
                loss: Some(0.4),
                test_accuracy: None,
                test_loss: None,
            },
            CurvePoint {
                iteration: 3,
                time_s: 3.0,
                loss: Some(0.5),
                test_accuracy: Some(0.8),
                test_loss: None,
            },
        ],
        ..r
    };
    let t = |text: &str| toml::from_str::<suite::Target>(text).expect("target");
    assert_eq!(report::time_to_target(&r, &t("accuracy = 0.7")), Some(3.0));
    assert_eq!(report::time_to_target(&r, &t("loss = 0.45")), Some(2.0));
    assert_eq!(report::time_to_target(&r, &t("accuracy = 0.95")), None);
    // Convergence: |0.5 − 0.9| > 25 % of 0.9 over two iterations, but |0.4 − 0.5| ≤ 25 % of 0.5
    // over one.
    let c = |text: &str| t(&format!("converged = {{ {text} }}"));
    assert_eq!(
        report::time_to_target(&r, &c("change = 0.25, over = 2")),
        None
    );
    assert_eq!(
        report::time_to_target(&r, &c("change = 0.25, over = 1")),
        Some(3.0)
    );
    assert_eq!(
        report::iterations_to_target(&r, &c("change = 0.6, over = 1")),
        Some(2)
    );
    assert_eq!(
        report::iterations_to_target(&r, &c("change = 0.6, over = 1, after = 2")),
        Some(3)
    );
}

#[test]
fn time_indexed_evaluations_decide_test_loss_and_accuracy_targets() {
    use runner::{CellResult, CurvePoint, EvalPoint};
    let point = |iteration: u64, time_s: f64, acc: Option<f64>| CurvePoint {
        iteration,
        time_s,
        loss: Some(0.1),
        test_accuracy: acc,
        test_loss: None,
    };
    let eval = |time_s: f64, iteration: u64, loss: f64, acc: f64| EvalPoint {
        time_s,
        iteration,
        test_loss: Some(loss),
        test_accuracy: Some(acc),
    };
    // A result cached before evaluations existed still reads.
    let r = cached_result(2);
    assert!(r.evals.is_empty());
    let r = CellResult {
        curve: vec![point(1, 1.0, None), point(2, 2.0, Some(0.95))],
        evals: vec![
            eval(0.0, 0, 2.0, 0.1),
            eval(0.5, 0, 0.8, 0.5),
            eval(1.0, 1, 0.4, 0.8),
            eval(1.5, 1, 0.3, 0.9),
        ],
        ..r
    };
    let t = |text: &str| toml::from_str::<suite::Target>(text).expect("target");
    assert_eq!(report::time_to_target(&r, &t("test_loss = 0.5")), Some(1.0));
    assert_eq!(
        report::iterations_to_target(&r, &t("test_loss = 0.5")),
        Some(1)
    );
    assert_eq!(report::time_to_target(&r, &t("test_loss = 0.1")), None);
    // With evaluations, accuracy is read from them, not from the per-iteration ones.
    assert_eq!(report::time_to_target(&r, &t("accuracy = 0.85")), Some(1.5));
    // The training-loss target still reads the curve.
    assert_eq!(report::time_to_target(&r, &t("loss = 0.1")), Some(1.0));
}

/// Every `<text>` of an SVG file, after checking that it parses as XML with an `<svg>` root.
fn svg_texts(path: &Path) -> Vec<String> {
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

fn assert_has(texts: &[String], wanted: &[&str], path: &Path) {
    for w in wanted {
        assert!(
            texts.iter().any(|t| t == w),
            "{}: no <text> {w:?}; texts: {texts:?}",
            path.display()
        );
    }
}

#[test]
fn plots_are_svg_with_title_axis_labels_and_legend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let labels = Labels {
        title: "Loss vs time".into(),
        x: "virtual time (s)".into(),
        y: "training loss".into(),
    };
    let lines_path = dir.path().join("lines.svg");
    plot::lines(
        &lines_path,
        &labels,
        &[
            Line {
                label: "bsp".into(),
                points: vec![(0.0, 2.0), (1.0, 1.0)],
                color: None,
            },
            Line {
                label: "ssp <s=1> & co".into(),
                points: vec![(0.0, 2.0), (0.8, 0.9)],
                color: Some(3),
            },
        ],
        true,
        Some(&Reference {
            y: 0.5,
            label: "target".into(),
        }),
        plotters::prelude::SeriesLabelPosition::UpperRight,
    )
    .expect("line plot");
    let texts = svg_texts(&lines_path);
    assert_has(
        &texts,
        &[
            "Loss vs time",
            "virtual time (s)",
            "training loss",
            "bsp",
            "ssp <s=1> & co",
            "target",
        ],
        &lines_path,
    );

    let bars_path = dir.path().join("bars.svg");
    let groups: Vec<String> = (0..6).map(|i| format!("scenario {i}")).collect();
    plot::grouped_bars(
        &bars_path,
        &Labels {
            title: "Time per iteration".into(),
            x: "scenario".into(),
            y: "ms".into(),
        },
        &groups,
        &[
            Bars {
                label: "bsp".into(),
                values: vec![Some((1.0, 0.9, 1.1)); 6],
            },
            Bars {
                label: "asp".into(),
                values: vec![None, Some((0.5, 0.5, 0.5)), None, None, None, None],
            },
        ],
        Some(&Reference {
            y: 1.0,
            label: "ideal".into(),
        }),
    )
    .expect("bar plot");
    let texts = svg_texts(&bars_path);
    assert_has(
        &texts,
        &[
            "Time per iteration",
            "scenario",
            "ms",
            "bsp",
            "asp",
            "ideal",
            "scenario 0",
            "scenario 5",
        ],
        &bars_path,
    );
}

/// The smoke suite end to end into a temporary folder: every expected cell is in the CSV, the
/// report and every plot are written, each plot is valid SVG with its title, axis labels and a
/// legend entry per strategy, and a second run takes every cell from the cache with the same
/// numbers.
#[test]
fn the_smoke_suite_writes_every_cell_report_and_plot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Suite::load_named("smoke").expect("smoke suite");
    let settings = RunSettings {
        jobs: 2,
        force: false,
        progress: false,
    };
    let root = suite::workspace_root();
    let run = super::run_suite(&s, None, dir.path(), &settings, &root).expect("smoke runs");
    assert_eq!(run.ran, run.expected.len());
    super::check_csv(dir.path(), &run.expected).expect("every cell in results.csv");
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).expect("csv");
    let report = std::fs::read_to_string(dir.path().join("REPORT.md")).expect("report");
    assert!(
        report.contains("Code version") && report.contains("Seeds:** 1"),
        "{report}"
    );
    assert!(report.contains("## Claims") && (report.contains('✓') || report.contains('✗')));
    assert!(report.contains("★"));

    let plots: Vec<_> = std::fs::read_dir(dir.path().join("plots"))
        .expect("plots")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let names: Vec<String> = plots
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for wanted in [
        "time-per-iteration.svg",
        "efficiency.svg",
        "loss-no-stragglers.svg",
        "accuracy-no-stragglers.svg",
        "sweep-slow-worker-time-per-iteration.svg",
        "sweep-slow-worker-efficiency.svg",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "no {wanted} in {names:?}"
        );
    }
    for p in &plots {
        let texts = svg_texts(p);
        assert_has(&texts, &["bsp", "ssp"], p);
        assert!(
            texts
                .iter()
                .any(|t| t.contains("suite smoke") || t.contains(": ")),
            "{}: no title",
            p.display()
        );
        assert!(
            texts
                .iter()
                .any(|t| t.contains("virtual") || t.contains("efficiency")),
            "{}: no axis label: {texts:?}",
            p.display()
        );
    }

    // Again: all cached, same CSV.
    let again = super::run_suite(&s, None, dir.path(), &settings, &root).expect("cached run");
    assert_eq!((again.ran, again.cached), (0, run.expected.len()));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.csv")).expect("csv"),
        csv
    );
    // A filter that matches nothing is an error, not an empty run.
    let err = super::run_suite(&s, Some("no such cell"), dir.path(), &settings, &root)
        .expect_err("no match");
    assert!(err.to_string().contains("no such cell"));
}

/// MINIMAL with a third strategy and a second scenario that runs only some of them.
const SUBSETS: &str = r#"
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

#[test]
fn a_scenario_runs_only_its_strategies() {
    let s = parse(SUBSETS).expect("suite");
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let expected = report::expected_cells(&s, &scenarios, &cells);
    let ids: Vec<(String, String, u64)> = expected.into_iter().collect();
    let some: Vec<(&str, u64)> = ids
        .iter()
        .filter(|(sc, _, _)| sc == "some")
        .map(|(_, st, seed)| (st.as_str(), *seed))
        .collect();
    // Suite order (bsp before asp is not implied: expected_cells is sorted by label).
    assert_eq!(some, [("asp", 1), ("asp", 2), ("bsp", 1), ("bsp", 2)]);
    assert_eq!(ids.iter().filter(|(sc, _, _)| sc == "all").count(), 6);
    assert_eq!(cells.len(), 6 + 4);
    // Cells of a subset scenario keep the suite's strategy order and indices.
    let some_cells: Vec<usize> = cells
        .iter()
        .filter(|c| scenarios[c.scenario].label == "some")
        .map(|c| c.strategy)
        .collect();
    assert_eq!(some_cells, [0, 0, 2, 2]);

    // An unknown label is an error naming the file and the key.
    let msg = parse(&SUBSETS.replace("[\"asp\", \"bsp\"]", "[\"asp\", \"flexrr\"]"))
        .expect_err("unknown label")
        .to_string();
    assert!(
        msg.contains("bench/test.toml")
            && msg.contains("scenarios[1].strategies")
            && msg.contains("flexrr"),
        "{msg}"
    );
    let msg = parse(&SUBSETS.replace("[\"asp\", \"bsp\"]", "[]"))
        .expect_err("empty subset")
        .to_string();
    assert!(msg.contains("scenarios[1].strategies"), "{msg}");
    let msg = parse(&SUBSETS.replace("[\"asp\", \"bsp\"]", "[\"asp\", \"asp\"]"))
        .expect_err("listed twice")
        .to_string();
    assert!(msg.contains("scenarios[1].strategies[1]"), "{msg}");

    // A claim about a strategy the scenario does not run is an error.
    let claim = "claims = [{ text = \"t\", metric = \"efficiency\", strategy = \"ssp\", baseline = \"bsp\", expect = \"greater\" }]";
    let text = SUBSETS.replace(
        "strategies = [\"asp\", \"bsp\"]",
        &format!("strategies = [\"asp\", \"bsp\"]\n{claim}"),
    );
    let msg = parse(&text).expect_err("ssp not run").to_string();
    assert!(
        msg.contains("scenarios[1].claims[0].strategy") && msg.contains("ssp"),
        "{msg}"
    );
}

/// The report of a subset scenario, from made-up results: only its strategies appear in its
/// table, best marking and plots; the speed-up column is left out where it lacks the baseline.
#[test]
fn the_report_of_a_subset_scenario_shows_only_its_strategies() {
    let text = SUBSETS.replace("[\"asp\", \"bsp\"]", "[\"asp\", \"ssp\"]").replace(
        "label = \"some\"",
        "label = \"some\"\nclaims = [\n  { text = \"asp waits less than ssp\", metric = \"wait_share\", strategy = \"asp\", baseline = \"ssp\", expect = \"less\" },\n  { text = \"asp rmse under 10%\", source = \"made up\", metric = \"figure:asp.rmse\", strategy = \"asp\", expect = \"less\", than = 0.1 },\n]",
    );
    let s = parse(&text).expect("suite");
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let results: Vec<Option<runner::CellResult>> = cells
        .iter()
        .map(|c| {
            let mut figures = std::collections::BTreeMap::new();
            figures.insert("asp.rmse".to_string(), 0.05 + c.seed as f64 * 1e-3);
            Some(runner::CellResult {
                metrics: runner::Metrics {
                    iterations: 12,
                    run_time_s: 1.2,
                    time_per_iteration_s: 0.1 / (1.0 + c.strategy as f64),
                    throughput_samples_per_s: 1.0,
                    ideal_time_s: 1.0,
                    efficiency: 0.8,
                    wait_share: 0.3 - 0.1 * c.strategy as f64,
                    final_loss: Some(0.5),
                    final_accuracy: None,
                    final_test_loss: None,
                    bytes_sent: 10,
                    messages_sent: 1,
                    peak_worker_memory_bytes: 1,
                    peak_server_memory_bytes: 1,
                    figures,
                },
                curve: vec![
                    runner::CurvePoint {
                        iteration: 1,
                        time_s: 0.1,
                        loss: Some(1.0),
                        test_accuracy: None,
                        test_loss: None,
                    },
                    runner::CurvePoint {
                        iteration: 2,
                        time_s: 0.2,
                        loss: Some(0.5),
                        test_accuracy: None,
                        test_loss: None,
                    },
                ],
                evals: Vec::new(),
            })
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = report::ReportInput {
        suite: &s,
        scenarios: &scenarios,
        cells: &cells,
        results: &results,
        code_version: "v",
    };
    let rows = report::write_all(dir.path(), &input).expect("report");
    assert_eq!(rows.len(), 10);
    let md = std::fs::read_to_string(dir.path().join("REPORT.md")).expect("report");
    let section = md.split("### some").nth(1).expect("section of `some`");
    assert!(!section.contains("| bsp"), "{section}");
    assert!(
        section.contains("| ssp") && section.contains("**asp** ★"),
        "{section}"
    );
    assert!(!section.contains("speed-up"), "{section}");
    let all = md.split("### all").nth(1).expect("section of `all`");
    assert!(all.contains("speed-up vs bsp"), "{all}");
    // Both claims, in the summary near the top and in the section.
    let summary = md.split("## Scenarios").next().expect("top");
    assert!(
        summary.contains("## Claims") && summary.contains("2 of 2 claims hold"),
        "{summary}"
    );
    assert!(summary.contains("asp rmse under 10%") && summary.contains("made up"));
    assert_eq!(section.matches("**Claim").count(), 2, "{section}");
    let texts = svg_texts(&dir.path().join("plots/loss-some.svg"));
    assert_has(&texts, &["asp", "ssp"], Path::new("loss-some.svg"));
    assert!(!texts.iter().any(|t| t == "bsp"), "{texts:?}");
    // Rewriting from the same results gives the same files.
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).expect("csv");
    report::write_all(dir.path(), &input).expect("again");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("REPORT.md")).expect("report"),
        md
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.csv")).expect("csv"),
        csv
    );
}

#[test]
fn a_scenario_takes_several_claims_and_a_single_one() {
    let with =
        |extra: &str| MINIMAL.replace("label = \"tiny\"", &format!("label = \"tiny\"\n{extra}"));
    let text = with(
        "claim = { text = \"a\", metric = \"time_per_iteration_s\", strategy = \"ssp\", baseline = \"bsp\", expect = \"less\" }\n\
         claims = [\n\
           { text = \"b\", metric = \"wait_share\", strategy = \"ssp\", expect = \"less\", than = 0.05 },\n\
           { text = \"c\", metric = \"figure:ssp.max_staleness\", strategy = \"ssp\", expect = \"less\", than = 3, by_at_least = 0.1, by_at_most = 0.9 },\n\
         ]",
    );
    let s = parse(&text).expect("suite");
    let claims = s.scenarios[0].all_claims();
    let keys: Vec<&str> = claims.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["claim", "claims[0]", "claims[1]"]);
    assert_eq!(claims[1].1.than, Some(0.05));
    assert_eq!(claims[2].1.than, Some(3.0));
    assert_eq!(claims[0].1.baseline.as_deref(), Some("bsp"));

    // The `[[scenarios.claims]]` form.
    let tables = format!(
        "{MINIMAL}\n[[scenarios.claims]]\ntext = \"d\"\nmetric = \"efficiency\"\nstrategy = \"ssp\"\nbaseline = \"bsp\"\nexpect = \"greater\"\n\n[[scenarios.claims]]\ntext = \"e\"\nmetric = \"efficiency\"\nstrategy = \"bsp\"\nexpect = \"greater\"\nthan = 0.5\n"
    );
    let s = parse(&tables).expect("suite");
    assert_eq!(s.scenarios[0].all_claims().len(), 2);

    // Each claim is validated, and errors name it.
    let claims = |body: &str| {
        with(&format!(
            "claims = [\n{{ text = \"ok\", metric = \"efficiency\", strategy = \"ssp\", baseline = \"bsp\", expect = \"greater\" }},\n{{ text = \"bad\", strategy = \"ssp\", expect = \"less\", {body} }},\n]"
        ))
    };
    let msg = parse(&claims("metric = \"speed\", than = 1.0"))
        .expect_err("bad metric")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claims[1].metric") && msg.contains("figure:"),
        "{msg}"
    );
    let msg = parse(&claims("metric = \"figure:\", than = 1.0"))
        .expect_err("empty figure name")
        .to_string();
    assert!(msg.contains("scenarios[0].claims[1].metric"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\""))
        .expect_err("neither baseline nor than")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claims[1]") && msg.contains("exactly one of"),
        "{msg}"
    );
    let msg = parse(&claims(
        "metric = \"efficiency\", baseline = \"bsp\", than = 1.0",
    ))
    .expect_err("both")
    .to_string();
    assert!(msg.contains("exactly one of"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\", than = \"x\""))
        .expect_err("than not a number")
        .to_string();
    assert!(msg.contains("than"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\", than = nan"))
        .expect_err("than not finite")
        .to_string();
    assert!(msg.contains("scenarios[0].claims[1].than"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\", baseline = \"asp\""))
        .expect_err("unknown baseline")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claims[1].baseline") && msg.contains("asp"),
        "{msg}"
    );
    let msg = parse(&claims(
        "metric = \"efficiency\", than = 1.0, by_at_least = 0.5, by_at_most = 0.2",
    ))
    .expect_err("range")
    .to_string();
    assert!(msg.contains("scenarios[0].claims[1].by_at_most"), "{msg}");
}

#[test]
fn a_claim_against_a_constant_holds_or_fails() {
    let mut rows = vec![row("lb", 1, 1.0), row("lb", 2, 1.0)];
    rows[0].wait_share = 0.03;
    rows[1].wait_share = 0.05; // mean 0.04
    rows[0].figures = "lb.rmse=0.2".into();
    rows[1].figures = "lb.rmse=0.1;other=7".into(); // mean 0.15
    let claim = |body: &str| {
        toml::from_str::<suite::Claim>(&format!("text = \"c\"\nstrategy = \"lb\"\n{body}"))
            .expect("claim")
    };
    // (0.05 − 0.04)/0.05 = 20 % less.
    let k = check_claim(
        &rows,
        "s",
        &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05"),
    )
    .expect("data");
    assert!((k.relative - 0.2).abs() < 1e-12 && k.holds, "{k:?}");
    assert_eq!(k.reference, 0.05);
    assert!(
        check_claim(
            &rows,
            "s",
            &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05\nby_at_least = 0.1\nby_at_most = 0.3"),
        )
        .expect("data")
        .holds
    );
    // Too little, and the wrong way.
    assert!(
        !check_claim(
            &rows,
            "s",
            &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05\nby_at_least = 0.25"),
        )
        .expect("data")
        .holds
    );
    let k = check_claim(
        &rows,
        "s",
        &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.03"),
    )
    .expect("data");
    assert!(!k.holds && k.relative < 0.0, "{k:?}");
    // `greater`: (value − than)/|than|; on a strategy figure.
    let k = check_claim(
        &rows,
        "s",
        &claim("metric = \"figure:lb.rmse\"\nexpect = \"greater\"\nthan = 0.1\nby_at_least = 0.5"),
    )
    .expect("data");
    assert!((k.relative - 0.5).abs() < 1e-12 && k.holds, "{k:?}");
    assert!(
        !check_claim(
            &rows,
            "s",
            &claim("metric = \"figure:lb.rmse\"\nexpect = \"greater\"\nthan = 0.2"),
        )
        .expect("data")
        .holds
    );
    // A figure no run reports: no data.
    assert!(check_claim(
        &rows,
        "s",
        &claim("metric = \"figure:nope\"\nexpect = \"less\"\nthan = 1")
    )
    .is_none());
}

#[test]
fn figures_round_trip_through_the_csv() {
    let mut figures = std::collections::BTreeMap::new();
    figures.insert("lb-bsp.rmse_relative".to_string(), 0.1 + 0.2);
    figures.insert("a.tiny".to_string(), 1e-300 / 3.0);
    figures.insert("b.whole".to_string(), 4.0);
    figures.insert("c.neg".to_string(), -std::f64::consts::PI);
    let field = report::format_figures(&figures);
    // Sorted by name.
    assert!(
        field.starts_with("a.tiny=") && field.contains(";b.whole=4;"),
        "{field}"
    );
    assert_eq!(report::parse_figures(&field), figures);
    assert_eq!(report::format_figures(&Default::default()), "");

    let mut r = row("lb", 1, 1.0);
    r.figures = field;
    let other = row("bsp", 1, 1.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("results.csv");
    report::write_csv(&path, &[r.clone(), other.clone()]).expect("write");
    let text = std::fs::read_to_string(&path).expect("csv");
    assert!(
        text.lines().next().is_some_and(|h| h.ends_with(",figures")),
        "{text}"
    );
    let back = report::read_csv(&path).expect("read");
    assert_eq!(back, [r, other]);
    for (name, v) in &figures {
        assert_eq!(
            back[0].metric(&format!("figure:{name}")).map(f64::to_bits),
            Some(v.to_bits()),
            "{name}"
        );
    }
    assert_eq!(back[0].metric("figure:missing"), None);
    assert_eq!(back[1].metric("figure:lb-bsp.rmse_relative"), None);
    // Written again from what was read, byte for byte the same.
    report::write_csv(&path, &back).expect("rewrite");
    assert_eq!(std::fs::read_to_string(&path).expect("csv"), text);
    assert!(report::known_metric("figure:lb-bsp.rmse_relative"));
    assert!(!report::known_metric("figure:"));
    assert!(!report::known_metric("speed"));
}

#[test]
fn phase_ratio_compares_disturbed_and_calm_iterations() {
    use super::report::phase_ratio;
    use super::runner::CurvePoint;
    use super::suite::Phases;
    // Iterations of 1 s while t < 10, then of 1.5 s while 10 <= t < 20 (phase 1), and so on.
    let mut curve = Vec::new();
    let mut t = 0.0;
    for i in 0..40u64 {
        let phase = (t / 10.0f64).floor() as u64 % 2;
        t += if phase == 0 { 1.0 } else { 1.5 };
        curve.push(CurvePoint {
            iteration: i + 1,
            time_s: t,
            loss: None,
            test_accuracy: None,
            test_loss: None,
        });
    }
    let mut result = super::runner::CellResult {
        metrics: serde_json::from_value(serde_json::json!({
            "iterations": 40, "run_time_s": t, "time_per_iteration_s": t / 40.0,
            "throughput_samples_per_s": 0.0, "ideal_time_s": 0.0, "efficiency": 0.0,
            "wait_share": 0.0, "final_loss": null, "final_accuracy": null, "final_test_loss": null,
            "bytes_sent": 0, "messages_sent": 0, "peak_worker_memory_bytes": 0,
            "peak_server_memory_bytes": 0, "figures": {}
        }))
        .unwrap(),
        curve,
        evals: Vec::new(),
    };
    let phases = Phases {
        period_s: 10.0,
        count: 2,
        skip: 0,
    };
    let r = phase_ratio(&result, &phases).unwrap();
    assert!(r > 1.3 && r < 1.6, "{r}");
    result.curve.truncate(5);
    assert_eq!(
        phase_ratio(&result, &phases),
        None,
        "no disturbed iteration yet"
    );
}

#[test]
fn steady_time_covers_the_second_half_of_the_run() {
    use super::report::steady_time_per_iteration;
    use super::runner::CurvePoint;
    // 10 slow iterations of 3 s (adapting), then 10 of 1 s.
    let curve = |n: u64| {
        let mut t = 0.0;
        (1..=n)
            .map(|i| {
                t += if i <= 10 { 3.0 } else { 1.0 };
                CurvePoint {
                    iteration: i,
                    time_s: t,
                    loss: None,
                    test_accuracy: None,
                    test_loss: None,
                }
            })
            .collect::<Vec<_>>()
    };
    let result = |n: u64| super::runner::CellResult {
        metrics: serde_json::from_value(serde_json::json!({
            "iterations": n, "run_time_s": 0.0, "time_per_iteration_s": 0.0,
            "throughput_samples_per_s": 0.0, "ideal_time_s": 0.0, "efficiency": 0.0,
            "wait_share": 0.0, "final_loss": null, "final_accuracy": null, "final_test_loss": null,
            "bytes_sent": 0, "messages_sent": 0, "peak_worker_memory_bytes": 0,
            "peak_server_memory_bytes": 0, "figures": {}
        }))
        .unwrap(),
        curve: curve(n),
        evals: Vec::new(),
    };
    assert_eq!(steady_time_per_iteration(&result(20)), Some(1.0));
    // 21 iterations: the second half is iterations 11..=21, all 1 s.
    assert_eq!(steady_time_per_iteration(&result(21)), Some(1.0));
    assert_eq!(steady_time_per_iteration(&result(1)), None);
}

/// Trend claims: a least-squares line's slope and R², and flatness up to a swept value.
#[test]
fn trend_claims_fit_lines_and_check_flatness() {
    let text = r#"
        seeds = [1]
        [[strategies]]
        label = "bsp"
        strategies = ["bsp"]
        [[scenarios]]
        label = "sweep"
        sweep = { key = "batch", values = [1, 2, 3, 4] }
        trends = [
          { text = "linear", metric = "time_per_iteration_s", strategy = "bsp", shape = { kind = "linear", min_r2 = 0.95 } },
          { text = "flat", metric = "time_per_iteration_s", strategy = "bsp", shape = { kind = "flat", up_to = 2.0, within = 0.1 } },
        ]
    "#;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.toml");
    std::fs::write(&path, text).expect("write");
    let suite = Suite::load(&path).expect("suite");
    let scenarios = suite.scenarios_expanded();
    let group: Vec<&suite::Scenario> = scenarios.iter().collect();
    let rows_with = |ys: [f64; 4]| -> Vec<Row> {
        scenarios
            .iter()
            .zip(ys)
            .map(|(sc, y)| Row {
                scenario: sc.label.clone(),
                ..row("bsp", 1, y)
            })
            .collect()
    };
    let linear = &suite.scenarios[0].trends[0];
    let flat = &suite.scenarios[0].trends[1];
    // y = 1 + x exactly: linear holds; 2 → 3 is a 50 % change, not flat.
    let rows = rows_with([2.0, 3.0, 4.0, 5.0]);
    assert!(
        report::check_trend(&rows, &group, linear)
            .expect("data")
            .holds
    );
    assert!(
        !report::check_trend(&rows, &group, flat)
            .expect("data")
            .holds
    );
    // Flat up to 2, then a jump: flat holds, the line does not fit.
    let rows = rows_with([2.0, 2.1, 2.0, 9.0]);
    assert!(
        report::check_trend(&rows, &group, flat)
            .expect("data")
            .holds
    );
    assert!(
        !report::check_trend(&rows, &group, linear)
            .expect("data")
            .holds
    );
    // Falling is not rising.
    let rows = rows_with([5.0, 4.0, 3.0, 2.0]);
    assert!(
        !report::check_trend(&rows, &group, linear)
            .expect("data")
            .holds
    );
}
