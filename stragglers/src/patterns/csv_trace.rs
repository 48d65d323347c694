//! Replay of a recorded `time,role,factor` CSV trace.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::common::Check;
use crate::config::Pattern;
use crate::{Effect, JobShape, Probe, RoleKind, Straggler, StragglerError};

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

    /// Reads the file and checks that every row names a worker, server or machine of the job.
    fn check_job(&self, job: &JobShape) -> Result<(), StragglerError> {
        let rows = read_rows(&self.path)?;
        check_rows(&self.path.display().to_string(), &rows, job)
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

/// One parsed data row of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Row {
    /// 1-based line number in the file.
    pub(crate) line: u64,
    /// When the factor starts to hold.
    pub(crate) time: f64,
    /// Who it slows.
    target: Target,
    /// The factor (finite, > 0).
    pub(crate) factor: f64,
}

/// Reads the trace at `path` whole; errors name the path, the 1-based line, the column and the
/// problem.
fn read_rows(path: &Path) -> Result<Vec<Row>, StragglerError> {
    let file = std::fs::File::open(path).map_err(|e| StragglerError::CsvFile {
        path: path.display().to_string(),
        problem: format!("cannot open the file: {e}"),
    })?;
    parse_rows(&path.display().to_string(), file)
}

/// Parses a trace from `input` (`shown` names it in errors): the header, then rows sorted by
/// time with a known role kind and a finite factor > 0.
pub(crate) fn parse_rows(
    shown: &str,
    mut input: impl std::io::Read,
) -> Result<Vec<Row>, StragglerError> {
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|e| StragglerError::CsvFile {
            path: shown.to_string(),
            problem: format!("cannot read the file: {e}"),
        })?;
    let lines = LineIndex::new(&bytes);
    let row_err = |line: u64, column: &str, problem: String| StragglerError::CsvRow {
        path: shown.to_string(),
        line,
        column: column.to_string(),
        problem,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes.as_slice());
    let mut rows = Vec::new();
    let mut seen_header = false;
    let mut prev_time = f64::NEG_INFINITY;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| lines.line_of(p.byte()));
            row_err(line, "row", format!("unreadable CSV: {e}"))
        })?;
        let line = record.position().map_or(0, |p| lines.line_of(p.byte()));
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
        let factor: f64 = record[2]
            .parse()
            .map_err(|_| row_err(line, "factor", format!("`{}` is not a number", &record[2])))?;
        if !(factor.is_finite() && factor > 0.0) {
            return Err(row_err(
                line,
                "factor",
                format!("{factor} is not a finite factor > 0"),
            ));
        }
        rows.push(Row {
            line,
            time,
            target,
            factor,
        });
    }
    if !seen_header {
        return Err(row_err(
            1,
            "header",
            "empty file: missing header `time,role,factor`".into(),
        ));
    }
    Ok(rows)
}

/// Where each line of a file starts, so that rows and errors name the line a reader sees: the
/// CSV reader ends records at `\n`, `\r\n` and a lone `\r` alike but counts only `\n`s, which
/// put every row of a file with `\r` line ends on line 1.
struct LineIndex(Vec<u64>);

impl LineIndex {
    fn new(bytes: &[u8]) -> Self {
        let mut starts = vec![0];
        for (i, &b) in bytes.iter().enumerate() {
            // A `\r\n` starts its next line at the `\n`, where the CSV reader may place the
            // next record's start.
            let crlf_tail = b == b'\n' && i > 0 && bytes[i - 1] == b'\r';
            if b == b'\r' || (b == b'\n' && !crlf_tail) {
                starts.push(i as u64 + 1);
            }
        }
        LineIndex(starts)
    }

    /// The 1-based line holding byte `at`.
    fn line_of(&self, at: u64) -> u64 {
        self.0.partition_point(|&start| start <= at) as u64
    }
}

/// Checks that every row names a role of the job; the error names the file, the line and the
/// role.
pub(crate) fn check_rows(shown: &str, rows: &[Row], job: &JobShape) -> Result<(), StragglerError> {
    for row in rows {
        let (kind, id, count) = match row.target {
            Target::Worker(i) => ("worker", i, job.workers),
            Target::Server(i) => ("server", i, job.servers),
            Target::Machine(i) => ("machine", i, job.machines),
        };
        if id >= count {
            let known = match count {
                0 => format!("the job has no {kind}s"),
                1 => format!("the job has 1 {kind} ({kind}:0)"),
                n => format!("the job has {n} {kind}s ({kind}:0 to {kind}:{})", n - 1),
            };
            return Err(StragglerError::CsvRow {
                path: shown.to_string(),
                line: row.line,
                column: "role".into(),
                problem: format!("{kind}:{id} is not in this job: {known}"),
            });
        }
    }
    Ok(())
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
        let own_target = match kind {
            RoleKind::Worker => Target::Worker(index),
            RoleKind::Server => Target::Server(index),
        };
        let mut own = Series::default();
        let mut mach = Series::default();
        for row in read_rows(path)? {
            if row.target == own_target {
                own.0.push((row.time, row.factor));
            } else if row.target == Target::Machine(machine) {
                mach.0.push((row.time, row.factor));
            }
        }
        Ok(CsvTrace { own, machine: mach })
    }
}

impl Straggler for CsvTrace {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(self.own.at(p.now) * self.machine.at(p.now))
    }
}
