//! The error type of validating and building straggler patterns.

/// Errors from validating or building patterns. Messages name the pattern, the field,
/// the offending value and what is allowed; CSV errors name the file, line and column.
#[derive(thiserror::Error, Debug)]
pub enum StragglerError {
    /// A configuration field is out of range (or inconsistent with the role being built).
    #[error("straggler pattern `{pattern}`: field `{field}` = {value} is invalid: {allowed}")]
    InvalidField {
        /// Pattern tag, e.g. `slow-worker`.
        pattern: &'static str,
        /// Field name as written in TOML.
        field: &'static str,
        /// The offending value, rendered.
        value: String,
        /// What would have been accepted.
        allowed: String,
    },
    /// A CSV trace file could not be read at all (missing, unreadable).
    #[error("csv trace `{path}`: {problem}")]
    CsvFile {
        /// File path as configured.
        path: String,
        /// What went wrong.
        problem: String,
    },
    /// A CSV trace file has a malformed header or row.
    #[error("csv trace `{path}`, line {line}, column `{column}`: {problem}")]
    CsvRow {
        /// File path as configured.
        path: String,
        /// 1-based line number in the file.
        line: u64,
        /// Column name (`time`, `role`, `factor`, `header` or `row`).
        column: String,
        /// What went wrong.
        problem: String,
    },
    /// A checkpoint's straggler state does not fit the patterns of the resumed run.
    #[error("straggler state in the checkpoint: {0}")]
    State(String),
}
