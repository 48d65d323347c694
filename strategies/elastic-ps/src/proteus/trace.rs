//! The price trace file: CSV `time_s,type,price`, one row per price change of one type.
//!
//! Reading checks every row and names the first bad one (`path:line`, the column, why): a
//! malformed or non-finite number, a negative price, a type the market file does not name, a
//! time that does not increase strictly for its type; and a type with no row at all.

use super::error::MarketError;
use super::market::{InstanceType, PriceTrace};
use std::fmt::Write as _;
use std::path::Path;

/// The header line of a trace file.
pub const HEADER: &str = "time_s,type,price";

/// Reads a trace file into one [`PriceTrace`] per type of `types` (same order).
pub fn read_csv(path: &Path, types: &[InstanceType]) -> Result<Vec<PriceTrace>, MarketError> {
    let text = std::fs::read_to_string(path).map_err(|source| MarketError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_csv(&text, path, types)
}

/// Parses trace text; `path` names the file in errors.
pub fn parse_csv(
    text: &str,
    path: &Path,
    types: &[InstanceType],
) -> Result<Vec<PriceTrace>, MarketError> {
    let bad = |line: usize, field: &str, reason: String| MarketError::Trace {
        path: path.to_path_buf(),
        line,
        field: field.to_string(),
        reason,
    };
    let mut points: Vec<Vec<(f64, f64)>> = vec![Vec::new(); types.len()];
    let mut header_seen = false;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            bad(line, "(row)", format!("unreadable CSV: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let cols: Vec<&str> = record.iter().collect();
        // Blank and comment lines.
        if cols.iter().all(|c| c.is_empty()) || cols[0].starts_with('#') {
            continue;
        }
        if !header_seen {
            if cols != ["time_s", "type", "price"] {
                return Err(bad(
                    line,
                    "(header)",
                    format!("expected `{HEADER}`, found `{}`", cols.join(",")),
                ));
            }
            header_seen = true;
            continue;
        }
        if cols.len() != 3 {
            return Err(bad(
                line,
                "(row)",
                format!("expected 3 columns ({HEADER}), found {}", cols.len()),
            ));
        }
        let time: f64 = cols[0]
            .parse()
            .map_err(|_| bad(line, "time_s", format!("`{}` is not a number", cols[0])))?;
        if !time.is_finite() {
            return Err(bad(line, "time_s", format!("{time} is not finite")));
        }
        let Some(ti) = types.iter().position(|t| t.name == cols[1]) else {
            let known: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
            return Err(bad(
                line,
                "type",
                format!(
                    "`{}` is not a type of the market; one of {}",
                    cols[1],
                    known.join(", ")
                ),
            ));
        };
        let price: f64 = cols[2]
            .parse()
            .map_err(|_| bad(line, "price", format!("`{}` is not a number", cols[2])))?;
        if !(price.is_finite() && price >= 0.0) {
            return Err(bad(
                line,
                "price",
                format!("{price} is not a finite price ≥ 0"),
            ));
        }
        if let Some(&(last, _)) = points[ti].last() {
            if time <= last {
                return Err(bad(
                    line,
                    "time_s",
                    format!(
                        "{time} does not follow the previous time {last} of `{}` (times must increase strictly per type)",
                        cols[1]
                    ),
                ));
            }
        }
        points[ti].push((time, price));
    }
    if !header_seen {
        return Err(bad(
            1,
            "(header)",
            format!("empty trace: expected `{HEADER}` and rows"),
        ));
    }
    types
        .iter()
        .zip(points)
        .map(|(t, p)| {
            if p.is_empty() {
                return Err(MarketError::Trace {
                    path: path.to_path_buf(),
                    line: text.lines().count(),
                    field: "type".into(),
                    reason: format!("empty trace for `{}`: no row names it", t.name),
                });
            }
            PriceTrace::new(p)
        })
        .collect()
}

/// The trace text of `traces` (one per type of `types`), rows ordered by time then type.
pub fn to_csv(types: &[InstanceType], traces: &[PriceTrace]) -> String {
    let mut rows: Vec<(f64, usize, f64)> = traces
        .iter()
        .enumerate()
        .flat_map(|(ti, tr)| tr.points().map(move |(t, p)| (t, ti, p)))
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = String::with_capacity(rows.len() * 24);
    out.push_str(HEADER);
    out.push('\n');
    for (t, ti, p) in rows {
        let _ = writeln!(out, "{t},{},{p}", types[ti].name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types() -> Vec<InstanceType> {
        ["a", "b"]
            .iter()
            .map(|n| InstanceType {
                name: n.to_string(),
                vcpus: 4,
                on_demand: 0.2,
            })
            .collect()
    }

    fn parse(text: &str) -> Result<Vec<PriceTrace>, MarketError> {
        parse_csv(text, Path::new("t.csv"), &types())
    }

    #[test]
    fn a_trace_round_trips_through_its_text() {
        let text = "time_s,type,price\n0,a,0.05\n0,b,0.06\n300,a,0.07\n";
        let traces = parse(text).unwrap();
        assert_eq!(traces[0].price_at(400.0), 0.07);
        assert_eq!(traces[1].price_at(400.0), 0.06);
        assert_eq!(to_csv(&types(), &traces), text);
    }

    #[test]
    fn bad_rows_are_named_by_line_and_column() {
        let cases = [
            ("time_s,type,price\n0,a,0.05\n0,b,-1\n", 3, "price"),
            ("time_s,type,price\n0,a,0.05\n0,b,inf\n", 3, "price"),
            ("time_s,type,price\n0,a,0.05\n0,c,0.1\n", 3, "type"),
            ("time_s,type,price\n0,a,0.05\n0,b,1\n0,a,0.1\n", 4, "time_s"),
            ("time_s,type,price\n0,a,0.05\n", 2, "type"),
            ("time_s,type,price\n0,a\n", 2, "(row)"),
        ];
        for (text, want_line, want_field) in cases {
            match parse(text) {
                Err(MarketError::Trace { line, field, .. }) => {
                    assert_eq!((line, field.as_str()), (want_line, want_field), "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(parse(""), Err(MarketError::Trace { .. })));
        assert!(matches!(
            parse("t,y,p\n"),
            Err(MarketError::Trace { line: 1, .. })
        ));
    }
}
