//! The report: plots are valid SVG with titles, axis labels and legends, the smoke suite writes
//! every file, a subset scenario's report shows only its strategies, and strategy figures round
//! trip through the CSV.

use super::common::{assert_has, parse, row, svg_texts, SUBSETS};
use crate::bench::plot::{self, Bars, Labels, Line, Reference};
use crate::bench::report::csv_file::{read_csv, write_csv};
use crate::bench::report::input::ReportInput;
use crate::bench::report::row::{format_figures, parse_figures};
use crate::bench::report::write_all;
use crate::bench::runner::result::{CellResult, CurvePoint, Metrics};
use crate::bench::runner::RunSettings;
use crate::bench::suite::load::workspace_root;
use crate::bench::suite::metrics::known_metric;
use crate::bench::suite::schema::Suite;
use crate::bench::{check_csv, run_suite, RecordMode};
use std::path::Path;

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
        false,
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
    let root = workspace_root();
    let record = tempfile::tempdir().expect("record dir");
    let run = run_suite(
        &s,
        None,
        dir.path(),
        &settings,
        &root,
        RecordMode::Write(record.path().to_path_buf()),
    )
    .expect("smoke runs");
    assert_eq!(run.ran, run.expected.len());
    check_csv(dir.path(), &run.expected).expect("every cell in results.csv");
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
    // A sweep of times starts its y axis at 0 (the smoke sweep's times are all well above it).
    let sweep_time = dir
        .path()
        .join("plots/sweep-slow-worker-time-per-iteration.svg");
    let ticks = svg_texts(&sweep_time);
    assert!(
        ticks.iter().any(|t| t.trim() == "0" || t.trim() == "0.0"),
        "no 0 tick: {ticks:?}"
    );
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

    // The record: the same CSV, the report without its plots.
    assert_eq!(
        std::fs::read_to_string(record.path().join("results.csv")).expect("record csv"),
        csv
    );
    let recorded = std::fs::read_to_string(record.path().join("REPORT.md")).expect("record");
    assert!(report.contains("](plots/") && !recorded.contains("](plots/"));
    assert!(recorded.contains("## Claims") && recorded.contains("Code version"));

    // Again: all cached, same CSV, and every cell matches the record.
    let check = RecordMode::Check(record.path().to_path_buf());
    let again =
        run_suite(&s, None, dir.path(), &settings, &root, check.clone()).expect("cached run");
    assert_eq!((again.ran, again.cached), (0, run.expected.len()));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.csv")).expect("csv"),
        csv
    );
    // A record that differs in one cell's number, or lacks a cell: the check names the cell
    // and the column, and leaves the record as it was.
    let first = &run.rows[0];
    let cell = format!(
        "{} / {} / seed {}",
        first.scenario, first.strategy, first.seed
    );
    let mut edited = run.rows.clone();
    edited[0].time_per_iteration_s *= 1.0 + 1e-12;
    edited.pop();
    write_csv(&record.path().join("results.csv"), &edited).expect("edit record");
    let err = run_suite(&s, None, dir.path(), &settings, &root, check)
        .expect_err("moved")
        .to_string();
    assert!(err.contains("2 cell(s) moved"), "{err}");
    assert!(
        err.contains(&format!("{cell}: time_per_iteration_s:")),
        "{err}"
    );
    assert!(err.contains("not in the record"), "{err}");
    // A filter that matches nothing is an error, not an empty run.
    let err = run_suite(
        &s,
        Some("no such cell"),
        dir.path(),
        &settings,
        &root,
        RecordMode::Skip,
    )
    .expect_err("no match");
    assert!(err.to_string().contains("no such cell"));
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
    let results: Vec<Option<CellResult>> = cells
        .iter()
        .map(|c| {
            let mut figures = std::collections::BTreeMap::new();
            figures.insert("asp.rmse".to_string(), 0.05 + c.seed as f64 * 1e-3);
            Some(CellResult {
                metrics: Metrics {
                    iterations: 12,
                    run_time_s: 1.2,
                    time_per_iteration_s: 0.1 / (1.0 + c.strategy as f64),
                    throughput_samples_per_s: 1.0,
                    ideal_time_s: 1.0,
                    efficiency: 0.8,
                    wait_share: 0.3 - 0.1 * c.strategy as f64,
                    final_loss: Some(0.5),
                    final_accuracy: None,
                    final_auc: None,
                    final_test_loss: None,
                    bytes_sent: 10,
                    messages_sent: 1,
                    peak_worker_memory_bytes: 1,
                    peak_server_memory_bytes: 1,
                    figures,
                },
                curve: vec![
                    CurvePoint {
                        iteration: 1,
                        time_s: 0.1,
                        loss: Some(1.0),
                        test_accuracy: None,
                        test_loss: None,
                    },
                    CurvePoint {
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
    let input = ReportInput {
        suite: &s,
        scenarios: &scenarios,
        cells: &cells,
        results: &results,
        code_version: "v",
        fingerprint: None,
    };
    let rows = write_all(dir.path(), &input).expect("report");
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
        summary.contains("## Claims") && summary.contains("2 of 2 paper claims hold in every seed"),
        "{summary}"
    );
    assert!(summary.contains("asp rmse under 10%") && summary.contains("made up"));
    assert_eq!(section.matches("**Claim").count(), 2, "{section}");
    // With its own baseline, the scenario shows speed-ups against it.
    let own = parse(&text.replace("label = \"some\"", "label = \"some\"\nbaseline = \"ssp\""))
        .expect("suite with a scenario baseline");
    let dir2 = tempfile::tempdir().expect("tempdir");
    let own_scenarios = own.scenarios_expanded();
    write_all(
        dir2.path(),
        &ReportInput {
            suite: &own,
            scenarios: &own_scenarios,
            ..input
        },
    )
    .expect("report");
    let md2 = std::fs::read_to_string(dir2.path().join("REPORT.md")).expect("report");
    let section2 = md2.split("### some").nth(1).expect("section of `some`");
    assert!(section2.contains("speed-up vs ssp"), "{section2}");
    let texts = svg_texts(&dir.path().join("plots/loss-some.svg"));
    assert_has(&texts, &["asp", "ssp"], Path::new("loss-some.svg"));
    assert!(!texts.iter().any(|t| t == "bsp"), "{texts:?}");
    // Rewriting from the same results gives the same files.
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).expect("csv");
    write_all(dir.path(), &input).expect("again");
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
fn figures_round_trip_through_the_csv() {
    let mut figures = std::collections::BTreeMap::new();
    figures.insert("lb-bsp.rmse_relative".to_string(), 0.1 + 0.2);
    figures.insert("a.tiny".to_string(), 1e-300 / 3.0);
    figures.insert("b.whole".to_string(), 4.0);
    figures.insert("c.neg".to_string(), -std::f64::consts::PI);
    let field = format_figures(&figures);
    // Sorted by name.
    assert!(
        field.starts_with("a.tiny=") && field.contains(";b.whole=4;"),
        "{field}"
    );
    assert_eq!(parse_figures(&field), figures);
    assert_eq!(format_figures(&Default::default()), "");

    let mut r = row("lb", 1, 1.0);
    r.figures = field;
    let other = row("bsp", 1, 1.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("results.csv");
    write_csv(&path, &[r.clone(), other.clone()]).expect("write");
    let text = std::fs::read_to_string(&path).expect("csv");
    assert!(
        text.lines().next().is_some_and(|h| h.ends_with(",figures")),
        "{text}"
    );
    let back = read_csv(&path).expect("read");
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
    write_csv(&path, &back).expect("rewrite");
    assert_eq!(std::fs::read_to_string(&path).expect("csv"), text);
    assert!(known_metric("figure:lb-bsp.rmse_relative"));
    assert!(!known_metric("figure:"));
    assert!(!known_metric("speed"));
}

/// Every kind of target gets its setup line (none is left blank).
#[test]
fn every_target_kind_is_described_in_the_setup_line() {
    use crate::bench::report::markdown::scenarios::describe_target;
    use crate::bench::suite::schema::Target;
    let t = |text: &str| toml::from_str::<Target>(text).expect("target");
    assert_eq!(
        describe_target(&t("accuracy = 0.9")),
        "target test accuracy ≥ 0.9"
    );
    assert_eq!(
        describe_target(&t("loss = 0.3")),
        "target training loss ≤ 0.3"
    );
    assert_eq!(
        describe_target(&t("test_loss = 0.25")),
        "target test loss ≤ 0.25 (time-indexed evaluations)"
    );
    assert_eq!(
        describe_target(&t("converged = { change = 0.02, over = 10, after = 5 }")),
        "target convergence: objective changes < 2.0% over 10 iterations, checked from iteration 5"
    );
}
