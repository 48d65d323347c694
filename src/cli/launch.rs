//! `concord launch --nproc N <command>`: a one-machine try of a `--runtime process` job. Starts N
//! copies of this program with torchrun's variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR=127.0.0.1`, a free `MASTER_PORT`) and a fresh job id, waits for all, and stops
//! the rest when one fails; with `--max-restarts`, starts the group again after a failure, as
//! torchrun does, a training job continuing from its last checkpoint. Each process computes on
//! its share of the cores (`RAYON_NUM_THREADS`, unless set).

mod restart;
mod signals;

use clap::{Args, Parser};
use restart::{Continue, Restartable};
use signals::Caught;
use std::ffi::OsString;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Arguments of `launch`.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// Number of processes (the job's cluster must have this many machines); also
    /// `--nproc-per-node`, torchrun's name for it.
    #[arg(
        long,
        visible_alias = "nproc-per-node",
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub nproc: u32,
    /// Rendezvous port on 127.0.0.1 (default: a free one).
    #[arg(long)]
    pub master_port: Option<u16>,
    /// Seconds the other processes get to stop by themselves after one fails, before they are
    /// killed.
    #[arg(long, default_value_t = 60.0)]
    pub grace_s: f64,
    /// Times the whole group is started again after one of its processes fails (torchrun's
    /// `--max-restarts`). A `train` job continues from the last checkpoint in its run folder
    /// (`checkpoint_every`), or from the beginning if it had cut none.
    #[arg(long, default_value_t = 0)]
    pub max_restarts: u32,
    /// The concord command each process runs, e.g. `train --config configs/default.toml`
    /// (`--runtime process` is added to `train` when not given; a `sim` or `wall` job, which runs
    /// in one process, is refused at more than one).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

/// Runs `launch`.
pub fn run(args: &LaunchArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find this program to start it again: {e}"))?;
    let restartable = if args.max_restarts > 0 {
        Some(Restartable::new(&args.command)?)
    } else {
        None
    };
    let mut command = restartable
        .as_ref()
        .map_or_else(|| args.command.clone(), |r| r.first().to_vec());
    let job_id = format!(
        "launch-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    check_train(&with_process_runtime(&command), args.nproc)?;
    // Caught before any process starts: a stopped launch stops them all.
    let caught = Caught::install()?;
    let mut attempt = 0;
    loop {
        // A restarted group is a new job on the wire: a stale frame of the failed one is refused.
        let job = match attempt {
            0 => job_id.clone(),
            k => format!("{job_id}-restart-{k}"),
        };
        let group = start_group(&exe, args, &with_process_runtime(&command), &job, &caught);
        let failure = match group {
            Ok(()) => return Ok(()),
            Err(Stop::Failed(failure)) => failure,
            Err(Stop::Interrupted(signal)) => {
                eprintln!(
                    "concord launch: interrupted ({}); its {} processes were stopped",
                    crate::cli::interrupt::signal_name(signal),
                    args.nproc
                );
                std::process::exit(128 + signal);
            }
        };
        let Some(restartable) = restartable.as_ref() else {
            return Err(failure);
        };
        if attempt == args.max_restarts {
            anyhow::bail!(
                "{failure}; no restart left (--max-restarts {})",
                args.max_restarts
            );
        }
        let (next, how) = restartable
            .next()
            .map_err(|why| anyhow::anyhow!("{failure}; not restarted: {why}"))?;
        attempt += 1;
        eprintln!(
            "concord launch: {failure}; restart {attempt} of {}: {}",
            args.max_restarts,
            match how {
                Continue::Resume => format!(
                    "continuing from the last checkpoint in {}",
                    restartable.out().display()
                ),
                Continue::FromScratch => "from the beginning (no checkpoint was cut)".into(),
            }
        );
        command = next;
    }
}

/// Why a group of processes did not all end well.
enum Stop {
    /// One failed (or could not start): the first failure.
    Failed(anyhow::Error),
    /// The launch was sent this signal, and stopped the processes.
    Interrupted(i32),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Stop {
        Stop::Failed(e)
    }
}

/// Starts the `args.nproc` processes of `command` as job `job_id` and waits for them all.
fn start_group(
    exe: &std::path::Path,
    args: &LaunchArgs,
    command: &[OsString],
    job_id: &str,
    caught: &Caught,
) -> Result<(), Stop> {
    let port = match args.master_port {
        Some(p) => p,
        None => free_port()?,
    };
    // As torchrun does for OMP_NUM_THREADS: processes sharing the cores get a share each.
    let threads = std::env::var("RAYON_NUM_THREADS").ok().unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        (cores / args.nproc).max(1).to_string()
    });
    let mut children: Vec<(u32, Child)> = Vec::new();
    for rank in 0..args.nproc {
        let child = Command::new(exe)
            .env("RAYON_NUM_THREADS", &threads)
            .args(command)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", args.nproc.to_string())
            .env("LOCAL_WORLD_SIZE", args.nproc.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("CONCORD_JOB_ID", job_id)
            .spawn();
        match child {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                kill_all(&mut children);
                return Err(anyhow::anyhow!("cannot start rank {rank}: {e}").into());
            }
        }
    }
    wait_all(
        children,
        Duration::from_secs_f64(args.grace_s.max(0.0)),
        caught,
    )
}

/// Checks what a `train` command would check first, before any process starts: its arguments,
/// its configuration (a resumed run's from its run folder's checkpoint) and strategies, and one
/// machine for each of the `nproc` processes. A mistake is then told once, not by every process.
fn check_train(command: &[OsString], nproc: u32) -> anyhow::Result<()> {
    if command.first().is_none_or(|c| c != "train") {
        return Ok(());
    }
    let argv = std::iter::once(OsString::from("concord")).chain(command.iter().cloned());
    let args = match super::Cli::try_parse_from(argv) {
        Ok(super::Cli {
            command: super::Command::Train(args),
        }) => args,
        Ok(_) => return Ok(()),
        Err(e) => {
            let text = e.render().to_string();
            anyhow::bail!("{}", text.trim_start_matches("error: ").trim_end())
        }
    };
    let sourced = match &args.resume {
        Some(dir) => super::resumed_config(dir, &args.config.sets, &args.runtime_sets())?.0,
        None => args.config.load(&args.runtime_sets())?,
    };
    let asm = crate::registry()
        .compose(&sourced.config)
        .map_err(|e| sourced.attribute(e))?;
    if sourced.config.runtime == concord_engine::context::RuntimeKind::Process {
        concord_engine::run::process_cluster(&sourced.config, &asm, nproc, "concord launch")
            .map_err(|e| sourced.attribute(e))?;
    } else if nproc > 1 {
        // Each process would run the whole job on its own and write the same run folder.
        let runtime = sourced.config.runtime.as_str();
        anyhow::bail!(
            "--nproc {nproc}: a `{runtime}` job runs in one process (`concord train --runtime \
             {runtime}`); `concord launch` starts the processes of a `--runtime process` job \
             (drop `--runtime {runtime}`)"
        );
    }
    Ok(())
}

/// `command` with `--runtime process` added after `train` when it names no runtime.
fn with_process_runtime(command: &[OsString]) -> Vec<OsString> {
    let mut out = command.to_vec();
    let is_train = command.first().is_some_and(|c| c == "train");
    let names_runtime = command
        .iter()
        .any(|a| a == "--runtime" || a.to_string_lossy().starts_with("--runtime="));
    if is_train && !names_runtime {
        out.insert(1, "--runtime".into());
        out.insert(2, "process".into());
    }
    out
}

/// A port free on 127.0.0.1 now.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| anyhow::anyhow!("cannot find a free port for the rendezvous: {e}"))?;
    Ok(listener.local_addr()?.port())
}

/// Waits for every child; after the first failure, the others get `grace` to stop by themselves
/// (they notice the lost peer), then are killed. The first failure is the error. A signal
/// `caught` meanwhile is passed on to every child (SIGTERM), which then gets `grace` to stop.
fn wait_all(mut children: Vec<(u32, Child)>, grace: Duration, caught: &Caught) -> Result<(), Stop> {
    let mut failed: Option<(u32, ExitStatus)> = None;
    let mut stopping_since: Option<Instant> = None;
    let mut interrupted: Option<i32> = None;
    while !children.is_empty() {
        if interrupted.is_none() {
            if let Some(signal) = caught.signal() {
                interrupted = Some(signal);
                stopping_since = Some(Instant::now());
                for (_, child) in &children {
                    signals::terminate(child);
                }
            }
        }
        let mut i = 0;
        while i < children.len() {
            match children[i].1.try_wait() {
                Ok(Some(status)) => {
                    let (rank, _) = children.remove(i);
                    if !status.success() && failed.is_none() {
                        failed = Some((rank, status));
                        stopping_since.get_or_insert_with(Instant::now);
                    }
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let (rank, _) = children.remove(i);
                    tracing::warn!("cannot wait for rank {rank}: {e}");
                }
            }
        }
        if stopping_since.is_some_and(|t| t.elapsed() > grace) {
            kill_all(&mut children);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A signal after the last process ended still stops the launch (no restart follows it).
    match (interrupted.or_else(|| caught.signal()), failed) {
        (Some(signal), _) => Err(Stop::Interrupted(signal)),
        (None, None) => Ok(()),
        (None, Some((rank, status))) => {
            Err(anyhow::anyhow!("rank {rank} failed ({status})").into())
        }
    }
}

fn kill_all(children: &mut Vec<(u32, Child)>) {
    for (_, c) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    children.clear();
}

/// A command line from its words, for the tests of this module and its children.
#[cfg(test)]
fn words(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchruns_name_for_the_process_count_is_understood() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "concord",
            "launch",
            "--nproc-per-node",
            "3",
            "train",
        ])
        .unwrap();
        match cli.command {
            crate::cli::Command::Launch(args) => assert_eq!(args.nproc, 3),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn train_gets_the_process_runtime_unless_it_names_one() {
        assert_eq!(
            with_process_runtime(&words(&["train", "--config", "c.toml"])),
            words(&["train", "--runtime", "process", "--config", "c.toml"])
        );
        let named = words(&["train", "--runtime", "wall"]);
        assert_eq!(with_process_runtime(&named), named);
        let other = words(&["config"]);
        assert_eq!(with_process_runtime(&other), other);
    }
}
