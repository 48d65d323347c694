//! Building with CUDA on a machine without a GPU.
//!
//! - `cuda-env`: installs the pinned CUDA 13.0 compile-time toolkit (nvcc and headers, from
//!   PyPI wheels) into `.cuda/venv` and prints the environment a `--features cuda` build needs.
//! - `gpu-bundle`: a self-contained bundle for a GPU machine: the release binary and the GPU
//!   checks linked against generated stub libraries (the real CUDA libraries are found on the
//!   target at start-up), with scripts that find those libraries and run the checks.
//!
//! The toolkit is pinned to 13.0 so the PTX it emits loads on CUDA 13.0 drivers and newer. Only
//! compiling needs it: `cargo check --features cuda,nccl` links nothing; linking a binary needs the
//! stubs, which `gpu-bundle` generates from the undefined symbols of the compiled crates.

use anyhow::{bail, ensure, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The compile-time wheels, pinned (they share one tree, `site-packages/nvidia/cu13`).
const WHEELS: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
];

/// Arguments of `cargo xtask cuda-env`.
#[derive(Debug, clap::Args)]
pub struct EnvArgs {
    /// GPU compute capability the kernels are built for (90: H100/H200; 80: A100).
    #[arg(long, default_value_t = 90)]
    pub compute_cap: u32,
}

/// Arguments of `cargo xtask gpu-bundle`.
#[derive(Debug, clap::Args)]
pub struct BundleArgs {
    /// GPU compute capability the kernels are built for (90: H100/H200; 80: A100).
    #[arg(long, default_value_t = 90)]
    pub compute_cap: u32,
    /// Where the bundle is written (default: target/gpu-bundle).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The toolkit's paths and the environment a cuda build runs under.
pub struct CudaEnv {
    vars: Vec<(&'static str, String)>,
}

impl CudaEnv {
    /// Installs the toolkit under `root/.cuda` when missing and returns its environment.
    pub fn prepare(root: &Path, compute_cap: u32) -> Result<CudaEnv> {
        let base = root.join(".cuda");
        let venv = base.join("venv");
        let marker = venv.join("concord-wheels.txt");
        let pins = WHEELS.join("\n");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(pins.as_str()) {
            eprintln!(
                "cuda-env: installing the CUDA 13.0 compile-time wheels into {}",
                venv.display()
            );
            run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
            run(Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(WHEELS))?;
            std::fs::write(&marker, &pins)?;
        }
        let cu13 = site_packages(&venv)?.join("nvidia").join("cu13");
        ensure!(
            cu13.join("bin/nvcc").is_file(),
            "nvcc is missing from {}: remove {} and run again",
            cu13.display(),
            venv.display()
        );
        // cudarc's build script adds `-L $CUDA_ROOT/lib` only if the folder exists when it runs,
        // so it must exist before the first build, even though the stubs come later.
        std::fs::create_dir_all(base.join("stubs").join("lib"))?;
        let path = std::env::var("PATH").unwrap_or_default();
        Ok(CudaEnv {
            vars: vec![
                ("PATH", format!("{}:{path}", cu13.join("bin").display())),
                ("CUDA_HOME", cu13.display().to_string()),
                ("CUDA_COMPUTE_CAP", compute_cap.to_string()),
                // cudarc looks for link-time libraries under `$CUDA_ROOT/lib`: the stubs.
                ("CUDA_ROOT", base.join("stubs").display().to_string()),
            ],
        })
    }

    /// `cmd` with this environment.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// The environment as shell `export` lines.
    pub fn exports(&self) -> String {
        self.vars
            .iter()
            .map(|(k, v)| format!("export {k}=\"{v}\"\n"))
            .collect()
    }
}

/// The venv's `site-packages` folder.
fn site_packages(venv: &Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    for entry in std::fs::read_dir(&lib).with_context(|| format!("read {}", lib.display()))? {
        let p = entry?.path().join("site-packages");
        if p.is_dir() {
            return Ok(p);
        }
    }
    bail!("no site-packages under {}", lib.display())
}

/// Runs `cmd`, failing with its command line when it fails.
fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("start {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok(())
}

/// `cargo xtask cuda-env`: prepares the toolkit and prints its environment (for `eval`).
pub fn env(args: &EnvArgs) -> Result<()> {
    let root = crate::bench::suite::load::workspace_root();
    let env = CudaEnv::prepare(&root, args.compute_cap)?;
    print!("{}", env.exports());
    eprintln!("cuda-env: ready; `eval \"$(cargo xtask cuda-env)\"`, then `cargo check --features cuda,nccl`");
    Ok(())
}

/// What `nvcc` adds to every command line in [`check`]: no device-code optimisation.
///
/// A check links nothing and runs no kernel, yet candle's build script still compiles all its
/// CUDA kernels, most of them quantized-model (GGUF) kernels concord never calls; optimising
/// them is most of that time (45 s a file at `-O3` on a 2-core machine, 17 s without). The
/// kernels are still parsed and compiled, so a toolkit that cannot build them still fails the
/// check; the bundle, which runs them, builds them fully optimised in its own target folder.
const CHECK_NVCC_FLAGS: &str = "-Xcicc -O0 -Xptxas -O0";

/// `cargo check --workspace --all-targets --features cuda,nccl` in its own target folder: what
/// CI runs so the GPU code keeps compiling on machines without a GPU.
pub fn check(root: &Path) -> Result<()> {
    let env = CudaEnv::prepare(root, 90)?;
    let target = root.join("target").join("cuda-check");
    eprintln!(
        "+ cargo check --workspace --all-targets --features cuda,nccl (CUDA 13.0 toolkit, no GPU)"
    );
    run(env
        .apply(&mut cargo())
        .env("NVCC_APPEND_FLAGS", CHECK_NVCC_FLAGS)
        .args(["check", "--workspace", "--all-targets", "--release"])
        .args(["--features", "cuda,nccl"])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(root))
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The shared libraries a cuda build links, by soname, and which undefined symbols each one
/// defines (by prefix, most specific first).
const LIBRARIES: &[(&str, &str, &[&str])] = &[
    ("nccl", "libnccl.so.2", &["nccl", "pnccl"]),
    ("cudnn", "libcudnn.so.9", &["cudnn"]),
    ("cublasLt", "libcublasLt.so.13", &["cublasLt"]),
    ("cublas", "libcublas.so.13", &["cublas"]),
    ("curand", "libcurand.so.10", &["curand"]),
    ("nvrtc", "libnvrtc.so.13", &["nvrtc"]),
    ("cudart", "libcudart.so.13", &["cuda", "__cuda"]),
    ("cuda", "libcuda.so.1", &["cu"]),
];

/// The library an undefined symbol belongs to, if it is a CUDA one.
fn library_of(symbol: &str) -> Option<usize> {
    LIBRARIES.iter().position(|(_, _, prefixes)| {
        prefixes.iter().any(|p| {
            symbol.starts_with(p)
                // Driver API symbols are `cu` + an upper-case letter (cuInit, cuMemAlloc_v2).
                && (*p != "cu" || symbol[2..].starts_with(|c: char| c.is_ascii_uppercase()))
        })
    })
}

/// Writes stub libraries defining every CUDA symbol the compiled crates under `deps` use, each
/// returning 34 (`CUDA_ERROR_STUB_LIBRARY`), into `dir` with the sonames the real ones have.
fn write_stubs(target: &Path, dir: &Path) -> Result<()> {
    let mut archives = Vec::new();
    for entry in std::fs::read_dir(target.join("release/deps"))? {
        let p = entry?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".rlib")
            && (name.starts_with("libcudarc-") || name.starts_with("libcandle_"))
        {
            archives.push(p);
        }
    }
    for entry in std::fs::read_dir(target.join("release/build"))? {
        let p = entry?.path();
        if p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("candle-kernels-"))
        {
            let moe = p.join("out/libmoe.a");
            if moe.is_file() {
                archives.push(moe);
            }
        }
    }
    ensure!(
        !archives.is_empty(),
        "no compiled cudarc/candle crates under {}",
        target.display()
    );
    let mut symbols: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for archive in &archives {
        let out = Command::new("nm")
            .args(["-u", "--format=posix"])
            .arg(archive)
            .output()?;
        ensure!(out.status.success(), "nm -u {} failed", archive.display());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(sym) = line.split_whitespace().next() else {
                continue;
            };
            if let Some(lib) = library_of(sym) {
                symbols.entry(lib).or_default().insert(sym.to_string());
            }
        }
    }
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir)?;
    for (i, (short, soname, _)) in LIBRARIES.iter().enumerate() {
        let src = dir.join(format!("{short}.c"));
        let body: String = symbols
            .get(&i)
            .into_iter()
            .flatten()
            .map(|s| format!("int {s}(void) {{ return 34; }}\n"))
            .collect();
        std::fs::write(&src, format!("/* link-time stub of {soname} */\n{body}"))?;
        run(Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(lib_dir.join(soname))
            .arg(format!("-Wl,-soname,{soname}"))
            .arg(&src))?;
        let link = lib_dir.join(format!("lib{short}.so"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(soname, &link)?;
    }
    eprintln!(
        "gpu-bundle: stub libraries for {} CUDA symbols in {}",
        symbols.values().map(BTreeSet::len).sum::<usize>(),
        lib_dir.display()
    );
    Ok(())
}

/// The scripts shipped in the bundle.
const RUN_CHECKS: &str = include_str!("../gpu-bundle/run-gpu-checks.sh");
const FIND_LIBS: &str = include_str!("../gpu-bundle/cuda-libs.sh");
const TORCH_REFERENCE: &str = include_str!("../gpu-bundle/torch-vgg-like.py");
const BUNDLE_README: &str = include_str!("../gpu-bundle/README.md");

/// `cargo xtask gpu-bundle`: builds the release binary and the GPU checks with `cuda,nccl` and
/// packs them with their scripts into `<out>/concord-gpu.tar.gz`.
pub fn bundle(args: &BundleArgs) -> Result<()> {
    let root = crate::bench::suite::load::workspace_root();
    let env = CudaEnv::prepare(&root, args.compute_cap)?;
    let target = root.join("target").join("cuda");
    let build = |extra: &[&str]| -> Result<Vec<u8>> {
        let mut cmd = cargo();
        env.apply(&mut cmd)
            .args(["--quiet"])
            .args(extra)
            .args([
                "--release",
                "--features",
                "cuda,nccl",
                "--message-format=json",
            ])
            .arg("--target-dir")
            .arg(&target)
            .current_dir(&root)
            .stderr(std::process::Stdio::inherit());
        eprintln!("+ cargo {} --release --features cuda,nccl", extra.join(" "));
        let out = cmd.output()?;
        ensure!(out.status.success(), "`cargo {}` failed", extra.join(" "));
        Ok(out.stdout)
    };
    // Everything but the final links first, so the stubs can list what the links need.
    build(&["build", "-p", "concord", "--lib"])?;
    write_stubs(&target, &root.join(".cuda").join("stubs"))?;
    let bin = executables(
        &build(&["build", "-p", "concord", "--bin", "concord"])?,
        "concord",
    )?;
    let tests = executables(
        &build(&["test", "-p", "concord", "--test", "gpu", "--no-run"])?,
        "gpu",
    )?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target.join("gpu-bundle"));
    let dir = out.join("concord-gpu");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin"))?;
    std::fs::create_dir_all(dir.join("configs"))?;
    for (from, name) in [(&bin, "concord"), (&tests, "gpu-checks")] {
        let src = from.first().context("cargo built no executable")?;
        let dst = dir.join("bin").join(name);
        run(Command::new("strip").arg("-o").arg(&dst).arg(src))?;
    }
    for config in ["default.toml", "gpu/vgg-like.toml"] {
        let name = config.replace('/', "-");
        std::fs::copy(
            root.join("configs").join(config),
            dir.join("configs").join(name),
        )?;
    }
    write_executable(&dir.join("run-gpu-checks.sh"), RUN_CHECKS)?;
    write_executable(&dir.join("cuda-libs.sh"), FIND_LIBS)?;
    std::fs::write(dir.join("torch-vgg-like.py"), TORCH_REFERENCE)?;
    std::fs::write(dir.join("README.md"), BUNDLE_README)?;
    let tarball = out.join("concord-gpu.tar.gz");
    run(Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&out)
        .arg("concord-gpu"))?;
    eprintln!(
        "gpu-bundle: {} ({} MiB); on the GPU machine: tar xzf concord-gpu.tar.gz && concord-gpu/run-gpu-checks.sh",
        tarball.display(),
        std::fs::metadata(&tarball)?.len() >> 20
    );
    Ok(())
}

/// The executables of target `name` cargo reported building, from its JSON messages (a test
/// build also builds the binaries its tests run).
fn executables(messages: &[u8], name: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for line in messages.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let msg: serde_json::Value = serde_json::from_slice(line)?;
        let target = msg.pointer("/target/name").and_then(|n| n.as_str());
        if let (Some(exe), Some(name_here)) =
            (msg.get("executable").and_then(|e| e.as_str()), target)
        {
            if name_here == name {
                found.push(PathBuf::from(exe));
            }
        }
    }
    Ok(found)
}

fn write_executable(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::library_of;

    #[test]
    fn symbols_go_to_the_library_that_defines_them() {
        let lib = |s| library_of(s).map(|i| super::LIBRARIES[i].1);
        assert_eq!(lib("cuInit"), Some("libcuda.so.1"));
        assert_eq!(lib("cuMemAlloc_v2"), Some("libcuda.so.1"));
        assert_eq!(lib("cudaMalloc"), Some("libcudart.so.13"));
        assert_eq!(lib("__cudaRegisterFatBinary"), Some("libcudart.so.13"));
        assert_eq!(lib("cublasLtMatmul"), Some("libcublasLt.so.13"));
        assert_eq!(lib("cublasSgemm_v2"), Some("libcublas.so.13"));
        assert_eq!(lib("cudnnCreate"), Some("libcudnn.so.9"));
        assert_eq!(lib("ncclAllReduce"), Some("libnccl.so.2"));
        assert_eq!(lib("curandCreateGenerator"), Some("libcurand.so.10"));
        assert_eq!(lib("nvrtcCompileProgram"), Some("libnvrtc.so.13"));
        assert_eq!(lib("memcpy"), None);
        assert_eq!(lib("cube_root"), None);
    }
}
