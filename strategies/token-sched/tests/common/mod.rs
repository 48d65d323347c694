//! What this crate's end-to-end tests share: picking a strategy with options, running a config,
//! its start-up or run error, and a summary figure.

use concord_engine::config::RunConfig;
use concord_engine::run::RunResult;
use concord_test_support::{registry, run_with};

pub use concord_test_support::figure;
pub use concord_test_support::with_strategy as with;

/// Runs `cfg` with this crate's strategies registered.
pub fn run(cfg: &RunConfig) -> RunResult {
    run_with(&registry(&[concord_token_sched::register]), cfg)
}

/// The error `cfg` fails with, at composition or at the run's start.
pub fn compose_err(cfg: &RunConfig) -> String {
    concord_test_support::compose_err(&registry(&[concord_token_sched::register]), cfg)
}
