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

/// The models' convolution on CUDA (cuDNN's forward, backward-data and backward-filter passes)
/// against candle's on the CPU: output and both gradients, over kernel sizes, paddings, strides
/// and odd shapes.
#[test]
fn cudnn_convolution_passes_match_the_cpu() {
    use candle_core::{Device, Tensor, Var};
    use concord::engine::model::conv::conv2d;
    let gpu = Device::new_cuda(0).expect("a CUDA device");
    // (batch, channels in, height, width, channels out, kernel, padding, stride); the last
    // strided case leaves its rows and columns different remainders.
    let cases = [
        (2, 3, 8, 8, 4, 3, 1, 1),
        (1, 5, 7, 6, 3, 3, 0, 1),
        (3, 2, 9, 9, 6, 5, 2, 1),
        (2, 4, 6, 5, 2, 1, 0, 1),
        (2, 3, 9, 9, 5, 3, 1, 2),
        (1, 6, 13, 11, 8, 7, 3, 2),
        (2, 3, 8, 7, 4, 3, 1, 2),
    ];
    for (n, c, h, w_, k, r, padding, stride) in cases {
        let label = format!(
            "x [{n}, {c}, {h}, {w_}], w [{k}, {c}, {r}, {r}], padding {padding}, stride {stride}"
        );
        let x = Tensor::randn(0f32, 1.0, (n, c, h, w_), &Device::Cpu).expect("x");
        let w = Tensor::randn(0f32, 1.0, (k, c, r, r), &Device::Cpu).expect("w");
        // Output and gradients of sum(y²) on `dev`, back on the host.
        let passes = |dev: &Device| -> Vec<Vec<f32>> {
            let x = Var::from_tensor(&x.to_device(dev).expect("x")).expect("x");
            let w = Var::from_tensor(&w.to_device(dev).expect("w")).expect("w");
            let y = conv2d(x.as_tensor(), w.as_tensor(), padding, stride).expect("conv2d");
            let g = y
                .sqr()
                .and_then(|s| s.sum_all())
                .and_then(|s| s.backward())
                .expect("backward");
            [
                &y,
                g.get(x.as_tensor()).expect("dx"),
                g.get(w.as_tensor()).expect("dw"),
            ]
            .iter()
            .map(|t| {
                t.flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .expect("values")
            })
            .collect()
        };
        let (cpu, cuda) = (passes(&Device::Cpu), passes(&gpu));
        for (what, (a, b)) in ["output", "input gradient", "kernel gradient"]
            .iter()
            .zip(cpu.iter().zip(&cuda))
        {
            assert_eq!(a.len(), b.len(), "{label}: {what} size");
            let scale = a.iter().fold(1f32, |m, v| m.max(v.abs()));
            let diff = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(
                diff <= 1e-5 * scale,
                "{label}: {what} differs by {diff} (scale {scale})"
            );
        }
    }
    println!(
        "cuDNN convolution passes: {} shapes match the CPU",
        cases.len()
    );
}

/// Parameters up and values down through the page-locked staging buffers: exact, in place (a
/// tensor computed before the load keeps its values), and timed beside candle's own pageable
/// copies of the same tensors (printed, not asserted).
#[test]
fn staged_parameter_uploads_and_downloads_are_exact() {
    use candle_core::{DType, Device, Tensor, Var};
    use concord::engine::model::{host_values, load_vars};
    use std::time::Instant;
    let gpu = Device::new_cuda(0).expect("a CUDA device");
    let shapes: [&[usize]; 4] = [&[64, 3, 3, 3], &[512, 4096], &[10], &[256, 256, 3, 3]];
    let vars: Vec<Var> = shapes
        .iter()
        .map(|s| Var::zeros(*s, DType::F32, &gpu).expect("var"))
        .collect();
    let refs: Vec<&Var> = vars.iter().collect();
    let values: Vec<Vec<f32>> = vars
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (0..v.elem_count())
                .map(|k| (k as f32 * 0.37 + i as f32).sin())
                .collect()
        })
        .collect();
    let before = vars[2].as_tensor().affine(2.0, 1.0).expect("affine");
    load_vars(&refs, &values).expect("staged upload");
    for (v, want) in vars.iter().zip(&values) {
        let got = v.as_tensor().flatten_all().and_then(|t| t.to_vec1::<f32>());
        assert_eq!(&got.expect("read back"), want);
    }
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    assert_eq!(host_values(&tensors).expect("staged download"), values);
    assert_eq!(before.to_vec1::<f32>().expect("before"), vec![1.0; 10]);
    // ms per call, mean of 10 after one warm-up.
    let time = |f: &dyn Fn()| {
        f();
        let t = Instant::now();
        for _ in 0..10 {
            f();
        }
        t.elapsed().as_secs_f64() * 100.0
    };
    let staged_up = time(&|| load_vars(&refs, &values).expect("upload"));
    let staged_down = time(&|| {
        host_values(&tensors).expect("download");
    });
    let pageable_up = time(&|| {
        for (v, x) in vars.iter().zip(&values) {
            let t = Tensor::from_slice(x, v.shape(), &gpu).expect("upload");
            v.set(&t).expect("set");
        }
    });
    let pageable_down = time(&|| {
        for t in &tensors {
            t.flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .expect("download");
        }
    });
    let mb = values.iter().map(Vec::len).sum::<usize>() as f64 * 4.0 / 1e6;
    println!(
        "{mb:.1} MB of parameters: up {staged_up:.2} ms staged, {pageable_up:.2} ms pageable; \
         down {staged_down:.2} ms staged, {pageable_down:.2} ms pageable"
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
