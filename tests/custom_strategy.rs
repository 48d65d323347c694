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
