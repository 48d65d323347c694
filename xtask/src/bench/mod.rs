//! `cargo xtask bench`: the cross-strategy benchmark matrix.
//!
//! A suite file (`bench/<suite>.toml`, see [`suite`]) names strategies, scenarios and seeds;
//! every combination is a cell, run in `sim` (so deterministic) in parallel, cached by config and
//! code version ([`runner`]), and reported in `bench/out/<suite>/` as `results.csv`, `REPORT.md`
//! and SVG plots ([`report`], [`plot`]), with each paper claim a scenario carries beside what we
//! measure. Strategies are named in suite files only, so a strategy registered later is
//! benchmarked without touching this code.
//!
//! Layers, each module using only those above it in this list (and none using this file):
//! - [`error`] — the error type; [`plot`] — SVG line and bar charts (knows nothing of suites);
//! - [`suite`] — suite files, their checks, and their expansion into cells;
//! - [`runner`] — running cells, with the result cache;
//! - [`report`] — rows, verdicts on claims, `results.csv`, `REPORT.md` and plots;
//! - this file: the `cargo xtask bench` command, tying them together.

pub mod error;
pub mod plot;
pub mod report;
pub mod runner;
pub mod suite;

#[cfg(test)]
mod tests;

use error::BenchError;
use report::input::ReportInput;
use report::row::Row;
use runner::RunSettings;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use suite::schema::Suite;

/// Arguments of `cargo xtask bench`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// Suite to run: the name of a file in bench/ (smoke, stragglers, scaling, paper, …).
    #[arg(long)]
    pub suite: String,
    /// Run only cells whose `scenario / strategy / seed N` contains this text (the report
    /// still includes every cached cell).
    #[arg(long)]
    pub filter: Option<String>,
    /// Cells run at once (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Rerun cells even if their result is cached.
    #[arg(long)]
    pub force: bool,
    /// Output folder (default: bench/out/<suite>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// What one suite run produced.
#[derive(Debug)]
pub struct SuiteRun {
    /// The output folder.
    pub out_dir: PathBuf,
    /// Rows written to `results.csv`.
    pub rows: Vec<Row>,
    /// The (scenario, strategy, seed) cells the suite expects.
    pub expected: BTreeSet<(String, String, u64)>,
    /// Cells run now, taken from cache, and wall seconds.
    pub ran: usize,
    /// Cells taken from the cache.
    pub cached: usize,
    /// Wall-clock seconds.
    pub wall_s: f64,
}

/// Runs a suite and writes its report; the `cargo xtask bench` entry point.
pub fn run(args: &BenchArgs) -> anyhow::Result<SuiteRun> {
    let root = suite::load::workspace_root();
    // Relative paths inside run configs (e.g. a csv-trace file) are relative to the workspace
    // root, as for `cargo xtask train`.
    std::env::set_current_dir(&root).map_err(|source| BenchError::Io {
        path: root.clone(),
        source,
    })?;
    // Cells run in parallel, one per core: candle's own matmul threads would only contend with
    // them (2.4× slower on 2 cores for the default MLP). Set before any thread starts.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    let suite = Suite::load_named(&args.suite)?;
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("bench").join("out").join(&suite.name));
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let settings = RunSettings {
        jobs,
        force: args.force,
        progress: true,
    };
    run_suite(&suite, args.filter.as_deref(), &out_dir, &settings, &root)
}

/// Runs `suite` into `out_dir` and writes the report. Fails if a cell failed (after writing
/// the report for the others).
pub fn run_suite(
    suite: &Suite,
    filter: Option<&str>,
    out_dir: &Path,
    settings: &RunSettings,
    root: &Path,
) -> anyhow::Result<SuiteRun> {
    let scenarios = suite.scenarios_expanded();
    let cells = suite.cells(&scenarios)?;
    let selected: Vec<bool> = cells
        .iter()
        .map(|c| filter.is_none_or(|f| c.id(suite, &scenarios).contains(f)))
        .collect();
    if let Some(f) = filter {
        if !selected.iter().any(|s| *s) {
            return Err(BenchError::NoMatch {
                filter: f.into(),
                suite: suite.name.clone(),
            }
            .into());
        }
    }
    let version = runner::cache::code_version(root);
    let outcome = runner::run_suite(
        suite, &scenarios, &cells, &selected, &version, out_dir, settings,
    )?;
    let rows = report::write_all(
        out_dir,
        &ReportInput {
            suite,
            scenarios: &scenarios,
            cells: &cells,
            results: &outcome.results,
            code_version: &version,
        },
    )?;
    if !outcome.failed.is_empty() {
        return Err(BenchError::CellsFailed {
            suite: suite.name.clone(),
            failed: outcome.failed,
        }
        .into());
    }
    Ok(SuiteRun {
        out_dir: out_dir.to_path_buf(),
        rows,
        expected: report::csv_file::expected_cells(suite, &scenarios, &cells),
        ran: outcome.ran,
        cached: outcome.cached,
        wall_s: outcome.wall_s,
    })
}

/// Checks that `results.csv` in `out_dir` has a row for every cell the suite expects.
pub fn check_csv(
    out_dir: &Path,
    expected: &BTreeSet<(String, String, u64)>,
) -> Result<(), BenchError> {
    let path = out_dir.join("results.csv");
    let rows = report::csv_file::read_csv(&path)?;
    let have: BTreeSet<(String, String, u64)> = rows
        .into_iter()
        .map(|r| (r.scenario, r.strategy, r.seed))
        .collect();
    let missing: Vec<String> = expected
        .difference(&have)
        .map(|(sc, st, seed)| format!("{sc} / {st} / seed {seed}"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(BenchError::MissingCells { path, missing })
    }
}

/// What CI runs after the tests: the smoke suite (cached cells reused), then a check that its
/// CSV has every expected cell.
pub fn ci_smoke() -> anyhow::Result<()> {
    let args = BenchArgs {
        suite: "smoke".into(),
        filter: None,
        jobs: None,
        force: false,
        out: None,
    };
    let run = run(&args)?;
    check_csv(&run.out_dir, &run.expected)?;
    eprintln!(
        "bench smoke: {} cells ({} run, {} cached) in {:.1} s; results.csv has every expected cell",
        run.expected.len(),
        run.ran,
        run.cached,
        run.wall_s
    );
    Ok(())
}

/// Prints where a finished run's report is.
pub fn print_done(run: &SuiteRun) {
    println!(
        "{} cells ({} run, {} cached) in {:.1} s wall; report: {}",
        run.rows.len(),
        run.ran,
        run.cached,
        run.wall_s,
        run.out_dir.join("REPORT.md").display()
    );
}
