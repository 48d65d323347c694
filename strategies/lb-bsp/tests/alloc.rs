//! L-T2: allocation sums, proportionality, water-filling with communication, GPU bounds, and
//! the Cluster-C sanity example of B5.

use concord_engine::cluster::DeviceProfile;
use concord_engine::model::StageFacts;
use concord_lb_bsp::alloc::{cpu_rule, gpu_rule, round_to_total, GpuProfile, Relaxed};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn cpu_sizes_sum_to_x_and_are_proportional_within_one() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for trial in 0..500 {
        let n = rng.gen_range(1..40usize);
        let total = rng.gen_range(n as u64..20_000);
        let v: Vec<f64> = (0..n).map(|_| rng.gen_range(0.3..3.0)).collect();
        let sum_v: f64 = v.iter().sum();
        let a = cpu_rule(&v, None, total, 1);
        assert_eq!(a.batches.iter().sum::<u64>(), total, "trial {trial}");
        for (i, &x) in a.batches.iter().enumerate() {
            let ideal = total as f64 * v[i] / sum_v;
            assert!(x >= 1);
            if ideal >= 1.0 {
                assert!(
                    (x as f64 - ideal).abs() < 1.0 + 1e-9,
                    "trial {trial}: worker {i} got {x}, proportional share {ideal}"
                );
            }
        }
    }
}

#[test]
fn cpu_rule_exact_on_a_hand_example_and_respects_min_batch() {
    let a = cpu_rule(&[1.0, 2.0, 3.0, 4.0], None, 100, 1);
    assert_eq!(a.batches, vec![10, 20, 30, 40]);
    // Largest remainders: 10/3 each → 4, 3, 3 (ties to the lower index).
    let a = cpu_rule(&[1.0, 1.0, 1.0], None, 10, 1);
    assert_eq!(a.batches, vec![4, 3, 3]);
    // A nearly stopped worker is clamped at the floor and the rest re-solved.
    let a = cpu_rule(&[1e-4, 1.0, 1.0], None, 30, 2);
    assert_eq!(a.batches, vec![2, 14, 14]);
    // A worker with no usable prediction is treated as average.
    let a = cpu_rule(&[0.0, 1.0, f64::NAN], None, 30, 1);
    assert_eq!(a.batches, vec![10, 10, 10]);
}

#[test]
fn water_filling_with_communication_equalizes_predicted_times() {
    let v = [100.0, 200.0, 300.0, 400.0];
    let tm = [0.5, 0.1, 0.3, 0.0];
    let total = 4000;
    let a = cpu_rule(&v, Some(&tm), total, 1);
    assert_eq!(a.batches.iter().sum::<u64>(), total);
    // Closed form of B1.2: T* = (X + Σ v t^m) / Σ v.
    let sv: f64 = v.iter().sum();
    let t_star = (total as f64 + v.iter().zip(&tm).map(|(v, t)| v * t).sum::<f64>()) / sv;
    assert!((a.time - t_star).abs() < 1e-9, "{} vs {t_star}", a.time);
    for i in 0..4 {
        let real = a.real[i] / v[i] + tm[i];
        assert!((real - t_star).abs() < 1e-9);
        let t = a.batches[i] as f64 / v[i] + tm[i];
        assert!(
            (t - t_star).abs() <= 1.0 / v[i] + 1e-12,
            "worker {i}: {t} vs {t_star}"
        );
    }
    // The worker with the most communication gets fewer samples than its speed share.
    let plain = cpu_rule(&v, None, total, 1);
    assert!(a.batches[0] < plain.batches[0]);
}

fn profile(slope: f64, offset: f64, s: u64, o: u64) -> GpuProfile {
    GpuProfile {
        slope,
        offset,
        saturation: s,
        oom: o,
    }
}

#[test]
fn gpu_rule_respects_saturation_and_memory_bounds() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for _ in 0..300 {
        let n = rng.gen_range(2..12usize);
        let ps: Vec<GpuProfile> = (0..n)
            .map(|_| {
                let s = rng.gen_range(1..60u64);
                profile(
                    rng.gen_range(1e-4..1e-2),
                    rng.gen_range(0.0..0.05),
                    s,
                    s + rng.gen_range(1..500u64),
                )
            })
            .collect();
        let comm: Vec<f64> = (0..n).map(|_| rng.gen_range(0.0..0.2)).collect();
        let lo: u64 = ps.iter().map(|p| p.saturation).sum();
        let hi: u64 = ps.iter().map(|p| p.oom).sum();
        let total = rng.gen_range(lo..=hi);
        let a = gpu_rule(&ps, &comm, total, 1);
        assert_eq!(a.relaxed, None);
        assert_eq!(a.batches.iter().sum::<u64>(), total);
        for (i, (&x, p)) in a.batches.iter().zip(&ps).enumerate() {
            assert!(
                x >= p.saturation && x <= p.oom,
                "worker {i}: {x} outside [{}, {}]",
                p.saturation,
                p.oom
            );
            // Unclamped workers share the common time T (within one sample's time).
            if a.real[i] > p.saturation as f64 + 1e-6 && a.real[i] < p.oom as f64 - 1e-6 {
                let t = p.slope * x as f64 + p.offset + comm[i];
                assert!((t - a.time).abs() <= p.slope + 1e-9);
            }
        }
    }
}

#[test]
fn infeasible_gpu_bounds_are_relaxed_and_reported() {
    let ps = [profile(1e-3, 0.0, 100, 200), profile(2e-3, 0.0, 100, 200)];
    let a = gpu_rule(&ps, &[0.0, 0.0], 150, 1);
    assert_eq!(a.relaxed, Some(Relaxed::Lower));
    assert_eq!(a.batches.iter().sum::<u64>(), 150);
    assert_eq!(a.batches, vec![100, 50]);
    let a = gpu_rule(&ps, &[0.0, 0.0], 600, 1);
    assert_eq!(a.relaxed, Some(Relaxed::Upper));
    assert_eq!(a.batches.iter().sum::<u64>(), 600);
    assert_eq!(a.batches, vec![400, 200]);
}

/// B5's sanity example: Cluster-C-like intervals, X = 8·380 = 3040. The K520 (g2.2xlarge) is the
/// slowest GPU (about 2.45 TFLOP/s against 4.37 for a K80 die and 4.83 for an M60), so LB-BSP
/// gives the four g2 workers less than 380 (the paper: 380 → 235).
#[test]
fn cluster_c_lowers_the_slow_g2_batches_below_380() {
    let ms_per_sample = |tflops: f64| 1e-3 * 2.45 / tflops; // g2: 1 ms per sample
    let g2 = profile(ms_per_sample(2.45), 0.010, 58, 384);
    let k80 = profile(ms_per_sample(4.37), 0.010, 92, 1184);
    let m60 = profile(ms_per_sample(4.83), 0.010, 103, 788);
    let ps = [g2, g2, g2, g2, k80, k80, m60, m60];
    let comm = [0.02; 8];
    let a = gpu_rule(&ps, &comm, 3040, 1);
    assert_eq!(a.relaxed, None);
    assert_eq!(a.batches.iter().sum::<u64>(), 3040);
    for (i, (&x, p)) in a.batches.iter().zip(&ps).enumerate() {
        assert!(x >= p.saturation && x <= p.oom, "worker {i}: {x}");
    }
    for &x in &a.batches[..4] {
        assert!(x < 380, "g2 batch {x} should drop below 380");
    }
    for &x in &a.batches[4..] {
        assert!(x > 380);
    }
    // Predicted iteration time falls against BSP's (everyone at 380: the g2 workers' time).
    let bsp = g2.slope * 380.0 + g2.offset + comm[0];
    assert!(a.time < bsp * 0.85, "{} vs BSP {bsp}", a.time);
    eprintln!("Cluster-C batches: {:?}", a.batches);
}

#[test]
fn device_profiling_matches_the_engine_cost_model() {
    let d = DeviceProfile::builtins()["v100"].clone();
    let stages = vec![
        StageFacts {
            name: "a".into(),
            forward_flops: 1e6,
            activation_bytes: 1 << 20,
            kept_bytes: 1 << 20,
        },
        StageFacts {
            name: "b".into(),
            forward_flops: 1e6,
            activation_bytes: 1 << 20,
            kept_bytes: 1 << 20,
        },
    ];
    let f = 6e6;
    let p = GpuProfile::from_device(&d, f, &stages, 1 << 30, 0.5, 1);
    for x in [40.0, 100.0, 700.0] {
        let t = p.slope * x + p.offset;
        assert!((t - d.compute_seconds(f, x)).abs() < 1e-12);
    }
    assert_eq!(p.saturation, 32); // half-saturation batch of the v100 profile
    let p9 = GpuProfile::from_device(&d, f, &stages, 1 << 30, 0.9, 1);
    assert_eq!(p9.saturation, 288);
    // 16 GiB − 2 GiB of parameters and gradients, 2 MiB of activations per sample.
    assert_eq!(p.oom, (14u64 << 30) / (2 << 20));
}

#[test]
fn rounding_keeps_bounds_and_total() {
    let x = round_to_total(&[2.5, 2.5, 5.0], &[3, 1, 1], &[10, 10, 4], 10);
    assert_eq!(x.iter().sum::<u64>(), 10);
    assert!(x[0] >= 3 && x[2] <= 4);
}
