//! GPU checks: candle CUDA tensors and NCCL against the CPU reference.
//!
//! Built only with the `cuda` feature (CI compiles them with `cargo check --features cuda,nccl`);
//! they need a CUDA GPU and fail without one. `cargo xtask gpu-bundle` packs them with the release
//! binary for a GPU machine, where `run-gpu-checks.sh` runs them.
#![cfg(feature = "cuda")]

mod common;

use common::*;
use concord::engine::cluster::{Backend, DeviceProfile, MachineGroup};
use concord::engine::config::{CollectiveBackend, RunConfig, RuntimeKind};
use concord::engine::error::EngineError;

/// `cfg` with every machine's device computing on CUDA (same cost figures as `cpu`).
fn on_cuda(mut cfg: RunConfig) -> RunConfig {
    let cuda = DeviceProfile {
        backend: Backend::Cuda,
        ..DeviceProfile::builtins()["cpu"].clone()
    };
    cfg.cluster.devices.insert("cuda".into(), cuda);
    cfg.cluster.default_device = "cuda".into();
    cfg
}

/// The largest parameter difference between two runs, relative to the largest parameter.
fn relative_param_diff(
    a: &concord::engine::run::RunResult,
    b: &concord::engine::run::RunResult,
) -> f32 {
    let (pa, pb) = (
        a.params.as_ref().expect("params"),
        b.params.as_ref().expect("params"),
    );
    let scale = pa
        .iter()
        .flat_map(|(_, v)| v.iter())
        .fold(0f32, |m, x| m.max(x.abs()));
    max_diff(pa, pb) / scale
}

#[test]
fn default_config_on_cuda_reaches_the_cpu_runs_accuracy() {
    let cpu = RunConfig::default();
    let gpu = on_cuda(RunConfig::default());
    let (a, b) = (run(&cpu), run(&gpu));
    let (acc_cpu, acc_gpu) = (
        a.summary.final_test_accuracy.expect("accuracy"),
        b.summary.final_test_accuracy.expect("accuracy"),
    );
    println!("default config: accuracy cpu {acc_cpu:.4}, cuda {acc_gpu:.4}");
    assert!(
        (acc_cpu - acc_gpu).abs() <= 0.01,
        "cpu {acc_cpu} vs cuda {acc_gpu}"
    );
    // The virtual time comes from the cost model, not from where the math ran.
    assert_eq!(a.summary.run_time_s, b.summary.run_time_s);
}

/// Runs `cfg` on the CPU and on CUDA and checks their final parameters agree to `1e-4` of the
/// largest parameter; prints the difference under `label`.
fn assert_gpu_matches_cpu(label: &str, cfg: RunConfig) {
    let (a, b) = (run(&cfg), run(&on_cuda(cfg)));
    let diff = relative_param_diff(&a, &b);
    println!("{label}: max |cpu - cuda| / max |param| = {diff:.2e}");
    assert!(diff < 1e-4, "{label}: relative difference {diff}");
}

#[test]
fn bsp_on_gpu_matches_cpu_parameters() {
    assert_gpu_matches_cpu("BSP 4 workers x 20 clocks", small(4, 32, 20));
}

#[test]
fn cnn_on_gpu_matches_cpu_parameters() {
    let mut cfg = small(2, 16, 5);
    cfg.model = toml::from_str("kind = \"cnn\"\nimage = [3, 8, 8]").expect("cnn model");
    cfg.data = toml::from_str("kind = \"blobs\"\ndim = 192\nclasses = 4\ntrain = 512\ntest = 128")
        .expect("image-shaped data");
    assert_gpu_matches_cpu("CNN (cuDNN convolutions) 2 workers x 5 clocks", cfg);
}

/// Allreduce workers keep their parameters and optimizer state on the GPU for the whole run
/// (updates run there); Adam exercises every operation of the device update.
#[test]
fn allreduce_with_parameters_on_the_gpu_matches_cpu_parameters() {
    let mut cfg = small(2, 16, 20);
    cfg.strategies = vec!["allreduce".into()];
    cfg.optimizer =
        toml::from_str("kind = \"adam\"\nlr = 0.01\nweight_decay = 0.01").expect("adam");
    assert_gpu_matches_cpu(
        "allreduce 2 workers x 20 clocks, Adam, parameters on the GPU",
        cfg,
    );
}

#[test]
fn a_slot_beyond_the_visible_gpus_is_refused_before_any_work() {
    let visible = concord::engine::gpu::visible_gpus().expect("a visible GPU") as u32;
    let mut cfg = on_cuda(small(visible + 1, 8, 2));
    cfg.cluster.machines = vec![MachineGroup {
        device: "cuda".into(),
        count: 1,
        slots: visible + 1,
        labels: Default::default(),
    }];
    let asm = concord::registry().compose(&cfg).expect("composes");
    let err = concord::engine::run(&cfg, &asm, Default::default()).expect_err("refused");
    let msg = err.to_string();
    assert!(matches!(err, EngineError::Config { .. }), "{msg}");
    assert!(
        msg.contains(&format!("GPU {visible}")) && msg.contains("cluster.devices.cuda.backend"),
        "{msg}"
    );
}

#[cfg(feature = "nccl")]
#[test]
fn allreduce_over_nccl_matches_the_ring() {
    let mut cfg = on_cuda(small(1, 32, 10));
    cfg.strategies = vec!["allreduce".into()];
    cfg.runtime = RuntimeKind::Wall;
    let ring = run(&cfg);
    cfg.collective = CollectiveBackend::Nccl;
    // Under NCCL the gradients never leave the GPU: fused, summed, averaged and applied there.
    let nccl = run(&cfg);
    // One rank: NCCL's sum is the identity, so the runs must agree bit for bit.
    assert_eq!(
        max_diff(ring.params.as_ref().unwrap(), nccl.params.as_ref().unwrap()),
        0.0
    );
}

#[cfg(feature = "nccl")]
#[test]
fn nccl_allreduce_of_256_mb_on_one_rank() {
    use concord::engine::gpu::nccl_self_check;
    let elems = 64 << 20; // 256 MiB of f32
    let report = nccl_self_check(0, elems, 5).expect("NCCL allreduce");
    println!(
        "NCCL allreduce, 1 rank, {} MiB out of place: {:.3} ms per call (mean of {}, {:.0} GB/s \
         read + written), sum correct: {}",
        (elems * 4) >> 20,
        report.mean_ms,
        report.calls,
        (elems * 8) as f64 / report.mean_ms / 1e6,
        report.correct
    );
    assert!(report.correct);
}
