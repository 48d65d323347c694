//! Synthetic access streams: Zipf-distributed row ids whose hot set drifts over time, with a
//! click label per access (the S8 eviction experiment, and Zipf warm-up data for placement).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::PlacementError;

/// Accesses per iteration in a generated stream unless set with [`AccessStream::with_batch`].
pub const DEFAULT_STREAM_BATCH: usize = 256;
/// At each drift the popularity ranking rotates by `rows / DRIFT_OFFSET_DIVISOR` ids (at least 1):
/// the hottest 5 % of ids turn cold, and the next 5 % become the hottest.
pub const DRIFT_OFFSET_DIVISOR: usize = 20;
/// Click probability of the most popular id.
pub const POSITIVE_RATE_TOP: f64 = 0.25;
/// The click probability falls with popularity rank r (0-based) as `(r + 1)^-POSITIVE_RATE_DECAY`.
pub const POSITIVE_RATE_DECAY: f64 = 0.25;

/// One lookup of one row by one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access {
    /// The table looked up.
    pub table: usize,
    /// The row looked up.
    pub row: usize,
    /// Whether the sample was a positive (a click).
    pub positive: bool,
}

/// A sequence of accesses grouped into iterations of `batch` accesses (the last may be shorter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessStream {
    /// The accesses, in time order.
    pub accesses: Vec<Access>,
    /// Accesses per iteration (importance scores decay once per iteration).
    pub batch: usize,
}

impl AccessStream {
    /// The same stream cut into iterations of `batch` accesses; fails on 0.
    pub fn with_batch(mut self, batch: usize) -> Result<AccessStream, PlacementError> {
        if batch == 0 {
            return Err(PlacementError::StreamParam {
                name: "batch",
                value: 0.0,
                expected: ">= 1",
            });
        }
        self.batch = batch;
        Ok(self)
    }

    /// The accesses of each iteration in turn.
    pub fn iterations(&self) -> std::slice::Chunks<'_, Access> {
        self.accesses.chunks(self.batch.max(1))
    }
}

/// `samples` accesses to table 0 of `rows` rows: popularity rank r drawn with probability
/// ∝ (r+1)^−`exponent`, mapped to an id by a random permutation (from `seed`) that rotates by
/// `rows / 20` every `drift_every` samples (0: never drifts).
///
/// Labels: a sample is positive with probability `0.25 · (r+1)^−0.25` for its id's current rank
/// r (25 % for the hottest id, about 2.5 % at rank 10 000). Popular items are popular partly
/// because they are clicked, and the label bias gives importance scores (which weigh positives
/// above negatives) a signal beyond the raw frequency.
pub fn drifting_zipf(
    rows: usize,
    exponent: f64,
    samples: usize,
    drift_every: usize,
    seed: u64,
) -> Result<AccessStream, PlacementError> {
    if rows == 0 {
        return Err(PlacementError::StreamParam {
            name: "rows",
            value: 0.0,
            expected: ">= 1",
        });
    }
    if !(exponent >= 0.0 && exponent.is_finite()) {
        return Err(PlacementError::StreamParam {
            name: "exponent",
            value: exponent,
            expected: "finite and >= 0",
        });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut perm: Vec<usize> = (0..rows).collect();
    perm.shuffle(&mut rng);
    let mut cdf = Vec::with_capacity(rows);
    let mut acc = 0.0;
    for r in 0..rows {
        acc += ((r + 1) as f64).powf(-exponent);
        cdf.push(acc);
    }
    let offset = (rows / DRIFT_OFFSET_DIVISOR).max(1);
    let accesses = (0..samples)
        .map(|i| {
            let u = rng.gen::<f64>() * acc;
            let rank = cdf.partition_point(|&c| c <= u).min(rows - 1);
            let epoch = i.checked_div(drift_every).unwrap_or(0);
            let shift = (epoch % rows) * offset % rows;
            let p = POSITIVE_RATE_TOP * ((rank + 1) as f64).powf(-POSITIVE_RATE_DECAY);
            Access {
                table: 0,
                row: perm[(rank + shift) % rows],
                positive: rng.gen::<f64>() < p,
            }
        })
        .collect();
    Ok(AccessStream {
        accesses,
        batch: DEFAULT_STREAM_BATCH,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(s: &[Access], rows: usize) -> Vec<usize> {
        let mut c = vec![0; rows];
        for a in s {
            c[a.row] += 1;
        }
        c
    }

    fn top(c: &[usize]) -> usize {
        (0..c.len())
            .max_by_key(|&i| (c[i], std::cmp::Reverse(i)))
            .unwrap_or(0)
    }

    #[test]
    fn hot_set_rotates_at_each_drift() {
        let rows = 1000;
        let s = drifting_zipf(rows, 1.2, 40_000, 20_000, 5).unwrap();
        assert_eq!(s.accesses.len(), 40_000);
        let (a, b) = s.accesses.split_at(20_000);
        let (ca, cb) = (counts(a, rows), counts(b, rows));
        let (ha, hb) = (top(&ca), top(&cb));
        assert_ne!(ha, hb);
        // The old hottest id is now rank rows - 50: nearly never drawn.
        assert!(
            cb[ha] * 100 < ca[ha],
            "old hot id: {} then {}",
            ca[ha],
            cb[ha]
        );
        // The new hottest id was rank 50 before: drawn, but much less.
        assert!(
            ca[hb] * 10 < cb[hb],
            "new hot id: {} then {}",
            ca[hb],
            cb[hb]
        );
        // Without drift the halves share their hottest id.
        let s = drifting_zipf(rows, 1.2, 40_000, 0, 5).unwrap();
        let (a, b) = s.accesses.split_at(20_000);
        assert_eq!(top(&counts(a, rows)), top(&counts(b, rows)));
    }

    #[test]
    fn frequencies_follow_the_power_law_and_hot_ids_click_more() {
        let rows = 500;
        let s = drifting_zipf(rows, 1.0, 200_000, 0, 11).unwrap();
        let mut c = counts(&s.accesses, rows);
        c.sort_unstable_by(|a, b| b.cmp(a));
        // Zipf(1): rank 1 is drawn twice as often as rank 2, ten times as often as rank 10.
        let r2 = c[0] as f64 / c[1] as f64;
        let r10 = c[0] as f64 / c[9] as f64;
        assert!((r2 - 2.0).abs() < 0.15, "{r2}");
        assert!((r10 - 10.0).abs() < 1.5, "{r10}");
        // Positive rate of the hottest id near 25 %, overall lower.
        let hot = top(&counts(&s.accesses, rows));
        let (mut hp, mut hn, mut p) = (0, 0, 0);
        for a in &s.accesses {
            p += usize::from(a.positive);
            if a.row == hot {
                hn += 1;
                hp += usize::from(a.positive);
            }
        }
        let hot_rate = hp as f64 / hn as f64;
        let rate = p as f64 / s.accesses.len() as f64;
        assert!((hot_rate - POSITIVE_RATE_TOP).abs() < 0.02, "{hot_rate}");
        assert!(rate < hot_rate - 0.05 && rate > 0.03, "{rate}");
    }

    #[test]
    fn streams_are_seeded_and_validated() {
        let a = drifting_zipf(100, 1.1, 1000, 100, 3).unwrap();
        assert_eq!(a, drifting_zipf(100, 1.1, 1000, 100, 3).unwrap());
        assert_ne!(a, drifting_zipf(100, 1.1, 1000, 100, 4).unwrap());
        assert_eq!(a.batch, DEFAULT_STREAM_BATCH);
        let b = a.clone().with_batch(300).unwrap();
        let lens: Vec<usize> = b.iterations().map(<[Access]>::len).collect();
        assert_eq!(lens, vec![300, 300, 300, 100]);
        assert!(a.with_batch(0).is_err());
        assert!(drifting_zipf(0, 1.1, 10, 0, 1).is_err());
        let err = drifting_zipf(10, -1.0, 10, 0, 1).unwrap_err();
        assert!(err.to_string().contains("exponent is -1"), "{err}");
        assert!(drifting_zipf(10, f64::NAN, 10, 0, 1).is_err());
    }
}
