//! The teacher task: Gaussian inputs labelled by a fixed random tanh MLP, keeping only the
//! inputs the teacher is confident about (rejection sampling on the logit margin).

use rand_chacha::ChaCha8Rng;

use super::{normal, rng_for};
use crate::data::{DataError, Dataset, Split};

/// Stream numbers of the teacher's ChaCha8 streams.
pub(super) const TEACHER_WEIGHTS_STREAM: u64 = 0x5445_4143_4845_5201; // "TEACHER" 1
const TEACHER_TRAIN_STREAM: u64 = 0x5445_4143_4845_5202;
const TEACHER_TEST_STREAM: u64 = 0x5445_4143_4845_5203;

/// The teacher gives up (with [`DataError::MarginTooStrict`]) after this many
/// candidate draws per wanted sample (plus a fixed 1000), i.e. when fewer
/// than about 1% of inputs clear the margin.
pub const MAX_ATTEMPTS_PER_SAMPLE: u64 = 100;

/// How the teacher's rejection sampling went: candidate inputs drawn and kept.
///
/// Reported so tests and run summaries can show how much of the input
/// distribution the margin cuts away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TeacherStats {
    /// Candidate inputs drawn (train and test together).
    pub attempts: u64,
    /// Candidates kept (= train + test sizes).
    pub accepted: u64,
}

impl TeacherStats {
    /// The fraction of candidate inputs rejected for a logit gap below the margin.
    pub fn rejection_rate(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            1.0 - self.accepted as f64 / self.attempts as f64
        }
    }
}

/// The fixed random `dim → hidden → classes` tanh MLP that labels inputs.
pub(super) struct TeacherNet {
    dim: usize,
    hidden: usize,
    classes: usize,
    /// `hidden × dim`, row-major, `N(0, 1/dim)`.
    w1: Vec<f64>,
    /// `classes × hidden`, row-major, `N(0, 1/hidden)`.
    w2: Vec<f64>,
}

impl TeacherNet {
    pub(super) fn new(dim: usize, hidden: usize, classes: usize, rng: &mut ChaCha8Rng) -> Self {
        let s1 = (1.0 / dim as f64).sqrt();
        let s2 = (1.0 / hidden as f64).sqrt();
        let w1 = (0..hidden * dim).map(|_| normal(rng) * s1).collect();
        let w2 = (0..classes * hidden).map(|_| normal(rng) * s2).collect();
        TeacherNet {
            dim,
            hidden,
            classes,
            w1,
            w2,
        }
    }

    /// Writes the logits of `x` into `out`, using `h` as scratch for the hidden layer.
    pub(super) fn logits(&self, x: &[f32], h: &mut [f64], out: &mut [f64]) {
        for (j, hj) in h.iter_mut().enumerate() {
            let row = &self.w1[j * self.dim..(j + 1) * self.dim];
            let z: f64 = row.iter().zip(x).map(|(w, &v)| w * v as f64).sum();
            *hj = z.tanh();
        }
        for (k, ok) in out.iter_mut().enumerate() {
            let row = &self.w2[k * self.hidden..(k + 1) * self.hidden];
            *ok = row.iter().zip(h.iter()).map(|(w, v)| w * v).sum();
        }
    }

    /// Draws `n` inputs from `rng` that clear `margin`, labelled by the argmax logit.
    fn sample(
        &self,
        n: usize,
        margin: f32,
        rng: &mut ChaCha8Rng,
        stats: &mut TeacherStats,
    ) -> Result<Dataset, DataError> {
        let limit = MAX_ATTEMPTS_PER_SAMPLE
            .saturating_mul(n as u64)
            .saturating_add(1000);
        let mut features = Vec::with_capacity(n * self.dim);
        let mut labels = Vec::with_capacity(n);
        let mut x = vec![0f32; self.dim];
        let mut h = vec![0f64; self.hidden];
        let mut out = vec![0f64; self.classes];
        let mut attempts = 0u64;
        while labels.len() < n {
            if attempts >= limit {
                return Err(DataError::MarginTooStrict {
                    margin,
                    accepted: labels.len(),
                    wanted: n,
                    attempts,
                });
            }
            attempts += 1;
            for v in x.iter_mut() {
                *v = normal(rng) as f32;
            }
            self.logits(&x, &mut h, &mut out);
            let (top, gap) = top_and_gap(&out);
            if gap >= margin as f64 {
                features.extend_from_slice(&x);
                labels.push(top as u32);
            }
        }
        stats.attempts += attempts;
        stats.accepted += n as u64;
        Ok(Dataset {
            features,
            sample_shape: vec![self.dim],
            labels,
            classes: self.classes,
            ctr: None,
        })
    }
}

/// The argmax of `v` (first on ties) and the gap between its top two values.
pub(super) fn top_and_gap(v: &[f64]) -> (usize, f64) {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate().skip(1) {
        if x > v[best] {
            best = i;
        }
    }
    let second = v
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best)
        .map(|(_, &x)| x)
        .fold(f64::NEG_INFINITY, f64::max);
    (best, v[best] - second)
}

/// The teacher task: Gaussian inputs labelled by a fixed random tanh MLP, with rejection sampling.
///
/// Inputs `x ~ N(0, I_dim)`; the teacher is a `dim → hidden → classes` MLP
/// with tanh hidden units, no biases and weights `N(0, 1/fan_in)`; the label
/// is the argmax of its logits. A candidate is kept only if its top-1 minus
/// top-2 logit is ≥ `margin`, which removes the ambiguous inputs near the
/// teacher's decision boundaries so a small student can learn the task to
/// high accuracy. Train and test come from the same teacher and separate
/// ChaCha8 streams. Returns the split and the rejection statistics.
///
/// Does not validate its arguments (see [`DataConfig::validate`](crate::data::DataConfig::validate));
/// fails with [`DataError::MarginTooStrict`] if fewer than ~1% of candidates
/// clear the margin.
pub fn teacher(
    dim: usize,
    classes: usize,
    hidden: usize,
    train: usize,
    test: usize,
    margin: f32,
    seed: u64,
) -> Result<(Split, TeacherStats), DataError> {
    let net = TeacherNet::new(
        dim,
        hidden,
        classes,
        &mut rng_for(seed, TEACHER_WEIGHTS_STREAM),
    );
    let mut stats = TeacherStats::default();
    let train = net.sample(
        train,
        margin,
        &mut rng_for(seed, TEACHER_TRAIN_STREAM),
        &mut stats,
    )?;
    let test = net.sample(
        test,
        margin,
        &mut rng_for(seed, TEACHER_TEST_STREAM),
        &mut stats,
    )?;
    Ok((Split { train, test }, stats))
}
