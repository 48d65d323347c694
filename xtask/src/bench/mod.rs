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
//! - [`record`] — the committed record in `bench/results/<suite>/` and `--check` against it;
//! - this file: the `cargo xtask bench` command, tying them together.

pub mod error;
pub mod plot;
pub mod record;
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
    /// Output folder (default: `bench/out/<suite>`). A run into another folder does not update
    /// the committed record.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Rerun the suite and compare every cell with the committed record in
    /// `bench/results/<suite>/` (which is left as it is): fails listing each cell that moved.
    #[arg(long, conflicts_with = "filter")]
    pub check: bool,
}

/// What a suite run does with the committed record in `bench/results/<suite>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordMode {
    /// Leave it alone (a filtered run, or one into another folder).
    Skip,
    /// Replace the record in this folder when the run is complete (every cell has a result).
    Write(PathBuf),
    /// Compare the run with the record in this folder and fail on any cell that moved.
    Check(PathBuf),
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
    /// How many paper claims and trends hold.
    pub tally: report::markdown::verdicts::Tally,
    /// Where the committed record was written or checked, if it was.
    pub record: Option<PathBuf>,
}

/// Runs a suite and writes its report, and writes or checks its committed record; the
/// `cargo xtask bench` entry point.
pub fn run(args: &BenchArgs) -> anyhow::Result<SuiteRun> {
    run_with_record(args, true)
}

/// Runs a suite as [`run`] does; `record` false leaves the committed record alone whatever
/// the arguments (CI's smoke run must not rewrite a tracked file).
fn run_with_record(args: &BenchArgs, record: bool) -> anyhow::Result<SuiteRun> {
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
    let record_dir = record::record_dir(&root, &suite.name);
    let record = if args.check {
        RecordMode::Check(record_dir)
    } else if record && args.filter.is_none() && args.out.is_none() {
        RecordMode::Write(record_dir)
    } else {
        RecordMode::Skip
    };
    run_suite(
        &suite,
        args.filter.as_deref(),
        &out_dir,
        &settings,
        &root,
        record,
    )
}

/// Runs `suite` into `out_dir` and writes the report, then writes or checks the committed
/// record as `record` says. Fails if a cell failed (after writing the report for the others),
/// or if `--check` found a cell that moved.
pub fn run_suite(
    suite: &Suite,
    filter: Option<&str>,
    out_dir: &Path,
    settings: &RunSettings,
    root: &Path,
    record: RecordMode,
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
    let fingerprint = runner::cache::code_fingerprint(root);
    let outcome = runner::run_suite(
        suite,
        &scenarios,
        &cells,
        &selected,
        fingerprint.as_deref(),
        out_dir,
        settings,
    )?;
    let input = ReportInput {
        suite,
        scenarios: &scenarios,
        cells: &cells,
        results: &outcome.results,
        code_version: &version,
        fingerprint: fingerprint.as_deref(),
    };
    let rows = report::write_all(out_dir, &input)?;
    if !outcome.failed.is_empty() {
        return Err(BenchError::CellsFailed {
            suite: suite.name.clone(),
            failed: outcome.failed,
        }
        .into());
    }
    let tally = report::markdown::verdicts::tally(&input, &rows);
    let recorded = match record {
        RecordMode::Write(dir) if rows.len() == cells.len() => {
            record::write_record(&dir, &report::markdown::record(&input, &rows), &rows)?;
            Some(dir)
        }
        RecordMode::Check(dir) => {
            let moved = record::compare(&dir, &rows)?;
            if !moved.is_empty() {
                return Err(BenchError::Moved {
                    path: dir.join("results.csv"),
                    moved: moved.iter().map(ToString::to_string).collect(),
                }
                .into());
            }
            Some(dir)
        }
        _ => None,
    };
    Ok(SuiteRun {
        out_dir: out_dir.to_path_buf(),
        rows,
        expected: report::csv_file::expected_cells(suite, &scenarios, &cells),
        ran: outcome.ran,
        cached: outcome.cached,
        wall_s: outcome.wall_s,
        tally,
        record: recorded,
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
        check: false,
    };
    let run = run_with_record(&args, false)?;
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

/// Prints where a finished run's report is, how many of its claims hold, and what became of
/// the committed record.
pub fn print_done(run: &SuiteRun, check: bool) {
    println!(
        "{} cells ({} run, {} cached) in {:.1} s wall; report: {}",
        run.rows.len(),
        run.ran,
        run.cached,
        run.wall_s,
        run.out_dir.join("REPORT.md").display()
    );
    let t = run.tally;
    if t.claims > 0 {
        println!(
            "{} of {} paper claims hold in every seed ({} on the means alone)",
            t.held, t.claims, t.held_on_mean
        );
    }
    if t.trends > 0 {
        println!(
            "{} of {} trend claims hold in every seed",
            t.trends_held, t.trends
        );
    }
    match (&run.record, check) {
        (Some(dir), true) => println!("every cell matches the record in {}", dir.display()),
        (Some(dir), false) => println!("record updated: {}", dir.display()),
        (None, _) => {}
    }
}
