//! `cargo xtask bench-process`: the process runtime beside the peer users would otherwise pick,
//! and its wire against the machine's own loopback.
//!
//! 1. **vs PyTorch DDP**: an MLP 32-64-10 at batch 32 per worker, one process per worker, as
//!    allreduce and as BSP with two parameter servers (`concord launch`), beside PyTorch
//!    DistributedDataParallel on gloo (`bench/ddp/ddp_mlp.py`, when a Python with PyTorch is
//!    found), in ms per iteration. Goal: allreduce no slower than DDP at every size.
//! 2. **TCP throughput**: a plain socket copy between two threads on loopback (the ceiling),
//!    then a large push and pull (VGG16's 553 MB in throughput mode, one worker and one server
//!    process) and a two-process allreduce of the same size, each run three times in turns and
//!    counted by its median; goal: at least half the ceiling (the best of the socket copies taken
//!    before each run and after the last).
//!    Beside them, a push and pull of real tensors end to end (copies and the server's update
//!    included), reported without a goal.
//! 3. **Small messages**: run time per message of a tiny-model BSP job between two processes (an
//!    upper bound on the per-message cost: frame, copy, syscalls, scheduling).
//!
//! Every number is from this run on this machine; each concord job runs through the `concord`
//! binary built beside this program.

use anyhow::Context;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `cargo xtask bench-process`.
#[derive(Clone, Debug, clap::Args)]
pub struct ProcessArgs {
    /// Process counts of the DDP comparison.
    #[arg(long, value_delimiter = ',', default_values_t = [2, 4, 8])]
    pub procs: Vec<u32>,
    /// Iterations per concord job of the comparison.
    #[arg(long, default_value_t = 300)]
    pub iterations: u64,
    /// Python with PyTorch for the DDP side (skipped when it has none).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Where the run folders go (default: bench/out/process).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs the three parts and prints their tables.
pub fn run(args: &ProcessArgs) -> anyhow::Result<()> {
    let root = crate::bench::suite::load::workspace_root();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("bench").join("out").join("process"));
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    let concord = concord_binary()?;
    versus_ddp(args, &root, &out, &concord)?;
    println!();
    throughput(&root, &out, &concord)?;
    Ok(())
}

/// The `concord` binary built beside this program.
pub fn concord_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let bin = me.with_file_name(format!("concord{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        bin.exists(),
        "{} not found: build it first (cargo build --release -p concord)",
        bin.display()
    );
    crate::freshness::check(&bin, "cargo build --release -p concord")?;
    Ok(bin)
}

/// Runs `concord launch --nproc n train` with `sets` into `out/name`; the run's summary.
fn launch(
    concord: &Path,
    root: &Path,
    n: u32,
    sets: &[String],
    out: &Path,
) -> anyhow::Result<serde_json::Value> {
    let mut cmd = Command::new(concord);
    cmd.current_dir(root)
        .args(["launch", "--nproc", &n.to_string(), "train", "--quiet"])
        .args(["--config", "configs/default.toml"])
        .arg("--out")
        .arg(out);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let done = cmd.output().context("starting concord launch")?;
    anyhow::ensure!(
        done.status.success(),
        "concord launch --nproc {n} {sets:?} failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let text = std::fs::read_to_string(out.join("summary.json"))?;
    Ok(serde_json::from_str(&text)?)
}

fn number(summary: &serde_json::Value, key: &str) -> anyhow::Result<f64> {
    summary[key]
        .as_f64()
        .with_context(|| format!("summary.json has no number `{key}`"))
}

/// Part 1: ms per iteration beside DDP.
fn versus_ddp(args: &ProcessArgs, root: &Path, out: &Path, concord: &Path) -> anyhow::Result<()> {
    let ddp = ddp_times(args, root, out);
    println!(
        "MLP 32-64-10, batch 32 per worker, one process per worker, {} iterations (ms per iteration)",
        args.iterations
    );
    println!(
        "{:>6} {:>12} {:>14} {:>10} {:>16}  goal: allreduce <= DDP",
        "procs", "allreduce", "bsp (2 PS)", "DDP", "allreduce / DDP"
    );
    for &n in &args.procs {
        let common = [
            format!("workers={n}"),
            "batch=32".into(),
            format!("iterations={}", args.iterations),
            format!("eval_every={}", args.iterations),
            "stragglers=[]".into(),
            "trace=\"off\"".into(),
            "model.hidden=[64]".into(),
        ];
        let mut per_iter = Vec::new();
        for strategy in ["allreduce", "bsp"] {
            let mut sets = common.to_vec();
            sets.push(format!("strategies=[\"{strategy}\"]"));
            let s = launch(
                concord,
                root,
                n,
                &sets,
                &out.join(format!("{strategy}-{n}")),
            )?;
            per_iter.push(number(&s, "time_per_iteration_s")? * 1e3);
        }
        let theirs = ddp.as_ref().ok().and_then(|d| d.get(&n).copied());
        let (ratio, verdict) = match theirs {
            Some(d) => {
                let r = per_iter[0] / d;
                (format!("{r:.2}"), if r <= 1.0 { "met" } else { "MISSED" })
            }
            None => ("n/a".into(), "no DDP measurement"),
        };
        println!(
            "{n:>6} {:>12.2} {:>14.2} {:>10} {ratio:>16}  {verdict}",
            per_iter[0],
            per_iter[1],
            theirs.map_or("n/a".into(), |d| format!("{d:.2}")),
        );
    }
    if let Err(why) = ddp {
        println!("DDP not measured: {why}");
    }
    Ok(())
}

/// DDP's ms per iteration by process count, from `bench/ddp/ddp_mlp.py`.
fn ddp_times(
    args: &ProcessArgs,
    root: &Path,
    out: &Path,
) -> anyhow::Result<std::collections::BTreeMap<u32, f64>> {
    let json = out.join("ddp.json");
    let procs: Vec<String> = args.procs.iter().map(u32::to_string).collect();
    let done = Command::new(&args.python)
        .current_dir(root)
        .arg("bench/ddp/ddp_mlp.py")
        .args(["--procs", &procs.join(",")])
        .arg("--json")
        .arg(&json)
        .output()
        .with_context(|| format!("starting {}", args.python))?;
    match done.status.code() {
        Some(0) => {}
        Some(3) => anyhow::bail!("{} has no PyTorch (pass --python)", args.python),
        _ => anyhow::bail!(
            "the DDP script failed: {}",
            String::from_utf8_lossy(&done.stderr)
        ),
    }
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    Ok(rows
        .iter()
        .filter_map(|r| Some((r["procs"].as_u64()? as u32, r["ms_per_iter"].as_f64()?)))
        .collect())
}

/// Bytes a plain loopback socket copy moves per second (one writer thread, one reader).
fn socket_copy(total: usize) -> anyhow::Result<f64> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 4 << 20];
        let mut got = 0;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(got);
            }
            got += n;
        }
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    let chunk = vec![7u8; 4 << 20];
    let start = Instant::now();
    let mut sent = 0;
    while sent < total {
        s.write_all(&chunk)?;
        sent += chunk.len();
    }
    drop(s);
    let got = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reader thread panicked"))??;
    Ok(got as f64 / start.elapsed().as_secs_f64())
}

/// Iterations of each large-transfer case.
const BIG_ITERATIONS: u64 = 12;
/// Runs of each large-transfer case, taken in turns with the others; the median counts.
const BIG_RUNS: usize = 3;
/// Iterations of each large-transfer case left out of its rate.
const WARM_UP: usize = 2;

/// Seconds an iteration of the run in `dir` spends outside its workers' steps, over the
/// iterations after the first [`WARM_UP`]: its time (`metrics.jsonl`'s `time_s` from the end of
/// the one before) less its slowest worker's compute (`compute_s`). In throughput mode a step is
/// a modeled sleep, which no transfer overlaps in BSP or the ring: what is left is the
/// iteration's transfers.
fn steady_transfer_seconds(dir: &Path) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl"))?;
    let rows: Vec<(f64, f64)> = text
        .lines()
        .map(|l| {
            let row: serde_json::Value = serde_json::from_str(l)?;
            let end = row["time_s"]
                .as_f64()
                .context("a metrics row without time_s")?;
            let compute = row["compute_s"]
                .as_array()
                .context("a metrics row without compute_s")?
                .iter()
                .filter_map(serde_json::Value::as_f64)
                .fold(0.0, f64::max);
            Ok((end, compute))
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        rows.len() > WARM_UP,
        "too few iterations in {}",
        dir.display()
    );
    let steady = &rows[WARM_UP - 1..];
    let transfers: f64 = steady
        .windows(2)
        .map(|pair| pair[1].0 - pair[0].0 - pair[1].1)
        .sum();
    Ok(transfers / (steady.len() - 1) as f64)
}

/// Parts 2 and 3.
fn throughput(root: &Path, out: &Path, concord: &Path) -> anyhow::Result<()> {
    // What every case shares, and the roles of a push and pull (one worker, one server apart).
    let run = [
        format!("iterations={BIG_ITERATIONS}"),
        format!("eval_every={BIG_ITERATIONS}"),
        "stragglers=[]".into(),
        "trace=\"off\"".into(),
    ];
    let vgg16 = [
        "model.kind=\"profile\"",
        "model.name=\"vgg16\"",
        // The modeled step is left out of the rate: a fast device keeps the runs short.
        "cluster.default_device=\"h200\"",
    ];
    let push_pull = [
        "workers=1",
        "servers=1",
        "cluster.dedicated_servers=true",
        "strategies=[\"bsp\"]",
    ];
    let case = |parts: &[&[&str]]| -> Vec<String> {
        run.iter()
            .cloned()
            .chain(parts.iter().flat_map(|p| p.iter().map(|s| s.to_string())))
            .collect()
    };
    // Every byte crosses one process boundary (one worker per process, one server apart).
    let cases = [
        (
            "push + pull, 553 MB each way (worker | server)",
            "push",
            case(&[&vgg16, &push_pull]),
            true,
        ),
        (
            "ring allreduce of 553 MB, 2 processes (both ways)",
            "allreduce",
            case(&[&vgg16, &["workers=2", "strategies=[\"allreduce\"]"]]),
            true,
        ),
        // The same push and pull with real tensors (an MLP 32-4096-4096-10), end to end: beside
        // the wire, the worker's copies out of its gradients and into its parameters, the
        // server's decoding and its optimizer step. Reported, not held to the goal, which is
        // the wire's.
        (
            "push + pull of real tensors, 68 MB each way",
            "push-real",
            case(&[&["model.hidden=[4096, 4096]"], &push_pull]),
            false,
        ),
    ];
    // Each case runs BIG_RUNS times, in turns with the others, and counts by its median; plain
    // socket copies, one before each run and one after the last, the best the ceiling: this
    // machine's loopback rate moves by 2x within minutes, and a slow copy would flatter every
    // case.
    let mut copies = Vec::with_capacity(BIG_RUNS * cases.len() + 1);
    let mut rates = vec![Vec::with_capacity(BIG_RUNS); cases.len()];
    for turn in 0..BIG_RUNS {
        for ((_, name, sets, _), runs) in cases.iter().zip(&mut rates) {
            copies.push(socket_copy(2 << 30)?);
            let dir = out.join(format!("{name}-run{turn}"));
            let s = launch(concord, root, 2, sets, &dir)?;
            // The rate is the steady state's: the iterations after the first WARM_UP, which
            // map the buffers a stream of large frames then reuses.
            let per_iteration = number(&s, "bytes_sent")? / BIG_ITERATIONS as f64;
            runs.push(per_iteration / steady_transfer_seconds(&dir)?);
        }
    }
    copies.push(socket_copy(2 << 30)?);
    let ceiling = copies.iter().copied().fold(0.0, f64::max);
    println!("TCP between two processes on loopback");
    println!(
        "{:<46} {:>12} {:>12}  goal: >= 50% of the socket copy (steady state, after {WARM_UP} of {BIG_ITERATIONS} iterations)",
        "", "GB/s", "of ceiling"
    );
    let gbps = |xs: &[f64]| -> String {
        xs.iter()
            .map(|x| format!("{:.2}", x / 1e9))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{:<46} {:>12.2} {:>12}  best of {} ({}), one before each run and one after",
        "plain socket copy (2 GiB, 4 MiB writes)",
        ceiling / 1e9,
        "100%",
        copies.len(),
        gbps(&copies)
    );
    for ((label, _, _, goal), runs) in cases.iter().zip(rates) {
        let rate = crate::fidelity::quantile(&runs, 0.5);
        let verdict = match (goal, rate >= 0.5 * ceiling) {
            (false, _) => {
                "(end to end: with the copies in and out of tensors and the server's \
                           update; no goal)"
            }
            (true, true) => "met",
            (true, false) => "MISSED",
        };
        println!(
            "{label:<46} {:>12.2} {:>11.0}%  {verdict}  (median of {})",
            rate / 1e9,
            100.0 * rate / ceiling,
            gbps(&runs)
        );
    }
    let tiny = [
        "workers=2".to_string(),
        "servers=1".into(),
        "model.hidden=[1]".into(),
        "batch=1".into(),
        "iterations=2000".into(),
        "eval_every=2000".into(),
        "stragglers=[]".into(),
        "trace=\"off\"".into(),
        "strategies=[\"bsp\"]".into(),
    ];
    let s = launch(concord, root, 2, &tiny, &out.join("small"))?;
    let messages = number(&s, "messages_sent")?;
    let per = number(&s, "run_time_s")? / messages;
    println!(
        "small messages: {:.1} µs of run time per message ({} messages of a tiny-model BSP job, \
         two processes; an upper bound on the per-message cost)",
        per * 1e6,
        messages
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_is_what_an_iteration_spends_outside_its_slowest_step() {
        let dir = tempfile::tempdir().unwrap();
        // Iterations end at 10, 13, 17 and 20 s; steps of 2 and 2.5 s, 1 and 3 s, 2 and 1 s.
        let rows = [
            (10.0, [9.0, 9.0]),
            (13.0, [2.0, 2.5]),
            (17.0, [1.0, 3.0]),
            (20.0, [2.0, 1.0]),
        ];
        let text: String = rows
            .iter()
            .map(|(t, c)| format!("{{\"time_s\": {t}, \"compute_s\": [{}, {}]}}\n", c[0], c[1]))
            .collect();
        std::fs::write(dir.path().join("metrics.jsonl"), text).unwrap();
        // After the first WARM_UP (2) iterations: (17 - 13 - 3) and (20 - 17 - 2).
        let got = steady_transfer_seconds(dir.path()).unwrap();
        assert!((got - 1.0).abs() < 1e-12, "{got}");
        std::fs::write(dir.path().join("metrics.jsonl"), "{\"time_s\": 1.0}\n").unwrap();
        assert!(steady_transfer_seconds(dir.path()).is_err());
    }
}
