//! Tests of the telemetry: statistics, fits, pooling, the window and the profile.

use super::estimate::ols_fit;
use super::*;
use concord_engine::prelude::*;

fn stats(samples: &[(f64, f64)]) -> OlsStats {
    let mut st = OlsStats::default();
    for &(s, t) in samples {
        st.add(s, t);
    }
    st
}

fn report(worker: u32, per: &[(ServerId, &[(f64, f64)])]) -> PeriodReport {
    PeriodReport {
        worker,
        per_server: per.iter().map(|&(r, s)| (r, stats(s))).collect(),
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn merge_equals_adding_all_samples() {
    let a = [(1.0, 2.0), (3.0, 5.0)];
    let b = [(4.0, 1.0)];
    let mut m = stats(&a);
    m.merge(&stats(&b));
    assert_eq!(m, stats(&[(1.0, 2.0), (3.0, 5.0), (4.0, 1.0)]));
    assert_eq!(m.mean_s(), 8.0 / 3.0);
    assert_eq!(OlsStats::default().mean_t(), 0.0);
}

#[test]
fn exact_line_is_recovered_with_zero_sem_when_workers_agree() {
    // t = 2e-9·s + 1e-3 for both workers, sizes 1..4 MB.
    let line: Vec<(f64, f64)> = (1..=4)
        .map(|k| {
            let s = k as f64 * 1e6;
            (s, 2e-9 * s + 1e-3)
        })
        .collect();
    let mut h = History::new(5);
    h.ingest(&[report(0, &[(7, &line)]), report(1, &[(7, &line)])]);
    let pred = h.fit();
    let m = pred.get(7).expect("server 7 fitted");
    assert!(close(m.alpha(), 2e-9, 1e-9), "alpha {}", m.alpha());
    assert!(close(m.beta(), 1e-3, 1e-9), "beta {}", m.beta());
    // Zero up to the rounding of the sums of squares (times are milliseconds here).
    assert!(m.sem(3e6) < 1e-9, "sem {}", m.sem(3e6));
    assert_eq!(pred.servers(), vec![7]);
}

#[test]
fn noise_every_worker_shares_is_not_averaged_away() {
    // Both workers see the same noisy times (the server's own fluctuation): the spread
    // across workers is zero, but the server's speed is still uncertain. The SEM is each
    // fit's own OLS standard error of the mean prediction, not that over √W.
    let noisy: Vec<(f64, f64)> = [(1e6, 0.011), (2e6, 0.019), (3e6, 0.032), (4e6, 0.039)]
        .into_iter()
        .collect();
    let mut h = History::new(5);
    h.ingest(&[report(0, &[(3, &noisy)]), report(1, &[(3, &noisy)])]);
    let both = h.fit().get(3).cloned().expect("fitted");
    let mut h = History::new(5);
    h.ingest(&[report(0, &[(3, &noisy)])]);
    let one = h.fit().get(3).cloned().expect("fitted");
    assert!(
        one.sem(2.5e6) > 1e-4,
        "a real uncertainty: {}",
        one.sem(2.5e6)
    );
    for s in [1e6, 2.5e6, 5e6] {
        assert!(
            close(both.sem(s), one.sem(s), 1e-9),
            "at {s}: {} vs {}",
            both.sem(s),
            one.sem(s)
        );
    }
}

#[test]
fn sem_is_stddev_over_workers_over_sqrt_w() {
    // Worker 0: t = 1e-9 s + 1e-3; worker 1: t = 3e-9 s + 1e-3 (exact lines).
    let l0: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s + 1e-3)).collect();
    let l1: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 3e-9 * s + 1e-3)).collect();
    let mut h = History::new(5);
    h.ingest(&[report(0, &[(0, &l0)]), report(1, &[(0, &l1)])]);
    let m = h.fit().get(0).cloned().expect("fitted");
    let s = 4e6;
    // Predictions 5e-3 and 13e-3: mean 9e-3, sample stddev 4e-3·√2, SEM = that / √2 = 4e-3.
    assert!(close(m.mean(s), 9e-3, 1e-9), "mean {}", m.mean(s));
    assert!(close(m.sem(s), 4e-3, 1e-6), "sem {}", m.sem(s));
    assert!(close(m.upper(s, 1.645), 9e-3 + 1.645 * 4e-3, 1e-6));
    assert!(close(m.lower(s, 1.645), 9e-3 - 1.645 * 4e-3, 1e-6));
}

#[test]
fn single_worker_uses_the_ols_standard_error() {
    // Residuals ±0.1 around t = s: s = 0,1,2,3, t = 0.1, 0.9, 2.1, 2.9.
    let pts = [(0.0, 0.1), (1.0, 0.9), (2.0, 2.1), (3.0, 2.9)];
    let st = stats(&pts);
    let f = ols_fit(&st);
    // Hand computation: s̄ = 1.5, Sxx = 5, Sxy = 4.8 → α = 0.96, β = 1.5 − 1.44 = 0.06.
    assert!(close(f.alpha, 0.96, 1e-12));
    assert!(close(f.beta, 0.06, 1e-12));
    let sse: f64 = pts
        .iter()
        .map(|&(s, t)| (t - 0.96 * s - 0.06_f64).powi(2))
        .sum();
    let sigma = (sse / 2.0).sqrt();
    let mut h = History::new(5);
    h.ingest(&[report(3, &[(1, &pts)])]);
    let m = h.fit().get(1).cloned().expect("fitted");
    for s in [0.0, 1.5, 4.0] {
        let want = sigma * (0.25 + (s - 1.5) * (s - 1.5) / 5.0_f64).sqrt();
        assert!(
            close(m.sem(s), want, 1e-9),
            "s = {s}: {} vs {want}",
            m.sem(s)
        );
    }
}

#[test]
fn degenerate_fit_is_proportional_to_load() {
    // Servers 0 and 1 have varying sizes (β = 1 ms and 3 ms); server 2 always moves 8 MB in
    // 0.1 s: β = 0 and α = t̄/s̄, whatever the other servers' intercepts.
    let l0: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s + 1e-3)).collect();
    let l1: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s + 3e-3)).collect();
    let flat = [(8e6, 0.1), (8e6, 0.1), (8e6, 0.1)];
    let mut h = History::new(5);
    h.ingest(&[report(0, &[(0, &l0), (1, &l1), (2, &flat)])]);
    let m = h.fit().get(2).cloned().expect("fitted");
    assert_eq!(m.beta(), 0.0);
    assert!(close(m.alpha(), 0.1 / 8e6, 1e-12));
    assert!(close(m.mean(8e6), 0.1, 1e-9));
    // Twice the load, twice the predicted time: more load is never free.
    assert!(close(m.mean(16e6), 0.2, 1e-9));
}

#[test]
fn negative_coefficients_are_clamped() {
    // Time falls with size: α would be negative → the best line through the origin.
    let down = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)];
    let f = ols_fit(&stats(&down));
    assert_eq!(f.beta, 0.0);
    assert!(close(f.alpha, (3.0 + 4.0 + 3.0) / 14.0, 1e-12));
    // A line with a negative intercept → fit through the origin.
    let neg = [(1.0, 1.0), (2.0, 3.0), (3.0, 5.0)];
    let f = ols_fit(&stats(&neg));
    assert_eq!(f.beta, 0.0);
    assert!(close(f.alpha, (1.0 + 6.0 + 15.0) / 14.0, 1e-12));
}

#[test]
fn window_drops_old_periods_and_idle_servers_keep_their_model() {
    let slow: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-8 * s)).collect();
    let fast: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s)).collect();
    let mut h = History::new(2);
    h.ingest(&[report(0, &[(0, &slow), (1, &slow)])]);
    let p = h.fit();
    assert!(close(p.get(1).map_or(0.0, |m| m.alpha()), 1e-8, 1e-9));
    // Two periods in which server 0 became fast and server 1 got no samples.
    h.ingest(&[report(0, &[(0, &fast)])]);
    h.ingest(&[report(0, &[(0, &fast)])]);
    let p = h.fit();
    assert!(close(p.get(0).map_or(0.0, |m| m.alpha()), 1e-9, 1e-9));
    assert!(close(p.get(1).map_or(0.0, |m| m.alpha()), 1e-8, 1e-9));
    let speeds = h.literal_speeds();
    assert!(close(speeds[&0], 1e9, 1e-9));
    // Server 1 had no samples in this window and no earlier literal-speed call: absent.
    assert!(!speeds.contains_key(&1));
}

#[test]
fn literal_speed_is_bytes_over_time_and_sticky() {
    let mut h = History::new(1);
    h.ingest(&[
        report(0, &[(0, &[(4e6, 0.1), (4e6, 0.3)])]),
        report(1, &[(0, &[(4e6, 0.2)])]),
    ]);
    let sp = h.literal_speeds();
    assert!(close(sp[&0], 12e6 / 0.6, 1e-12));
    h.ingest(&[]);
    assert!(close(h.literal_speeds()[&0], 12e6 / 0.6, 1e-12));
    // The model, unlike the speed, was never fitted while samples were in the window.
    assert!(h.fit().get(0).is_none());
}

#[test]
fn empty_inputs_do_not_panic() {
    let mut h = History::new(0);
    h.ingest(&[]);
    assert!(h.fit().servers().is_empty());
    assert!(h.literal_speeds().is_empty());
    h.ingest(&[report(0, &[(0, &[(0.0, 0.0)])])]);
    let m = h.fit().get(0).cloned().expect("fitted");
    assert_eq!((m.alpha(), m.beta(), m.sem(1.0)), (0.0, 0.0, 0.0));
    assert_eq!(Pred::default().average_model(), None);
    assert_eq!(Pred::default().speed(0, 1.0), None);
    let mut p = Pred::default();
    p.insert(0, ServerModel::fixed(0.0, 0.0, 0.0));
    assert_eq!(p.speed(0, 1.0), None);
}

#[test]
fn average_model_and_speed() {
    let mut p = Pred::default();
    p.insert(0, ServerModel::fixed(1e-9, 1e-3, 0.02));
    p.insert(1, ServerModel::fixed(3e-9, 3e-3, 0.04));
    let avg = p.average_model().expect("two models");
    assert!(close(avg.alpha(), 2e-9, 1e-12));
    assert!(close(avg.beta(), 2e-3, 1e-12));
    assert!(close(avg.sem(1e6), 0.03, 1e-12));
    // s_ref = 1 MB on server 0: 1e6 / (1e-3 + 1e-3) bytes/s.
    assert!(close(p.speed(0, 1e6).unwrap_or(0.0), 5e8, 1e-12));
    assert_eq!(p.speed(9, 1e6), None);
}

#[test]
fn report_round_trips_through_json() {
    let r = report(4, &[(2, &[(1.0, 2.0)]), (5, &[(3.0, 4.0), (5.0, 6.0)])]);
    let json = serde_json::to_string(&r).expect("serializes");
    let back: PeriodReport = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, r);
}
