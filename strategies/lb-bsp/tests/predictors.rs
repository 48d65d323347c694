//! Predictors: exact on hand sequences; NARX beats EMA and Memoryless when an exogenous signal
//! explains the speed; deterministic given the seed.

use concord_lb_bsp::predictor::{Ema, Memoryless, Narx, NarxConfig, Signals, SpeedPredictor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

#[test]
fn memoryless_and_ema_are_exact_on_hand_sequences() {
    let mut m = Memoryless::new();
    let mut e = Ema::new(0.2);
    let seq = [10.0, 20.0, 30.0, 5.0];
    let want_ema = [10.0, 12.0, 15.6, 13.48];
    for (i, &v) in seq.iter().enumerate() {
        m.observe(v, None);
        e.observe(v, None);
        assert_eq!(m.predict(None, 0.0), v);
        assert!((e.predict(None, 0.0) - want_ema[i]).abs() < 1e-12);
    }
    // Non-finite or non-positive observations are ignored.
    m.observe(f64::NAN, None);
    e.observe(-1.0, None);
    assert_eq!(m.predict(None, 0.0), 5.0);
    assert!((e.predict(None, 0.0) - 13.48).abs() < 1e-12);
}

/// `v = 100 (1 − 0.6 c) · noise`, with `c` a Markov on/off competing load and transient spikes
/// (speed halved for one clock) that do not show in the signals: B5's dynamic pattern.
fn series(seed: u64, len: usize) -> Vec<(f64, Signals)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut on = false;
    (0..len)
        .map(|_| {
            let u: f64 = rng.gen();
            on = if on { u >= 0.1 } else { u < 0.05 };
            let busy = if on { 0.6 } else { 0.0 };
            let z: f64 = rng.sample(StandardNormal);
            let spike = if rng.gen::<f64>() < 0.05 { 0.5 } else { 1.0 };
            let v = 100.0 * (1.0 - busy) * (0.03 * z).exp() * spike;
            let z1: f64 = rng.sample(StandardNormal);
            let z2: f64 = rng.sample(StandardNormal);
            let s = Signals {
                cpu: (busy + 0.02 * z1).clamp(0.0, 1.0),
                mem: (0.3 + 0.5 * busy + 0.02 * z2).clamp(0.0, 1.0),
            };
            (v, s)
        })
        .collect()
}

/// RMSE of one-step predictions after `from`.
fn rmse(p: &mut dyn SpeedPredictor, data: &[(f64, Signals)], from: usize) -> f64 {
    let mut sq = 0.0;
    let mut n = 0;
    for k in 0..data.len() - 1 {
        p.observe(data[k].0, Some(data[k].1));
        p.maintain(0.0, 0.0).unwrap();
        let pred = p.predict(Some(data[k + 1].1), 0.0);
        if k + 1 >= from {
            sq += (pred - data[k + 1].0).powi(2);
            n += 1;
        }
    }
    (sq / n as f64).sqrt()
}

fn narx(seed: u64) -> Narx {
    let cfg = NarxConfig {
        warmup: 300,
        ..NarxConfig::default()
    };
    assert_eq!(cfg.parameters(), 17);
    Narx::new(cfg, seed, 0).unwrap()
}

#[test]
fn narx_beats_ema_and_memoryless_when_the_signal_explains_speed() {
    let data = series(5, 900);
    let from = 300;
    let r_narx = rmse(&mut narx(1), &data, from);
    let r_ema = rmse(&mut Ema::new(0.2), &data, from);
    let r_mem = rmse(&mut Memoryless::new(), &data, from);
    eprintln!("RMSE narx {r_narx:.3}, ema {r_ema:.3}, memoryless {r_mem:.3}");
    assert!(r_narx < 0.8 * r_ema, "narx {r_narx} vs ema {r_ema}");
    assert!(r_narx < 0.8 * r_mem, "narx {r_narx} vs memoryless {r_mem}");
}

#[test]
fn narx_is_ema_during_warmup_and_deterministic_given_the_seed() {
    let data = series(9, 400);
    let cfg = NarxConfig {
        warmup: 200,
        retrain_every: 50,
        ..NarxConfig::default()
    };
    let mut a = Narx::new(cfg.clone(), 3, 1).unwrap();
    let mut b = Narx::new(cfg, 3, 1).unwrap();
    let mut e = Ema::new(0.2);
    for k in 0..data.len() - 1 {
        for p in [&mut a as &mut dyn SpeedPredictor, &mut b, &mut e] {
            p.observe(data[k].0, Some(data[k].1));
            p.maintain(0.0, 0.0).unwrap();
        }
        let next = Some(data[k + 1].1);
        let (pa, pb, pe) = (
            a.predict(next, 0.0),
            b.predict(next, 0.0),
            e.predict(next, 0.0),
        );
        assert_eq!(pa.to_bits(), pb.to_bits(), "clock {k}");
        if k + 1 < 200 {
            assert_eq!(pa, pe, "EMA during warm-up (clock {k})");
        }
    }
    assert!(a.uses_network(0.0));
    assert!(a.retrains >= 1);
}

#[test]
fn narx_waits_for_background_training_to_finish() {
    let data = series(2, 120);
    let cfg = NarxConfig {
        warmup: 0,
        retrain_every: 100,
        ..NarxConfig::default()
    };
    let mut p = Narx::new(cfg, 1, 0).unwrap();
    let mut e = Ema::new(0.2);
    let mut secs = 0.0;
    for (v, s) in &data[..100] {
        p.observe(*v, Some(*s));
        e.observe(*v, Some(*s));
        secs += p.maintain(10.0, 1e-6).unwrap();
    }
    assert!(secs > 0.0);
    assert_eq!(
        p.predict(None, 10.0),
        e.predict(None, 10.0),
        "not ready yet"
    );
    assert!(!p.uses_network(10.0));
    assert!(p.uses_network(10.0 + secs));
}
