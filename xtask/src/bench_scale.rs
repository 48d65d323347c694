//! `cargo xtask bench-scale`: VGG16 in throughput mode at 64 and 1024 workers
//! (`configs/vgg16-scale.toml`, one server per 8 workers, traces sampled), each in a process of its
//! own, against the goals: wall time (the run and its run folder written) and peak memory.
//!
//! Each case reruns this program as `bench-scale-case`, which runs the config, writes the run
//! folder as `concord train` does (timelines streamed into it) and prints one JSON line: its wall
//! and CPU seconds and its peak resident memory. The CPU seconds tell a slow machine from a slow
//! run when other work shares the cores.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The config every case runs.
const CONFIG: &str = "configs/vgg16-scale.toml";
/// Workers per parameter server.
const WORKERS_PER_SERVER: u32 = 8;

/// Arguments of `cargo xtask bench-scale`.
#[derive(Clone, Debug, clap::Args)]
pub struct ScaleArgs {
    /// Worker counts to run, in order.
    #[arg(long, value_delimiter = ',', default_values_t = [64, 1024])]
    pub workers: Vec<u32>,
    /// Extra config overrides for every case (`--set trace="full"`, …), as for `concord train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Where the run folders go (default: bench/out/scale).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Arguments of one case (`bench-scale-case`, run by `bench-scale` in a process of its own).
#[derive(Clone, Debug, clap::Args)]
pub struct CaseArgs {
    /// Workers.
    #[arg(long)]
    pub workers: u32,
    /// The run folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Config overrides.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// What one case measured.
#[derive(Debug, Serialize, Deserialize)]
struct Measured {
    workers: u32,
    servers: u32,
    /// Wall seconds from loading the config to the run folder written.
    wall_s: f64,
    /// CPU seconds of the process (user + system).
    cpu_s: f64,
    /// Peak resident memory of the process, bytes.
    peak_rss: u64,
    /// Virtual seconds the run took.
    run_time_s: f64,
    /// Bytes of the run folder's `trace/`.
    trace_bytes: u64,
}

/// The goals the brief of this bench sets, per worker count: (wall seconds, peak bytes).
fn goal(workers: u32) -> Option<(f64, Option<u64>)> {
    match workers {
        64 => Some((1.0, None)),
        1024 => Some((60.0, Some(1 << 30))),
        _ => None,
    }
}

/// Runs every case and prints the table.
pub fn run(args: &ScaleArgs) -> anyhow::Result<()> {
    let root = crate::bench::suite::load::workspace_root();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("bench").join("out").join("scale"));
    let exe = std::env::current_exe()?;
    let cfg = concord::config::load(Some(&root.join(CONFIG)), &args.sets)?;
    println!(
        "throughput mode, {CONFIG}: VGG16, {} iterations, {}, one server per {WORKERS_PER_SERVER} workers",
        cfg.iterations,
        cfg.strategies.join(" + ").to_uppercase()
    );
    if !args.sets.is_empty() {
        println!("(the goals are for the config as it is: with --set they are not judged)");
    }
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>12} {:>12} {:>12}  goal",
        "workers", "servers", "wall s", "cpu s", "peak MiB", "virtual s", "trace MiB"
    );
    for &workers in &args.workers {
        let mut cmd = Command::new(&exe);
        cmd.current_dir(&root)
            .arg("bench-scale-case")
            .args(["--workers", &workers.to_string()])
            .arg("--out")
            .arg(out.join(format!("w{workers}")));
        for s in &args.sets {
            cmd.args(["--set", s]);
        }
        let output = cmd.output().context("starting a bench-scale case")?;
        anyhow::ensure!(
            output.status.success(),
            "the case of {workers} workers failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let m: Measured = serde_json::from_str(line)
            .with_context(|| format!("reading the case's measurement {line:?}"))?;
        let judged = goal(workers).filter(|_| args.sets.is_empty());
        let verdict = judged.map_or_else(String::new, |(wall, peak)| {
            let wall_ok = m.wall_s < wall;
            let peak_ok = peak.is_none_or(|p| m.peak_rss < p);
            let peak_goal = peak.map_or(String::new(), |p| format!(", < {} MiB", p >> 20));
            let ok = if wall_ok && peak_ok { "met" } else { "MISSED" };
            format!("< {wall} s{peak_goal}: {ok}")
        });
        println!(
            "{:>8} {:>8} {:>10.2} {:>10.2} {:>12.1} {:>12.1} {:>12.2}  {verdict}",
            m.workers,
            m.servers,
            m.wall_s,
            m.cpu_s,
            m.peak_rss as f64 / (1u64 << 20) as f64,
            m.run_time_s,
            m.trace_bytes as f64 / (1u64 << 20) as f64,
        );
    }
    Ok(())
}

/// Runs one case in this process and prints its measurement as a JSON line.
pub fn case(args: &CaseArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let servers = (args.workers / WORKERS_PER_SERVER).max(1);
    let mut sets = vec![
        format!("workers={}", args.workers),
        format!("servers={servers}"),
    ];
    sets.extend(args.sets.iter().cloned());
    let cfg = concord::config::load(Some(Path::new(CONFIG)), &sets)?;
    let asm = concord::registry().compose(&cfg)?;
    let trace_dir = args.out.join("trace");
    if trace_dir.exists() {
        std::fs::remove_dir_all(&trace_dir)?;
    }
    let options = concord_engine::RunOptions {
        trace_dir: Some(trace_dir.clone()),
        ..Default::default()
    };
    let result = concord_engine::run(&cfg, &asm, options)?;
    concord_engine::output::write_run_folder(&args.out, &result)?;
    let wall_s = started.elapsed().as_secs_f64();
    let (cpu_s, peak_rss) = usage();
    let measured = Measured {
        workers: cfg.workers,
        servers: cfg.servers,
        wall_s,
        cpu_s,
        peak_rss,
        run_time_s: result.summary.run_time_s,
        trace_bytes: folder_bytes(&trace_dir),
    };
    println!("{}", serde_json::to_string(&measured)?);
    Ok(())
}

/// Total bytes of the files in `dir` (0 when it does not exist).
fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum()
    })
}

/// CPU seconds (user + system) and peak resident bytes of this process so far.
#[cfg(unix)]
fn usage() -> (f64, u64) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (f64::NAN, 0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // ru_maxrss is in KiB on Linux, in bytes on macOS.
    let unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
    (
        secs(ru.ru_utime) + secs(ru.ru_stime),
        (ru.ru_maxrss.max(0) as u64) * unit,
    )
}

/// Not measured off unix.
#[cfg(not(unix))]
fn usage() -> (f64, u64) {
    (f64::NAN, 0)
}
