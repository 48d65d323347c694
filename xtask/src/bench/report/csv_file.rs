//! `results.csv`: writing the rows, reading them back, and the cells a suite expects in it.

use super::row::Row;
use crate::bench::error::BenchError;
use crate::bench::suite::expand::{Cell, Scenario};
use crate::bench::suite::schema::Suite;
use std::collections::BTreeSet;
use std::path::Path;

/// Writes `rows` as CSV with a header.
pub fn write_csv(path: &Path, rows: &[Row]) -> Result<(), BenchError> {
    let bad = |e: csv::Error| BenchError::Output {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut w = csv::Writer::from_path(path).map_err(bad)?;
    for r in rows {
        w.serialize(r).map_err(bad)?;
    }
    w.flush().map_err(|e| bad(e.into()))?;
    Ok(())
}

/// Reads `results.csv` back.
pub fn read_csv(path: &Path) -> Result<Vec<Row>, BenchError> {
    let bad = |e: csv::Error| BenchError::Output {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut r = csv::Reader::from_path(path).map_err(bad)?;
    r.deserialize().map(|row| row.map_err(bad)).collect()
}

/// The (scenario, strategy, seed) triples a suite expects in its CSV.
pub fn expected_cells(
    suite: &Suite,
    scenarios: &[Scenario],
    cells: &[Cell],
) -> BTreeSet<(String, String, u64)> {
    cells
        .iter()
        .map(|c| {
            (
                scenarios[c.scenario].label.clone(),
                suite.strategies[c.strategy].label.clone(),
                c.seed,
            )
        })
        .collect()
}
