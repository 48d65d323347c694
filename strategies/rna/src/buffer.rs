//! The CPU-side gradient buffer of an RNA worker: local accumulation, staleness bound, null
//! contributions (§5.1.3, the TF WriteOp / reset of §5.4).

use crate::options::Accumulate;

/// One gradient the compute thread wrote.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Per-tensor gradient (`None` in throughput mode).
    pub grads: Option<Vec<Vec<f32>>>,
    /// Version (rounds applied) of the parameters it was computed on.
    pub version: u64,
    /// Samples it was computed on.
    pub samples: u64,
    /// Mean training loss of its batch.
    pub loss: f64,
}

/// What a worker contributes to one round.
#[derive(Clone, Debug, PartialEq)]
pub struct Contribution {
    /// The locally reduced gradient (`None`: null, or throughput mode).
    pub grads: Option<Vec<Vec<f32>>>,
    /// w: 1 if it contributes, 0 for a null contribution.
    pub weight: f32,
    /// Samples behind it.
    pub samples: u64,
    /// Sample-weighted mean loss of the gradients used (0 when none).
    pub loss: f64,
    /// Staleness k − t of each gradient used.
    pub staleness: Vec<u64>,
    /// Gradients dropped for being older than the bound.
    pub dropped: u64,
}

/// The gradients written since the last round.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GradBuffer {
    entries: Vec<Entry>,
}

impl GradBuffer {
    /// Writes a fresh gradient (WriteOp).
    pub fn write(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// Whether a gradient that round `k` would still accept (k − t ≤ η) is waiting: a probe is
    /// answered only then.
    pub fn ready(&self, k: u64, eta: u64) -> bool {
        self.entries
            .iter()
            .any(|e| k.saturating_sub(e.version) <= eta)
    }

    /// Gradients waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes the contribution to round `k` and resets the buffer to null: gradients with
    /// k − t > η are dropped; the rest are combined by `rule`; nothing left is a null
    /// contribution (w = 0).
    pub fn take(&mut self, k: u64, eta: u64, rule: Accumulate) -> Contribution {
        let entries = std::mem::take(&mut self.entries);
        let total = entries.len() as u64;
        let kept: Vec<Entry> = entries
            .into_iter()
            .filter(|e| k.saturating_sub(e.version) <= eta)
            .collect();
        let dropped = total - kept.len() as u64;
        let samples: u64 = kept.iter().map(|e| e.samples).sum();
        let loss = if samples > 0 {
            kept.iter().map(|e| e.loss * e.samples as f64).sum::<f64>() / samples as f64
        } else {
            0.0
        };
        let staleness = kept.iter().map(|e| k.saturating_sub(e.version)).collect();
        let grads = combine(&kept, rule);
        Contribution {
            grads,
            weight: if kept.is_empty() { 0.0 } else { 1.0 },
            samples,
            loss,
            staleness,
            dropped,
        }
    }
}

/// Combines the kept gradients: a single one is used as is (bit for bit).
fn combine(kept: &[Entry], rule: Accumulate) -> Option<Vec<Vec<f32>>> {
    let first = kept.first()?.grads.as_ref()?;
    if kept.len() == 1 {
        return Some(first.clone());
    }
    let min_t = kept.iter().map(|e| e.version).min().unwrap_or(0);
    let weight = |e: &Entry| match rule {
        Accumulate::WeightedAvg => (e.version - min_t + 1) as f32,
        Accumulate::Sum => 1.0,
    };
    let norm: f32 = match rule {
        Accumulate::WeightedAvg => kept.iter().map(weight).sum(),
        Accumulate::Sum => 1.0,
    };
    let mut out: Vec<Vec<f32>> = first.iter().map(|t| vec![0.0; t.len()]).collect();
    for e in kept {
        let Some(g) = &e.grads else { continue };
        let w = weight(e);
        for (o, t) in out.iter_mut().zip(g) {
            for (x, y) in o.iter_mut().zip(t) {
                *x += w * y;
            }
        }
    }
    if norm != 1.0 {
        for o in out.iter_mut() {
            for x in o.iter_mut() {
                *x /= norm;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: f32, version: u64) -> Entry {
        Entry {
            grads: Some(vec![vec![v, 2.0 * v]]),
            version,
            samples: 4,
            loss: v as f64,
        }
    }

    #[test]
    fn weighted_average_gives_newer_gradients_linearly_more_weight() {
        let mut b = GradBuffer::default();
        // Versions 5, 6, 7 at round 7: weights 1, 2, 3.
        b.write(entry(1.0, 5));
        b.write(entry(2.0, 6));
        b.write(entry(4.0, 7));
        let c = b.take(7, 3, Accumulate::WeightedAvg);
        let want = (1.0 + 2.0 * 2.0 + 3.0 * 4.0) / 6.0;
        let g = c.grads.unwrap();
        assert!((g[0][0] - want).abs() < 1e-6 && (g[0][1] - 2.0 * want).abs() < 1e-6);
        assert_eq!((c.weight, c.samples, c.staleness), (1.0, 12, vec![2, 1, 0]));
        assert!(b.is_empty(), "the buffer is reset to null after a round");
    }

    #[test]
    fn sum_rule_adds_everything() {
        let mut b = GradBuffer::default();
        b.write(entry(1.0, 0));
        b.write(entry(2.0, 1));
        let g = b.take(1, 3, Accumulate::Sum).grads.unwrap();
        assert_eq!(g, vec![vec![3.0, 6.0]]);
    }

    /// R8 (v): gradients older than η are dropped.
    #[test]
    fn gradients_older_than_eta_are_dropped() {
        let mut b = GradBuffer::default();
        b.write(entry(100.0, 2)); // staleness 4 > η = 3 at round 6
        b.write(entry(1.0, 3)); // staleness 3: kept
        assert!(b.ready(6, 3));
        let c = b.take(6, 3, Accumulate::WeightedAvg);
        assert_eq!(c.grads.unwrap(), vec![vec![1.0, 2.0]]);
        assert_eq!((c.dropped, c.staleness), (1, vec![3]));
        // Only too-old gradients: not ready, and a null contribution.
        b.write(entry(5.0, 0));
        assert!(!b.ready(4, 3));
        let c = b.take(4, 3, Accumulate::WeightedAvg);
        assert_eq!((c.grads, c.weight, c.dropped, c.samples), (None, 0.0, 1, 0));
        // η = 0 keeps only gradients computed on the current version.
        b.write(entry(1.0, 4));
        b.write(entry(2.0, 5));
        assert_eq!(
            b.take(5, 0, Accumulate::Sum).grads.unwrap(),
            vec![vec![2.0, 4.0]]
        );
    }

    /// R8 (iv): a null contribution has weight 0 (the worker adds zeros to the ring).
    #[test]
    fn an_empty_buffer_is_a_null_contribution() {
        let mut b = GradBuffer::default();
        assert!(!b.ready(0, 3));
        let c = b.take(0, 3, Accumulate::WeightedAvg);
        assert_eq!((c.grads, c.weight, c.samples, c.loss), (None, 0.0, 0, 0.0));
    }

    #[test]
    fn a_single_gradient_passes_through_bit_for_bit() {
        let mut b = GradBuffer::default();
        let g = vec![vec![0.1f32, 1.0 / 3.0, -7.25e-8]];
        b.write(Entry {
            grads: Some(g.clone()),
            version: 9,
            samples: 1,
            loss: 0.5,
        });
        assert_eq!(b.take(9, 0, Accumulate::WeightedAvg).grads.unwrap(), g);
    }
}
