//! GPU configuration at the door: a config that asks for a GPU the build or the machine cannot
//! give is refused before any work, naming the key; nothing is written.

use std::path::Path;
use std::process::{Command, Output};

fn concord(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(args)
        .current_dir(dir)
        .env_remove("CONCORD_WORKERS")
        .output()
        .expect("runs the binary")
}

/// `train` with a device `gpu` (`backend = "cuda"`) for every worker and `extra` settings,
/// expected to fail: its stderr, and whether the folder is still empty.
fn refused(extra: &[&str]) -> (String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "train",
        "--quiet",
        "--set",
        "iterations=2",
        "--set",
        "workers=2",
        "--set",
        "cluster.devices.gpu={peak_tflops=67.0, memory_gib=80.0, nic_gbps=400.0, latency_us=5.0, backend=\"cuda\"}",
        "--set",
        "cluster.default_device=\"gpu\"",
    ];
    args.extend_from_slice(extra);
    let out = concord(&args, dir.path());
    assert!(!out.status.success(), "{extra:?} should fail");
    let empty = std::fs::read_dir(dir.path()).unwrap().next().is_none();
    (String::from_utf8_lossy(&out.stderr).into_owned(), empty)
}

#[cfg(not(feature = "cuda"))]
#[test]
fn a_cuda_device_in_a_build_without_the_feature_is_refused() {
    let (e, empty) = refused(&[]);
    assert!(
        e.contains("cluster.devices.gpu.backend") && e.contains("`cuda` feature"),
        "{e}"
    );
    assert!(empty, "the refused run wrote files");
}

#[cfg(not(feature = "nccl"))]
#[test]
fn nccl_in_a_build_without_the_feature_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = concord(
        &[
            "train",
            "--quiet",
            "--set",
            "iterations=2",
            "--set",
            "collective=\"nccl\"",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("`collective`") && e.contains("`nccl` feature"),
        "{e}"
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn an_unknown_backend_names_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    let out = concord(
        &[
            "train",
            "--quiet",
            "--set",
            "cluster.devices.gpu={peak_tflops=1.0, memory_gib=1.0, nic_gbps=1.0, latency_us=1.0, backend=\"rocm\"}",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
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
    let (e, empty) = refused(&[]);
    assert!(
        e.contains("cluster.devices.gpu.backend") && e.contains("no GPU"),
        "{e}"
    );
    assert!(empty);
}
