//! The committed record of a suite: `bench/results/<suite>/` holds the `REPORT.md` (without
//! plots) and `results.csv` of the last complete run, so every number the project quotes can be
//! traced to a code version and its seeds, and `--check` can tell which cells a change moved.

use crate::bench::error::BenchError;
use crate::bench::report::csv_file::{read_csv, write_csv};
use crate::bench::report::row::Row;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a suite's record lives: `bench/results/<suite>/` under the workspace root.
pub fn record_dir(root: &Path, suite: &str) -> PathBuf {
    root.join("bench").join("results").join(suite)
}

/// Writes the record: `REPORT.md` and `results.csv` in `dir`.
pub fn write_record(dir: &Path, markdown: &str, rows: &[Row]) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    write_csv(&dir.join("results.csv"), rows)?;
    let path = dir.join("REPORT.md");
    std::fs::write(&path, markdown).map_err(|source| BenchError::Io { path, source })
}

/// One cell whose result differs from the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    /// `scenario / strategy / seed N`.
    pub cell: String,
    /// What changed: `column: recorded → now` for each column that differs, or that the cell
    /// is new or gone.
    pub change: String,
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.cell, self.change)
    }
}

/// A row's fields by CSV column name, as written (so a comparison is of the exact digits).
fn fields(row: &Row) -> Result<BTreeMap<String, String>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(row)?;
    let bytes = w
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    let mut r = csv::Reader::from_reader(bytes.as_slice());
    let header = r.headers()?.clone();
    let record = r.records().next().transpose()?.unwrap_or_default();
    Ok(header
        .iter()
        .zip(record.iter())
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect())
}

/// Compares `rows` with the record's `results.csv` in `dir`: every cell that is new, gone, or
/// has any column with other digits.
pub fn compare(dir: &Path, rows: &[Row]) -> Result<Vec<Moved>, BenchError> {
    let path = dir.join("results.csv");
    if !path.exists() {
        return Err(BenchError::NoRecord { path });
    }
    let recorded = read_csv(&path)?;
    let bad = |e: csv::Error| BenchError::Output {
        path: path.clone(),
        reason: e.to_string(),
    };
    let key = |r: &Row| format!("{} / {} / seed {}", r.scenario, r.strategy, r.seed);
    let mut before: BTreeMap<String, &Row> = recorded.iter().map(|r| (key(r), r)).collect();
    let mut moved = Vec::new();
    for row in rows {
        let cell = key(row);
        let Some(old) = before.remove(&cell) else {
            moved.push(Moved {
                cell,
                change: "not in the record".into(),
            });
            continue;
        };
        let (old, new) = (fields(old).map_err(bad)?, fields(row).map_err(bad)?);
        let changes: Vec<String> = new
            .iter()
            .filter(|(k, v)| old.get(*k) != Some(v))
            .map(|(k, v)| {
                format!(
                    "{k}: {} → {v}",
                    old.get(k).map_or("(absent)", String::as_str)
                )
            })
            .collect();
        if !changes.is_empty() {
            moved.push(Moved {
                cell,
                change: changes.join(", "),
            });
        }
    }
    moved.extend(before.into_keys().map(|cell| Moved {
        cell,
        change: "in the record, not in this run".into(),
    }));
    Ok(moved)
}
