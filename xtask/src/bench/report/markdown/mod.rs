//! `REPORT.md`: the suite's summary, then its claims and trends, overview plots, sweep tables,
//! and one section per scenario.
//!
//! Layers, each file using only those above it: [`verdicts`] (the claims and trends tables, and
//! how a claim and its measurement are written), [`scenarios`] (the per-scenario sections), then
//! this file (the document: its header, the overview and the sweep tables, and the order of the
//! sections).

pub mod scenarios;
pub mod verdicts;

use super::format::{inline, ms, show};
use super::input::ReportInput;
use super::plots::Plots;
use super::row::Row;
use super::stats::stat;
use crate::bench::suite::expand::sweep_groups;
use crate::bench::suite::schema::StrategySpec;
use crate::bench::suite::toml_tables::show_value;
use std::fmt::Write as _;

/// The whole of `REPORT.md`, from the report's inputs, its rows and the plots written.
pub fn markdown(input: &ReportInput<'_>, rows: &[Row], plots: &Plots) -> String {
    let mut md = String::new();
    header(&mut md, input, rows);
    verdicts::claims_section(&mut md, input, rows);
    verdicts::trends_section(&mut md, input, rows);
    verdicts::properties_section(&mut md, input, rows);
    overview(&mut md, plots);
    sweeps_section(&mut md, input, rows, plots);
    scenarios::scenarios_section(&mut md, input, rows, plots);
    md
}

/// `REPORT.md` as committed in `bench/results/<suite>/`: the same document without the plots
/// (they stay in the run's output folder), so the record is small and diffs stay readable.
pub fn record(input: &ReportInput<'_>, rows: &[Row]) -> String {
    markdown(input, rows, &Plots::default())
}

/// The title, the suite's description, what was run and how to read the tables, and the
/// strategies.
fn header(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let suite = input.suite;
    let seeds: Vec<String> = suite.seeds.iter().map(u64::to_string).collect();
    let expected = input.cells.len();
    let _ = writeln!(md, "# Bench report: suite `{}`\n", suite.name);
    if !suite.description.is_empty() {
        let _ = writeln!(md, "{}\n", suite.description.trim());
    }
    let fingerprint = input.fingerprint.map_or_else(String::new, |f| {
        format!(" (code fingerprint `{f}`: every file the numbers depend on, all but prose and recorded results)")
    });
    let _ = writeln!(
        md,
        "- **Code version:** `{}`{fingerprint}",
        input.code_version
    );
    let _ = writeln!(md, "- **Seeds:** {}", seeds.join(", "));
    let matrix = if suite.full_matrix() {
        format!(
            "{} scenarios × {} strategies × {} seeds",
            input.scenarios.len(),
            suite.strategies.len(),
            suite.seeds.len()
        )
    } else {
        format!(
            "{} scenarios, each with its strategies (of {}), × {} seeds",
            input.scenarios.len(),
            suite.strategies.len(),
            suite.seeds.len()
        )
    };
    let _ = writeln!(
        md,
        "- **Cells:** {matrix} = {expected} runs; {} with results{}",
        rows.len(),
        if rows.len() < expected {
            " (the rest were filtered out, or failed: rerun without `--filter`)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "- **Runtime:** `sim`: every time is virtual seconds, and the same code version and \
         config give the same numbers bit for bit."
    );
    let _ = writeln!(
        md,
        "- **Suite file:** `bench/{}.toml`; per-run numbers in `results.csv`.",
        suite.name
    );
    let _ = writeln!(
        md,
        "- **Columns:** mean over seeds, with (min–max) when seeds differ. ★ marks the best \
         strategy (lowest time to target where the scenario has one, else lowest time per \
         iteration); speed-up is the baseline's time per iteration (or to target) over the \
         strategy's, the baseline being `{}` unless the scenario names its own (shown where \
         the scenario runs it).\n",
        suite.baseline
    );
    let strategies: Vec<String> = suite
        .strategies
        .iter()
        .map(|s| {
            let opts = if s.options.is_empty() {
                String::new()
            } else {
                format!(" with `{}`", inline(&s.options))
            };
            format!("`{}` = [{}]{opts}", s.label, s.strategies.join(", "))
        })
        .collect();
    let _ = writeln!(md, "Strategies: {}.\n", strategies.join("; "));
}

/// The suite-wide bar charts.
fn overview(md: &mut String, plots: &Plots) {
    if !plots.overview.is_empty() {
        let _ = writeln!(md, "## Overview\n");
        for f in &plots.overview {
            let _ = writeln!(md, "![{f}](plots/{f})\n");
        }
    }
}

/// One table per sweep group: time per iteration of each strategy at each swept value, with
/// the group's plots.
fn sweeps_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row], plots: &Plots) {
    let suite = input.suite;
    let groups = sweep_groups(input.scenarios);
    if !groups.is_empty() {
        let _ = writeln!(md, "## Sweeps\n");
        for (group, members) in &groups {
            let key = members[0].swept.as_ref().map_or("", |(k, _)| k.as_str());
            let _ = writeln!(md, "### `{group}`: time per iteration (ms) vs `{key}`\n");
            let shown: Vec<&StrategySpec> = suite
                .scenario_strategies(&members[0].spec)
                .into_iter()
                .map(|t| &suite.strategies[t])
                .collect();
            let mut header = format!("| {key} |");
            let mut rule = "|---|".to_string();
            for s in &shown {
                let _ = write!(header, " {} |", s.label);
                rule.push_str("---|");
            }
            let _ = writeln!(md, "{header}\n{rule}");
            for m in members {
                let v = m
                    .swept
                    .as_ref()
                    .map_or(String::new(), |(_, v)| show_value(v));
                let mut line = format!("| {v} |");
                for s in &shown {
                    let st = stat(rows, &m.label, &s.label, "time_per_iteration_s");
                    let _ = write!(line, " {} |", show(st, ms));
                }
                let _ = writeln!(md, "{line}");
            }
            md.push('\n');
            if let Some((_, files)) = plots.sweeps.iter().find(|(g, _)| g == group) {
                for f in files {
                    let _ = writeln!(md, "![{f}](plots/{f})\n");
                }
            }
        }
    }
}
