//! What this crate's end-to-end tests share: picking a strategy with options, running a config,
//! its start-up or run error, a summary figure, and a small staged model.
#![allow(dead_code)]

use concord_engine::config::RunConfig;
use concord_engine::run::RunResult;
use concord_test_support::{registry, run_with, small};

pub use concord_test_support::figure;
pub use concord_test_support::with_strategy as with;

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
    concord_test_support::compose_err(&reg(), cfg)
}

/// `small` with an MLP of three layers (32 → 32 → 16 → classes).
pub fn mlp(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    let mut cfg = small(workers, batch, iterations);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16]").expect("model");
    cfg
}
