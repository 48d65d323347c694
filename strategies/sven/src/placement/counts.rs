//! Per-row access counts gathered over the warm-up stage (spec §3.1.3, step 1).

use super::PlacementError;

/// Access counts of every row of every table, recorded over warm-up iterations.
///
/// Memory is one `u32` per row (O(total rows)); counts saturate at `u32::MAX`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AccessCounts {
    /// Row count per table.
    tables_rows: Vec<usize>,
    /// Start of each table's counts in `counts`.
    starts: Vec<usize>,
    /// Flat counts, table after table.
    counts: Vec<u32>,
}

impl AccessCounts {
    /// Zero counts for tables of the given row counts.
    pub fn new(tables_rows: &[usize]) -> AccessCounts {
        let mut starts = Vec::with_capacity(tables_rows.len());
        let mut total = 0;
        for &rows in tables_rows {
            starts.push(total);
            total += rows;
        }
        AccessCounts {
            tables_rows: tables_rows.to_vec(),
            starts,
            counts: vec![0; total],
        }
    }

    /// Counts one access of each id in `ids` (repeats count again) in `table`.
    ///
    /// Fails, recording nothing, on an unknown table or an id past the table's end.
    pub fn record(&mut self, table: usize, ids: &[usize]) -> Result<(), PlacementError> {
        let rows = self.rows_of(table)?;
        if let Some(&row) = ids.iter().find(|&&id| id >= rows) {
            return Err(PlacementError::RowOutOfRange { table, row, rows });
        }
        let start = self.starts[table];
        for &id in ids {
            let c = &mut self.counts[start + id];
            *c = c.saturating_add(1);
        }
        Ok(())
    }

    /// The row count of `table`, or an error naming it if it does not exist.
    fn rows_of(&self, table: usize) -> Result<usize, PlacementError> {
        self.tables_rows
            .get(table)
            .copied()
            .ok_or(PlacementError::TableOutOfRange {
                table,
                tables: self.tables_rows.len(),
            })
    }

    /// The count of (`table`, `row`).
    ///
    /// # Panics
    /// If the row is outside the tables (as slice indexing does).
    pub fn count(&self, table: usize, row: usize) -> u32 {
        assert!(
            row < self.tables_rows[table],
            "placement: row {row} is outside table {table}"
        );
        self.counts[self.starts[table] + row]
    }

    /// The counts of `table`'s rows.
    ///
    /// # Panics
    /// If `table` does not exist.
    pub fn table(&self, table: usize) -> &[u32] {
        let start = self.starts[table];
        &self.counts[start..start + self.tables_rows[table]]
    }

    /// Row count per table.
    pub fn tables_rows(&self) -> &[usize] {
        &self.tables_rows
    }

    /// Rows over all tables.
    pub fn total_rows(&self) -> usize {
        self.counts.len()
    }

    /// Accesses recorded over all tables.
    pub fn total_accesses(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_repeats_per_table() {
        let mut c = AccessCounts::new(&[3, 5]);
        c.record(0, &[0, 2, 2]).unwrap();
        c.record(1, &[4, 4, 4, 0]).unwrap();
        assert_eq!(c.table(0), &[1, 0, 2]);
        assert_eq!(c.table(1), &[1, 0, 0, 0, 3]);
        assert_eq!(c.count(1, 4), 3);
        assert_eq!(c.total_rows(), 8);
        assert_eq!(c.total_accesses(), 7);
    }

    #[test]
    fn bad_ids_record_nothing() {
        let mut c = AccessCounts::new(&[3]);
        assert_eq!(
            c.record(0, &[1, 3]).unwrap_err(),
            PlacementError::RowOutOfRange {
                table: 0,
                row: 3,
                rows: 3
            }
        );
        assert_eq!(c.total_accesses(), 0);
        assert_eq!(
            c.record(2, &[0]).unwrap_err(),
            PlacementError::TableOutOfRange {
                table: 2,
                tables: 1
            }
        );
    }
}
