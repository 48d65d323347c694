//! Entry importance scores (thesis §6.1.3): a decayed, label-weighted access frequency per row.
//!
//! Per iteration and per feature row s, `w_s ← (1−β)·w_s + β·(p_s·k + n_s·l)`, with `p_s`/`n_s`
//! the positive/negative samples of the iteration's batch that look s up. Rows not in the batch
//! decay too; that is done lazily: each row stores its score and the iteration it was last
//! updated, and is decayed by `(1−β)^(Δiter)` when read.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::PlacementError;

/// Default decay factor β.
pub const DEFAULT_BETA: f64 = 0.1;
/// Default weight k of a positive (clicked) sample.
pub const DEFAULT_K: f64 = 1.0;
/// Default weight l of a negative sample; smaller than k because clicks are rare and valuable.
pub const DEFAULT_L: f64 = 0.1;

/// Importance scores of the rows seen so far, over iterations.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Importance {
    beta: f64,
    k: f64,
    l: f64,
    /// The open iteration: updates land in it until [`Importance::end_iteration`].
    iteration: u64,
    /// (table, row) → (score after its last update, the iteration of that update).
    scores: HashMap<(usize, usize), (f64, u64)>,
}

impl Default for Importance {
    /// β = 0.1, k = 1.0, l = 0.1 (spec §3.1.3's choice).
    fn default() -> Self {
        Importance {
            beta: DEFAULT_BETA,
            k: DEFAULT_K,
            l: DEFAULT_L,
            iteration: 0,
            scores: HashMap::new(),
        }
    }
}

/// A score comparable across rows at any common iteration, without decaying every row.
///
/// Rows decay by the same factor per iteration, so `ln w − last·ln(1−β)` orders them the same at
/// every iteration after their updates. With β = 1 a row is worth its score in its own iteration
/// and nothing later, so (last, w) orders them (rows of older iterations, all worth 0, rank below).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ScoreKey(f64, f64);

impl ScoreKey {
    /// A key that orders by a counter alone (recency for LRU).
    pub(crate) fn ordinal(n: u64) -> ScoreKey {
        ScoreKey(n as f64, 0.0)
    }
}

impl Eq for ScoreKey {}

impl PartialOrd for ScoreKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ScoreKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.total_cmp(&other.1))
    }
}

impl Importance {
    /// Scores with decay `beta` in (0, 1] and sample weights `k`, `l` ≥ 0 (finite).
    pub fn new(beta: f64, k: f64, l: f64) -> Result<Importance, PlacementError> {
        if !(beta > 0.0 && beta <= 1.0) {
            return Err(PlacementError::ImportanceParam {
                name: "beta",
                value: beta,
                expected: "in (0, 1]",
            });
        }
        for (name, value) in [("k", k), ("l", l)] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(PlacementError::ImportanceParam {
                    name,
                    value,
                    expected: "finite and >= 0",
                });
            }
        }
        Ok(Importance {
            beta,
            k,
            l,
            ..Importance::default()
        })
    }

    /// The decay factor β.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// The weight k of a positive sample.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// The weight l of a negative sample.
    pub fn l(&self) -> f64 {
        self.l
    }

    /// The open iteration (0 before the first [`Importance::end_iteration`]).
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// Rows with a score.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether no row has a score yet.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// Counts one sample (positive or not) looking up (`table`, `row`) in the open iteration.
    pub fn record(&mut self, table: usize, row: usize, positive: bool) {
        let gain = self.beta * if positive { self.k } else { self.l };
        let now = self.iteration;
        let decay = 1.0 - self.beta;
        let entry = self.scores.entry((table, row)).or_insert((0.0, now));
        if entry.1 != now {
            // First touch this iteration: the decay of the iterations since, this one's included.
            entry.0 *= decay.powf((now - entry.1) as f64);
            entry.1 = now;
        }
        entry.0 += gain;
    }

    /// Counts a batch's lookups of `table`: `ids[i]` looked up by a sample labelled `labels[i]`
    /// (true = positive). Call it for every table of the batch, then [`Importance::end_iteration`].
    ///
    /// Fails, recording nothing, if `ids` and `labels` differ in length.
    pub fn update(
        &mut self,
        table: usize,
        ids: &[usize],
        labels: &[bool],
    ) -> Result<(), PlacementError> {
        if ids.len() != labels.len() {
            return Err(PlacementError::LabelsLength {
                table,
                ids: ids.len(),
                labels: labels.len(),
            });
        }
        for (&id, &positive) in ids.iter().zip(labels) {
            self.record(table, id, positive);
        }
        Ok(())
    }

    /// Closes the open iteration; rows not updated in the next one decay by (1−β).
    pub fn end_iteration(&mut self) {
        self.iteration += 1;
    }

    /// The score of (`table`, `row`) in the open iteration (0 for a row never seen).
    pub fn score(&self, table: usize, row: usize) -> f64 {
        match self.scores.get(&(table, row)) {
            Some(&(w, last)) => w * (1.0 - self.beta).powf((self.iteration - last) as f64),
            None => 0.0,
        }
    }

    /// Forgets the score of (`table`, `row`): a row dropped from the model starts over when
    /// re-admitted.
    pub fn forget(&mut self, table: usize, row: usize) {
        self.scores.remove(&(table, row));
    }

    /// The ordering key of (`table`, `row`): keys compare as the rows' current scores do, and
    /// stay valid while the row is not updated.
    pub(crate) fn key(&self, table: usize, row: usize) -> ScoreKey {
        let (w, last) = self.scores.get(&(table, row)).copied().unwrap_or((0.0, 0));
        if self.beta < 1.0 {
            ScoreKey(w.ln() - last as f64 * (1.0 - self.beta).ln(), 0.0)
        } else {
            ScoreKey(last as f64, w)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn lazy_decay_equals_the_eager_recurrence() {
        let batches: Vec<Vec<(usize, bool)>> = vec![
            vec![(0, true), (1, false), (0, false)],
            vec![],
            vec![(2, true), (2, true)],
            vec![(1, false)],
            vec![],
            vec![],
            vec![(0, false), (3, true)],
            vec![],
        ];
        for (beta, k, l) in [(0.1, 1.0, 0.1), (0.5, 2.0, 0.0), (1.0, 1.0, 0.3)] {
            let mut imp = Importance::new(beta, k, l).unwrap();
            // Eager: every row decayed and updated every iteration.
            let mut w = [0.0f64; 5];
            for (it, b) in batches.iter().enumerate() {
                let ids: Vec<usize> = b.iter().map(|p| p.0).collect();
                let labels: Vec<bool> = b.iter().map(|p| p.1).collect();
                imp.update(0, &ids, &labels).unwrap();
                let mut x = [0.0; 5];
                for &(id, pos) in b {
                    x[id] += if pos { k } else { l };
                }
                for (wi, xi) in w.iter_mut().zip(x) {
                    *wi = (1.0 - beta) * *wi + beta * xi;
                }
                for (row, &want) in w.iter().enumerate() {
                    let got = imp.score(0, row);
                    assert!(
                        close(got, want),
                        "beta {beta}, iteration {it}, row {row}: {got} vs {want}"
                    );
                }
                imp.end_iteration();
            }
        }
    }

    #[test]
    fn scores_within_an_iteration_match_the_recurrence() {
        let mut imp = Importance::default();
        imp.update(3, &[7, 7, 8], &[true, false, false]).unwrap();
        // w = 0.1 * (1 * 1.0 + 1 * 0.1) and 0.1 * 0.1.
        assert!(close(imp.score(3, 7), 0.11));
        assert!(close(imp.score(3, 8), 0.01));
        imp.end_iteration();
        imp.end_iteration();
        imp.update(3, &[8], &[true]).unwrap();
        // Two decays of 0.9, then + 0.1.
        assert!(close(imp.score(3, 8), 0.01 * 0.81 + 0.1));
        assert!(close(imp.score(3, 7), 0.11 * 0.81));
        assert_eq!(imp.score(2, 7), 0.0);
        imp.forget(3, 8);
        assert_eq!(imp.score(3, 8), 0.0);
    }

    #[test]
    fn keys_order_rows_as_their_scores_do() {
        for beta in [0.1, 0.7, 1.0] {
            let mut imp = Importance::new(beta, 1.0, 0.1).unwrap();
            let plan: [&[(usize, bool)]; 4] = [
                &[(0, true), (0, true), (1, false)],
                &[(2, false)],
                &[],
                &[(3, true), (4, false), (4, false)],
            ];
            for b in plan {
                for &(r, p) in b {
                    imp.record(0, r, p);
                }
                imp.end_iteration();
            }
            imp.record(0, 5, false);
            for a in 0..7 {
                for b in 0..7 {
                    let (sa, sb) = (imp.score(0, a), imp.score(0, b));
                    if (sa - sb).abs() > 1e-12 {
                        assert_eq!(
                            imp.key(0, a).cmp(&imp.key(0, b)),
                            sa.total_cmp(&sb),
                            "beta {beta}: rows {a} ({sa}) and {b} ({sb})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn parameters_are_validated_by_name() {
        assert!(Importance::new(1.0, 0.0, 0.0).is_ok());
        let err = Importance::new(0.0, 1.0, 0.1).unwrap_err();
        assert!(err.to_string().contains("beta is 0"), "{err}");
        assert!(Importance::new(1.1, 1.0, 0.1).is_err());
        assert!(Importance::new(f64::NAN, 1.0, 0.1).is_err());
        let err = Importance::new(0.1, 1.0, -0.5).unwrap_err();
        assert_eq!(
            err,
            PlacementError::ImportanceParam {
                name: "l",
                value: -0.5,
                expected: "finite and >= 0"
            }
        );
        assert!(Importance::new(0.1, f64::INFINITY, 0.1).is_err());
        let mut imp = Importance::default();
        assert_eq!(
            imp.update(4, &[1, 2], &[true]).unwrap_err(),
            PlacementError::LabelsLength {
                table: 4,
                ids: 2,
                labels: 1
            }
        );
        assert!(imp.is_empty());
    }
}
