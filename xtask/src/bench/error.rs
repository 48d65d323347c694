//! The bench's error type: what can go wrong loading a suite, running it, or writing its report.

use std::path::PathBuf;
use thiserror::Error;

/// What can go wrong in a bench run; each names the file (and key) at fault.
#[derive(Debug, Error)]
pub enum BenchError {
    /// No suite file of that name.
    #[error("no suite `{name}` (looked for bench/{name}.toml); suites: {known}")]
    NoSuite {
        /// The name asked for.
        name: String,
        /// The suites there are.
        known: String,
    },
    /// A suite file is malformed, or a cell's config built from it is invalid.
    #[error("suite {}: key `{key}`: {reason}", file.display())]
    Suite {
        /// The suite file.
        file: PathBuf,
        /// The key at fault (dotted, with indices).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An output file could not be written or read back.
    #[error("{}: {reason}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// `--filter` matched no cell.
    #[error("--filter {filter:?} matches no cell of suite `{suite}`")]
    NoMatch {
        /// The filter.
        filter: String,
        /// The suite.
        suite: String,
    },
    /// Some cells failed to run (the report was still written for the others).
    #[error("{} cell(s) of suite `{suite}` failed: {}", failed.len(), failed.iter().map(|(id, e)| format!("{id}: {e}")).collect::<Vec<_>>().join("; "))]
    CellsFailed {
        /// The suite.
        suite: String,
        /// Cell id and error of each failure.
        failed: Vec<(String, String)>,
    },
    /// The CSV lacks cells the suite expects.
    #[error("{}: missing {} expected cell(s): {}", path.display(), missing.len(), missing.join(", "))]
    MissingCells {
        /// The CSV.
        path: PathBuf,
        /// `scenario / strategy / seed` of each missing cell.
        missing: Vec<String>,
    },
    /// `--check` found no committed record to compare with.
    #[error("{}: no committed record to check against (run the suite without --check to write one)", path.display())]
    NoRecord {
        /// The record's CSV.
        path: PathBuf,
    },
    /// `--check` found cells whose results differ from the committed record.
    #[error("{} cell(s) moved against {}:\n  {}", moved.len(), path.display(), moved.join("\n  "))]
    Moved {
        /// The record's CSV.
        path: PathBuf,
        /// Each moved cell and what changed.
        moved: Vec<String>,
    },
}
