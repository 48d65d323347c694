//! # concord-test-support
//!
//! What the tests of strategy crates share, so that a strategy crate tests itself against the
//! engine and the default-slot strategies (BSP/SSP/ASP consistency, resident memory) without
//! depending on the facade that links every other strategy. Tests that compare strategies with
//! each other live in the root package's `tests/`.

#![warn(missing_docs)]

use concord_engine::cluster::DeviceProfile;
use concord_engine::config::RunConfig;
use concord_engine::context::RuntimeKind;
use concord_engine::contract::Slot;
use concord_engine::error::Result;
use concord_engine::registry::Registry;
use concord_engine::run::{RunOptions, RunResult};
use concord_engine::stragglers::StragglerConfig;

/// Adds a strategy crate's strategies to a registry (every strategy crate's `register`).
pub type Register = fn(&mut Registry) -> Result<()>;

/// A registry with the default-slot strategies (`bsp`, `ssp`, `asp`, `resident`, with `bsp` and
/// `resident` filling unclaimed slots, as in the facade) and the strategies `crates` register.
pub fn registry(crates: &[Register]) -> Registry {
    let mut r = Registry::new();
    let mut all: Vec<Register> = vec![concord_bsp_ssp::register, concord_memory::register];
    all.extend_from_slice(crates);
    for register in all {
        if let Err(e) = register(&mut r) {
            panic!("test registry is inconsistent: {e}");
        }
    }
    r.set_default(Slot::Consistency, "bsp")
        .set_default(Slot::Memory, "resident");
    r
}

/// Composes `cfg` from `registry` and runs it, keeping the servers' reads for the tests that
/// check them; panics with the error, naming the step.
pub fn run_with(registry: &Registry, cfg: &RunConfig) -> RunResult {
    let asm = registry.compose(cfg).expect("composes");
    concord_engine::run(cfg, &asm, recording_reads(RunOptions::default())).expect("runs")
}

/// `options` with the servers' reads kept ([`RunOptions::record_reads`]): what a test that checks
/// a consistency rule, or compares two runs' reads, runs with.
pub fn recording_reads(options: RunOptions) -> RunOptions {
    RunOptions {
        record_reads: true,
        ..options
    }
}

/// A small, fast config: default model and data, `workers` workers, `batch` each, two servers,
/// evaluated at the end only.
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

/// A compute-bound simulated core: 1 GFLOP/s sustained, no saturation offset, 10 Gbps NIC, so
/// compute dominates communication.
pub fn slow_device(memory_gib: f64) -> DeviceProfile {
    DeviceProfile::new(0.002, memory_gib, 10.0, 50.0)
}

/// `cfg` on devices named `name` of [`slow_device`] kind.
pub fn on_device(mut cfg: RunConfig, name: &str, device: DeviceProfile) -> RunConfig {
    cfg.cluster.devices.insert(name.into(), device);
    cfg.cluster.default_device = name.into();
    cfg
}

/// The same config on the given runtime.
pub fn with_runtime(mut cfg: RunConfig, runtime: RuntimeKind) -> RunConfig {
    cfg.runtime = runtime;
    cfg
}

/// Parses a straggler pattern from TOML.
pub fn straggler(toml_text: &str) -> StragglerConfig {
    toml::from_str(toml_text).expect("valid straggler TOML")
}

/// Largest absolute difference between two named parameter sets (same names, same order).
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

/// The final parameters' bits, for bit-for-bit comparisons.
pub fn param_bits(r: &RunResult) -> Vec<Vec<u32>> {
    r.params
        .as_ref()
        .expect("a real model")
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// `cfg` running `strategy` alone with `options` (its `[strategy.<name>]` table as TOML).
pub fn with_strategy(mut cfg: RunConfig, strategy: &str, options: &str) -> RunConfig {
    cfg.strategies = vec![strategy.into()];
    cfg.strategy
        .insert(strategy.into(), toml::from_str(options).expect("options"));
    cfg
}

/// The error `cfg` fails with under `registry`, at composition or at the run's start (panics if
/// it runs).
pub fn compose_err(registry: &Registry, cfg: &RunConfig) -> String {
    match registry.compose(cfg) {
        Ok(asm) => match concord_engine::run(cfg, &asm, RunOptions::default()) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// The summary figure `name` of a run (panics naming the figures the run has).
pub fn figure(r: &RunResult, name: &str) -> f64 {
    *r.summary
        .figures
        .get(name)
        .unwrap_or_else(|| panic!("figure {name} missing: {:?}", r.summary.figures))
}
