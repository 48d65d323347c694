//! Replay of a recorded `time,role,factor` CSV trace.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::common::Check;
use crate::config::Pattern;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "csv-trace";

/// Replay of a CSV file with header `time,role,factor`; `role` is `worker:N`, `server:N` or
/// `machine:N`; `factor` (> 0) multiplies compute/service time. A role's factor at time t is
/// the last row for it with `time ≤ t` (1 before its first row); a role's machine rows
/// multiply in. Rows must be sorted by time. Loaded at build time; relative paths are
/// relative to the process's working directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvTraceConfig {
    /// Path of the CSV file.
    pub path: PathBuf,
}

impl Pattern for CsvTraceConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        if self.path.as_os_str().is_empty() {
            Err(Check::new(NAME).err("path", "\"\"", "a path to a CSV file"))
        } else {
            Ok(())
        }
    }

    /// Always: the file decides which roles it slows.
    fn applies_to(&self, _kind: RoleKind, _index: u32, _machine: u32) -> bool {
        true
    }

    fn build(
        &self,
        _seed: u64,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(CsvTrace::load(&self.path, kind, index, machine)?))
    }
}

/// The expected header.
const HEADER: [&str; 3] = ["time", "role", "factor"];

/// Who a row is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Worker(u32),
    Server(u32),
    Machine(u32),
}

fn parse_role(s: &str) -> Option<Target> {
    let (kind, id) = s.split_once(':')?;
    let id: u32 = id.trim().parse().ok()?;
    match kind.trim() {
        "worker" => Some(Target::Worker(id)),
        "server" => Some(Target::Server(id)),
        "machine" => Some(Target::Machine(id)),
        _ => None,
    }
}

/// A step function of time: `(time, factor)` sorted by time.
#[derive(Debug, Default, Clone)]
struct Series(Vec<(f64, f64)>);

impl Series {
    /// The factor of the last row with `time ≤ now`, 1 before the first row.
    fn at(&self, now: f64) -> f64 {
        let n = self.0.partition_point(|&(t, _)| t <= now);
        if n == 0 {
            1.0
        } else {
            self.0[n - 1].1
        }
    }
}

/// One role's view of the trace: its own rows and its machine's rows (factors multiply).
#[derive(Debug)]
pub(crate) struct CsvTrace {
    own: Series,
    machine: Series,
}

impl CsvTrace {
    /// Loads `path`, keeping the rows of role `(kind, index)` and of machine `machine`.
    /// Errors name the path, the 1-based line, the column and the problem.
    pub(crate) fn load(
        path: &Path,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Self, StragglerError> {
        let shown = path.display().to_string();
        let row_err = |line: u64, column: &str, problem: String| StragglerError::CsvRow {
            path: shown.clone(),
            line,
            column: column.to_string(),
            problem,
        };
        let file = std::fs::File::open(path).map_err(|e| StragglerError::CsvFile {
            path: shown.clone(),
            problem: format!("cannot open the file: {e}"),
        })?;
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(file);
        let own_target = match kind {
            RoleKind::Worker => Target::Worker(index),
            RoleKind::Server => Target::Server(index),
        };
        let mut own = Series::default();
        let mut mach = Series::default();
        let mut seen_header = false;
        let mut prev_time = f64::NEG_INFINITY;
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line());
                row_err(line, "row", format!("unreadable CSV: {e}"))
            })?;
            let line = record.position().map_or(0, |p| p.line());
            if !seen_header {
                let fields: Vec<&str> = record.iter().collect();
                if fields != HEADER {
                    return Err(row_err(
                        line,
                        "header",
                        format!(
                            "expected header `time,role,factor`, found `{}`",
                            fields.join(",")
                        ),
                    ));
                }
                seen_header = true;
                continue;
            }
            if record.len() != 3 {
                return Err(row_err(
                    line,
                    "row",
                    format!(
                        "expected 3 fields (time,role,factor), found {}",
                        record.len()
                    ),
                ));
            }
            let time: f64 = record[0]
                .parse()
                .map_err(|_| row_err(line, "time", format!("`{}` is not a number", &record[0])))?;
            if !(time.is_finite() && time >= 0.0) {
                return Err(row_err(
                    line,
                    "time",
                    format!("{time} is not a finite time >= 0"),
                ));
            }
            if time < prev_time {
                return Err(row_err(
                    line,
                    "time",
                    format!("time {time} is earlier than the previous row's {prev_time}; rows must be sorted by time"),
                ));
            }
            prev_time = time;
            let target = parse_role(&record[1]).ok_or_else(|| {
                row_err(
                    line,
                    "role",
                    format!(
                        "`{}` is not a role; expected `worker:N`, `server:N` or `machine:N`",
                        &record[1]
                    ),
                )
            })?;
            let factor: f64 = record[2].parse().map_err(|_| {
                row_err(line, "factor", format!("`{}` is not a number", &record[2]))
            })?;
            if !(factor.is_finite() && factor > 0.0) {
                return Err(row_err(
                    line,
                    "factor",
                    format!("{factor} is not a finite factor > 0"),
                ));
            }
            if target == own_target {
                own.0.push((time, factor));
            } else if target == Target::Machine(machine) {
                mach.0.push((time, factor));
            }
        }
        if !seen_header {
            return Err(row_err(
                1,
                "header",
                "empty file: missing header `time,role,factor`".into(),
            ));
        }
        Ok(CsvTrace { own, machine: mach })
    }
}

impl Straggler for CsvTrace {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(self.own.at(p.now) * self.machine.at(p.now))
    }
}
