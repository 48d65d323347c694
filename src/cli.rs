//! The `concord` command line (also what `cargo xtask train` runs).

/// `print!` that returns the write's result, so that a reader closing the pipe early
/// (`concord calibrate --host | head`) ends the command quietly instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout(), $($arg)*)
    }};
}

/// `println!` that returns the write's result (see `out!`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)
    }};
}

mod calibrate;
mod elastic;
mod interrupt;
mod launch;
mod market;
mod memory;
mod out_dir;
mod plan;

pub use calibrate::CalibrateArgs;
pub use launch::LaunchArgs;
pub use market::MarketArgs;
pub use memory::MemoryArgs;
pub use plan::{PlanArgs, SearchArg};

pub use out_dir::{default_out_dir, prepare_out_dir, OutDir, OutDirError};
use out_dir::{drop_half_written, keep_for_resume};

use crate::config::{self, ConfigError};
use clap::{Args, Parser, Subcommand};
use concord_engine::checkpoint::{self, Checkpoint};
use concord_engine::context::RuntimeKind;
use concord_engine::output::{write_run_folder, FolderGate};
use concord_engine::prelude::*;
use concord_engine::run::{RankOutcome, RunOptions, RunResult};
use indicatif::{ProgressBar, ProgressStyle};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Distributed training on heterogeneous, straggler-prone clusters.
#[derive(Debug, Parser)]
#[command(name = "concord", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a training job and write its run folder.
    Train(TrainArgs),
    /// Print the resolved configuration (all layers applied) as TOML, checked as `train` checks it.
    Config(ConfigArgs),
    /// List the strategies this build knows and the slots they fill.
    Strategies,
    /// Fit a device's per-layer cost model to measured step times (`--from`), or measure this
    /// machine (`--host`); print it as a device profile.
    Calibrate(CalibrateArgs),
    /// Start N local processes of a `--runtime process` job on this machine (loopback), as
    /// torchrun would: `concord launch --nproc 8 train --config configs/default.toml` (8 workers,
    /// one machine each).
    Launch(LaunchArgs),
    /// Plan a PipeDream pipeline for the configured job: the stages, their replicas, the
    /// predicted time per minibatch, beside plain data parallelism.
    Plan(PlanArgs),
    /// Compare the swapping memory policies (Dymem, vDNN, single-stream, SuperNeurons) on one
    /// training iteration of the configured model: time, overlap, peak and least memory,
    /// fragmentation; `--plot` draws the memory after every layer.
    Memory(MemoryArgs),
    /// The Proteus spot-market cost study: one job under on-demand, standard bidding with
    /// checkpointing or AgileML, Proteus (BidBrain + AgileML) and bidding at the market, from
    /// many random start points over a spot price trace; `--generate` writes a synthetic market.
    Market(MarketArgs),
}

/// Where the configuration comes from.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// Config file (default: configs/default.toml when it exists).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Override a key: `--set workers=4`, `--set strategy.ssp.slack=2` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// Arguments of `train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Configuration layers.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Runtime: `sim` (virtual time, deterministic), `wall` (real time, threads) or `process`
    /// (one process per machine over TCP, started by `concord launch`, torchrun, srun or mpirun).
    #[arg(long, value_parser = ["sim", "wall", "process"])]
    pub runtime: Option<String>,
    /// Run folder (default: `runs/run-<timestamp>`, or `runs/run-<timestamp>-2`, ... if taken;
    /// with `--resume`, the folder resumed). Checked before the run: it must be a folder this
    /// process can write, and empty.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Clear the run folder (`--out`) before the run if it holds files (an earlier run's).
    #[arg(long)]
    pub overwrite: bool,
    /// Continue the run in this run folder from its checkpoint, to the `iterations` of its
    /// config (raise them with `--set iterations=N`), writing into that folder (or `--out`).
    /// The config is the checkpointed run's; only `iterations`, `checkpoint_every`,
    /// `time_limit_s`, `trace` and `[guard]` may change.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "config")]
    pub resume: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl TrainArgs {
    /// `--runtime`, as the configuration layer it sets (none when not given).
    fn runtime_sets(&self) -> Vec<String> {
        self.runtime
            .iter()
            .map(|r| format!("runtime=\"{r}\""))
            .collect()
    }
}

impl ConfigArgs {
    fn load(&self, extra: &[String]) -> Result<config::Sourced, ConfigError> {
        let default = PathBuf::from("configs/default.toml");
        let file = self
            .config
            .clone()
            .or_else(|| default.exists().then_some(default));
        let mut sets = self.sets.clone();
        sets.extend_from_slice(extra);
        config::load_sourced(file.as_deref(), &sets)
    }
}

/// Parses `args` and runs the command; the process exit code.
pub fn main_with(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    init_logging();
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`| head`): nothing is wrong with the command.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` is a write to a pipe whose reader has closed it.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Warnings (e.g. a strategy's advice on its settings) go to stderr; `RUST_LOG` tunes the level.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Already set (main_with called twice in one process): keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn execute(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config(args) => {
            let sourced = args.load(&[])?;
            // The strategies' options are checked as `train` checks them, so that a config
            // this prints is one that runs.
            crate::registry()
                .compose(&sourced.config)
                .map_err(|e| sourced.attribute(e))?;
            out!("{}", config::to_toml(&sourced.config))?;
            Ok(())
        }
        Command::Strategies => {
            for s in crate::registry().strategies() {
                let slots: Vec<String> = s.slots().iter().map(|x| x.to_string()).collect();
                outln!("{:<12} [{}]  {}", s.name(), slots.join(", "), s.summary())?;
            }
            Ok(())
        }
        Command::Train(args) => train(args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Launch(args) => launch::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Memory(args) => memory::run(&args),
        Command::Market(args) => market::run(&args),
    }
}

fn train(args: TrainArgs) -> anyhow::Result<()> {
    // Ctrl-C or SIGTERM ends the run as a failure does, cleaning up its folder (below).
    let interrupts = interrupt::Interrupts::watch()?;
    let extra = args.runtime_sets();
    // A resumed run continues in a folder: `--resume`'s, or under torchrun's restarts the run
    // folder this job's earlier attempt left a checkpoint in.
    let (sourced, resume, resume_dir) = match &args.resume {
        Some(dir) => {
            let (sourced, cp) = resumed_config(dir, &args.config.sets, &extra)?;
            (sourced, Some(Arc::new(cp.point)), Some(dir.clone()))
        }
        None => {
            let sourced = args.config.load(&extra)?;
            match elastic::restarted_job(args.out.as_deref(), &sourced.config)? {
                Some((dir, cp)) => {
                    eprintln!(
                        "note: a restart of this job ({}); continuing from the checkpoint in {} \
                         (clock {})",
                        elastic::RESTART_COUNT,
                        dir.display(),
                        cp.point.clock
                    );
                    let sourced = resumed_from(&dir, &cp, &args.config.sets, &extra)?;
                    (sourced, Some(Arc::new(cp.point)), Some(dir))
                }
                None => (sourced, None, None),
            }
        }
    };
    // A strategy's options are checked as it is composed: name the layer that set them.
    let asm = crate::registry()
        .compose(&sourced.config)
        .map_err(|e| sourced.attribute(e))?;
    for name in asm.unused_options() {
        tracing::warn!(
            "`strategy.{name}` (set by {}) is not used: `{name}` is not among the composed \
             strategies {:?}",
            sourced.layer_of(&format!("strategy.{name}")),
            asm.strategies()
        );
    }
    let cfg = sourced.config.clone();
    // A process job's rank comes from its launcher; only rank 0 writes the run folder.
    let world = if cfg.runtime == RuntimeKind::Process {
        Some(concord_engine::process::World::from_env()?)
    } else {
        None
    };
    if let Some(world) = world.as_ref().filter(|w| w.rank != 0) {
        return follow(&cfg, &asm, world);
    }
    // A resumed run continues in its own folder, which holds the earlier part; any other folder
    // is checked (and cleared with --overwrite) before the run.
    if let Some(dir) = &resume_dir {
        // An earlier stretch killed outright left its timelines half-written.
        drop_half_written(dir);
    }
    let out_arg = args.out.clone().filter(|o| Some(o) != resume_dir.as_ref());
    let (out_dir, out) = match (&resume_dir, &out_arg) {
        (Some(dir), None) => (None, dir.clone()),
        (_, out) => {
            let path = out
                .clone()
                .unwrap_or_else(|| default_out_dir(Path::new("runs")));
            let prepared = Arc::new(prepare_out_dir(&path, args.overwrite)?);
            let out = prepared.path().to_path_buf();
            (Some(prepared), out)
        }
    };
    let folder_gate = FolderGate::default();
    interrupts.clean_up(out.clone(), out_dir.clone(), folder_gate.clone());
    let total = cfg.iterations * cfg.workers as u64;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} worker-clocks {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(format!(
        "{} workers × {} iterations",
        cfg.workers, cfg.iterations
    ));
    if let Some(point) = &resume {
        bar.set_position(point.clock * cfg.workers as u64);
    }
    let tick = bar.clone();
    // Timelines go straight to the run folder while the run goes; it does not rewrite them.
    let options = RunOptions {
        progress: Some(Arc::new(move |_, _| tick.inc(1))),
        resume,
        checkpoint_dir: Some(out.clone()),
        trace_dir: Some(out.join("trace")),
        // Nothing in the run folder is made of the servers' reads.
        record_reads: false,
        folder_gate,
    };
    let result = match &world {
        Some(world) => {
            concord_engine::run::run_process(&cfg, &asm, options, world).and_then(|o| match o {
                RankOutcome::Leader(result) => Ok(*result),
                RankOutcome::Follower => Err(EngineError::Process {
                    rank: world.rank,
                    reason: "rank 0 ended as a follower".into(),
                }),
            })
        }
        None => concord_engine::run(&cfg, &asm, options),
    };
    bar.finish_and_clear();
    // From here the run's own outcome decides what its folder keeps.
    let _finished = interrupts.finish();
    let result = match result {
        // A stopped run keeps what it did: its folder is written, then the error is named.
        Err(EngineError::Stopped(stopped)) => {
            write_run_folder(&out, &stopped.result)?;
            print_summary(&stopped.result, cfg.runtime, &out)?;
            return Err(EngineError::Stopped(stopped).into());
        }
        Err(e) => {
            // A checkpoint cut before the failure is what the user restarts from: keep it.
            if keep_for_resume(&out) {
                eprintln!(
                    "note: {} keeps the run's last checkpoint; `concord train --resume {}` \
                     continues from it",
                    out.display(),
                    out.display()
                );
            } else if let Some(dir) = &out_dir {
                dir.discard();
            }
            // A key the run refused at its start (the cluster, a straggler trace, the data) is
            // named with the layer that set it, as the checks before the run name theirs.
            return Err(sourced.attribute(e).into());
        }
        Ok(result) => result,
    };
    write_run_folder(&out, &result)?;
    print_summary(&result, cfg.runtime, &out)?;
    Ok(())
}

/// A rank other than 0 of a process job: runs its roles; rank 0 gathers and writes the results.
fn follow(
    cfg: &concord_engine::RunConfig,
    asm: &Assembly,
    world: &concord_engine::process::World,
) -> anyhow::Result<()> {
    match concord_engine::run::run_process(cfg, asm, RunOptions::default(), world) {
        Ok(_) => Ok(()),
        Err(EngineError::Stopped(stopped)) => Err(anyhow::anyhow!("{stopped}")),
        Err(e) => Err(e.into()),
    }
}

/// The configuration and checkpoint of a run resumed from run folder `dir`: the checkpointed
/// run's configuration with `sets` (and `extra`) applied, which may change only the keys that do
/// not change the job.
fn resumed_config(
    dir: &Path,
    sets: &[String],
    extra: &[String],
) -> anyhow::Result<(config::Sourced, Checkpoint)> {
    let file = dir.join(checkpoint::FILE_NAME);
    if !file.exists() {
        anyhow::bail!(
            "--resume {}: no {} there (is it a run folder?)",
            dir.display(),
            checkpoint::FILE_NAME
        );
    }
    let cp = match checkpoint::read(&file) {
        Ok(cp) => cp,
        Err(e) => match why_not_resumable(dir) {
            Some(why) => anyhow::bail!("--resume {}: {why}", dir.display()),
            None => return Err(e.into()),
        },
    };
    let sourced = resumed_from(dir, &cp, sets, extra)?;
    Ok((sourced, cp))
}

/// The configuration of a run resumed from checkpoint `cp` (of run folder `dir`): its
/// configuration with `sets` (and `extra`) applied, which may change only the keys that do not
/// change the job.
fn resumed_from(
    dir: &Path,
    cp: &Checkpoint,
    sets: &[String],
    extra: &[String],
) -> anyhow::Result<config::Sourced> {
    let mut all = sets.to_vec();
    all.extend_from_slice(extra);
    let sourced = config::load_resumed(&cp.config, &all)?;
    if let Some(change) = config::job_change(&cp.config, &sourced.config)? {
        anyhow::bail!(
            "--resume {}: {change}; a resumed run continues the same job, so only {} may change",
            dir.display(),
            config::RESUMABLE_KEYS.map(|k| format!("`{k}`")).join(", ")
        );
    }
    Ok(sourced)
}

/// A figure with 4 decimals, or `n/a` where it is not a number (as `summary.json`'s `null`:
/// a throughput-mode run computes no loss).
fn finite_or_na(x: f64) -> String {
    if !x.is_finite() {
        "n/a".to_string()
    } else if x.abs() >= 1e6 {
        // A diverging loss: its magnitude, not thirty digits.
        format!("{x:.4e}")
    } else {
        format!("{x:.4}")
    }
}

/// Why the run in folder `dir` cannot be resumed, from its strategies (read from its
/// `config.toml`), when that is the reason its checkpoint holds no resume state.
fn why_not_resumable(dir: &Path) -> Option<String> {
    let cfg = config::load(Some(&dir.join("config.toml")), &[]).ok()?;
    let asm = crate::registry().compose(&cfg).ok()?;
    asm.resumable().err().map(|e| e.to_string())
}

fn print_summary(
    r: &RunResult,
    runtime: RuntimeKind,
    out: &std::path::Path,
) -> std::io::Result<()> {
    let s = &r.summary;
    let time_kind = if runtime == RuntimeKind::Sim {
        "virtual"
    } else {
        "wall"
    };
    let pct = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{:.2}%", v * 100.0));
    // A run the guard stopped ended its roles mid-run: what only their final reports tell (the
    // work they did, their traffic and memory) is not known, rather than zero.
    let known = |v: String| {
        if s.stopped.is_some() {
            "n/a (the run was stopped)".to_string()
        } else {
            v
        }
    };
    let rows = [
        ("strategies", s.strategies.join(" + ")),
        (
            "workers / servers",
            format!("{} / {}", s.workers, s.servers),
        ),
        ("iterations", s.iterations.to_string()),
        (
            &format!("run time ({time_kind})"),
            format!("{:.4} s", s.run_time_s),
        ),
        ("wall time", format!("{:.2} s", s.wall_time_s)),
        (
            "time / iteration",
            format!("{:.6} s", s.time_per_iteration_s),
        ),
        (
            "throughput",
            format!("{:.1} samples/s", s.throughput_samples_per_s),
        ),
        ("ideal time", known(format!("{:.4} s", s.ideal_time_s))),
        (
            "efficiency (ideal/achieved)",
            known(format!("{:.3}", s.efficiency)),
        ),
        ("wait share", format!("{:.1}%", s.wait_share * 100.0)),
        ("final train loss", finite_or_na(s.final_loss)),
        ("test accuracy", pct(s.final_test_accuracy)),
        (
            "bytes sent",
            known(format!("{:.3} MB", s.bytes_sent as f64 / 1e6)),
        ),
        (
            "peak memory (max role)",
            known(format!(
                "{:.3} MB",
                s.peak_memory.values().max().copied().unwrap_or(0) as f64 / 1e6
            )),
        ),
        ("run folder", out.display().to_string()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let timed = r.evaluations.last().map(|e| {
        (
            "model over time",
            format!(
                "{} evaluations (evaluations.jsonl); at {:.4} s: test loss {:.4}",
                r.evaluations.len(),
                e.time_s,
                e.test_loss
            ),
        )
    });
    let width = width.max(timed.as_ref().map_or(0, |(k, _)| k.len()));
    let mut rows: Vec<(&str, String)> = rows.iter().map(|(k, v)| (*k, v.clone())).collect();
    if let Some(loss) = s.final_test_loss {
        // The model's test loss, in place of an accuracy it does not have (a regression model
        // such as MF, whose loss is the test MSE) or after it.
        let at = rows
            .iter()
            .position(|(k, _)| *k == "test accuracy")
            .map_or(rows.len(), |i| i + 1);
        rows.insert(at, ("test loss", finite_or_na(loss)));
        if s.final_test_accuracy.is_none() {
            rows.retain(|(k, _)| *k != "test accuracy");
        }
    }
    if let Some(auc) = s.final_test_auc {
        // A click-through model's ranking quality, right after its accuracy and loss.
        let at = rows
            .iter()
            .position(|(k, _)| *k == "test loss")
            .map_or(rows.len(), |i| i + 1);
        rows.insert(at, ("test AUC", format!("{auc:.4}")));
    }
    if let Some(t) = timed {
        // Before the run folder, which stays last.
        rows.insert(rows.len() - 1, t);
    }
    for (k, v) in rows {
        outln!("{k:<width$}  {v}")?;
    }
    Ok(())
}
