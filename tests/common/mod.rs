//! Helpers shared by the integration tests: the test-support crate's, with the project's
//! registry.
#![allow(dead_code)]

use concord::engine::config::RunConfig;
use concord::engine::run::RunResult;
#[allow(unused_imports)]
pub use concord_test_support::{max_diff, small, straggler, with_runtime};

/// Adds a slow device (`slow`, 1 GFLOP/s) so compute dominates communication, and uses it.
pub fn on_slow_devices(cfg: RunConfig) -> RunConfig {
    concord_test_support::on_device(cfg, "slow", concord_test_support::slow_device(1.0))
}

/// The project's `configs/<name>` with `sets` (`--set` arguments) applied.
pub fn config_with(name: &str, sets: &[&str]) -> RunConfig {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    concord::config::load(Some(&file), &sets).unwrap()
}

/// The value of the printed summary's line `name` (e.g. `"test loss"`), if it has one.
pub fn summary_line(stdout: &str, name: &str) -> Option<String> {
    stdout
        .lines()
        .find(|l| l.starts_with(name))
        .map(|l| l[name.len()..].trim().to_string())
}

/// `--set`s that turn `configs/default.toml` into a small staged CNN on image-shaped blobs over
/// 3 workers: a model Fela's MP and HP baselines can cut (the default MLP has too few stages).
pub const SMALL_CNN: [&str; 5] = [
    "workers=3",
    "model.kind=\"vgg-like\"",
    "model.image=[3,8,8]",
    "data.kind=\"blobs\"",
    "data.dim=192",
];

/// Runs with the project's registry.
pub fn run(cfg: &RunConfig) -> RunResult {
    concord_test_support::run_with(&concord::registry(), cfg)
}

/// Runs the `concord` binary with `args` in `dir` (with `CONCORD_WORKERS` unset, so the
/// environment of the test run does not leak into the config).
pub fn concord(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    concord_with_env(args, dir, &[])
}

/// [`concord`] with the environment variables `env` set.
pub fn concord_with_env(
    args: &[&str],
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(args)
        .current_dir(dir)
        .env_remove("CONCORD_WORKERS")
        .envs(env.iter().copied())
        .output()
        .expect("runs the binary")
}

/// A short `train`: two workers, two iterations.
pub const FAST: [&str; 6] = [
    "train",
    "--quiet",
    "--set",
    "iterations=2",
    "--set",
    "workers=2",
];

/// Runs [`FAST`] with `extra` in a fresh folder, expecting failure; its stderr and the folder.
pub fn rejected(extra: &[&str], env: &[(&str, &str)]) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = FAST.to_vec();
    args.extend_from_slice(extra);
    let out = concord_with_env(&args, dir.path(), env);
    assert!(!out.status.success(), "{extra:?} should fail");
    (String::from_utf8_lossy(&out.stderr).into_owned(), dir)
}

/// Nothing but `keep` in `dir`: the run wrote nothing (no `runs/`, no `--out` folder).
pub fn nothing_written(dir: &std::path::Path, keep: &[&str]) {
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    assert!(left.is_empty(), "the run wrote {left:?}");
}

/// Sends `signal` (`-INT`, `-TERM`, `-KILL`) to the process `pid`.
#[cfg(unix)]
pub fn send(signal: &str, pid: u32) {
    let sent = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

/// Waits until `path` exists, at most a minute.
pub fn wait_for_path(path: &std::path::Path) {
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A run cut by a checkpoint and the same run resumed from a checkpoint file, for comparing the
/// two: `one`, `make(2 · at)` with a checkpoint every `at` clocks; `first`, `make(at)`; `file`,
/// the checkpoint `first` left in its run folder, read back; `resumed`, `make(2 · at)` resumed
/// from it.
pub struct Resumed {
    pub one: RunResult,
    pub first: RunResult,
    pub file: concord::engine::checkpoint::Checkpoint,
    pub resumed: RunResult,
}

/// Runs [`Resumed`]'s runs with the project's registry.
pub fn resumed_through_a_file(make: impl Fn(u64) -> RunConfig, at: u64) -> Resumed {
    use concord::engine::checkpoint;
    use concord::engine::run::RunOptions;
    let run_opts = |cfg: &RunConfig, options: RunOptions| {
        let asm = concord::registry().compose(cfg).expect("composes");
        let options = concord_test_support::recording_reads(options);
        concord::engine::run(cfg, &asm, options).expect("runs")
    };
    let mut whole = make(2 * at);
    whole.checkpoint_every = Some(at);
    let one = run_opts(&whole, RunOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let first = run_opts(&make(at), RunOptions::default());
    concord::engine::output::write_run_folder(dir.path(), &first).unwrap();
    let file = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).expect("reads");
    let options = RunOptions {
        resume: Some(std::sync::Arc::new(file.point.clone())),
        ..RunOptions::default()
    };
    let resumed = run_opts(&make(2 * at), options);
    Resumed {
        one,
        first,
        file,
        resumed,
    }
}

/// The end time of every metrics row, as bits.
pub fn row_times(r: &RunResult) -> Vec<u64> {
    r.rows.iter().map(|x| x.time_s.to_bits()).collect()
}
