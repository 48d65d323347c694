//! Errors of the spot-market model and the cost study, each naming what is wrong and where.

use std::path::PathBuf;

/// What went wrong loading a market, generating a trace or running the cost study.
#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The market file (TOML) is malformed: the field at fault and why.
    #[error("{path}: `{field}`: {reason}")]
    Market {
        /// The market file.
        path: PathBuf,
        /// The key at fault (`types[2].on_demand`).
        field: String,
        /// Why it is refused.
        reason: String,
    },
    /// A line of the price trace (CSV) is refused: its line number, the field and why.
    #[error("{path}:{line}: `{field}`: {reason}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The column at fault (`time_s`, `type`, `price`).
        field: String,
        /// Why it is refused.
        reason: String,
    },
    /// A setting of the study or the generator is out of range.
    #[error("`{field}`: {reason}")]
    Setting {
        /// The setting.
        field: String,
        /// Why it is refused.
        reason: String,
    },
    /// A simulated job could not finish within the time the study allows.
    #[error("scheme `{scheme}` started at {start_s} s did not finish its work within {limit_h} h of simulated time (no affordable instances?)")]
    DidNotFinish {
        /// The bidding/elasticity scheme.
        scheme: String,
        /// The job's start time in the trace, seconds.
        start_s: f64,
        /// The limit, hours.
        limit_h: f64,
    },
}
