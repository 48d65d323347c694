//! The in-memory data set every source produces, and its train/test split.

/// A dataset held in memory: row-major f32 features, one u32 label per sample.
///
/// Classification data uses the label; ratings data (matrix factorization)
/// stores each observed entry as the features `[row, col, value]` with label 0
/// and `classes = 1` (see [`ratings`](super::ratings)).
///
/// Sample `i` occupies `features[i * sample_len() .. (i + 1) * sample_len()]`,
/// laid out in `sample_shape` row-major order; its label is `labels[i]`, which
/// is always `< classes`. Kept as flat vectors so the engine can hand a batch
/// to any tensor library without copies per sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// All samples' features, concatenated row-major (`len() * sample_len()` values).
    pub features: Vec<f32>,
    /// The shape of one sample, e.g. `[32]` for vectors or `[1, 28, 28]` for images.
    pub sample_shape: Vec<usize>,
    /// One class label per sample, each `< classes`.
    pub labels: Vec<u32>,
    /// The number of classes (the width of a classifier's output).
    pub classes: usize,
    /// Click-through data's schema (how many dense features lead each sample, how many rows
    /// each categorical field has), so a DLRM can split a sample into its dense part and its
    /// ids; `None` for every other kind of data.
    pub ctr: Option<super::CtrSchema>,
}

impl Dataset {
    /// The number of samples (one per label).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the dataset holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The number of `f32` values in one sample: the product of `sample_shape`.
    pub fn sample_len(&self) -> usize {
        self.sample_shape.iter().product()
    }

    /// The features of sample `i`, `sample_len()` values.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn features_of(&self, i: usize) -> &[f32] {
        assert!(
            i < self.len(),
            "sample index {i} out of range for a dataset of {} samples",
            self.len()
        );
        let n = self.sample_len();
        &self.features[i * n..(i + 1) * n]
    }

    /// Gather a batch (features concatenated, labels) by sample indices.
    ///
    /// The features come back concatenated in `idx` order (`idx.len() *
    /// sample_len()` values), ready to become a `[batch, sample_shape..]`
    /// tensor; indices may repeat.
    ///
    /// # Panics
    /// If any index is `>= len()`.
    pub fn gather(&self, idx: &[usize]) -> (Vec<f32>, Vec<u32>) {
        let mut features = Vec::with_capacity(idx.len() * self.sample_len());
        let mut labels = Vec::with_capacity(idx.len());
        for &i in idx {
            features.extend_from_slice(self.features_of(i));
            labels.push(self.labels[i]);
        }
        (features, labels)
    }

    /// How many samples carry each label: a vector of length `classes`.
    ///
    /// Useful to check class balance (and to report it in run summaries).
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.classes];
        for &l in &self.labels {
            counts[l as usize] += 1;
        }
        counts
    }
}

/// Train and test split.
///
/// Both halves share `sample_shape` and `classes`; their samples are disjoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// The samples training draws its batches from.
    pub train: Dataset,
    /// The held-out samples accuracy is measured on.
    pub test: Dataset,
}
