//! Helpers shared by the integration tests: the test-support crate's, with the project's
//! registry.
#![allow(dead_code)]

use concord::engine::config::RunConfig;
use concord::engine::run::RunResult;
#[allow(unused_imports)]
pub use concord_test_support::{max_diff, small, straggler, with_runtime};

/// Adds a slow device (`slow`, 1 GFLOP/s) so compute dominates communication, and uses it.
pub fn on_slow_devices(cfg: RunConfig) -> RunConfig {
    concord_test_support::on_device(cfg, "slow", concord_test_support::slow_device(1.0))
}

/// Runs with the project's registry.
pub fn run(cfg: &RunConfig) -> RunResult {
    concord_test_support::run_with(&concord::registry(), cfg)
}

/// Runs the `concord` binary with `args` in `dir` (with `CONCORD_WORKERS` unset, so the
/// environment of the test run does not leak into the config).
pub fn concord(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(args)
        .current_dir(dir)
        .env_remove("CONCORD_WORKERS")
        .output()
        .expect("runs the binary")
}
