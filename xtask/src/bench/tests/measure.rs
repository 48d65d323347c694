//! Measurements read off a cell's curve: time and iterations to a target, phase ratio, steady
//! time per iteration.

use crate::bench::report::measure::{first_at_target, phase_ratio, steady_time_per_iteration};
use crate::bench::runner::result::{CellResult, CurvePoint, EvalPoint};
use crate::bench::suite::schema::{Phases, Target};

/// A cell result as the cache stores it, with `iterations` and an empty curve (and, as before
/// time-indexed evaluations existed, no `evals` key).
fn cached_result(iterations: u64) -> CellResult {
    serde_json::from_value(serde_json::json!({
        "metrics": {"iterations": iterations, "run_time_s": iterations as f64,
            "time_per_iteration_s": 1.0, "throughput_samples_per_s": 1.0, "ideal_time_s": 1.0,
            "efficiency": 0.3, "wait_share": 0.0, "final_loss": 0.1, "final_accuracy": 0.9,
            "final_test_loss": null, "bytes_sent": 0, "messages_sent": 0,
            "peak_worker_memory_bytes": 0, "peak_server_memory_bytes": 0, "figures": {}},
        "curve": []
    }))
    .expect("cached result")
}

/// The first virtual time a cell reaches `target`.
fn time_to_target(result: &CellResult, target: &Target) -> Option<f64> {
    first_at_target(result, target).map(|r| r.time_s)
}

/// Iterations completed when a cell first reaches `target`.
fn iterations_to_target(result: &CellResult, target: &Target) -> Option<u64> {
    first_at_target(result, target).map(|r| r.iteration)
}

#[test]
fn time_to_target_is_the_first_time_reached() {
    let r = cached_result(3);
    let r = CellResult {
        curve: vec![
            CurvePoint {
                iteration: 1,
                time_s: 1.0,
                loss: Some(0.9),
                test_accuracy: Some(0.4),
                test_loss: None,
            },
            CurvePoint {
                iteration: 2,
                time_s: 2.0,
                loss: Some(0.4),
                test_accuracy: None,
                test_loss: None,
            },
            CurvePoint {
                iteration: 3,
                time_s: 3.0,
                loss: Some(0.5),
                test_accuracy: Some(0.8),
                test_loss: None,
            },
        ],
        ..r
    };
    let t = |text: &str| toml::from_str::<Target>(text).expect("target");
    assert_eq!(time_to_target(&r, &t("accuracy = 0.7")), Some(3.0));
    assert_eq!(time_to_target(&r, &t("loss = 0.45")), Some(2.0));
    assert_eq!(time_to_target(&r, &t("accuracy = 0.95")), None);
    // How finely: the loss is checked at every iteration, so its reaching is exact; accuracy was
    // checked at iterations 1 and 3 only, so it may have been reached one iteration (2 s) earlier.
    let reached = |text: &str| first_at_target(&r, &t(text)).expect("reached");
    let loss = reached("loss = 0.45");
    assert_eq!((loss.resolution_s, loss.resolution_iterations), (0.0, 0));
    let acc = reached("accuracy = 0.7");
    assert_eq!((acc.resolution_s, acc.resolution_iterations), (2.0, 1));
    // Convergence: |0.5 − 0.9| > 25 % of 0.9 over two iterations, but |0.4 − 0.5| ≤ 25 % of 0.5
    // over one.
    let c = |text: &str| t(&format!("converged = {{ {text} }}"));
    assert_eq!(time_to_target(&r, &c("change = 0.25, over = 2")), None);
    assert_eq!(time_to_target(&r, &c("change = 0.25, over = 1")), Some(3.0));
    assert_eq!(
        iterations_to_target(&r, &c("change = 0.6, over = 1")),
        Some(2)
    );
    assert_eq!(
        iterations_to_target(&r, &c("change = 0.6, over = 1, after = 2")),
        Some(3)
    );
}

#[test]
fn time_indexed_evaluations_decide_test_loss_and_accuracy_targets() {
    let point = |iteration: u64, time_s: f64, acc: Option<f64>| CurvePoint {
        iteration,
        time_s,
        loss: Some(0.1),
        test_accuracy: acc,
        test_loss: None,
    };
    let eval = |time_s: f64, iteration: u64, loss: f64, acc: f64| EvalPoint {
        time_s,
        iteration,
        test_loss: Some(loss),
        test_accuracy: Some(acc),
    };
    // A result cached before evaluations existed still reads.
    let r = cached_result(2);
    assert!(r.evals.is_empty());
    let r = CellResult {
        curve: vec![point(1, 1.0, None), point(2, 2.0, Some(0.95))],
        evals: vec![
            eval(0.0, 0, 2.0, 0.1),
            eval(0.5, 0, 0.8, 0.5),
            eval(1.0, 1, 0.4, 0.8),
            eval(1.5, 1, 0.3, 0.9),
        ],
        ..r
    };
    let t = |text: &str| toml::from_str::<Target>(text).expect("target");
    assert_eq!(time_to_target(&r, &t("test_loss = 0.5")), Some(1.0));
    // Evaluations at times of their own: the model may have got there any time after the
    // evaluation before (0.5 s earlier), in the one iteration completed since.
    let hit = first_at_target(&r, &t("test_loss = 0.5")).expect("reached");
    assert_eq!((hit.resolution_s, hit.resolution_iterations), (0.5, 0));
    assert_eq!(iterations_to_target(&r, &t("test_loss = 0.5")), Some(1));
    assert_eq!(time_to_target(&r, &t("test_loss = 0.1")), None);
    // With evaluations, accuracy is read from them, not from the per-iteration ones.
    assert_eq!(time_to_target(&r, &t("accuracy = 0.85")), Some(1.5));
    // The training-loss target still reads the curve.
    assert_eq!(time_to_target(&r, &t("loss = 0.1")), Some(1.0));
}

#[test]
fn phase_ratio_compares_disturbed_and_calm_iterations() {
    // Iterations of 1 s while t < 10, then of 1.5 s while 10 <= t < 20 (phase 1), and so on.
    let mut curve = Vec::new();
    let mut t = 0.0;
    for i in 0..40u64 {
        let phase = (t / 10.0f64).floor() as u64 % 2;
        t += if phase == 0 { 1.0 } else { 1.5 };
        curve.push(CurvePoint {
            iteration: i + 1,
            time_s: t,
            loss: None,
            test_accuracy: None,
            test_loss: None,
        });
    }
    let mut result = CellResult {
        metrics: serde_json::from_value(serde_json::json!({
            "iterations": 40, "run_time_s": t, "time_per_iteration_s": t / 40.0,
            "throughput_samples_per_s": 0.0, "ideal_time_s": 0.0, "efficiency": 0.0,
            "wait_share": 0.0, "final_loss": null, "final_accuracy": null, "final_test_loss": null,
            "bytes_sent": 0, "messages_sent": 0, "peak_worker_memory_bytes": 0,
            "peak_server_memory_bytes": 0, "figures": {}
        }))
        .unwrap(),
        curve,
        evals: Vec::new(),
    };
    let phases = Phases {
        period_s: 10.0,
        count: 2,
        skip: 0,
    };
    let r = phase_ratio(&result, &phases).unwrap();
    assert!(r > 1.3 && r < 1.6, "{r}");
    result.curve.truncate(5);
    assert_eq!(
        phase_ratio(&result, &phases),
        None,
        "no disturbed iteration yet"
    );
}

/// A cell whose iterations end at `ends`, one curve point each.
fn ending_at(ends: &[f64]) -> CellResult {
    let n = ends.len() as u64;
    CellResult {
        metrics: serde_json::from_value(serde_json::json!({
            "iterations": n, "run_time_s": 0.0, "time_per_iteration_s": 0.0,
            "throughput_samples_per_s": 0.0, "ideal_time_s": 0.0, "efficiency": 0.0,
            "wait_share": 0.0, "final_loss": null, "final_accuracy": null, "final_test_loss": null,
            "bytes_sent": 0, "messages_sent": 0, "peak_worker_memory_bytes": 0,
            "peak_server_memory_bytes": 0, "figures": {}
        }))
        .unwrap(),
        curve: (1..=n)
            .zip(ends)
            .map(|(iteration, &time_s)| CurvePoint {
                iteration,
                time_s,
                loss: None,
                test_accuracy: None,
                test_loss: None,
            })
            .collect(),
        evals: Vec::new(),
    }
}

#[test]
fn steady_time_covers_the_second_half_of_the_run() {
    // 10 slow iterations of 3 s (adapting), then 10 of 1 s.
    let result = |n: u64| {
        let mut t = 0.0;
        let ends: Vec<f64> = (1..=n)
            .map(|i| {
                t += if i <= 10 { 3.0 } else { 1.0 };
                t
            })
            .collect();
        ending_at(&ends)
    };
    assert_eq!(steady_time_per_iteration(&result(20)), Some(1.0));
    // 21 iterations: the second half is iterations 11..=21, all 1 s.
    assert_eq!(steady_time_per_iteration(&result(21)), Some(1.0));
    assert_eq!(steady_time_per_iteration(&result(1)), None);
}

#[test]
fn steady_time_counts_iterations_closed_together_as_one_group() {
    // Rounds of 4 iterations, each closed at once, one every 4 s: 1 s an iteration. The second
    // half starts inside the round of iterations 9–12, which was not done before 12 s.
    let rounds: Vec<f64> = (0..20).map(|i| f64::from(i / 4 + 1) * 4.0).collect();
    assert_eq!(steady_time_per_iteration(&ending_at(&rounds)), Some(1.0));
    // The whole second half closed at once: timed from the round before.
    let late = [2.0, 2.0, 6.0, 6.0, 6.0, 6.0];
    assert_eq!(steady_time_per_iteration(&ending_at(&late)), Some(1.0));
    // Every iteration at one instant: no time to divide.
    assert_eq!(steady_time_per_iteration(&ending_at(&[5.0; 4])), None);

    // Flushes of 4 iterations every 4 s, then a final flush of the 1 iteration left, which
    // fills the pipeline for one minibatch (2 s): the remainder is left out.
    let mut flushes: Vec<f64> = (0..16).map(|i| f64::from(i / 4 + 1) * 4.0).collect();
    flushes.push(18.0);
    assert_eq!(steady_time_per_iteration(&ending_at(&flushes)), Some(1.0));
    // Counted, the window from iteration 8 would read (18 − 8) / 9 ≈ 1.11.
    // A remainder is left out only where a window remains without it.
    assert_eq!(
        steady_time_per_iteration(&ending_at(&[4.0, 4.0, 6.0])),
        Some(2.0)
    );
}
