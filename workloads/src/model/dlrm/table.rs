//! Row-wise access to one embedding table stored dimension-major.
//!
//! A table of `rows` ids and `width` columns is one flat slice of `width × rows` values: column
//! `c` of id `i` sits at `c * rows + i` (shape `[width, rows]`), so a column shard of the table
//! (a range of columns) is one contiguous range of the slice. These helpers read and update the
//! rows a batch touches and nothing else: embedding tables never get a dense gradient.
//!
//! Every id must be `< rows` and `cols` must lie within the table's width; the data sources
//! guarantee the first, the model's spec the second, and a violation panics (an index out of
//! bounds).

use std::ops::Range;

/// The values of `ids`' rows in columns `cols`, row-major `[ids.len(), cols.len()]` (one row per
/// listed id, repeats included).
///
/// # Panics
/// If an id is `>= rows` or `cols` reaches past the table.
pub fn gather_rows(table: &[f32], rows: usize, ids: &[u32], cols: Range<usize>) -> Vec<f32> {
    let width = cols.len();
    let mut out = vec![0.0f32; ids.len() * width];
    for (j, c) in cols.enumerate() {
        let column = &table[c * rows..(c + 1) * rows];
        for (i, &id) in ids.iter().enumerate() {
            out[i * width + j] = column[id as usize];
        }
    }
    out
}

/// Adds `scale × values` to `ids`' rows in columns `cols`; `values` is row-major
/// `[ids.len(), cols.len()]`. A repeated id receives every one of its rows, in list order.
///
/// # Panics
/// If an id is `>= rows`, `cols` reaches past the table, or `values` is shorter than
/// `ids.len() × cols.len()`.
pub fn add_rows(
    table: &mut [f32],
    rows: usize,
    ids: &[u32],
    values: &[f32],
    cols: Range<usize>,
    scale: f32,
) {
    let width = cols.len();
    for (j, c) in cols.enumerate() {
        let column = &mut table[c * rows..(c + 1) * rows];
        for (i, &id) in ids.iter().enumerate() {
            column[id as usize] += scale * values[i * width + j];
        }
    }
}

/// Plain SGD on the rows a batch touched: `row[id] -= lr × grad` for each listed id, in list
/// order (a repeated id's gradients accumulate); `grads` is row-major `[ids.len(),
/// cols.len()]`. Rows not listed are left untouched, bit for bit.
///
/// # Panics
/// As [`add_rows`].
pub fn sgd_rows(
    table: &mut [f32],
    rows: usize,
    ids: &[u32],
    grads: &[f32],
    cols: Range<usize>,
    lr: f32,
) {
    add_rows(table, rows, ids, grads, cols, -lr);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3-column table of 5 ids: value = 10·column + id.
    fn table() -> Vec<f32> {
        (0..3)
            .flat_map(|c| (0..5).map(move |i| (10 * c + i) as f32))
            .collect()
    }

    #[test]
    fn gather_reads_dimension_major_rows() {
        let t = table();
        assert_eq!(
            gather_rows(&t, 5, &[4, 0, 4], 0..3),
            vec![4.0, 14.0, 24.0, 0.0, 10.0, 20.0, 4.0, 14.0, 24.0]
        );
        assert_eq!(gather_rows(&t, 5, &[2], 1..3), vec![12.0, 22.0]);
        assert!(gather_rows(&t, 5, &[], 0..3).is_empty());
    }

    /// Only the listed rows change (the rest bit for bit), a repeated id takes both gradients,
    /// and a column range touches only its columns.
    #[test]
    fn sgd_touches_only_listed_rows_and_accumulates_repeats() {
        let before = table();
        let mut t = before.clone();
        let ids = [3u32, 1, 3];
        let grads = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 100.0, 200.0, 300.0];
        sgd_rows(&mut t, 5, &ids, &grads, 0..3, 0.5);
        for c in 0..3 {
            for i in 0..5 {
                let (b, a) = (before[c * 5 + i], t[c * 5 + i]);
                let expected = match i {
                    3 => b - 0.5 * (grads[c] + grads[6 + c]),
                    1 => b - 0.5 * grads[3 + c],
                    _ => b,
                };
                assert_eq!(a.to_bits(), expected.to_bits(), "column {c}, id {i}");
            }
        }
        // A column shard: columns 1..3 of id 0 only.
        let mut s = before.clone();
        sgd_rows(&mut s, 5, &[0], &[1.0, 1.0], 1..3, 1.0);
        let changed: Vec<usize> = (0..15).filter(|&k| s[k] != before[k]).collect();
        assert_eq!(changed, vec![5, 10]);
    }
}
