//! `cargo xtask <task>`: the project's tasks.
//!
//! - `train [args]`: run a training job (same arguments as `concord train`).
//! - `ci`: what CI runs: format check, clippy with warnings denied, the whole test suite.
//! - `bench-engine`: engine overhead vs a plain candle loop, and throughput-mode scale.

mod bench_engine;

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
    /// Format check, clippy (-D warnings) and every test, as CI runs them.
    Ci,
    /// Engine overhead vs a plain candle loop, and a VGG16 throughput-mode run at scale.
    BenchEngine,
}

fn main() -> ExitCode {
    let xtask = Xtask::parse();
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
    }
}

fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("+ cargo {}", args.join(" "));
    let status = Command::new(cargo).args(args).status()?;
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
    Ok(())
}
