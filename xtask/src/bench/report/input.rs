//! What a report is made from.

use crate::bench::runner::result::CellResult;
use crate::bench::suite::expand::{Cell, Scenario};
use crate::bench::suite::schema::Suite;

/// The inputs of a report.
pub struct ReportInput<'a> {
    /// The suite.
    pub suite: &'a Suite,
    /// Its scenarios, expanded.
    pub scenarios: &'a [Scenario],
    /// Its cells.
    pub cells: &'a [Cell],
    /// Each cell's result, where available.
    pub results: &'a [Option<CellResult>],
    /// The code version the results were made from.
    pub code_version: &'a str,
    /// The fingerprint of the files the results depend on (what the cache is keyed by), where
    /// there is one.
    pub fingerprint: Option<&'a str>,
}
