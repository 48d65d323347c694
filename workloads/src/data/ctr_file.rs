//! Click-through data from a local CSV file (`[data] kind = "ctr-file"`).
//!
//! Each line is `label,dense_0,…,dense_{D-1},id_0,…,id_{K-1}`: a 0/1 label, `D` dense values
//! and one id per field. The first line is a header, and skipped, when its first column is not
//! a number. Ids must be non-negative integers below their field's `rows`; every problem is an
//! error naming the file, the line and the column ([`DataError::CtrFile`]). A seeded shuffle
//! holds out `test_fraction` of the lines (at least one) as the test set; the samples are
//! encoded as the synthetic click-through data is (see [`super::ctr`]).

use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::sampling::{fisher_yates, mix_seed};
use super::{CtrSchema, DataError, Dataset, Split};

const SPLIT_STREAM: u64 = 0x4354_5246_494c_0001; // "CTRFIL" 1

fn bad(path: &Path, line: u64, field: impl Into<String>, reason: impl Into<String>) -> DataError {
    DataError::CtrFile {
        path: path.to_path_buf(),
        line,
        field: field.into(),
        reason: reason.into(),
    }
}

/// Parses one id column: a non-negative integer below `rows`.
fn parse_id(path: &Path, line: u64, k: usize, text: &str, rows: usize) -> Result<u32, DataError> {
    let field = format!("id_{k}");
    let t = text.trim();
    let id: i64 = match t.parse::<i64>() {
        Ok(v) => v,
        Err(_) => {
            return Err(bad(
                path,
                line,
                field,
                format!("{t:?} is not an integer id"),
            ))
        }
    };
    if id < 0 {
        return Err(bad(path, line, field, format!("id {id} is negative")));
    }
    if id as u64 >= rows as u64 {
        return Err(bad(
            path,
            line,
            field,
            format!("id {id} is out of range: field {k} has {rows} rows (ids 0..{rows})"),
        ));
    }
    Ok(id as u32)
}

/// Reads `path` (see the module documentation) into a train/test split.
///
/// `rows` holds one entry per field, `dense` the dense column count, `test_fraction` is in
/// (0, 1) (checked by `DataConfig::validate`); the split is a pure function of the file and
/// `seed`.
pub fn load_ctr_file(
    path: &Path,
    rows: &[usize],
    dense: usize,
    test_fraction: f64,
    seed: u64,
) -> Result<Split, DataError> {
    let schema = CtrSchema {
        dense,
        rows: rows.to_vec(),
    };
    let columns = 1 + schema.sample_len();
    let io = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(source) => DataError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => bad(path, 0, "file", format!("{other:?}")),
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(io)?;
    let mut samples: Vec<(Vec<f32>, u32)> = Vec::new();
    let mut first = true;
    for record in reader.records() {
        let record = record.map_err(io)?;
        let line = record.position().map_or(0, |p| p.line());
        let is_first = std::mem::replace(&mut first, false);
        if is_first && record.get(0).is_some_and(|c| c.parse::<f64>().is_err()) {
            continue; // a header
        }
        if record.len() == 1 && record.get(0).is_some_and(str::is_empty) {
            continue; // a blank line
        }
        if record.len() != columns {
            return Err(bad(
                path,
                line,
                "columns",
                format!(
                    "{} columns, expected {columns} (label, {dense} dense, {} ids)",
                    record.len(),
                    rows.len()
                ),
            ));
        }
        let label = match record.get(0).unwrap_or("") {
            "0" => 0,
            "1" => 1,
            other => {
                return Err(bad(
                    path,
                    line,
                    "label",
                    format!("{other:?} is not a label: must be 0 or 1"),
                ))
            }
        };
        let mut features = Vec::with_capacity(schema.sample_len());
        for i in 0..dense {
            let text = record.get(1 + i).unwrap_or("");
            match text.parse::<f32>() {
                Ok(v) if v.is_finite() => features.push(v),
                _ => {
                    return Err(bad(
                        path,
                        line,
                        format!("dense_{i}"),
                        format!("{text:?} is not a finite number"),
                    ))
                }
            }
        }
        for (k, &r) in rows.iter().enumerate() {
            let text = record.get(1 + dense + k).unwrap_or("");
            features.push(parse_id(path, line, k, text, r)? as f32);
        }
        samples.push((features, label));
    }
    if samples.len() < 2 {
        return Err(bad(
            path,
            0,
            "file",
            format!(
                "holds {} data lines; need at least 2 (one to train on, one to test)",
                samples.len()
            ),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(seed, SPLIT_STREAM));
    fisher_yates(&mut samples, &mut rng);
    let test =
        ((test_fraction * samples.len() as f64).round() as usize).clamp(1, samples.len() - 1);
    let dataset = |part: &[(Vec<f32>, u32)]| Dataset {
        features: part.iter().flat_map(|(f, _)| f.iter().copied()).collect(),
        sample_shape: vec![schema.sample_len()],
        labels: part.iter().map(|(_, l)| *l).collect(),
        classes: 2,
        ctr: Some(schema.clone()),
    };
    Ok(Split {
        test: dataset(&samples[..test]),
        train: dataset(&samples[test..]),
    })
}
