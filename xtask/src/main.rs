//! `cargo xtask <task>`: the project's tasks.
//!
//! - `train [args]`: run a training job (same arguments as `concord train`).
//! - `ci`: what CI runs: format check, clippy with warnings denied, the whole test suite.
//! - `bench-engine`: engine overhead vs a plain candle loop, and throughput-mode scale.
//! - `bench-scale [--workers 64,1024] [--set k=v]...`: VGG16 throughput mode at 64 and 1024
//!   workers, wall time and peak memory of each run (its run folder written) against the goals.
//! - `bench-process [--procs 2,4,8] [--python PATH]`: `--runtime process` beside PyTorch DDP
//!   (gloo) on an MLP, and its TCP throughput against a plain loopback socket copy.
//! - `cuda-env [--compute-cap 90]`: installs the pinned CUDA 13.0 compile-time toolkit into
//!   `.cuda/` and prints the environment a `--features cuda` build needs (`eval "$(...)"`).
//! - `gpu-bundle [--out DIR]`: the release binary and the GPU checks, built with `cuda,nccl` on
//!   a machine without a GPU, packed with scripts that find the CUDA libraries on a GPU machine.
//! - `bench-plans [--configs 80] [--seed 1]`: the pipeline planner's closed form and schedule
//!   replay against simulated runs of random configurations (`bench/out/plans/`).
//! - `bench --suite NAME [--filter S] [--jobs N] [--force]`: the cross-strategy benchmark
//!   matrix (`bench/NAME.toml` → `bench/out/NAME/`: results.csv, REPORT.md, plots).
//!   `--suite calibration` (also `calibration [--from FILE] [--out DIR]`): the calibrated device
//!   profiles against their measurements (`bench/out/calibration/`). `--suite fidelity`: how
//!   well `sim` on a `calibrate --host` profile predicts `--runtime process` on this machine.

mod bench;
mod bench_engine;
mod bench_plans;
mod bench_process;
mod bench_scale;
mod calibration;
mod cuda;
mod fidelity;
mod freshness;

use clap::{Parser, Subcommand};
use std::process::{Command, ExitCode};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Xtask {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Run a training job: `cargo xtask train [--config F] [--set k=v]... [--runtime sim|wall] [--out DIR]`.
    #[command(disable_help_flag = true)]
    Train {
        /// Arguments passed to `concord train`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Format check, clippy (-D warnings), every test, the smoke bench, and a compile check of the
    /// `cuda,nccl` features, as CI runs them.
    Ci,
    /// Engine overhead vs a plain candle loop, and a VGG16 throughput-mode run at scale.
    BenchEngine,
    /// The cross-strategy benchmark matrix of a suite (`bench/<suite>.toml`): results.csv,
    /// REPORT.md and SVG plots in `bench/out/<suite>/`.
    Bench(bench::BenchArgs),
    /// VGG16 throughput mode at 64 and 1024 workers (configs/vgg16-scale.toml, traces sampled):
    /// wall time with the run folder written, and peak memory, each case in its own process.
    BenchScale(bench_scale::ScaleArgs),
    /// The pipeline planner's two predictions of a configuration's time per minibatch (its
    /// closed form and the schedule's replay) against simulated runs of random configurations
    /// of mixed widths (bench/out/plans/: results.csv, REPORT.md).
    BenchPlans(bench_plans::PlansArgs),
    /// `--runtime process` beside PyTorch DDP (gloo) on an MLP 32-64-10, and its TCP throughput
    /// against a plain loopback socket copy (bench/out/process/).
    BenchProcess(bench_process::ProcessArgs),
    /// Simulated vs measured step times of the calibrated device profiles
    /// (bench/out/calibration/: results.csv, REPORT.md); what `bench --suite calibration` runs.
    Calibration(calibration::CalibrationArgs),
    /// Install the pinned CUDA 13.0 compile-time toolkit into .cuda/ and print the environment
    /// of a `--features cuda` build: `eval "$(cargo xtask cuda-env)"`.
    CudaEnv(cuda::EnvArgs),
    /// Build the release binary and the GPU checks with `cuda,nccl` (no GPU needed) and pack them
    /// with scripts that find the CUDA libraries on a GPU machine and run the checks.
    GpuBundle(cuda::BundleArgs),
    /// One case of bench-scale, in this process (run by bench-scale).
    #[command(hide = true)]
    BenchScaleCase(bench_scale::CaseArgs),
}

/// The allocator the `concord` binary runs with: the benches run the engine in this process
/// (bench-scale's cases, the suites' `sim` runs) and measure it as `concord train` runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let xtask = Xtask::parse();
    if measures(&xtask.task) {
        if let Err(e) = freshness::check_self("cargo build --release -p xtask") {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    }
    match xtask.task {
        Task::Train { args } => {
            let mut argv = vec!["concord".into(), "train".into()];
            argv.extend(args.into_iter().map(Into::into));
            concord::cli::main_with(argv)
        }
        Task::Ci => match ci() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask ci: {e:#}");
                ExitCode::FAILURE
            }
        },
        Task::BenchEngine => match bench_engine::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask bench-engine: {e:#}");
                ExitCode::FAILURE
            }
        },
        Task::CudaEnv(args) => report("cuda-env", cuda::env(&args)),
        Task::GpuBundle(args) => report("gpu-bundle", cuda::bundle(&args)),
        Task::BenchScale(args) => report("bench-scale", bench_scale::run(&args)),
        Task::BenchProcess(args) => report("bench-process", bench_process::run(&args)),
        Task::BenchPlans(args) => report(
            "bench-plans",
            bench_plans::run(args, &bench::suite::load::workspace_root()),
        ),
        Task::BenchScaleCase(args) => report("bench-scale-case", bench_scale::case(&args)),
        Task::Calibration(args) => report("calibration", calibration::run(&args)),
        Task::Bench(args) if args.suite == "fidelity" => {
            report("bench --suite fidelity", fidelity::run())
        }
        Task::Bench(args) if args.suite == "calibration" => report(
            "bench --suite calibration",
            calibration::run(&calibration::CalibrationArgs::default()),
        ),
        Task::Bench(args) => match bench::run(&args) {
            Ok(run) => {
                bench::print_done(&run, args.check);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xtask bench: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Whether `task` measures the code and files its numbers under the tree's version, so that a
/// binary built from older sources must not run it.
fn measures(task: &Task) -> bool {
    matches!(
        task,
        Task::Bench(_)
            | Task::BenchEngine
            | Task::BenchScale(_)
            | Task::BenchProcess(_)
            | Task::BenchPlans(_)
            | Task::Calibration(_)
    )
}

/// The exit code of a task, with its error printed.
fn report(task: &str, outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {task}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn cargo(args: &[&str]) -> anyhow::Result<()> {
    cargo_with(args, &[])
}

/// `cargo args` with the environment variables `env` set.
fn cargo_with(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("+ {}cargo {}", shown.concat(), args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .envs(env.iter().copied())
        .status()?;
    anyhow::ensure!(
        status.success(),
        "`cargo {}` failed ({status})",
        args.join(" ")
    );
    Ok(())
}

fn ci() -> anyhow::Result<()> {
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "--workspace", "--release"])?;
    // Every doc link resolves: the API docs are part of what a strategy author reads.
    cargo_with(
        &["doc", "--no-deps", "--workspace"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    // The smoke suite, and a check that its CSV has every strategy × scenario × seed cell.
    eprintln!("+ cargo xtask bench --suite smoke (and check results.csv)");
    bench::ci_smoke()?;
    // The GPU code compiles without a GPU (the CUDA toolkit comes from pinned wheels).
    cuda::check(&bench::suite::load::workspace_root())?;
    Ok(())
}
