//! Tests of the synthetic generators: determinism, disjoint splits, the teacher's margin and
//! rejection rate, and that the default tasks are learnable to the documented accuracies.

use super::teacher::{top_and_gap, TeacherNet, TEACHER_WEIGHTS_STREAM};
use super::*;
use crate::data::{DataConfig, DataError, Dataset, SampleStream, Split, DEFAULT_MARGIN};
use std::collections::HashSet;

fn bytes(d: &Dataset) -> Vec<u8> {
    let mut v: Vec<u8> = d.features.iter().flat_map(|f| f.to_le_bytes()).collect();
    v.extend(d.labels.iter().flat_map(|l| l.to_le_bytes()));
    v
}

fn small_teacher(seed: u64) -> Split {
    let cfg = DataConfig::Teacher {
        dim: 8,
        classes: 4,
        hidden: 16,
        train: 500,
        test: 100,
        margin: 0.1,
    };
    cfg.load(seed).unwrap()
}

fn small_blobs(seed: u64) -> Split {
    let cfg = DataConfig::Blobs {
        dim: 8,
        classes: 4,
        train: 500,
        test: 100,
        spread: 1.0,
        separation: 1.0,
    };
    cfg.load(seed).unwrap()
}

#[test]
fn same_seed_same_bytes_different_seed_different_data() {
    for gen in [small_teacher as fn(u64) -> Split, small_blobs] {
        let a = gen(11);
        let b = gen(11);
        let c = gen(12);
        assert_eq!(bytes(&a.train), bytes(&b.train));
        assert_eq!(bytes(&a.test), bytes(&b.test));
        assert_ne!(a.train.features, c.train.features);
        assert_ne!(a.test.features, c.test.features);
        assert_eq!(a.train.len(), 500);
        assert_eq!(a.test.len(), 100);
        assert_eq!(a.train.sample_shape, vec![8]);
        assert_eq!(a.train.features.len(), 500 * 8);
    }
}

#[test]
fn test_set_does_not_depend_on_train_size() {
    let a = teacher(8, 4, 16, 100, 50, 0.1, 3).unwrap().0;
    let b = teacher(8, 4, 16, 300, 50, 0.1, 3).unwrap().0;
    assert_eq!(a.test, b.test);
    assert_eq!(a.train.features[..], b.train.features[..100 * 8]);
}

#[test]
fn train_and_test_are_disjoint() {
    let s = teacher(32, 10, 64, 5000, 1000, DEFAULT_MARGIN, 1)
        .unwrap()
        .0;
    let rows = |d: &Dataset| -> HashSet<Vec<u32>> {
        (0..d.len())
            .map(|i| d.features_of(i).iter().map(|f| f.to_bits()).collect())
            .collect()
    };
    let tr = rows(&s.train);
    assert_eq!(tr.len(), 5000);
    assert!(rows(&s.test).is_disjoint(&tr));
}

/// The default config's measured rejection rate and class balance (seed 0..3).
///
/// Measured with DEFAULT_MARGIN = 0.25 on the default shapes: the
/// rejection rate is 0.476–0.481 here (0.473–0.482 with the full
/// 20000 + 2000 samples; see the eprintln output); the smallest class
/// holds 3.9–5.1% of the training samples (≥ 3% asserted).
#[test]
fn teacher_default_rejection_rate_and_balance() {
    for seed in 0..3 {
        // The default shapes; 8000 + 2000 samples (the training set is a
        // prefix of the default 20000, the test set the same) keep it quick.
        let (s, stats) = teacher(32, 10, 64, 8_000, 2_000, DEFAULT_MARGIN, seed).unwrap();
        let rate = stats.rejection_rate();
        eprintln!(
            "seed {seed}: rejection rate {rate:.3}, train class counts {:?}",
            s.train.class_counts()
        );
        assert!((0.40..=0.55).contains(&rate), "rejection rate {rate}");
        assert_eq!(stats.accepted, 10_000);
        for d in [&s.train, &s.test] {
            for (c, &n) in d.class_counts().iter().enumerate() {
                assert!(
                    n as f64 >= 0.03 * d.len() as f64,
                    "seed {seed}: class {c} has only {n} of {} samples",
                    d.len()
                );
            }
        }
    }
}

#[test]
fn teacher_margin_is_honoured() {
    let dim = 8;
    let hidden = 16;
    let classes = 5;
    let seed = 4;
    let margin = 0.3;
    let (s, stats) = teacher(dim, classes, hidden, 400, 100, margin, seed).unwrap();
    assert!(stats.rejection_rate() > 0.0);
    // Rebuild the same teacher and check every kept sample's gap and label.
    let net = TeacherNet::new(
        dim,
        hidden,
        classes,
        &mut rng_for(seed, TEACHER_WEIGHTS_STREAM),
    );
    let mut h = vec![0.0; hidden];
    let mut out = vec![0.0; classes];
    for d in [&s.train, &s.test] {
        for i in 0..d.len() {
            net.logits(d.features_of(i), &mut h, &mut out);
            let (top, gap) = top_and_gap(&out);
            assert!(gap >= margin as f64);
            assert_eq!(top as u32, d.labels[i]);
        }
    }
    // Margin 0 keeps everything.
    let (_, stats0) = teacher(dim, classes, hidden, 400, 100, 0.0, seed).unwrap();
    assert_eq!(stats0.rejection_rate(), 0.0);
}

#[test]
fn impossible_margin_fails_cleanly() {
    let err = teacher(4, 3, 4, 10, 10, 100.0, 0).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DataError::MarginTooStrict { .. }));
    assert!(msg.contains("margin"), "{msg}");
}

/// Softmax regression on raw features, plain full-batch-free SGD.
fn softmax_regression_accuracy(split: &Split, epochs: usize, lr: f32) -> f64 {
    let d = split.train.sample_len();
    let k = split.train.classes;
    let mut w = vec![0f32; k * (d + 1)];
    let order = SampleStream::new(split.train.len(), 99);
    let batch = 32;
    let iters = epochs * split.train.len() / batch;
    let mut p = vec![0f32; k];
    for it in 0..iters {
        let mut grad = vec![0f32; w.len()];
        for i in order.indices(it as u64, batch, 0, batch) {
            let x = split.train.features_of(i);
            for c in 0..k {
                let row = &w[c * (d + 1)..(c + 1) * (d + 1)];
                p[c] = row[d] + row[..d].iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
            }
            let m = p.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = p
                .iter_mut()
                .map(|v| {
                    *v = (*v - m).exp();
                    *v
                })
                .sum();
            for c in 0..k {
                let g = p[c] / z - f32::from(split.train.labels[i] == c as u32);
                let row = &mut grad[c * (d + 1)..(c + 1) * (d + 1)];
                for (r, xv) in row[..d].iter_mut().zip(x) {
                    *r += g * xv;
                }
                row[d] += g;
            }
        }
        for (wv, g) in w.iter_mut().zip(&grad) {
            *wv -= lr * g / batch as f32;
        }
    }
    let test = &split.test;
    let correct = (0..test.len())
        .filter(|&i| {
            let x = test.features_of(i);
            let score = |c: usize| {
                let row = &w[c * (d + 1)..(c + 1) * (d + 1)];
                row[d] + row[..d].iter().zip(x).map(|(a, b)| a * b).sum::<f32>()
            };
            let best = (0..k)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .unwrap();
            best as u32 == test.labels[i]
        })
        .count();
    correct as f64 / test.len() as f64
}

/// The default teacher task is learnable but not trivial: plain softmax
/// regression (a linear model, 3 epochs of SGD, batch 32, lr 0.5)
/// reaches 0.955 test accuracy (seed 0; ≥ 0.70 asserted), but not 100%
/// (< 0.995 asserted): the teacher is non-linear, though close to linear
/// on most of the inputs the margin keeps.
#[test]
fn teacher_default_is_learnable_by_softmax_regression() {
    let split = DataConfig::default().load(0).unwrap();
    let acc = softmax_regression_accuracy(&split, 3, 0.5);
    eprintln!("softmax regression test accuracy on the default teacher task: {acc:.3}");
    assert!(acc >= 0.70, "accuracy {acc}");
    assert!(acc < 0.995, "suspiciously easy: accuracy {acc}");
}

/// Nearest-centroid accuracy (centroids from train, measured on test).
fn nearest_centroid_accuracy(split: &Split) -> f64 {
    let d = split.train.sample_len();
    let k = split.train.classes;
    let mut sums = vec![0f64; k * d];
    let counts = split.train.class_counts();
    for i in 0..split.train.len() {
        let c = split.train.labels[i] as usize;
        for (s, &x) in sums[c * d..(c + 1) * d]
            .iter_mut()
            .zip(split.train.features_of(i))
        {
            *s += x as f64;
        }
    }
    for c in 0..k {
        for s in &mut sums[c * d..(c + 1) * d] {
            *s /= counts[c].max(1) as f64;
        }
    }
    let test = &split.test;
    let correct = (0..test.len())
        .filter(|&i| {
            let x = test.features_of(i);
            let dist = |c: usize| -> f64 {
                sums[c * d..(c + 1) * d]
                    .iter()
                    .zip(x)
                    .map(|(m, &v)| (m - v as f64).powi(2))
                    .sum()
            };
            let best = (0..k).min_by(|&a, &b| dist(a).total_cmp(&dist(b))).unwrap();
            best as u32 == test.labels[i]
        })
        .count();
    correct as f64 / test.len() as f64
}

#[test]
fn blobs_separable_as_configured() {
    let mk = |spread: f32, separation: f32| {
        DataConfig::Blobs {
            dim: 16,
            classes: 5,
            train: 2000,
            test: 1000,
            spread,
            separation,
        }
        .load(7)
        .unwrap()
    };
    // Well separated: centres ~ 2·√32 ≈ 11 apart, noise 0.5 → nearly perfect.
    let easy = nearest_centroid_accuracy(&mk(0.5, 2.0));
    // Heavily overlapping: centres ~ 0.1·√32 ≈ 0.6 apart, noise 1.
    let hard = nearest_centroid_accuracy(&mk(1.0, 0.1));
    // Default ratio (spread 1, separation 0.5).
    let default = nearest_centroid_accuracy(&mk(1.0, 0.5));
    eprintln!(
        "blobs nearest-centroid accuracy: easy {easy:.3}, default {default:.3}, hard {hard:.3}"
    );
    assert!(easy >= 0.99, "easy {easy}");
    assert!(hard < 0.6, "hard {hard}");
    assert!(hard < default && default < easy);
    let s = mk(1.0, 0.5);
    for (c, &n) in s.train.class_counts().iter().enumerate() {
        assert!(n >= 300, "class {c}: {n}");
    }
    // Samples sit around their centres with the configured spread.
    let s = mk(0.25, 1.0);
    let d = 16;
    let mut var = 0.0;
    let n = s.train.len();
    let means = {
        let mut m = vec![0f64; 5 * d];
        let counts = s.train.class_counts();
        for i in 0..n {
            let c = s.train.labels[i] as usize;
            for (a, &x) in m[c * d..(c + 1) * d].iter_mut().zip(s.train.features_of(i)) {
                *a += x as f64 / counts[c] as f64;
            }
        }
        m
    };
    for i in 0..n {
        let c = s.train.labels[i] as usize;
        for (a, &x) in means[c * d..(c + 1) * d].iter().zip(s.train.features_of(i)) {
            var += (x as f64 - a).powi(2);
        }
    }
    let std = (var / (n * d) as f64).sqrt();
    assert!((std - 0.25).abs() < 0.01, "measured spread {std}");
}

/// A plain-Rust 32-64-10 tanh MLP student trained with SGD (batch 256),
/// to check the default teacher task meets its target: ≥ 90% test
/// accuracy within 200 steps (measured on seed 0, lr 0.5: 0.941 after
/// 100 steps, 0.949 after 200, 0.953 after 400). Slow in debug builds,
/// so it runs in optimised test builds only (CI tests in release)
/// (`STUDENT_MARGIN` and `STUDENT_LR` override the margin and rate).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "slow without optimisation; runs under --release"
)]
fn student_mlp_reaches_target() {
    let env = |name: &str, default: f32| -> f32 {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let margin = env("STUDENT_MARGIN", DEFAULT_MARGIN);
    let (split, _) = teacher(32, 10, 64, 20_000, 2_000, margin, 0).unwrap();
    let (d, h, k) = (32usize, 64usize, 10usize);
    let mut rng = rng_for(123, 0);
    let mut w1: Vec<f32> = (0..h * d)
        .map(|_| (normal(&mut rng) / (d as f64).sqrt()) as f32)
        .collect();
    let mut b1 = vec![0f32; h];
    let mut w2: Vec<f32> = (0..k * h)
        .map(|_| (normal(&mut rng) / (h as f64).sqrt()) as f32)
        .collect();
    let mut b2 = vec![0f32; k];
    let lr = env("STUDENT_LR", 0.5);
    let batch = 256;
    let order = SampleStream::new(split.train.len(), 5);
    let forward = |w1: &[f32],
                   b1: &[f32],
                   w2: &[f32],
                   b2: &[f32],
                   x: &[f32],
                   hid: &mut [f32],
                   out: &mut [f32]| {
        for j in 0..h {
            hid[j] = (b1[j]
                + w1[j * d..(j + 1) * d]
                    .iter()
                    .zip(x)
                    .map(|(a, b)| a * b)
                    .sum::<f32>())
            .tanh();
        }
        for c in 0..k {
            out[c] = b2[c]
                + w2[c * h..(c + 1) * h]
                    .iter()
                    .zip(hid.iter())
                    .map(|(a, b)| a * b)
                    .sum::<f32>();
        }
    };
    let eval = |w1: &[f32], b1: &[f32], w2: &[f32], b2: &[f32]| {
        let mut hid = vec![0f32; h];
        let mut out = vec![0f32; k];
        let t = &split.test;
        let ok = (0..t.len())
            .filter(|&i| {
                forward(w1, b1, w2, b2, t.features_of(i), &mut hid, &mut out);
                let best = (0..k).max_by(|&a, &b| out[a].total_cmp(&out[b])).unwrap();
                best as u32 == t.labels[i]
            })
            .count();
        ok as f64 / t.len() as f64
    };
    let mut hid = vec![0f32; h];
    let mut out = vec![0f32; k];
    let mut at_200 = 0.0;
    for step in 0..400u64 {
        let mut gw1 = vec![0f32; h * d];
        let mut gb1 = vec![0f32; h];
        let mut gw2 = vec![0f32; k * h];
        let mut gb2 = vec![0f32; k];
        for i in order.indices(step, batch, 0, batch) {
            let x = split.train.features_of(i);
            forward(&w1, &b1, &w2, &b2, x, &mut hid, &mut out);
            let m = out.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = out
                .iter_mut()
                .map(|v| {
                    *v = (*v - m).exp();
                    *v
                })
                .sum();
            let mut dh = vec![0f32; h];
            for c in 0..k {
                let g = out[c] / z - f32::from(split.train.labels[i] == c as u32);
                gb2[c] += g;
                for j in 0..h {
                    gw2[c * h + j] += g * hid[j];
                    dh[j] += g * w2[c * h + j];
                }
            }
            for j in 0..h {
                let g = dh[j] * (1.0 - hid[j] * hid[j]);
                gb1[j] += g;
                for (a, &xv) in gw1[j * d..(j + 1) * d].iter_mut().zip(x) {
                    *a += g * xv;
                }
            }
        }
        let s = lr / batch as f32;
        for (p, g) in w1.iter_mut().zip(&gw1) {
            *p -= s * g;
        }
        for (p, g) in b1.iter_mut().zip(&gb1) {
            *p -= s * g;
        }
        for (p, g) in w2.iter_mut().zip(&gw2) {
            *p -= s * g;
        }
        for (p, g) in b2.iter_mut().zip(&gb2) {
            *p -= s * g;
        }
        if (step + 1) % 50 == 0 {
            let acc = eval(&w1, &b1, &w2, &b2);
            eprintln!("student step {}: test accuracy {acc:.3}", step + 1);
            if step + 1 == 200 {
                at_200 = acc;
            }
        }
    }
    assert!(at_200 >= 0.90, "student accuracy after 200 steps: {at_200}");
}
