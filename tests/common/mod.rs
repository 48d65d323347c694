//! Helpers shared by the integration tests.
#![allow(dead_code)]

use concord::engine::cluster::DeviceProfile;
use concord::engine::config::RunConfig;
use concord::engine::context::RuntimeKind;
use concord::engine::run::{RunOptions, RunResult};

/// A small, fast config: default model and data, `workers` workers, `batch` each.
pub fn small(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    RunConfig {
        workers,
        servers: 2,
        batch,
        iterations,
        eval_every: iterations,
        ..RunConfig::default()
    }
}

/// Adds a slow device (`slow`, 1 GFLOP/s) so compute dominates communication, and uses it.
pub fn on_slow_devices(mut cfg: RunConfig) -> RunConfig {
    cfg.cluster.devices.insert(
        "slow".into(),
        DeviceProfile {
            peak_tflops: 0.002,
            efficiency: 0.5,
            half_saturation_batch: 0.0,
            memory_gib: 1.0,
            nic_gbps: 10.0,
            latency_us: 50.0,
        },
    );
    cfg.cluster.default_device = "slow".into();
    cfg
}

/// Runs with the project's registry.
pub fn run(cfg: &RunConfig) -> RunResult {
    let asm = concord::registry().compose(cfg).expect("composes");
    concord::engine::run(cfg, &asm, RunOptions::default()).expect("runs")
}

/// Same config on the given runtime.
pub fn with_runtime(mut cfg: RunConfig, runtime: RuntimeKind) -> RunConfig {
    cfg.runtime = runtime;
    cfg
}

/// Parses a straggler pattern from TOML.
pub fn straggler(toml_text: &str) -> concord::engine::stragglers::StragglerConfig {
    toml::from_str(toml_text).expect("valid straggler TOML")
}

/// Largest absolute difference between two parameter sets.
pub fn max_diff(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|((na, va), (nb, vb))| {
            assert_eq!(na, nb);
            va.iter().zip(vb).map(|(x, y)| (x - y).abs())
        })
        .fold(0.0, f32::max)
}
