//! What this crate's end-to-end tests share: picking a strategy with options, running a config,
//! its start-up or run error, and a summary figure.
#![allow(dead_code)]

use concord_engine::config::RunConfig;
use concord_engine::run::RunResult;
use concord_test_support::{registry, run_with, small};

/// `cfg` running `strategy` alone with `options` (its `[strategy.<name>]` table as TOML).
pub fn with(mut cfg: RunConfig, strategy: &str, options: &str) -> RunConfig {
    cfg.strategies = vec![strategy.into()];
    cfg.strategy
        .insert(strategy.into(), toml::from_str(options).expect("options"));
    cfg
}

/// The registry of the default strategies and this crate's.
pub fn reg() -> concord_engine::registry::Registry {
    registry(&[concord_pipeline::register])
}

/// Runs `cfg` with this crate's strategies registered.
pub fn run(cfg: &RunConfig) -> RunResult {
    run_with(&reg(), cfg)
}

/// The error `cfg` fails with, at composition or at the run's start.
pub fn compose_err(cfg: &RunConfig) -> String {
    match reg().compose(cfg) {
        Ok(asm) => match concord_engine::run(cfg, &asm, Default::default()) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// The summary figure `name`.
pub fn figure(r: &RunResult, name: &str) -> f64 {
    *r.summary
        .figures
        .get(name)
        .unwrap_or_else(|| panic!("figure {name} missing: {:?}", r.summary.figures))
}

/// `small` with an MLP of three layers (32 → 32 → 16 → classes).
pub fn mlp(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    let mut cfg = small(workers, batch, iterations);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16]").expect("model");
    cfg
}
