//! BSP over N workers with batch b is the same SGD as one worker with batch N·b.

mod common;

use common::*;
use concord::engine::context::RuntimeKind;

fn check(runtime: RuntimeKind) {
    let four = run(&with_runtime(small(4, 8, 20), runtime));
    let one = run(&with_runtime(small(1, 32, 20), runtime));
    let (a, b) = (
        four.params.expect("real model"),
        one.params.expect("real model"),
    );
    let diff = max_diff(&a, &b);
    assert!(
        diff <= 1e-5,
        "{runtime:?}: 4 x 8 and 1 x 32 differ by {diff}"
    );
    // And training did move the parameters (the comparison is not vacuous).
    let init = run(&with_runtime(small(1, 32, 1), runtime)).params.unwrap();
    assert!(max_diff(&a, &init) > 1e-3);
    assert_eq!(four.rows.len(), 20);
    assert!(four.rows.iter().all(|r| r.samples == 32));
}

#[test]
fn four_workers_equal_one_worker_with_four_times_the_batch_in_sim() {
    check(RuntimeKind::Sim);
}

#[test]
fn four_workers_equal_one_worker_with_four_times_the_batch_in_wall() {
    check(RuntimeKind::Wall);
}

#[test]
fn sim_and_wall_train_the_same_parameters() {
    let sim = run(&with_runtime(small(3, 8, 10), RuntimeKind::Sim))
        .params
        .unwrap();
    let wall = run(&with_runtime(small(3, 8, 10), RuntimeKind::Wall))
        .params
        .unwrap();
    assert_eq!(
        max_diff(&sim, &wall),
        0.0,
        "BSP aggregates in a canonical order in both runtimes"
    );
}
