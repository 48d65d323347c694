//! A worker's batch seen table by table: the unique ids each table's lookups touch (what it
//! pulls), the embedding rows of the batch assembled from the pulled rows, and the row gradients
//! summed per unique id (what it pushes).

use std::ops::Range;

/// The ids of one worker's batch, deduplicated per table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableIds {
    /// Per table, the ids the batch looks up, sorted, each once.
    pub unique: Vec<Vec<u32>>,
    /// Per (sample, field), sample-major: the position of its id in `unique[field]`.
    slot: Vec<usize>,
    fields: usize,
}

impl TableIds {
    /// The batch whose ids are `ids` (`[samples, fields]` row-major).
    pub fn new(ids: &[u32], fields: usize) -> TableIds {
        let fields = fields.max(1);
        let samples = ids.len() / fields;
        let mut unique: Vec<Vec<u32>> = (0..fields)
            .map(|k| (0..samples).map(|m| ids[m * fields + k]).collect())
            .collect();
        for u in &mut unique {
            u.sort_unstable();
            u.dedup();
        }
        let slot = ids
            .iter()
            .enumerate()
            .map(|(i, id)| unique[i % fields].binary_search(id).unwrap_or(0))
            .collect();
        TableIds {
            unique,
            slot,
            fields,
        }
    }

    /// Samples in the batch.
    pub fn samples(&self) -> usize {
        self.slot.len() / self.fields
    }

    /// Unique ids over all tables: the rows one pull reads and one push updates.
    pub fn rows(&self) -> usize {
        self.unique.iter().map(Vec::len).sum()
    }

    /// The positions in `unique[table]` of the ids inside `rows` (ids are sorted, so they are
    /// one contiguous range).
    pub fn within(&self, table: usize, rows: &Range<usize>) -> Range<usize> {
        let u = &self.unique[table];
        let lo = u.partition_point(|&id| (id as usize) < rows.start);
        let hi = u.partition_point(|&id| (id as usize) < rows.end);
        lo..hi.max(lo)
    }

    /// The batch's embedding rows `[samples, fields, width]` from `rows[k]`, the values of
    /// `unique[k]`'s rows (`[unique[k].len(), width]` row-major).
    pub fn assemble(&self, rows: &[Vec<f32>], width: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.slot.len() * width);
        for (i, &s) in self.slot.iter().enumerate() {
            let table = &rows[i % self.fields];
            out.extend_from_slice(&table[s * width..(s + 1) * width]);
        }
        out
    }

    /// The gradient of each unique row, `[unique[k].len(), width]` per table: `emb_grad`
    /// (`[samples, fields, width]`) summed over the samples that looked the row up.
    pub fn sum_grads(&self, emb_grad: &[f32], width: usize) -> Vec<Vec<f32>> {
        let mut out: Vec<Vec<f32>> = self
            .unique
            .iter()
            .map(|u| vec![0.0; u.len() * width])
            .collect();
        for (i, &s) in self.slot.iter().enumerate() {
            let g = &emb_grad[i * width..(i + 1) * width];
            let dst = &mut out[i % self.fields][s * width..(s + 1) * width];
            for (d, x) in dst.iter_mut().zip(g) {
                *d += x;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three samples of two fields: field 0 ids 5, 2, 5; field 1 ids 0, 0, 9.
    fn batch() -> TableIds {
        TableIds::new(&[5, 0, 2, 0, 5, 9], 2)
    }

    #[test]
    fn unique_ids_are_sorted_and_ranges_split_them() {
        let b = batch();
        assert_eq!(b.unique, vec![vec![2, 5], vec![0, 9]]);
        assert_eq!((b.samples(), b.rows()), (3, 4));
        assert_eq!(b.within(0, &(0..3)), 0..1);
        assert_eq!(b.within(0, &(3..10)), 1..2);
        assert_eq!(b.within(1, &(1..9)), 1..1);
    }

    /// Assembling puts each sample's rows in place; summing gradients adds a repeated id's
    /// rows and is the transpose of assembling (⟨assemble(r), g⟩ = ⟨r, sum(g)⟩).
    #[test]
    fn assemble_and_sum_are_adjoint() {
        let b = batch();
        let rows = vec![vec![1.0, 2.0, 3.0, 4.0], vec![10.0, 20.0, 30.0, 40.0]];
        let emb = b.assemble(&rows, 2);
        assert_eq!(
            emb,
            vec![3.0, 4.0, 10.0, 20.0, 1.0, 2.0, 10.0, 20.0, 3.0, 4.0, 30.0, 40.0]
        );
        let g: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let sums = b.sum_grads(&g, 2);
        // id 5 of field 0: samples 0 and 2 → [0+8, 1+9]; id 0 of field 1: samples 0, 1.
        assert_eq!(sums[0], vec![4.0, 5.0, 8.0, 10.0]);
        assert_eq!(sums[1], vec![2.0 + 6.0, 3.0 + 7.0, 10.0, 11.0]);
        let lhs: f32 = emb.iter().zip(&g).map(|(a, b)| a * b).sum();
        let rhs: f32 = rows
            .iter()
            .flatten()
            .zip(sums.iter().flatten())
            .map(|(a, b)| a * b)
            .sum();
        assert_eq!(lhs, rhs);
    }
}
