//! The report of a suite: `results.csv`, `REPORT.md` and the SVG plots in `plots/`.
//!
//! Everything here is a pure function of the cells' results, the suite and the code version, so
//! a re-run writes the same files (no wall-clock figures go into them).
//!
//! Layers, each file using only those above it in this list:
//! - [`input`] — what a report is made from;
//! - [`measure`] — targets, steady state and phase ratio read off a cell's curve;
//! - [`row`] — one `results.csv` row per cell;
//! - [`csv_file`] — writing and reading `results.csv`;
//! - [`stats`] — mean, min and max over seeds;
//! - [`format`](mod@format) — how numbers and labels are written;
//! - [`claims`], [`trends`] — verdicts on the suite's claims;
//! - [`plots`] — the SVG plots;
//! - [`markdown`] — `REPORT.md`;
//! - this file: writing them all.

pub mod claims;
pub mod csv_file;
pub mod format;
pub mod input;
pub mod markdown;
pub mod measure;
pub mod plots;
pub mod row;
pub mod stats;
pub mod trends;

use crate::bench::error::BenchError;
use input::ReportInput;
use row::Row;
use std::path::Path;

/// Writes `results.csv`, `REPORT.md` and `plots/*.svg` into `dir`; returns the rows.
pub fn write_all(dir: &Path, input: &ReportInput<'_>) -> Result<Vec<Row>, BenchError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BenchError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let rows = row::rows(input.suite, input.scenarios, input.cells, input.results);
    csv_file::write_csv(&dir.join("results.csv"), &rows)?;
    let plots_dir = dir.join("plots");
    if plots_dir.exists() {
        std::fs::remove_dir_all(&plots_dir).map_err(io(&plots_dir))?;
    }
    std::fs::create_dir_all(&plots_dir).map_err(io(&plots_dir))?;
    let plots = plots::write_plots(&plots_dir, input, &rows).map_err(|e| BenchError::Output {
        path: plots_dir.clone(),
        reason: format!("{e:#}"),
    })?;
    let md = markdown::markdown(input, &rows, &plots);
    let path = dir.join("REPORT.md");
    std::fs::write(&path, md).map_err(io(&path))?;
    Ok(rows)
}
