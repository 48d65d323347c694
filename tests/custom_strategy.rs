//! A strategy written outside the project registers and runs (examples/custom-strategy).

mod common;

use common::*;
use concord_custom_strategy::{ramp_batch, RampOptions};

#[test]
fn batch_ramp_directs_every_clock() {
    let mut registry = concord::registry();
    concord_custom_strategy::register(&mut registry).unwrap();
    let mut cfg = small(4, 16, 12);
    cfg.strategies = vec!["ssp".into(), "batch-ramp".into()];
    cfg.strategy.insert(
        "batch-ramp".into(),
        toml::from_str("start_fraction = 0.25\nramp_iterations = 8").unwrap(),
    );
    let asm = registry.compose(&cfg).unwrap();
    assert_eq!(
        asm.owners()
            .get(&concord::engine::contract::Slot::Coordinator)
            .unwrap(),
        "batch-ramp"
    );
    let r = concord::engine::run(&cfg, &asm, Default::default()).unwrap();
    let o = RampOptions {
        start_fraction: 0.25,
        ramp_iterations: 8,
    };
    for (c, row) in r.rows.iter().enumerate() {
        assert_eq!(row.samples, 4 * ramp_batch(&o, 16, c as u64), "clock {c}");
    }
    assert_eq!(r.rows[0].samples, 16);
    assert_eq!(r.rows[11].samples, 64);
    assert_eq!(r.coordinator.reports.len(), 4 * 12);
}

#[test]
fn batch_ramp_rejects_bad_options_and_conflicts() {
    let mut registry = concord::registry();
    concord_custom_strategy::register(&mut registry).unwrap();
    let mut cfg = small(2, 8, 2);
    cfg.strategies = vec!["batch-ramp".into()];
    cfg.strategy.insert(
        "batch-ramp".into(),
        toml::from_str("start_fraction = 0.0").unwrap(),
    );
    let e = registry.compose(&cfg).err().unwrap().to_string();
    assert!(e.contains("strategy.batch-ramp.start_fraction"), "{e}");
    assert!(registry
        .register(std::sync::Arc::new(concord_custom_strategy::BatchRamp))
        .is_err());
}

/// Adding a strategy to a build is one `register` call: a config file that names it then loads,
/// composes and runs like any built-in one; without the call the same config is rejected, naming it.
#[test]
fn adding_a_strategy_is_one_registry_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ramp.toml");
    std::fs::write(
        &path,
        r#"
        workers = 2
        servers = 1
        batch = 8
        iterations = 5
        eval_every = 5
        strategies = ["bsp", "batch-ramp"]
        [strategy.batch-ramp]
        start_fraction = 0.5
        ramp_iterations = 4
        [data]
        kind = "teacher"
        train = 512
        test = 64
        "#,
    )
    .unwrap();
    let cfg = concord::config::load(Some(&path), &[]).unwrap();

    let without = concord::registry().compose(&cfg).err().unwrap().to_string();
    assert!(
        without.contains("batch-ramp") && without.contains("unknown strategy"),
        "{without}"
    );

    let mut registry = concord::registry();
    registry
        .register(std::sync::Arc::new(concord_custom_strategy::BatchRamp))
        .unwrap();

    let asm = registry.compose(&cfg).unwrap();
    assert_eq!(asm.strategies(), ["bsp", "batch-ramp", "resident"]);
    assert_eq!(
        asm.owners()
            .get(&concord::engine::contract::Slot::Coordinator)
            .map(String::as_str),
        Some("batch-ramp")
    );
    let r = concord::engine::run(&cfg, &asm, Default::default()).unwrap();
    let samples: Vec<u64> = r.rows.iter().map(|row| row.samples).collect();
    // Per worker 4, 5, 6, 7, 8 samples (0.5 → 1 of the batch over 4 clocks), on 2 workers.
    assert_eq!(samples, [8, 10, 12, 14, 16]);
    assert_eq!(r.summary.strategies, ["bsp", "batch-ramp", "resident"]);
}

/// The example is written against the prelude alone: no other engine path in its source.
#[test]
fn the_example_imports_only_the_prelude() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/custom-strategy/src/lib.rs"
    );
    let source = std::fs::read_to_string(path).unwrap();
    let engine_paths: Vec<&str> = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| l.contains("concord_engine"))
        .collect();
    assert_eq!(engine_paths, ["use concord_engine::prelude::*;"]);
}
