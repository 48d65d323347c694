//! Statistical and behavioural tests of the injector. Tolerances are derived from the
//! sample sizes (k standard errors of the estimator), not tuned to the observed values.

use super::*;
use crate::patterns::{
    contention, disrupted_machine, persistent, power_law, server_markov, slow_worker, trace_like,
};

use std::io::Write;

fn probe(
    kind: RoleKind,
    index: u32,
    machine: u32,
    num_workers: u32,
    now: f64,
    iter: u64,
    progress: f64,
) -> Probe {
    Probe {
        kind,
        index,
        machine,
        num_workers,
        now,
        iter,
        progress,
        nominal_iter_s: 1.0,
    }
}

fn worker(index: u32, now: f64, iter: u64, progress: f64) -> Probe {
    probe(RoleKind::Worker, index, 0, 4, now, iter, progress)
}

fn server(index: u32, now: f64) -> Probe {
    probe(RoleKind::Server, index, 0, 4, now, 0, 0.0)
}

/// Asserts |x − expected| ≤ k·se with a readable message.
fn assert_close(what: &str, x: f64, expected: f64, se: f64, k: f64) {
    assert!(
        (x - expected).abs() <= k * se,
        "{what}: observed {x}, expected {expected} ± {k}·{se} (= {})",
        k * se
    );
}

// ---------------------------------------------------------------- Effect

#[test]
fn effect_then_composes_factors_and_delays() {
    let a = Effect {
        compute_factor: 2.0,
        extra_delay_s: 1.0,
        bandwidth_factor: 0.5,
        per_request_s: 0.1,
    };
    let b = Effect {
        compute_factor: 1.5,
        extra_delay_s: 2.0,
        bandwidth_factor: 0.5,
        per_request_s: 0.2,
    };
    let c = a.then(b);
    assert_eq!(c.compute_factor, 3.0);
    assert_eq!(c.extra_delay_s, 3.0);
    assert_eq!(c.bandwidth_factor, 0.25);
    assert!((c.per_request_s - 0.3).abs() < 1e-12);
    assert_eq!(a.then(Effect::NONE), a);
    assert_eq!(Effect::NONE.then(a), a);
}

#[test]
fn rng_keys_are_stable_and_distinct() {
    // Fixed values: a change to the mixing function would silently change every run.
    assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    assert_ne!(key_hash(1, "a", &[1, 2]), key_hash(1, "a", &[2, 1]));
    assert_ne!(key_hash(1, "a", &[1]), key_hash(1, "b", &[1]));
    assert_ne!(key_hash(1, "a", &[1]), key_hash(2, "a", &[1]));
    assert_eq!(key_hash(9, "x", &[3, 4]), key_hash(9, "x", &[3, 4]));
}

// ---------------------------------------------------------------- slow-worker

fn slow_worker_cfg(probability: f64, delay: f64) -> StragglerConfig {
    StragglerConfig::SlowWorker(SlowWorkerConfig {
        workers: None,
        probability,
        points: 10,
        delay,
        length: SlowLength::Time,
    })
}

/// Drives one worker through `iters` iterations of nominal length 1 s with 10 probe points,
/// pure compute (no waits). Returns (total time, slowed time, factors per interval, slowdowns started).
fn drive_slow_worker(
    s: &mut slow_worker::SlowWorker,
    iters: u64,
    delay: f64,
) -> (f64, f64, Vec<f64>, usize) {
    let dt = 0.1;
    let (mut t, mut slowed, mut starts) = (0.0, 0.0, 0);
    let mut factors = Vec::new();
    for iter in 0..iters {
        for k in 0..=10u32 {
            let p = worker(0, t, iter, f64::from(k) / 10.0);
            let before = s.slowed_until;
            let f = s.effect(&p).compute_factor;
            starts += usize::from(s.slowed_until != before);
            if k < 10 {
                factors.push(f);
                t += dt * f;
                // The interval's extra time is r·d/(1+d) for r slowed seconds.
                slowed += (f - 1.0) * dt * (1.0 + delay) / delay;
            }
        }
    }
    (t, slowed, factors, starts)
}

#[test]
fn slow_worker_fraction_of_time_slowed() {
    let (p, d, delta) = (0.01, 1.0, 0.1);
    let mut s = slow_worker::SlowWorker::new(11, 0, p, 10, d, SlowLength::Time);
    let (t, slowed, factors, starts) = drive_slow_worker(&mut s, 20_000, d);
    let frac = slowed / t;
    // Renewal cycle: slowed S ~ U[0, 2·T0] (mean 1), then unslowed time U = R + (K−1)·Δ,
    // with K ~ Geometric(p) decision points and R the rest of the interval in which the
    // slowdown ended. With d = 1 the work done while slowed, S/2 ~ U[0, 1], spans whole
    // intervals, so R ~ U[0, Δ]: E[C] = 1 + Δ/2 + (1/p − 1)Δ = 10.95, fraction = 1/10.95 ≈ 0.0913.
    let e_cycle = 1.0 + delta / 2.0 + (1.0 / p - 1.0) * delta;
    let expected = 1.0 / e_cycle;
    // Ratio estimator over n ≈ t/E[C] cycles: se = sd((1−f)S − f·U)/(√n·E[C]).
    let var_s = 4.0 / 12.0;
    let var_u = delta * delta / 12.0 + delta * delta * (1.0 - p) / (p * p);
    let n = t / e_cycle;
    let se =
        (((1.0 - expected).powi(2) * var_s + expected * expected * var_u) / n).sqrt() / e_cycle;
    assert_close("slow-worker fraction slowed", frac, expected, se, 4.0);
    // Factor is exactly 1+d on fully slowed intervals, within [1, 1+d] on the last one.
    assert!(factors.iter().all(|&f| (1.0..=1.0 + d).contains(&f)));
    let full = factors.iter().filter(|&&f| f == 1.0 + d).count();
    let partial = factors.iter().filter(|&&f| f > 1.0 && f < 1.0 + d).count();
    assert!(full > 0 && partial > 0);
    // Each slowdown has at most one partial interval (the one in which it ends).
    assert!(partial <= starts, "partial {partial} > starts {starts}");
    // Renewal count: N(t) ≈ t/E[C] with Var ≈ t·Var(C)/E[C]³ = n·Var(C)/E[C]².
    assert_close(
        "slowdown starts",
        starts as f64,
        n,
        (n * (var_s + var_u)).sqrt() / e_cycle,
        4.0,
    );
}

#[test]
fn slow_worker_ignores_decisions_while_slowed() {
    // p = 1: every decision point starts a slowdown unless one is running.
    let mut s = slow_worker::SlowWorker::new(5, 0, 1.0, 10, 2.0, SlowLength::Time);
    let mut t = 0.0;
    let mut starts = 0;
    for iter in 0..2_000u64 {
        for k in 0..=10u32 {
            let before = s.slowed_until;
            let p = worker(0, t, iter, f64::from(k) / 10.0);
            let f = s.effect(&p).compute_factor;
            if t < before {
                assert_eq!(
                    s.slowed_until, before,
                    "new decision taken while slowed at iter {iter} k {k}"
                );
            } else if k > 0 {
                // Unslowed at a decision point with p = 1: a new slowdown must start.
                assert_ne!(s.slowed_until, before);
                starts += 1;
            }
            if k < 10 {
                t += 0.1 * f;
            }
        }
    }
    assert!(starts > 100);
    // A repeated probe at the same point does not decide again.
    let mut s = slow_worker::SlowWorker::new(5, 0, 1.0, 10, 2.0, SlowLength::Time);
    s.effect(&worker(0, 0.0, 0, 0.1));
    let until = s.slowed_until;
    s.slowed_until = -1.0; // pretend it ended
    s.effect(&worker(0, until + 1.0, 0, 0.1));
    assert_eq!(s.slowed_until, -1.0);
}

/// Measured in work, a slowdown lasts for the drawn amount of the worker's own nominal work,
/// however long that takes: the time it adds is exactly `d` × the slowed work, so the mean
/// added time grows linearly in `d` (BSP's slope in the thesis's Fig. 3.6).
#[test]
fn slow_worker_measured_in_work_adds_time_linear_in_delay() {
    let mean_added = |d: f64| {
        let mut s = slow_worker::SlowWorker::new(11, 0, 0.01, 10, d, SlowLength::Work);
        let (mut t, mut nominal) = (0.0, 0.0);
        for iter in 0..20_000u64 {
            for k in 0..10u32 {
                let p = worker(0, t, iter, f64::from(k) / 10.0);
                t += 0.1 * s.effect(&p).compute_factor;
                nominal += 0.1;
            }
        }
        (t - nominal) / 20_000.0
    };
    let (one, two, four) = (mean_added(1.0), mean_added(2.0), mean_added(4.0));
    // About 0.09 slowdowns per iteration of mean length 1: ≈ 0.09·d s per 1 s iteration.
    assert!(one > 0.06 && one < 0.12, "{one}");
    assert!((two / one - 2.0).abs() < 0.05, "{one} {two}");
    assert!((four / one - 4.0).abs() < 0.1, "{one} {four}");
    // Measured in time the added time saturates instead: d/(1+d) of the slowed time.
    let mut s = slow_worker::SlowWorker::new(11, 0, 0.01, 10, 4.0, SlowLength::Time);
    let (mut t, mut nominal) = (0.0, 0.0);
    for iter in 0..20_000u64 {
        for k in 0..10u32 {
            t += 0.1
                * s.effect(&worker(0, t, iter, f64::from(k) / 10.0))
                    .compute_factor;
            nominal += 0.1;
        }
    }
    assert!((t - nominal) / 20_000.0 < 0.5 * four);
}

// ---------------------------------------------------------------- disrupted-machine

#[test]
fn disrupted_machine_shared_schedule_and_rate() {
    let cfg = StragglerConfig::DisruptedMachine(DisruptedMachineConfig {
        machines: None,
        probability: 0.2,
        period_s: 20.0,
        duration_s: 20.0,
        delay: 2.0,
        include_servers: false,
    });
    let mut a = cfg.build(3, RoleKind::Worker, 0, 3).unwrap();
    let mut b = cfg.build(3, RoleKind::Worker, 5, 3).unwrap();
    let mut other = cfg.build(3, RoleKind::Worker, 1, 4).unwrap();
    let periods = 20_000u64;
    let (mut hits, mut other_hits, mut both) = (0u64, 0u64, 0u64);
    for j in 0..periods {
        for off in [0.0, 10.0, 19.999] {
            let now = j as f64 * 20.0 + off;
            // Different iteration/progress on the two workers: the schedule is time-keyed.
            let ea = a.effect(&probe(RoleKind::Worker, 0, 3, 8, now, j, 0.3));
            let eb = b.effect(&probe(RoleKind::Worker, 5, 3, 8, now, j + 7, 0.9));
            assert_eq!(ea, eb);
            assert!(ea.compute_factor == 1.0 || ea.compute_factor == 3.0);
        }
        let now = j as f64 * 20.0 + 10.0;
        let hit = a
            .effect(&probe(RoleKind::Worker, 0, 3, 8, now, j, 0.0))
            .compute_factor
            > 1.0;
        let ohit = other
            .effect(&probe(RoleKind::Worker, 1, 4, 8, now, j, 0.0))
            .compute_factor
            > 1.0;
        hits += u64::from(hit);
        other_hits += u64::from(ohit);
        both += u64::from(hit && ohit);
    }
    let n = periods as f64;
    let se = (0.2 * 0.8 / n).sqrt();
    assert_close("disrupted fraction", hits as f64 / n, 0.2, se, 4.0);
    assert_close(
        "other machine fraction",
        other_hits as f64 / n,
        0.2,
        se,
        4.0,
    );
    // Machines are independent: P(both) ≈ 0.04.
    assert_close(
        "both disrupted",
        both as f64 / n,
        0.04,
        (0.04 * 0.96 / n).sqrt(),
        4.0,
    );
    // Servers are untouched unless include_servers.
    assert_eq!(
        cfg.build(3, RoleKind::Server, 0, 3)
            .unwrap()
            .effect(&server(0, 10.0)),
        Effect::NONE
    );
}

#[test]
fn disrupted_machine_overlapping_windows() {
    // duration > period: disrupted at t iff some period j with j·P ≤ t < j·P + D fired.
    let d = disrupted_machine::DisruptedMachine::new(1, 0, 0.3, 5.0, 12.0, 1.0);
    for i in 0..2_000 {
        let now = i as f64 * 0.7;
        let expected = (0..=(now / 5.0) as u64).any(|j| {
            let s = j as f64 * 5.0;
            s <= now && now < s + 12.0 && d.period_fires(j)
        });
        assert_eq!(d.disrupted_at(now), expected, "t = {now}");
    }
}

// ---------------------------------------------------------------- power-law

#[test]
fn power_law_means_and_medians() {
    let n = 50_000u64;
    for alpha in [11.0f64, 7.0, 4.0] {
        let pl = power_law::PowerLaw::new(17, 2, alpha);
        let xs: Vec<f64> = (0..n).map(|i| pl.multiplier(i)).collect();
        assert!(xs.iter().all(|&x| x >= 1.0));
        let mean = xs.iter().sum::<f64>() / n as f64;
        // Pareto with shape a = α − 1, scale 1: mean a/(a−1), variance a/((a−1)²(a−2)).
        let a = alpha - 1.0;
        let expected_mean = a / (a - 1.0);
        let var = a / ((a - 1.0).powi(2) * (a - 2.0));
        assert_close(
            &format!("power-law mean α={alpha}"),
            mean,
            expected_mean,
            (var / n as f64).sqrt(),
            5.0,
        );
        // Robust check: the share below the theoretical median 2^(1/(α−1)) is 1/2.
        let median = 2f64.powf(1.0 / a);
        let below = xs.iter().filter(|&&x| x < median).count() as f64 / n as f64;
        assert_close(
            &format!("power-law median α={alpha}"),
            below,
            0.5,
            (0.25 / n as f64).sqrt(),
            4.0,
        );
    }
    // Spec values.
    assert!((10.0f64 / 9.0 - 1.11).abs() < 0.01);
    // Constant over an iteration, keyed by (seed, worker, iter).
    let cfg = StragglerConfig::PowerLaw(PowerLawConfig {
        workers: None,
        alpha: 4.0,
    });
    let mut s = cfg.build(1, RoleKind::Worker, 0, 0).unwrap();
    let e0 = s.effect(&worker(0, 0.0, 42, 0.0));
    assert_eq!(e0, s.effect(&worker(0, 0.5, 42, 0.5)));
    assert_ne!(e0, s.effect(&worker(0, 1.0, 43, 0.0)));
}

// ---------------------------------------------------------------- persistent

#[test]
fn persistent_spread_uneven_and_speeds() {
    let spread = StragglerConfig::Persistent(PersistentConfig {
        workers: None,
        speeds: None,
        spread: Some(Span { min: 0.5, max: 1.0 }),
        uneven: None,
    });
    let n = 4;
    let f = |i: u32| {
        spread
            .build(0, RoleKind::Worker, i, 0)
            .unwrap()
            .effect(&probe(RoleKind::Worker, i, 0, n, 0.0, 0, 0.0))
            .compute_factor
    };
    assert_eq!(f(0), 2.0); // speed min = 0.5, slowest
    assert_eq!(f(3), 1.0); // speed max = 1.0
    assert!((f(1) - 1.5).abs() < 1e-12); // speed 2/3
    assert_eq!(f(0) / f(3), 2.0); // Hetero-L2: min/max speed = 1/2

    let uneven = StragglerConfig::Persistent(PersistentConfig {
        workers: None,
        speeds: None,
        spread: None,
        uneven: Some(Uneven::default()),
    });
    let g = |m: u32| {
        uneven
            .build(0, RoleKind::Worker, 0, m)
            .unwrap()
            .effect(&worker(0, 0.0, 0, 0.0))
            .compute_factor
    };
    // Heavy machines (even ids for f = 0.5) take share/f = 1.5, light ones (1−share)/(1−f) = 0.5.
    assert_eq!(g(0), 1.5);
    assert_eq!(g(1), 0.5);
    assert_eq!(g(0) / g(1), 3.0);
    let avg: f64 = (0..8).map(g).sum::<f64>() / 8.0;
    assert!((avg - 1.0).abs() < 1e-12);
    // f = 0.25: machines 0 and 4 of 0..8 are heavy; average work still 1.
    let heavy: Vec<u32> = (0..8).filter(|&m| persistent::is_heavy(m, 0.25)).collect();
    assert_eq!(heavy, vec![0, 4]);
    let heavy10: usize = (0..10).filter(|&m| persistent::is_heavy(m, 0.3)).count();
    assert_eq!(heavy10, 3);

    let speeds = StragglerConfig::Persistent(PersistentConfig {
        workers: None,
        speeds: Some(vec![1.0, 0.25]),
        spread: None,
        uneven: None,
    });
    let mut s = speeds.build(0, RoleKind::Worker, 1, 0).unwrap();
    assert_eq!(s.effect(&worker(1, 0.0, 0, 0.0)).compute_factor, 4.0);
    let err = speeds
        .build(0, RoleKind::Worker, 5, 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("persistent") && err.contains("speeds") && err.contains("worker 5"),
        "{err}"
    );
}

// ---------------------------------------------------------------- sleeps

#[test]
fn round_robin_sleep_is_exact() {
    let cfg = StragglerConfig::RoundRobinSleep(RoundRobinSleepConfig { delay_s: 6.0 });
    let n = 4u32;
    let mut roles: Vec<_> = (0..n)
        .map(|i| cfg.build(0, RoleKind::Worker, i, i).unwrap())
        .collect();
    for iter in 0..100u64 {
        for (i, s) in roles.iter_mut().enumerate() {
            let i = i as u32;
            let p = probe(RoleKind::Worker, i, i, n, iter as f64, iter, 0.0);
            let e = s.effect(&p);
            let expected = if iter % u64::from(n) == u64::from(i) {
                6.0
            } else {
                0.0
            };
            assert_eq!(e.extra_delay_s, expected, "iter {iter} worker {i}");
            assert_eq!(e.compute_factor, 1.0);
            // Reported once per iteration, only at progress 0.
            assert_eq!(s.effect(&p).extra_delay_s, 0.0);
            assert_eq!(s.effect(&Probe { progress: 0.5, ..p }).extra_delay_s, 0.0);
        }
    }
    assert!(
        cfg.build(0, RoleKind::Server, 0, 0)
            .unwrap()
            .effect(&server(0, 0.0))
            == Effect::NONE
    );
}

#[test]
fn probabilistic_sleep_frequency() {
    let p = 0.3;
    let cfg = StragglerConfig::ProbabilisticSleep(ProbabilisticSleepConfig {
        workers: None,
        probability: p,
        delay_s: 3.0,
    });
    let (workers, iters) = (4u32, 10_000u64);
    let mut hits = 0u64;
    for i in 0..workers {
        let mut s = cfg.build(8, RoleKind::Worker, i, 0).unwrap();
        for iter in 0..iters {
            let e = s.effect(&worker(i, iter as f64, iter, 0.0));
            assert!(e.extra_delay_s == 0.0 || e.extra_delay_s == 3.0);
            hits += u64::from(e.extra_delay_s > 0.0);
            assert_eq!(s.effect(&worker(i, iter as f64, iter, 0.5)), Effect::NONE);
        }
    }
    let n = f64::from(workers) * iters as f64;
    assert_close(
        "probabilistic sleep frequency",
        hits as f64 / n,
        p,
        (p * (1.0 - p) / n).sqrt(),
        4.0,
    );
}

// ---------------------------------------------------------------- contention

fn contention_cfg(spike_probability: f64) -> StragglerConfig {
    StragglerConfig::Contention(ContentionConfig {
        workers: None,
        p_on: 0.1,
        p_off: 0.3,
        load: Some(vec![0.5, 0.3]),
        load_spread: None,
        noise: 0.05,
        spike_probability,
        spike_factor: 2.0,
        signal_noise: 0.02,
    })
}

fn pearson(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    sxy / (sxx * syy).sqrt()
}

#[test]
fn contention_stationary_on_fraction_and_signals() {
    let (p_on, p_off) = (0.1, 0.3);
    let params = contention::Params {
        seed: 4,
        index: 0,
        p_on,
        p_off,
        load: contention::Load::Fixed(0.5),
        noise: 0.05,
        spike_probability: 0.0,
        spike_factor: 2.0,
        signal_noise: 0.02,
    };
    let mut c = contention::Contention::new(params);
    let n = 50_000u64;
    let on = (0..n).filter(|&k| c.on_at(k)).count() as f64 / n as f64;
    let pi = p_on / (p_on + p_off);
    // Two-state chain: lag-1 autocorrelation ρ = 1 − p_on − p_off, so
    // Var(mean) = π(1−π)/n · (1+ρ)/(1−ρ).
    let rho = 1.0 - p_on - p_off;
    let se = (pi * (1.0 - pi) / n as f64 * (1.0 + rho) / (1.0 - rho)).sqrt();
    assert_close("contention on-fraction", on, pi, se, 4.0);

    // Counter-based: jumping straight to an iteration gives the same state.
    let mut fresh = contention::Contention::new(params);
    assert_eq!(fresh.on_at(7_777), c.on_at(7_777));

    // Signals track the slowdown.
    let mut s = contention_cfg(0.0)
        .build(4, RoleKind::Worker, 0, 0)
        .unwrap();
    let (mut cpu, mut fac) = (Vec::new(), Vec::new());
    for k in 0..5_000u64 {
        let p = worker(0, k as f64, k, 0.0);
        let e = s.effect(&p);
        let sig = s.signals(&p).unwrap();
        assert!((0.0..=1.0).contains(&sig.cpu) && (0.0..=1.0).contains(&sig.mem));
        cpu.push(sig.cpu);
        fac.push(e.compute_factor);
        // Availability (1 − ℓ·on)·noise: factor ≈ 1 off, ≈ 2 on (ℓ = 0.5), noise σ = 0.05.
        assert!(
            e.compute_factor > 0.75 && e.compute_factor < 2.8,
            "{}",
            e.compute_factor
        );
    }
    let mem: Vec<f64> = (0..5_000u64)
        .map(|k| s.signals(&worker(0, k as f64, k, 0.0)).unwrap().mem)
        .collect();
    assert!(
        pearson(&cpu, &fac) > 0.9,
        "cpu/factor correlation {}",
        pearson(&cpu, &fac)
    );
    assert!(
        pearson(&mem, &fac) > 0.9,
        "mem/factor correlation {}",
        pearson(&mem, &fac)
    );
}

#[test]
fn contention_spikes_do_not_show_in_signals() {
    let q = 0.2;
    let mut calm = contention_cfg(0.0)
        .build(9, RoleKind::Worker, 1, 0)
        .unwrap();
    let mut spiky = contention_cfg(q).build(9, RoleKind::Worker, 1, 0).unwrap();
    let n = 10_000u64;
    let mut spikes = 0u64;
    for k in 0..n {
        let p = worker(1, k as f64, k, 0.0);
        assert_eq!(calm.signals(&p), spiky.signals(&p));
        let (a, b) = (
            calm.effect(&p).compute_factor,
            spiky.effect(&p).compute_factor,
        );
        if a != b {
            assert!((b / a - 2.0).abs() < 1e-12);
            spikes += 1;
        }
    }
    let se = (q * (1.0 - q) / n as f64).sqrt();
    assert_close("spike frequency", spikes as f64 / n as f64, q, se, 4.0);
}

#[test]
fn contention_load_spread_orders_workers() {
    let cfg = StragglerConfig::Contention(ContentionConfig {
        workers: None,
        p_on: 1.0,
        p_off: 0.0,
        load: None,
        load_spread: Some(Span { min: 0.2, max: 0.6 }),
        noise: 0.0,
        spike_probability: 0.0,
        spike_factor: 2.0,
        signal_noise: 0.0,
    });
    // Always on, no noise: factor = 1/(1 − ℓ), worker 0 has ℓ = max.
    let f = |i: u32| {
        cfg.build(0, RoleKind::Worker, i, 0)
            .unwrap()
            .effect(&probe(RoleKind::Worker, i, 0, 3, 0.0, 5, 0.0))
            .compute_factor
    };
    assert!((f(0) - 1.0 / 0.4).abs() < 1e-12);
    assert!((f(1) - 1.0 / 0.6).abs() < 1e-12);
    assert!((f(2) - 1.0 / 0.8).abs() < 1e-12);
}

// ---------------------------------------------------------------- trace-like

#[test]
fn trace_like_levels_and_segments() {
    let (min, max, mean) = (0.4, 0.9, 30.0);
    let mut t = trace_like::TraceLike::new(2, 3, mean, min, max);
    let mut levels = Vec::new();
    for i in 0..200_000 {
        let l = t.level_at(i as f64 * 0.5);
        assert!((min..=max).contains(&l), "level {l}");
        levels.push(l);
    }
    let shifts = levels.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(shifts > 1_000, "{shifts}");
    // Level mean ≈ (min+max)/2 over segments; segment lengths ~ Exp(mean).
    let mut t = trace_like::TraceLike::new(2, 3, mean, min, max);
    let n = 20_000u32;
    let (mut now, mut sum_level) = (0.0, 0.0);
    for _ in 0..n {
        sum_level += t.level_at(now);
        now = t.end; // first instant of the next segment
    }
    let level_se = (max - min) / 12f64.sqrt() / f64::from(n).sqrt();
    assert_close(
        "trace level mean",
        sum_level / f64::from(n),
        (min + max) / 2.0,
        level_se,
        4.0,
    );
    assert_close(
        "segment mean",
        now / f64::from(n),
        mean,
        mean / f64::from(n).sqrt(),
        4.0,
    );
    // Effect and signals follow the level.
    let cfg = StragglerConfig::TraceLike(TraceLikeConfig {
        workers: None,
        mean_segment_s: mean,
        min,
        max,
    });
    let mut s = cfg.build(2, RoleKind::Worker, 3, 0).unwrap();
    let mut t = trace_like::TraceLike::new(2, 3, mean, min, max);
    for i in 0..1_000 {
        let now = i as f64 * 3.7;
        let l = t.level_at(now);
        let p = worker(3, now, i, 0.0);
        assert_eq!(s.effect(&p).compute_factor, 1.0 / l);
        assert!((s.signals(&p).unwrap().cpu - (1.0 - l)).abs() < 1e-12);
    }
    // Going back in time replays the same stream.
    let mut t2 = trace_like::TraceLike::new(2, 3, mean, min, max);
    let late = t2.level_at(5_000.0);
    let early = t2.level_at(1.0);
    let mut t3 = trace_like::TraceLike::new(2, 3, mean, min, max);
    assert_eq!(t3.level_at(1.0), early);
    assert_eq!(t3.level_at(5_000.0), late);
}

// ---------------------------------------------------------------- servers

#[test]
fn slow_server_schedule_boundaries() {
    let cfg = StragglerConfig::SlowServer(SlowServerConfig {
        servers: Some(vec![1]),
        start_s: 10.0,
        end_s: Some(20.0),
        bandwidth_factor: 0.25,
        cpu_factor: 3.0,
        per_request_s: 0.01,
    });
    let on = Effect {
        compute_factor: 3.0,
        extra_delay_s: 0.0,
        bandwidth_factor: 0.25,
        per_request_s: 0.01,
    };
    let mut s = cfg.build(0, RoleKind::Server, 1, 0).unwrap();
    assert_eq!(s.effect(&server(1, 0.0)), Effect::NONE);
    assert_eq!(s.effect(&server(1, 9.999_999)), Effect::NONE);
    assert_eq!(s.effect(&server(1, 10.0)), on);
    assert_eq!(s.effect(&server(1, 19.999_999)), on);
    assert_eq!(s.effect(&server(1, 20.0)), Effect::NONE);
    assert_eq!(s.effect(&server(1, 1e6)), Effect::NONE);
    let mut other = cfg.build(0, RoleKind::Server, 0, 0).unwrap();
    assert_eq!(other.effect(&server(0, 15.0)), Effect::NONE);
    let mut w = cfg.build(0, RoleKind::Worker, 1, 0).unwrap();
    assert_eq!(w.effect(&worker(1, 15.0, 0, 0.0)), Effect::NONE);
    let forever = StragglerConfig::SlowServer(SlowServerConfig {
        servers: None,
        start_s: 0.0,
        end_s: None,
        bandwidth_factor: 0.1,
        cpu_factor: 1.0,
        per_request_s: 0.0,
    });
    let mut f = forever.build(0, RoleKind::Server, 3, 0).unwrap();
    assert_eq!(f.effect(&server(3, 1e9)).bandwidth_factor, 0.1);
}

fn markov_cfg() -> StragglerConfig {
    StragglerConfig::ServerMarkov(ServerMarkovConfig {
        servers: None,
        states: vec![1.0, 0.5, 0.25],
        step_s: 10.0,
        switch_probability: 0.1,
        jitter: 0.01,
        cpu_coupled: false,
    })
}

#[test]
fn server_markov_determinism_and_variation() {
    let cfg = markov_cfg();
    let mut a = cfg.build(21, RoleKind::Server, 0, 0).unwrap();
    let mut a2 = cfg.build(21, RoleKind::Server, 0, 0).unwrap();
    let mut b = cfg.build(21, RoleKind::Server, 1, 0).unwrap();
    let mut c = cfg.build(22, RoleKind::Server, 0, 0).unwrap();
    let steps = 5_000u64;
    let (mut min_var, mut max_var) = (f64::INFINITY, 0.0f64);
    let mut differs = false;
    for j in 0..steps {
        let now = j as f64 * 10.0 + 5.0;
        let ea = a.effect(&server(0, now));
        assert_eq!(ea, a2.effect(&server(0, now)));
        differs |= ea != c.effect(&server(0, now));
        let eb = b.effect(&server(1, now));
        let (hi, lo) = (
            ea.bandwidth_factor.max(eb.bandwidth_factor),
            ea.bandwidth_factor.min(eb.bandwidth_factor),
        );
        let var = (hi - lo) / lo;
        min_var = min_var.min(var);
        max_var = max_var.max(var);
    }
    assert!(differs, "different seeds gave the same trace");
    // Same-state steps differ only by the 1 % jitter; opposite states 1 vs 0.25 give ≈ 3.
    assert!(min_var < 0.01, "min variation {min_var}");
    assert!((3.0..3.5).contains(&max_var), "max variation {max_var}");
    // Out-of-order queries agree with in-order ones (counter-based chain).
    let mut m1 =
        server_markov::ServerMarkov::new(21, 0, vec![1.0, 0.5, 0.25], 10.0, 0.1, 0.01, false);
    let mut m2 =
        server_markov::ServerMarkov::new(21, 0, vec![1.0, 0.5, 0.25], 10.0, 0.1, 0.01, false);
    let seq: Vec<usize> = (0..500).map(|j| m1.state_at(j)).collect();
    for j in (0..500).rev() {
        assert_eq!(m2.state_at(j), seq[j as usize]);
    }
    // Switching rate ≈ switch_probability.
    let switches = seq.windows(2).filter(|w| w[0] != w[1]).count() as f64 / 499.0;
    assert_close(
        "switch rate",
        switches,
        0.1,
        (0.1 * 0.9 / 499.0f64).sqrt(),
        4.0,
    );
}

// ---------------------------------------------------------------- jitter

#[test]
fn jitter_is_mean_one_and_per_point() {
    let sigma = 0.2;
    let cfg = StragglerConfig::Jitter(JitterConfig {
        roles: JitterRoles::All,
        workers: None,
        servers: None,
        sigma,
        per_iteration: false,
    });
    let mut w = cfg.build(5, RoleKind::Worker, 0, 0).unwrap();
    let n = 20_000u64;
    let mut sum = 0.0;
    let mut prev = 0.0;
    for i in 0..n {
        let p = worker(0, 0.0, i / 10, (i % 10) as f64 / 10.0);
        let f = w.effect(&p).compute_factor;
        assert_eq!(w.effect(&p).compute_factor, f, "same probe, same jitter");
        assert_ne!(f, prev);
        prev = f;
        sum += f;
    }
    let var = (sigma * sigma).exp() - 1.0;
    assert_close(
        "jitter mean",
        sum / n as f64,
        1.0,
        (var / n as f64).sqrt(),
        4.0,
    );
    let mut s = cfg.build(5, RoleKind::Server, 0, 0).unwrap();
    let e = s.effect(&server(0, 1.0));
    assert_eq!(e.compute_factor, 1.0);
    assert_ne!(e.bandwidth_factor, 1.0);
    let workers_only = StragglerConfig::Jitter(JitterConfig {
        roles: JitterRoles::Workers,
        workers: None,
        servers: None,
        sigma,
        per_iteration: false,
    });
    assert!(!workers_only.applies_to(RoleKind::Server, 0, 0));
}

// ---------------------------------------------------------------- csv-trace

fn write_csv(dir: &tempfile::TempDir, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    path
}

#[test]
fn csv_trace_exact_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_csv(
        &dir,
        "trace.csv",
        "time,role,factor\n0,worker:0,2\n5,machine:1,3\n10,worker:0,0.5\n10,server:1,4\n12, worker:1 ,1.25\n",
    );
    let cfg = StragglerConfig::CsvTrace(CsvTraceConfig { path });
    let mut w0 = cfg.build(0, RoleKind::Worker, 0, 1).unwrap();
    let at = |s: &mut Box<dyn Straggler>, kind: RoleKind, i: u32, t: f64| {
        s.effect(&probe(kind, i, 1, 2, t, 0, 0.0)).compute_factor
    };
    assert_eq!(at(&mut w0, RoleKind::Worker, 0, -1.0), 1.0);
    assert_eq!(at(&mut w0, RoleKind::Worker, 0, 0.0), 2.0);
    assert_eq!(at(&mut w0, RoleKind::Worker, 0, 4.999), 2.0);
    assert_eq!(at(&mut w0, RoleKind::Worker, 0, 5.0), 6.0);
    assert_eq!(at(&mut w0, RoleKind::Worker, 0, 10.0), 1.5);
    assert_eq!(at(&mut w0, RoleKind::Worker, 0, 1e6), 1.5);
    let mut w1 = cfg.build(0, RoleKind::Worker, 1, 0).unwrap();
    assert_eq!(at(&mut w1, RoleKind::Worker, 1, 11.0), 1.0);
    assert_eq!(at(&mut w1, RoleKind::Worker, 1, 12.0), 1.25);
    let mut s1 = cfg.build(0, RoleKind::Server, 1, 1).unwrap();
    assert_eq!(at(&mut s1, RoleKind::Server, 1, 9.0), 3.0);
    assert_eq!(at(&mut s1, RoleKind::Server, 1, 10.0), 12.0);
    let mut s0 = cfg.build(0, RoleKind::Server, 0, 0).unwrap();
    assert_eq!(at(&mut s0, RoleKind::Server, 0, 10.0), 1.0);
}

#[test]
fn csv_trace_errors_name_path_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, u64, &str); 9] = [
        (
            "bad_header.csv",
            "t,role,factor\n0,worker:0,1\n",
            1,
            "header",
        ),
        ("empty.csv", "", 1, "header"),
        (
            "bad_time.csv",
            "time,role,factor\n0,worker:0,1\nabc,worker:0,2\n",
            3,
            "time",
        ),
        (
            "neg_factor.csv",
            "time,role,factor\n0,worker:0,-1\n",
            2,
            "factor",
        ),
        (
            "zero_factor.csv",
            "time,role,factor\n0,worker:0,1\n1,worker:1,0\n",
            3,
            "factor",
        ),
        (
            "bad_factor.csv",
            "time,role,factor\n0,worker:0,fast\n",
            2,
            "factor",
        ),
        (
            "bad_role.csv",
            "time,role,factor\n0,worker:0,1\n1,gpu:1,2\n",
            3,
            "role",
        ),
        (
            "unsorted.csv",
            "time,role,factor\n5,worker:0,1\n6,worker:1,1\n4,worker:0,2\n",
            4,
            "time",
        ),
        ("fields.csv", "time,role,factor\n0,worker:0\n", 2, "row"),
    ];
    for (name, body, line, column) in cases {
        let path = write_csv(&dir, name, body);
        let cfg = StragglerConfig::CsvTrace(CsvTraceConfig { path: path.clone() });
        let err = cfg.build(0, RoleKind::Worker, 0, 0).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{name}: {msg}");
        assert!(msg.contains(&format!("line {line},")), "{name}: {msg}");
        assert!(msg.contains(&format!("column `{column}`")), "{name}: {msg}");
        assert!(
            matches!(err, StragglerError::CsvRow { line: l, .. } if l == line),
            "{name}: {msg}"
        );
    }
    let missing = dir.path().join("nope.csv");
    let msg = StragglerConfig::CsvTrace(CsvTraceConfig {
        path: missing.clone(),
    })
    .build(0, RoleKind::Worker, 0, 0)
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains(&missing.display().to_string()) && msg.contains("cannot open"),
        "{msg}"
    );
}

/// Found by `fuzz_csv_mutated_traces`: with `\r` line ends every row was reported on line 1.
#[test]
fn csv_trace_lines_count_carriage_return_line_ends() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in [
        ("cr.csv", "time,role,factor\r0,worker:0,1\r1,gpu:1,2\r"),
        (
            "crlf.csv",
            "time,role,factor\r\n0,worker:0,1\r\n1,gpu:1,2\r\n",
        ),
    ] {
        let path = write_csv(&dir, name, body);
        let err = StragglerConfig::CsvTrace(CsvTraceConfig { path })
            .build(0, RoleKind::Worker, 0, 0)
            .unwrap_err();
        assert!(
            matches!(err, StragglerError::CsvRow { line: 3, .. }),
            "{name}: {err}"
        );
    }
}

#[test]
fn csv_trace_rows_must_name_roles_of_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let job = JobShape {
        workers: 8,
        servers: 2,
        machines: 4,
    };
    let path = write_csv(
        &dir,
        "ok.csv",
        "time,role,factor\n0,worker:7,2\n1,server:1,3\n2,machine:3,1.5\n",
    );
    let ok = StragglerConfig::CsvTrace(CsvTraceConfig { path });
    ok.check_job(&job).unwrap();
    let cases = [
        ("worker:99", "8 workers (worker:0 to worker:7)"),
        ("server:2", "2 servers (server:0 to server:1)"),
        ("machine:4", "4 machines (machine:0 to machine:3)"),
    ];
    for (role, known) in cases {
        let path = write_csv(
            &dir,
            "straggler.csv",
            &format!("time,role,factor\n0,worker:0,2\n3,{role},4\n"),
        );
        let cfg = StragglerConfig::CsvTrace(CsvTraceConfig { path: path.clone() });
        let err = cfg.check_job(&job).unwrap_err();
        assert!(
            matches!(&err, StragglerError::CsvRow { line: 3, column, .. } if column == "role"),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&path.display().to_string())
                && msg.contains(&format!("{role} is not in this job"))
                && msg.contains(known),
            "{msg}"
        );
    }
    // A row that is malformed is reported as when building.
    let path = write_csv(&dir, "bad.csv", "time,role,factor\n0,gpu:1,2\n");
    let err = StragglerConfig::CsvTrace(CsvTraceConfig { path })
        .check_job(&job)
        .unwrap_err();
    assert!(
        matches!(err, StragglerError::CsvRow { line: 2, .. }),
        "{err}"
    );
}

#[test]
fn only_role_naming_patterns_check_the_job() {
    // A pattern that names no roles passes whatever the job's size.
    let none = JobShape {
        workers: 1,
        servers: 1,
        machines: 1,
    };
    let cfg: StragglerConfig = toml::from_str("pattern = \"jitter\"\nsigma = 0.1\n").unwrap();
    cfg.check_job(&none).unwrap();
}

// ---------------------------------------------------------------- sets & determinism

fn all_patterns(csv: std::path::PathBuf) -> Vec<StragglerConfig> {
    vec![
        slow_worker_cfg(0.05, 1.0),
        StragglerConfig::DisruptedMachine(DisruptedMachineConfig {
            machines: None,
            probability: 0.2,
            period_s: 2.0,
            duration_s: 2.0,
            delay: 1.0,
            include_servers: true,
        }),
        StragglerConfig::PowerLaw(PowerLawConfig {
            workers: None,
            alpha: 7.0,
        }),
        StragglerConfig::Persistent(PersistentConfig {
            workers: None,
            speeds: None,
            spread: Some(Span { min: 0.5, max: 1.0 }),
            uneven: None,
        }),
        StragglerConfig::RoundRobinSleep(RoundRobinSleepConfig { delay_s: 1.0 }),
        StragglerConfig::ProbabilisticSleep(ProbabilisticSleepConfig {
            workers: None,
            probability: 0.2,
            delay_s: 0.5,
        }),
        contention_cfg(0.05),
        StragglerConfig::TraceLike(TraceLikeConfig {
            workers: None,
            mean_segment_s: 5.0,
            min: 0.5,
            max: 1.0,
        }),
        StragglerConfig::SlowServer(SlowServerConfig {
            servers: None,
            start_s: 3.0,
            end_s: Some(9.0),
            bandwidth_factor: 0.5,
            cpu_factor: 2.0,
            per_request_s: 0.001,
        }),
        markov_cfg(),
        StragglerConfig::Jitter(JitterConfig {
            roles: JitterRoles::All,
            workers: None,
            servers: None,
            sigma: 0.1,
            per_iteration: false,
        }),
        StragglerConfig::CsvTrace(CsvTraceConfig { path: csv }),
    ]
}

fn run_set(
    configs: &[StragglerConfig],
    seed: u64,
    kind: RoleKind,
    index: u32,
) -> Vec<(Effect, Option<ResourceSignals>)> {
    let mut set = StragglerSet::build(configs, seed, kind, index, 1).unwrap();
    let mut out = Vec::new();
    let mut t = 0.0;
    for iter in 0..200u64 {
        for k in 0..=10u32 {
            let p = probe(kind, index, 1, 4, t, iter, f64::from(k) / 10.0);
            let e = set.effect(&p);
            out.push((e, set.signals(&p)));
            t += 0.1 * e.compute_factor + e.extra_delay_s;
        }
    }
    out
}

#[test]
fn same_seed_same_effects_different_seed_different() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(&dir, "t.csv", "time,role,factor\n1,machine:1,1.5\n");
    let configs = all_patterns(csv);
    for (kind, index) in [(RoleKind::Worker, 1), (RoleKind::Server, 0)] {
        let a = run_set(&configs, 77, kind, index);
        let b = run_set(&configs, 77, kind, index);
        let c = run_set(&configs, 78, kind, index);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
    // Workers get every worker pattern, servers the server ones (+ disrupted, jitter, csv).
    let w = StragglerSet::build(&configs, 1, RoleKind::Worker, 1, 1).unwrap();
    assert_eq!(w.len(), 10);
    let s = StragglerSet::build(&configs, 1, RoleKind::Server, 1, 1).unwrap();
    assert_eq!(s.len(), 5);
    assert!(
        StragglerSet::build(&configs[..8], 1, RoleKind::Server, 0, 0)
            .map(|s| s.len() == 1) // only disrupted-machine (include_servers)
            .unwrap()
    );
    assert!(
        StragglerSet::build(&configs[2..8], 1, RoleKind::Server, 0, 0)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn set_agreement_across_roles_does_not_depend_on_probe_order() {
    // Two workers on machine 1 with only the disrupted-machine pattern: whatever the order and
    // frequency of their probes, they agree at equal times.
    let configs = vec![
        slow_worker_cfg(0.0, 1.0),
        StragglerConfig::DisruptedMachine(DisruptedMachineConfig {
            machines: None,
            probability: 0.5,
            period_s: 1.0,
            duration_s: 1.0,
            delay: 1.0,
            include_servers: false,
        }),
    ];
    let mut a = StragglerSet::build(&configs, 3, RoleKind::Worker, 0, 1).unwrap();
    let mut b = StragglerSet::build(&configs, 3, RoleKind::Worker, 2, 1).unwrap();
    let times: Vec<f64> = (0..500).map(|i| i as f64 * 0.37).collect();
    let ea: Vec<Effect> = times
        .iter()
        .map(|&t| a.effect(&worker(0, t, 0, 0.0)))
        .collect();
    let eb: Vec<Effect> = times
        .iter()
        .rev()
        .map(|&t| b.effect(&worker(2, t, 0, 0.0)))
        .collect();
    let eb: Vec<Effect> = eb.into_iter().rev().collect();
    assert_eq!(ea, eb);
    assert!(
        ea.iter().any(|e| e.compute_factor > 1.0) && ea.iter().any(|e| e.compute_factor == 1.0)
    );
}

#[test]
fn set_signals_combine() {
    let configs = vec![contention_cfg(0.0), contention_cfg(0.0)];
    let mut set = StragglerSet::build(&configs, 3, RoleKind::Worker, 0, 0).unwrap();
    let mut singles: Vec<_> = (0..2)
        .map(|i| {
            configs[i]
                .build(rng::pattern_seed(3, i), RoleKind::Worker, 0, 0)
                .unwrap()
        })
        .collect();
    for k in 0..50u64 {
        let p = worker(0, k as f64, k, 0.0);
        let s = set.signals(&p).unwrap();
        let a = singles[0].signals(&p).unwrap();
        let b = singles[1].signals(&p).unwrap();
        assert!((s.cpu - (1.0 - (1.0 - a.cpu) * (1.0 - b.cpu))).abs() < 1e-12);
        assert!((s.mem - (1.0 - (1.0 - a.mem) * (1.0 - b.mem))).abs() < 1e-12);
    }
    let mut empty = StragglerSet::build(&[], 3, RoleKind::Worker, 0, 0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.effect(&worker(0, 0.0, 0, 0.0)), Effect::NONE);
    assert_eq!(empty.signals(&worker(0, 0.0, 0, 0.0)), None);
}

// ---------------------------------------------------------------- config

#[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
struct Wrapper {
    #[serde(default)]
    stragglers: Vec<StragglerConfig>,
}

const ALL_TOML: &str = r#"
[[stragglers]]
pattern = "slow-worker"
delay = 1.0

[[stragglers]]
pattern = "disrupted-machine"
delay = 2.0
machines = [0, 1]

[[stragglers]]
pattern = "power-law"
alpha = 11

[[stragglers]]
pattern = "persistent"
spread = { min = 0.5, max = 1.0 }

[[stragglers]]
pattern = "persistent"
uneven = { fraction_machines = 0.5, share = 0.75 }

[[stragglers]]
pattern = "persistent"
speeds = [1.0, 0.5]
workers = [0, 1]

[[stragglers]]
pattern = "round-robin-sleep"
delay_s = 6.0

[[stragglers]]
pattern = "probabilistic-sleep"
probability = 0.3
delay_s = 3.0

[[stragglers]]
pattern = "contention"
p_on = 0.1
p_off = 0.3
load_spread = { min = 0.2, max = 0.6 }

[[stragglers]]
pattern = "trace-like"
mean_segment_s = 60.0

[[stragglers]]
pattern = "slow-server"
servers = [0]
start_s = 100.0
end_s = 200.0
bandwidth_factor = 0.1

[[stragglers]]
pattern = "server-markov"

[[stragglers]]
pattern = "jitter"
roles = "servers"
sigma = 0.2

[[stragglers]]
pattern = "csv-trace"
path = "traces/run1.csv"
"#;

#[test]
fn toml_with_every_pattern_parses_with_defaults() {
    let w: Wrapper = toml::from_str(ALL_TOML).unwrap();
    assert_eq!(w.stragglers.len(), 14);
    let names: Vec<&str> = w.stragglers.iter().map(|c| c.pattern_name()).collect();
    for tag in [
        "slow-worker",
        "disrupted-machine",
        "power-law",
        "persistent",
        "round-robin-sleep",
        "probabilistic-sleep",
        "contention",
        "trace-like",
        "slow-server",
        "server-markov",
        "jitter",
        "csv-trace",
    ] {
        assert!(names.contains(&tag), "{tag} missing");
    }
    for c in &w.stragglers {
        c.validate().unwrap();
    }
    assert_eq!(w.stragglers[0], slow_worker_cfg(0.01, 1.0));
    assert_eq!(
        w.stragglers[1],
        StragglerConfig::DisruptedMachine(DisruptedMachineConfig {
            machines: Some(vec![0, 1]),
            probability: 0.2,
            period_s: 20.0,
            duration_s: 20.0,
            delay: 2.0,
            include_servers: false,
        })
    );
    assert_eq!(w.stragglers[11], markov_cfg());
    match &w.stragglers[8] {
        StragglerConfig::Contention(ContentionConfig {
            noise,
            spike_probability,
            spike_factor,
            signal_noise,
            ..
        }) => assert_eq!(
            (*noise, *spike_probability, *spike_factor, *signal_noise),
            (0.05, 0.05, 2.0, 0.02)
        ),
        other => panic!("{other:?}"),
    }
    match &w.stragglers[9] {
        StragglerConfig::TraceLike(TraceLikeConfig { min, max, .. }) => {
            assert_eq!((*min, *max), (0.5, 1.0))
        }
        other => panic!("{other:?}"),
    }
    // Round trip.
    let text = toml::to_string(&w).unwrap();
    let back: Wrapper = toml::from_str(&text).unwrap();
    assert_eq!(back, w);
}

#[test]
fn unknown_fields_and_patterns_are_errors() {
    for bad in [
        "[[stragglers]]\npattern = \"slow-worker\"\ndelay = 1.0\nprobabilty = 0.5\n",
        "[[stragglers]]\npattern = \"power-law\"\nalpha = 4\nbeta = 1\n",
        "[[stragglers]]\npattern = \"persistent\"\nspread = { min = 0.5, max = 1.0, mid = 0.7 }\n",
        "[[stragglers]]\npattern = \"slow-workers\"\ndelay = 1.0\n",
        "[[stragglers]]\npattern = \"round-robin-sleep\"\n",
    ] {
        let err = toml::from_str::<Wrapper>(bad).unwrap_err().to_string();
        assert!(!err.is_empty());
    }
    let err = toml::from_str::<Wrapper>(
        "[[stragglers]]\npattern = \"slow-worker\"\ndelay = 1.0\nprobabilty = 0.5\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("probabilty"), "{err}");
}

#[test]
fn validate_rejects_out_of_range_values() {
    let cases: Vec<(StragglerConfig, &str, &str)> = vec![
        (slow_worker_cfg(1.5, 1.0), "slow-worker", "`probability`"),
        (slow_worker_cfg(0.01, -1.0), "slow-worker", "`delay`"),
        (
            StragglerConfig::DisruptedMachine(DisruptedMachineConfig {
                machines: None,
                probability: 0.2,
                period_s: 0.0,
                duration_s: 20.0,
                delay: 1.0,
                include_servers: false,
            }),
            "disrupted-machine",
            "`period_s`",
        ),
        (
            StragglerConfig::PowerLaw(PowerLawConfig {
                workers: None,
                alpha: 2.0,
            }),
            "power-law",
            "`alpha`",
        ),
        (
            StragglerConfig::Persistent(PersistentConfig {
                workers: None,
                speeds: None,
                spread: None,
                uneven: None,
            }),
            "persistent",
            "`speeds/spread/uneven`",
        ),
        (
            StragglerConfig::Persistent(PersistentConfig {
                workers: None,
                speeds: None,
                spread: Some(Span { min: 1.0, max: 0.5 }),
                uneven: None,
            }),
            "persistent",
            "`spread`",
        ),
        (
            StragglerConfig::Persistent(PersistentConfig {
                workers: None,
                speeds: None,
                spread: None,
                uneven: Some(Uneven {
                    fraction_machines: 1.0,
                    share: 0.75,
                }),
            }),
            "persistent",
            "`uneven.fraction_machines`",
        ),
        (
            StragglerConfig::RoundRobinSleep(RoundRobinSleepConfig { delay_s: -2.0 }),
            "round-robin-sleep",
            "`delay_s`",
        ),
        (
            StragglerConfig::ProbabilisticSleep(ProbabilisticSleepConfig {
                workers: None,
                probability: -0.1,
                delay_s: 1.0,
            }),
            "probabilistic-sleep",
            "`probability`",
        ),
        (
            StragglerConfig::Contention(ContentionConfig {
                workers: None,
                p_on: 0.1,
                p_off: 0.1,
                load: Some(vec![0.5, 1.0]),
                load_spread: None,
                noise: 0.05,
                spike_probability: 0.0,
                spike_factor: 2.0,
                signal_noise: 0.0,
            }),
            "contention",
            "`load`",
        ),
        (
            StragglerConfig::Contention(ContentionConfig {
                workers: None,
                p_on: 0.1,
                p_off: 0.1,
                load: None,
                load_spread: None,
                noise: 0.05,
                spike_probability: 0.0,
                spike_factor: 2.0,
                signal_noise: 0.0,
            }),
            "contention",
            "`load/load_spread`",
        ),
        (
            StragglerConfig::TraceLike(TraceLikeConfig {
                workers: None,
                mean_segment_s: 30.0,
                min: 0.0,
                max: 1.0,
            }),
            "trace-like",
            "`min`",
        ),
        (
            StragglerConfig::SlowServer(SlowServerConfig {
                servers: None,
                start_s: 10.0,
                end_s: Some(5.0),
                bandwidth_factor: 1.0,
                cpu_factor: 1.0,
                per_request_s: 0.0,
            }),
            "slow-server",
            "`end_s`",
        ),
        (
            StragglerConfig::SlowServer(SlowServerConfig {
                servers: None,
                start_s: 0.0,
                end_s: None,
                bandwidth_factor: 0.0,
                cpu_factor: 1.0,
                per_request_s: 0.0,
            }),
            "slow-server",
            "`bandwidth_factor`",
        ),
        (
            StragglerConfig::ServerMarkov(ServerMarkovConfig {
                servers: None,
                states: vec![],
                step_s: 10.0,
                switch_probability: 0.1,
                jitter: 0.0,
                cpu_coupled: false,
            }),
            "server-markov",
            "`states`",
        ),
        (
            StragglerConfig::Jitter(JitterConfig {
                roles: JitterRoles::All,
                workers: None,
                servers: None,
                sigma: f64::NAN,
                per_iteration: false,
            }),
            "jitter",
            "`sigma`",
        ),
        (
            StragglerConfig::CsvTrace(CsvTraceConfig { path: "".into() }),
            "csv-trace",
            "`path`",
        ),
    ];
    for (cfg, pattern, field) in cases {
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(msg.contains(pattern) && msg.contains(field), "{msg}");
        // build validates too.
        assert!(cfg.build(0, RoleKind::Worker, 0, 0).is_err());
    }
    let msg = StragglerConfig::PowerLaw(PowerLawConfig {
        workers: None,
        alpha: 1.5,
    })
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("1.5") && msg.contains("infinite mean"),
        "{msg}"
    );
}

// ---------------------------------------------------------------- RNA injectors

fn build_worker(toml_text: &str, index: u32) -> Box<dyn Straggler> {
    let cfg: StragglerConfig = toml::from_str(toml_text).unwrap();
    cfg.build(7, RoleKind::Worker, index, index).unwrap()
}

#[test]
fn uniform_delay_is_uniform_once_per_iteration_and_filtered() {
    let mut s = build_worker("pattern = \"uniform-delay\"\nmin_s = 0.05\nmax_s = 0.1", 1);
    let n = 20_000;
    let mut delays = Vec::with_capacity(n);
    for it in 0..n as u64 {
        let e = s.effect(&worker(1, 0.0, it, 0.0));
        // A second progress-0 probe and later probes of the same iteration add nothing.
        assert_eq!(s.effect(&worker(1, 0.0, it, 0.0)), Effect::NONE);
        assert_eq!(s.effect(&worker(1, 0.0, it, 0.5)).extra_delay_s, 0.0);
        assert_eq!(e.compute_factor, 1.0);
        delays.push(e.extra_delay_s);
    }
    assert!(delays.iter().all(|d| (0.05..=0.1).contains(d)));
    let mean = delays.iter().sum::<f64>() / n as f64;
    let var = delays.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / n as f64;
    let sd = 0.05 / 12f64.sqrt();
    assert_close(
        "U(50,100) ms mean",
        mean,
        0.075,
        sd / (n as f64).sqrt(),
        4.0,
    );
    assert_close(
        "U(50,100) ms variance",
        var,
        sd * sd,
        sd * sd * (0.8f64 / n as f64).sqrt(),
        4.0,
    );
    let cfg: StragglerConfig =
        toml::from_str("pattern = \"uniform-delay\"\nmax_s = 0.05\nworkers = [4, 5]").unwrap();
    assert!(!cfg.applies_to(RoleKind::Worker, 1, 1) && cfg.applies_to(RoleKind::Worker, 4, 4));
    assert!(!cfg.applies_to(RoleKind::Server, 4, 4));
}

#[test]
fn random_slowdown_hits_one_in_n_iterations_by_the_factor() {
    let mut s = build_worker("pattern = \"random-slowdown\"", 2);
    let n = 40_000u64;
    let mut hits = 0u64;
    for it in 0..n {
        let f = s.effect(&worker(2, 0.0, it, 0.0)).compute_factor;
        // Constant over the iteration.
        assert_eq!(s.effect(&worker(2, 0.0, it, 0.7)).compute_factor, f);
        assert!(f == 1.0 || f == 6.0, "{f}");
        hits += u64::from(f == 6.0);
    }
    // `worker()` probes report 4 workers: p = 1/4 by default.
    let p = 0.25;
    assert_close(
        "slowdown rate",
        hits as f64 / n as f64,
        p,
        (p * (1.0 - p) / n as f64).sqrt(),
        4.0,
    );
    let mut s = build_worker(
        "pattern = \"random-slowdown\"\nprobability = 0.0\nfactor = 3.0",
        0,
    );
    assert!((0..1000).all(|it| s.effect(&worker(0, 0.0, it, 0.0)) == Effect::NONE));
}

#[test]
fn variable_length_has_the_ucf101_mean_and_spread_and_clipping() {
    let mut s = build_worker("pattern = \"variable-length\"", 3);
    let n = 40_000u64;
    let f: Vec<f64> = (0..n)
        .map(|it| s.effect(&worker(3, 0.0, it, 0.0)).compute_factor)
        .collect();
    let mean = f.iter().sum::<f64>() / n as f64;
    let sd = (f.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
    // Lengths clipped to [29, 1776] around mean 186, sd 97.7: factor mean ≈ 1, CV ≈ 0.525
    // (clipping at 29 raises the mean by well under 1%).
    assert_close("mean factor", mean, 1.0, 0.525 / (n as f64).sqrt(), 6.0);
    assert!((sd - 0.525).abs() < 0.03, "coefficient of variation {sd}");
    assert!(f
        .iter()
        .all(|x| (29.0 / 186.0..=1776.0 / 186.0).contains(x)));
    // Summing 16 sequences shrinks the spread by about √16.
    let mut s = build_worker("pattern = \"variable-length\"\nsequences = 16", 3);
    let f: Vec<f64> = (0..n)
        .map(|it| s.effect(&worker(3, 0.0, it, 0.0)).compute_factor)
        .collect();
    let m = f.iter().sum::<f64>() / n as f64;
    let sd16 = (f.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n as f64).sqrt();
    assert!((sd16 - 0.525 / 4.0).abs() < 0.01, "{sd16}");
}

#[test]
fn rna_injectors_reject_bad_values() {
    for (text, field) in [
        (
            "pattern = \"uniform-delay\"\nmin_s = 0.2\nmax_s = 0.1",
            "max_s",
        ),
        ("pattern = \"uniform-delay\"\nmax_s = -1.0", "max_s"),
        ("pattern = \"random-slowdown\"\nfactor = 0.5", "factor"),
        (
            "pattern = \"random-slowdown\"\nprobability = 1.5",
            "probability",
        ),
        ("pattern = \"variable-length\"\nsequences = 0", "sequences"),
        ("pattern = \"variable-length\"\nmean_len = 0.0", "mean_len"),
        (
            "pattern = \"variable-length\"\nmin_len = 100.0\nmax_len = 50.0",
            "max_len",
        ),
    ] {
        let cfg: StragglerConfig = toml::from_str(text).unwrap();
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains(field) && e.contains(cfg.pattern_name()),
            "{text}: {e}"
        );
    }
}

#[test]
fn per_iteration_jitter_is_constant_within_an_iteration() {
    let cfg = StragglerConfig::Jitter(JitterConfig {
        roles: JitterRoles::Workers,
        workers: None,
        servers: None,
        sigma: 0.3,
        per_iteration: true,
    });
    let mut w = cfg.build(5, RoleKind::Worker, 0, 0).unwrap();
    let probe = |iter: u64, progress: f64| Probe {
        kind: RoleKind::Worker,
        index: 0,
        machine: 0,
        num_workers: 1,
        now: 0.0,
        iter,
        progress,
        nominal_iter_s: 1.0,
    };
    let a = w.effect(&probe(3, 0.0)).compute_factor;
    assert_eq!(w.effect(&probe(3, 0.37)).compute_factor, a);
    assert_ne!(w.effect(&probe(4, 0.0)).compute_factor, a);
}
