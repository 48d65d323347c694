//! GPU configuration at the door: a config that asks for a GPU the build or the machine cannot
//! give is refused before any work, naming the key; nothing is written.

mod common;

use common::{nothing_written, rejected};

/// A device `gpu` computing on CUDA, used by every worker.
const ON_GPU: [&str; 4] = [
    "--set",
    "cluster.devices.gpu={peak_tflops=67.0, memory_gib=80.0, nic_gbps=400.0, latency_us=5.0, backend=\"cuda\"}",
    "--set",
    "cluster.default_device=\"gpu\"",
];

#[cfg(not(feature = "cuda"))]
#[test]
fn a_cuda_device_in_a_build_without_the_feature_is_refused() {
    let (e, dir) = rejected(&ON_GPU, &[]);
    assert!(
        e.contains("cluster.devices.gpu.backend") && e.contains("`cuda` feature"),
        "{e}"
    );
    nothing_written(dir.path(), &[]);
}

#[cfg(not(feature = "nccl"))]
#[test]
fn nccl_in_a_build_without_the_feature_is_refused() {
    let (e, dir) = rejected(&["--set", "collective=\"nccl\""], &[]);
    assert!(
        e.contains("`collective`") && e.contains("`nccl` feature"),
        "{e}"
    );
    nothing_written(dir.path(), &[]);
}

#[test]
fn an_unknown_backend_names_the_choices() {
    let (e, _) = rejected(
        &[
            "--set",
            "cluster.devices.gpu={peak_tflops=1.0, memory_gib=1.0, nic_gbps=1.0, latency_us=1.0, backend=\"rocm\"}",
        ],
        &[],
    );
    assert!(
        e.contains("rocm") && e.contains("cpu") && e.contains("cuda"),
        "{e}"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn a_cuda_build_without_a_usable_gpu_names_the_cause() {
    // Only meaningful where no GPU can be used (CI's compile check runs no tests).
    if concord::engine::gpu::visible_gpus().is_ok_and(|n| n > 0) {
        return;
    }
    let (e, dir) = rejected(&ON_GPU, &[]);
    assert!(
        e.contains("cluster.devices.gpu.backend") && e.contains("no GPU"),
        "{e}"
    );
    nothing_written(dir.path(), &[]);
}
