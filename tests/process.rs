//! `--runtime process`: every strategy runs with one OS process per machine over TCP (started by
//! `concord launch`); BSP and allreduce end with the parameters `sim` ends with, bit for bit;
//! FlexRR's exactly-once ledger (checked by its coordinator, which fails the run otherwise) holds
//! across processes; a killed process ends the run everywhere with a named error and no run
//! folder, and `concord launch --max-restarts` continues the job from its last checkpoint;
//! strangers' frames are refused without disturbing the run.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A small job: an MLP on the teacher task, `workers` workers on `machines` machines; `top`:
/// more top-level keys, `tables`: more tables.
fn config(dir: &Path, machines: u32, workers: u32, top: &str, tables: &str) -> PathBuf {
    let slots = workers.div_ceil(machines);
    let text = format!(
        "seed = 7\nworkers = {workers}\nservers = 2\nbatch = 16\niterations = 12\neval_every = 6\n\
         trace = \"sampled\"\n{top}\n\
         [model]\nkind = \"mlp\"\nhidden = [32]\n\
         [data]\nkind = \"teacher\"\ntrain = 2048\ntest = 256\n\
         [optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.0\n\
         [cluster]\nmachines = [{{ device = \"cpu\", count = {machines}, slots = {slots} }}]\n\
         [process]\npeer_timeout_s = 10.0\nconnect_timeout_s = 60.0\n{tables}"
    );
    let path = dir.join("job.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn concord() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_concord"));
    c.env_remove("CONCORD_WORKERS")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("SLURM_PROCID")
        .env_remove("SLURM_NTASKS")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("OMPI_COMM_WORLD_SIZE");
    c
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `concord launch --nproc n train --config cfg --out out`, expecting success.
fn launch(n: u32, cfg: &Path, out: &Path, extra: &[&str]) -> Output {
    let out = concord()
        .args(["launch", "--nproc", &n.to_string(), "train", "--quiet"])
        .arg("--config")
        .arg(cfg)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("runs concord launch");
    assert!(out.status.success(), "launch failed\n{}", text(&out));
    out
}

/// The same job in `sim`, in-process through the CLI.
fn sim(cfg: &Path, out: &Path) {
    sim_with(cfg, out, &[]);
}

/// [`sim`] with more arguments (`--set` overrides).
fn sim_with(cfg: &Path, out: &Path, extra: &[&str]) {
    let done = concord()
        .args(["train", "--quiet", "--runtime", "sim", "--config"])
        .arg(cfg)
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(done.status.success(), "sim failed\n{}", text(&done));
}

/// `concord launch --nproc n train --resume run --set iterations=…`, expecting success.
fn resume_launch(n: u32, run: &Path, iterations: u64) {
    let resumed = concord()
        .args([
            "launch",
            "--nproc",
            &n.to_string(),
            "train",
            "--quiet",
            "--resume",
        ])
        .arg(run)
        .args(["--set", &format!("iterations={iterations}")])
        .output()
        .expect("runs concord launch");
    assert!(
        resumed.status.success(),
        "resume failed\n{}",
        text(&resumed)
    );
}

/// The model tensors of a run folder's checkpoint, by name.
fn model(run: &Path) -> BTreeMap<String, Vec<u8>> {
    let bytes = std::fs::read(run.join("checkpoint.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .filter(|(name, _)| !name.starts_with('~'))
        .map(|(name, t)| (name, t.data().to_vec()))
        .collect()
}

fn summary(run: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap()
}

/// Runs `strategies` (with `body` appended to the config) under 2 processes of 2 workers each.
fn runs_under_processes(strategies: &str, body: &str) {
    runs_under_processes_with(strategies, body, &[]);
}

/// [`runs_under_processes`] with more `--set` overrides.
fn runs_under_processes_with(strategies: &str, body: &str, sets: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 4, "", body);
    let out = dir.path().join("run");
    let strategies = format!("strategies={strategies}");
    let mut args = vec!["--set", strategies.as_str()];
    for s in sets {
        args.extend(["--set", s]);
    }
    launch(2, &cfg, &out, &args);
    let s = summary(&out);
    assert_eq!(s["runtime"], "process");
    assert_eq!(s["workers"], 4);
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 12, "one row per iteration");
    assert!(s["final_loss"].as_f64().is_some_and(f64::is_finite));
    assert!(s["bytes_sent"].as_u64().unwrap() > 0);
}

#[test]
fn bsp_runs_under_processes() {
    runs_under_processes("[\"bsp\"]", "");
}

#[test]
fn ssp_runs_under_processes() {
    runs_under_processes("[\"ssp\"]", "");
}

#[test]
fn asp_runs_under_processes() {
    runs_under_processes("[\"asp\"]", "");
}

#[test]
fn a_balanced_placement_runs_under_processes() {
    runs_under_processes("[\"bsp\", \"balanced\"]", "");
}

#[test]
fn lb_bsp_runs_under_processes() {
    runs_under_processes("[\"lb-bsp\"]", "");
}

#[test]
fn allreduce_runs_under_processes() {
    runs_under_processes("[\"allreduce\"]", "");
}

#[test]
fn rna_runs_under_processes() {
    runs_under_processes("[\"rna\"]", "");
}

#[test]
fn ad_psgd_runs_under_processes() {
    runs_under_processes("[\"ad-psgd\"]", "");
}

#[test]
fn eager_sgd_runs_under_processes() {
    runs_under_processes("[\"eager-sgd\"]", "");
}

/// FlexRR's coordinator checks that every (clock, unit) was processed exactly once and fails the
/// run otherwise; a heavy straggler makes work move between processes.
#[test]
fn flexrr_runs_under_processes_and_its_ledger_verifies() {
    runs_under_processes(
        "[\"flexrr\"]",
        "[[stragglers]]\npattern = \"persistent\"\nspread = { min = 0.25, max = 1.0 }\n",
    );
}

/// Cut by checkpoints, FlexRR's processes hand their state on at each cut: the exactly-once check
/// covers every clock of the run, and the run folder's checkpoint can be resumed from.
#[test]
fn flexrr_under_processes_resumes_across_checkpoints() {
    let tables = "[[stragglers]]\npattern = \"persistent\"\nspread = { min = 0.25, max = 1.0 }\n\
                  [strategy.flexrr]\nunits = 8\n";
    // 12 clocks of 4 workers × 8 units, those before the cuts at 5 and 10 included; then 16.
    resumes_under_processes(
        "flexrr",
        tables,
        &[],
        "flexrr.units_verified",
        [384.0, 512.0],
    );
}

/// RNA's processes hand on their buffers, in-flight steps and the controller's sampler at each
/// cut: the replicas agree after every round of the run, those before the cuts included.
#[test]
fn rna_under_processes_resumes_across_checkpoints() {
    resumes_under_processes("rna", "", &[], "rna.checked_rounds", [12.0, 16.0]);
}

/// Fela's token server hands its tuner on at each cut: the weight vectors tried over the 12 and
/// then 16 iterations (six of them, three iterations each, in a fixed order; the resume at 12 is
/// a change of case) are those of the same job run in `sim` without cuts, so the tokens handed
/// out add up to theirs.
#[test]
fn fela_under_processes_resumes_across_checkpoints() {
    let tables = "[strategy.fela]\nboundaries = [1, 2]\nthreshold_batch = 4\ntune_iters = 3\n";
    let model = ["--set", "model.hidden=[32, 16]"];
    let uncut = |iterations: u32| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), 2, 4, "strategies = [\"fela\"]", tables);
        let out = dir.path().join("sim");
        let iterations = format!("iterations={iterations}");
        sim_with(&cfg, &out, &["--set", &iterations, model[0], model[1]]);
        summary(&out)["figures"]["fela.tokens"].as_f64().unwrap()
    };
    let expected = [uncut(12), uncut(16)];
    resumes_under_processes("fela", tables, &model, "fela.tokens", expected);
}

/// `strategy` as 2 processes of 2 workers (the config with `tables` appended, and `sets`), 12
/// iterations cut every 5, then resumed to 16: `figure` covers the whole run each time
/// (`expected`), and every iteration has its row.
fn resumes_under_processes(
    strategy: &str,
    tables: &str,
    sets: &[&str],
    figure: &str,
    expected: [f64; 2],
) {
    let dir = tempfile::tempdir().unwrap();
    let top = format!("strategies = [\"{strategy}\"]");
    let cfg = config(dir.path(), 2, 4, &top, tables);
    let out = dir.path().join("run");
    let mut args = vec!["--set", "checkpoint_every=5"];
    args.extend_from_slice(sets);
    launch(2, &cfg, &out, &args);
    assert_eq!(summary(&out)["figures"][figure], expected[0]);
    resume_launch(2, &out, 16);
    assert_eq!(summary(&out)["figures"][figure], expected[1]);
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 16, "one row per iteration");
}

#[test]
fn elastic_ps_runs_under_processes() {
    runs_under_processes("[\"elastic-ps\"]", "");
}

/// Fela tunes through weight cases and CTD subsets (a sub-model handed over between processes)
/// while tokens, outputs and gradients cross them.
#[test]
fn fela_runs_under_processes() {
    runs_under_processes_with(
        "[\"fela\"]",
        "[strategy.fela]\nboundaries = [1, 2]\nthreshold_batch = 4\ntune_iters = 1\n",
        &["model.hidden=[32, 16]"],
    );
}

#[test]
fn fela_mp_runs_under_processes() {
    runs_under_processes_with("[\"fela-mp\"]", "", &["model.hidden=[32, 16, 16]"]);
}

#[test]
fn fela_hp_runs_under_processes() {
    runs_under_processes_with("[\"fela-hp\"]", "[strategy.fela-hp]\nfc_from = 1\n", &[]);
}

#[test]
fn pipedream_runs_under_processes() {
    // A straight pipeline: activations and gradients cross between the two processes.
    runs_under_processes_with(
        "[\"pipedream\"]",
        "[strategy.pipedream]\nboundaries = [1, 2, 3]\n",
        &["model.hidden=[32, 16, 16]"],
    );
}

#[test]
fn pipedream_with_a_replicated_stage_runs_under_processes() {
    // 2-1-1: the input stage's replicas average their gradients over the ring every round.
    runs_under_processes_with(
        "[\"pipedream\"]",
        "[strategy.pipedream]\nboundaries = [1, 2]\nreplicas = [2, 1, 1]\n",
        &["model.hidden=[32, 16]"],
    );
}

#[test]
fn gpipe_runs_under_processes() {
    runs_under_processes_with(
        "[\"gpipe\"]",
        "[strategy.gpipe]\nboundaries = [1, 2, 3]\ndepth = 3\n",
        &["model.hidden=[32, 16, 16]"],
    );
}

/// A job of `strategy` over `machines` machines and `workers` workers, already run in `sim`:
/// the folder holding it all, the config, the `sim` run folder and where the process run goes.
fn with_sim_reference(
    strategy: &str,
    machines: u32,
    workers: u32,
) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let top = format!("strategies = [\"{strategy}\"]");
    let cfg = config(dir.path(), machines, workers, &top, "");
    let (a, b) = (dir.path().join("sim"), dir.path().join("process"));
    sim(&cfg, &a);
    (dir, cfg, a, b)
}

/// BSP and allreduce aggregate in a canonical order: eight processes end where `sim` ends.
#[test]
fn bsp_and_allreduce_end_with_the_parameters_of_sim() {
    for strategy in ["bsp", "allreduce"] {
        let (_dir, cfg, a, b) = with_sim_reference(strategy, 4, 8);
        launch(4, &cfg, &b, &[]);
        assert_same_model(&a, &b, strategy);
    }
}

/// Every process reads one run clock, set by rank 0's before the roles start: a worker's wait
/// for a server of the other process (the server's time of serving against the worker's time of
/// asking) fits inside the worker's clock, and no span of a worker's timeline starts before the
/// one before it ended. On clocks of their own, started a message's latency or more apart, a
/// wait came out longer than the clock it was part of, and the timelines overlapped.
#[test]
fn the_processes_share_one_run_clock() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "", "");
    let out = dir.path().join("run");
    let sets = [
        "iterations=200",
        "eval_every=200",
        "trace=\"full\"",
        "strategies=[\"bsp\"]",
    ];
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    launch(2, &cfg, &out, &args);
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seconds = |row: &serde_json::Value, key: &str, w: usize| row[key][w].as_f64().unwrap();
    let steady = &rows[20..];
    let clock = (steady[steady.len() - 1]["time_s"].as_f64().unwrap()
        - steady[0]["time_s"].as_f64().unwrap())
        / (steady.len() - 1) as f64;
    for w in 0..2 {
        let spent: f64 = steady[1..]
            .iter()
            .map(|r| seconds(r, "compute_s", w) + seconds(r, "wait_s", w) + seconds(r, "comm_s", w))
            .sum::<f64>()
            / (steady.len() - 1) as f64;
        assert!(
            spent <= 1.1 * clock,
            "worker {w} accounts {spent} s a clock, in clocks of {clock} s"
        );
        let trace: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("trace/worker-{w}.json"))).unwrap(),
        )
        .unwrap();
        let mut spans: Vec<(f64, f64)> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                let ts = e["ts"].as_f64().unwrap();
                (ts, ts + e["dur"].as_f64().unwrap_or(0.0))
            })
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Microseconds: what the clocks' alignment may leave (a fraction of a loopback round
        // trip), far below the hundreds the unaligned clocks were apart.
        let overlaps = spans.windows(2).filter(|p| p[1].0 < p[0].1 - 25.0).count();
        assert_eq!(
            overlaps, 0,
            "worker {w}: spans overlapping their predecessor"
        );
    }
}

/// The model tensors of two run folders are the same bits.
fn assert_same_model(a: &Path, b: &Path, what: &str) {
    let (ma, mb) = (model(a), model(b));
    assert!(!ma.is_empty());
    assert_eq!(ma.keys().collect::<Vec<_>>(), mb.keys().collect::<Vec<_>>());
    for (name, bits) in &ma {
        assert!(bits == &mb[name], "{what}: tensor {name} differs from sim");
    }
}

/// A process job cut by `checkpoint_every` plays each stretch with roles built afresh from the
/// cut, which rank 0 sends the other processes: BSP and allreduce over 3 processes (two of them
/// followers, which wait for each other between stretches) still end where `sim` ends, and the
/// run keeps one row per iteration.
#[test]
fn a_process_job_cut_by_checkpoints_ends_with_the_parameters_of_sim() {
    for strategy in ["bsp", "allreduce"] {
        let (_dir, cfg, a, b) = with_sim_reference(strategy, 3, 6);
        launch(3, &cfg, &b, &["--set", "checkpoint_every=5"]);
        assert_same_model(&a, &b, strategy);
        let rows = std::fs::read_to_string(b.join("metrics.jsonl")).unwrap();
        assert_eq!(
            rows.lines().count(),
            12,
            "{strategy}: one row per iteration"
        );
        // Every role's timeline of each later stretch is in its own file, whichever process ran
        // the role.
        let names: Vec<String> = std::fs::read_dir(b.join("trace"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let first: Vec<&String> = names.iter().filter(|n| !n.contains(".from-")).collect();
        assert!(first.iter().any(|n| n.starts_with("worker-2")), "{names:?}");
        for name in first {
            for clock in [5, 10] {
                let later = name.replace(".json", &format!(".from-{clock}.json"));
                assert!(
                    names.contains(&later),
                    "{strategy}: no {later} in {names:?}"
                );
            }
        }
    }
}

/// A pipeline cut by checkpoints drains at every cut and restarts from the stages' checkpoints
/// (which rank 0 sends the other processes): PipeDream 2-1 over 2 processes ends where `sim` with
/// the same cuts ends.
#[test]
fn a_pipeline_cut_by_checkpoints_ends_with_the_parameters_of_sim() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        2,
        4,
        "strategies = [\"pipedream\"]\ncheckpoint_every = 5",
        "[strategy.pipedream]\nboundaries = [1]\nreplicas = [2, 1]\n",
    );
    let (a, b) = (dir.path().join("sim"), dir.path().join("process"));
    sim(&cfg, &a);
    launch(2, &cfg, &b, &[]);
    assert_same_model(&a, &b, "pipedream");
}

/// A process job stopped at its checkpoint and resumed under processes (`--resume`, more
/// iterations) ends where one `sim` run of all the iterations ends; SSP's cut (its workers wait
/// for each other at the checkpoint clock) resumes under processes too.
#[test]
fn a_process_job_resumes_from_its_checkpoint() {
    for strategy in ["bsp", "ssp"] {
        let (_dir, cfg, a, b) = with_sim_reference(strategy, 3, 6);
        launch(3, &cfg, &b, &["--set", "iterations=7"]);
        resume_launch(3, &b, 12);
        let s = summary(&b);
        assert_eq!(s["runtime"], "process");
        let rows = std::fs::read_to_string(b.join("metrics.jsonl")).unwrap();
        assert_eq!(
            rows.lines().count(),
            12,
            "{strategy}: one row per iteration"
        );
        if strategy == "bsp" {
            assert_same_model(&a, &b, strategy);
        }
    }
}

/// The environment of rank `rank` of a hand-started `world`-process job.
fn rank_env(c: &mut Command, rank: u32, world: u32, port: u16, job: &str) {
    c.env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("CONCORD_JOB_ID", job);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts rank `rank` of a `world`-process job by hand (so the test holds its pid).
fn start_rank(rank: u32, world: u32, cfg: &Path, out: &Path, port: u16, extra: &[&str]) -> Child {
    let mut c = concord();
    rank_env(&mut c, rank, world, port, "hand-started");
    c.args(["train", "--quiet", "--runtime", "process", "--config"])
        .arg(cfg)
        .arg("--out")
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts every rank of a `world`-process job by hand.
fn start(world: u32, cfg: &Path, out: &Path, port: u16, extra: &[&str]) -> Vec<Child> {
    (0..world)
        .map(|rank| start_rank(rank, world, cfg, out, port, extra))
        .collect()
}

/// Waits for `child` at most `limit`; its output, or `None` if it is still running.
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Waits until the roles of rank 0 run: it streams their timelines into `out/trace`.
fn wait_until_running(out: &Path) {
    common::wait_for_path(&out.join("trace"));
    std::thread::sleep(Duration::from_millis(300));
}

/// Waits until the job writing `out` has cut its first checkpoint; the checkpoint's path.
fn wait_for_checkpoint(out: &Path) -> PathBuf {
    let file = out.join("checkpoint.safetensors");
    common::wait_for_path(&file);
    file
}

/// A BSP job on 2 machines of `iterations` clocks, cut every 40, with a delay of 1–3 ms before
/// every iteration: long enough to be killed mid-run after a checkpoint (the delay changes the
/// run's time, not its math).
fn job_to_kill(dir: &Path, iterations: u32) -> PathBuf {
    let cfg = config(
        dir,
        2,
        2,
        "strategies = [\"bsp\"]\ncheckpoint_every = 40",
        "[[stragglers]]\npattern = \"uniform-delay\"\nmin_s = 0.001\nmax_s = 0.003\n",
    );
    let job = std::fs::read_to_string(&cfg).unwrap();
    let job = job.replace("iterations = 12\n", &format!("iterations = {iterations}\n"));
    std::fs::write(&cfg, job).unwrap();
    cfg
}

/// SIGKILL on one worker process mid-run: the others stop within the peer timeout, exit
/// non-zero, rank 0 names the machine, its roles and the last iteration, and no run folder is
/// left.
#[test]
fn a_killed_worker_process_ends_the_run_with_a_named_error_and_no_run_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 3, 3, "", "");
    let out = dir.path().join("run");
    // Long enough to be killed mid-run.
    let extra = [
        "--set",
        "iterations=100000",
        "--set",
        "strategies=[\"bsp\"]",
        "--set",
        "trace=\"full\"",
    ];
    let mut ranks = start(3, &cfg, &out, free_port(), &extra);
    wait_until_running(&out);
    ranks[2].kill().unwrap();
    let killed_at = Instant::now();
    let _ = ranks[2].wait();
    for (rank, child) in ranks.iter_mut().enumerate().take(2) {
        let status = wait_for(child, Duration::from_secs(30)).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("rank {rank} did not stop after its peer was killed");
        });
        assert!(!status.success(), "rank {rank} exited 0 after a peer died");
    }
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(ranks[0].stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("machine 2")
            && stderr.contains("worker 2")
            && stderr.contains("iterations"),
        "rank 0 should name the lost machine, its roles and its progress: {stderr}"
    );
    assert!(!out.exists(), "a failed run left its folder behind");
}

/// A process job in which no worker can close an iteration (worker 0 sleeps for an hour in its
/// first) ends after `guard.stall_s` instead of hanging: every process exits non-zero, the
/// error says the run stalled and where the workers stand, and no run folder is left.
#[test]
fn a_stalled_process_job_ends_after_stall_s_with_a_named_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        2,
        2,
        "strategies = [\"bsp\"]",
        "[guard]\nstall_s = 2.0\n[[stragglers]]\npattern = \"round-robin-sleep\"\ndelay_s = 3600.0\n",
    );
    let out = dir.path().join("run");
    let started = Instant::now();
    let result = concord()
        .args([
            "launch",
            "--nproc",
            "2",
            "--grace-s",
            "30",
            "train",
            "--quiet",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("runs concord launch");
    assert!(
        !result.status.success(),
        "a stalled job exited 0\n{}",
        text(&result)
    );
    assert!(started.elapsed() < Duration::from_secs(120));
    let said = text(&result);
    assert!(
        said.contains("the run stalled: no worker closed an iteration for 2 s (guard.stall_s)")
            && said.contains("worker 0 at iteration 0 of 12"),
        "{said}"
    );
    assert!(!out.exists(), "a failed run left its folder behind");
}

/// A process job that loses a process after cutting checkpoints keeps its folder with the last
/// checkpoint (and says so), and `--resume` under processes continues from it to the parameters
/// one `sim` run of all the iterations ends with: what checkpoints are for.
#[test]
fn a_job_killed_after_a_checkpoint_resumes_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 3, 3, "strategies = [\"bsp\"]", "");
    let out = dir.path().join("run");
    // Long enough to be killed mid-run, cut every few clocks.
    let extra = ["--set", "iterations=100000", "--set", "checkpoint_every=4"];
    let mut ranks = start(3, &cfg, &out, free_port(), &extra);
    let file = wait_for_checkpoint(&out);
    std::thread::sleep(Duration::from_millis(200));
    ranks[1].kill().unwrap();
    let _ = ranks[1].wait();
    for (rank, child) in ranks.iter_mut().enumerate() {
        let status = wait_for(child, Duration::from_secs(30)).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("rank {rank} did not stop after its peer was killed");
        });
        assert!(!status.success(), "rank {rank} exited 0 after a peer died");
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(ranks[0].stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("--resume"),
        "rank 0 should say how to continue: {stderr}"
    );
    let clock = concord::engine::checkpoint::read(&file)
        .unwrap()
        .point
        .clock;
    assert!(clock > 0 && clock.is_multiple_of(4), "cut at clock {clock}");
    let leftovers: Vec<_> = std::fs::read_dir(out.join("trace"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "half-written timelines left: {leftovers:?}"
    );

    let total = clock + 6;
    resume_launch(3, &out, total);
    let reference = dir.path().join("sim");
    sim_with(&cfg, &reference, &["--set", &format!("iterations={total}")]);
    assert_same_model(&reference, &out, "bsp resumed after a kill");
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.lines().count() as u64, total);
}

/// The process `concord launch` (pid `launcher`) started as rank `rank`, if it runs now.
#[cfg(target_os = "linux")]
fn launched_rank(launcher: u32, rank: u32) -> Option<u32> {
    let want = format!("RANK={rank}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (name) state ppid ...`: the name may hold spaces, so read after its `)`.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let is_rank = environ.split(|&b| b == 0).any(|var| var == want.as_bytes());
            (ppid == launcher && is_rank).then_some(pid)
        })
}

/// The job of `cfg` that ended in run folder `out` after a restart has the parameters, the
/// `iterations` rows and the test accuracy of one `sim` run of the same job.
fn ends_as_sim(cfg: &Path, out: &Path, iterations: usize, what: &str) {
    let reference = out.with_file_name("sim");
    sim(cfg, &reference);
    assert_same_model(&reference, out, what);
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), iterations, "{what}");
    assert_eq!(
        summary(out)["final_test_accuracy"],
        summary(&reference)["final_test_accuracy"],
        "{what}"
    );
}

/// Waits at most `limit` for `child` (started with its stderr piped) to end: its status and
/// stderr.
fn end_of(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let status = wait_for(child, limit).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the process did not end within {limit:?}");
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// `concord launch --max-restarts 1`: SIGKILL on a worker process after the job cut a checkpoint
/// starts the group again, which continues from that checkpoint and ends with the parameters,
/// rows and evaluations of one `sim` run of all the iterations, as torchrun's restarts with a
/// script that loads its checkpoint would.
#[cfg(target_os = "linux")]
#[test]
fn a_launched_job_restarts_from_its_checkpoint_after_a_killed_process() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = job_to_kill(dir.path(), 1200);
    let out = dir.path().join("run");
    let mut launcher = concord()
        .args([
            "launch",
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--grace-s",
            "30",
        ])
        .args(["train", "--quiet", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_checkpoint(&out);
    let rank_1 = launched_rank(launcher.id(), 1).expect("rank 1 runs");
    common::send("-KILL", rank_1);
    let (status, stderr) = end_of(&mut launcher, Duration::from_secs(120));
    assert!(status.success(), "the restarted job failed: {stderr}");
    assert!(
        stderr.contains("restart 1 of 1: continuing from the last checkpoint"),
        "the launch should say it restarted: {stderr}"
    );
    ends_as_sim(&cfg, &out, 1200, "bsp restarted after a kill");
}

/// Restarts by torchrun's elastic agent: it starts the group again with the same command and
/// `TORCHELASTIC_RESTART_COUNT=1`. Rank 0 then continues from the checkpoint the job's `--out`
/// holds (the other ranks need only the job's config), and the job ends with the parameters and
/// rows of one `sim` run.
#[test]
fn a_group_restarted_by_torchrun_continues_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = job_to_kill(dir.path(), 800);
    let out = dir.path().join("run");
    let group = |restarts: &str| -> Vec<Child> {
        let port = free_port();
        (0..2)
            .map(|rank| {
                let mut c = concord();
                rank_env(&mut c, rank, 2, port, "elastic");
                c.env("TORCHELASTIC_RESTART_COUNT", restarts)
                    .args(["train", "--quiet", "--runtime", "process", "--config"])
                    .arg(&cfg)
                    .arg("--out")
                    .arg(&out)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect()
    };
    let mut first = group("0");
    wait_for_checkpoint(&out);
    first[1].kill().unwrap();
    for child in &mut first {
        let status = wait_for(child, Duration::from_secs(30)).expect("the group stops");
        assert!(!status.success());
    }
    let mut second = group("1");
    let mut stderr = String::new();
    for (rank, child) in second.iter_mut().enumerate() {
        let (status, err) = end_of(child, Duration::from_secs(120));
        assert!(status.success(), "rank {rank} failed: {err}");
        stderr += &err;
    }
    assert!(
        stderr.contains("continuing from the checkpoint"),
        "rank 0 should say it continues: {stderr}"
    );
    ends_as_sim(&cfg, &out, 800, "bsp restarted by torchrun");

    // Another job (another seed) restarted onto that folder does not continue its checkpoint:
    // rank 0 refuses the folder before connecting to anyone, and the folder is untouched.
    let before = model(&out);
    let mut c = concord();
    rank_env(&mut c, 0, 2, free_port(), "elastic-other");
    let other = c
        .env("TORCHELASTIC_RESTART_COUNT", "1")
        .args(["train", "--quiet", "--runtime", "process", "--config"])
        .arg(&cfg)
        .args(["--set", "seed=8", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!other.status.success());
    assert!(text(&other).contains("already holds"), "{}", text(&other));
    assert_eq!(model(&out), before);
}

/// SIGTERM to `concord launch` (a scheduler stopping the job, say): it passes the signal on to
/// its processes, which end as an interrupted run does (no half-written folder), and exits with
/// 143; no process of the job is left running without its launcher.
#[cfg(target_os = "linux")]
#[test]
fn a_stopped_launch_stops_its_processes_and_leaves_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "strategies = [\"bsp\"]", "");
    let out = dir.path().join("run");
    let mut launcher = concord()
        .args(["launch", "--nproc", "2", "train", "--quiet", "--config"])
        .arg(&cfg)
        .args(["--set", "iterations=10000000", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_running(&out);
    let ranks: Vec<u32> = (0..2)
        .map(|rank| launched_rank(launcher.id(), rank).expect("the rank runs"))
        .collect();
    common::send("-TERM", launcher.id());
    let (status, stderr) = end_of(&mut launcher, Duration::from_secs(60));
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("interrupted (SIGTERM)"), "{stderr}");
    for pid in ranks {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} of the job outlived its launcher"
        );
    }
    assert!(!out.exists(), "a half-written folder is left");
}

/// `--max-restarts` restarts only training jobs, and says so before starting anything.
#[test]
fn max_restarts_on_a_command_other_than_train_is_refused() {
    let out = concord()
        .args(["launch", "--nproc", "2", "--max-restarts", "2", "config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("`config` is not restarted"),
        "{}",
        text(&out)
    );
}

/// Hand-made bad frames at rank 0's rendezvous port, before the other rank has joined and again
/// while the job runs: garbage, a truncated frame, an oversized length, a hello with the wrong
/// token and a hello of another job, beside a stranger that connects and says nothing. Each is
/// refused (and logged); the run ends as `sim` does.
#[test]
fn bad_frames_are_refused_and_the_run_is_unaffected() {
    use concord::engine::process::wire::{self, JobIdentity};
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "", "");
    let (a, b) = (dir.path().join("sim"), dir.path().join("process"));
    sim(&cfg, &a);
    let port = free_port();
    let extra = ["--set", "iterations=400"];
    let mut ranks = vec![start_rank(0, 2, &cfg, &b, port, &extra)];
    let stranger = JobIdentity::new("hand-started", "wrong token", "not the config");
    let other_job = JobIdentity::new("another job", "", "");
    let hello = |id: &JobIdentity| {
        let bytes = wire::encode(id.tag, &id.hello(1, 2, 1)).unwrap();
        let mut framed = (bytes.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        framed
    };
    let garbage = {
        let mut f = 12u32.to_be_bytes().to_vec();
        f.extend_from_slice(b"\xc1garbage!!!!");
        f
    };
    let truncated = {
        let h = hello(&stranger);
        h[..h.len() / 2].to_vec()
    };
    let oversized = u32::MAX.to_be_bytes().to_vec();
    let frames = [
        garbage,
        truncated,
        oversized,
        hello(&stranger),
        hello(&other_job),
    ];
    let connect = || {
        let start = Instant::now();
        loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => return s,
                Err(e) if start.elapsed() > Duration::from_secs(60) => panic!("rank 0: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    };
    // Before rank 1 joins: rank 0 is in its rendezvous. The silent stranger stays connected.
    let _silent = connect();
    for frame in &frames {
        let _ = connect().write_all(frame);
    }
    ranks.push(start_rank(1, 2, &cfg, &b, port, &extra));
    // And while it runs (the run may be over already: best effort).
    for frame in &frames {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(frame);
        }
    }
    for (rank, child) in ranks.iter_mut().enumerate() {
        let status = wait_for(child, Duration::from_secs(120)).expect("the run finishes");
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "rank {rank}: {stderr}");
        if rank == 0 {
            let refused = stderr.matches("refused a connection").count();
            assert!(refused >= frames.len(), "{refused} refusals: {stderr}");
        }
    }
    // 400 iterations: compare with a sim run of the same length.
    let long = dir.path().join("sim-long");
    let done = concord()
        .args([
            "train",
            "--quiet",
            "--runtime",
            "sim",
            "--set",
            "iterations=400",
            "--config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(&long)
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", text(&done));
    assert_eq!(model(&long), model(&b), "the run was disturbed");
    assert!(!model(&a).is_empty());
}

/// A launcher that started another number of processes than the cluster has machines.
#[test]
fn a_world_that_does_not_match_the_cluster_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "", "");
    let mut c = concord();
    rank_env(&mut c, 0, 3, free_port(), "mismatch");
    let out = c
        .args(["train", "--quiet", "--runtime", "process", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2 machines") && err.contains("3 (world size)"),
        "{err}"
    );
    assert!(!dir.path().join("run").exists());
}

/// `--runtime process` without a launcher's variables says which ones it needs.
#[test]
fn the_process_runtime_without_a_launcher_names_the_launchers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "", "");
    let out = concord()
        .args(["train", "--quiet", "--runtime", "process", "--config"])
        .arg(&cfg)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RANK") && err.contains("SLURM_PROCID") && err.contains("concord launch"),
        "{err}"
    );
    common::nothing_written(dir.path(), &["job.toml"]);
}

/// A divergence on any process stops every process; rank 0 writes the stopped run (its summary
/// says why) with the rows every worker completed, its own and the others'.
#[test]
fn a_divergence_anywhere_stops_every_process_and_rank_0_writes_the_stopped_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "", "");
    let out = dir.path().join("run");
    let done = concord()
        .args(["launch", "--nproc", "2", "train", "--quiet", "--config"])
        .arg(&cfg)
        .args([
            "--set",
            "optimizer.lr=1000",
            "--set",
            "iterations=200",
            "--set",
            "eval_every=5",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!done.status.success(), "a diverged run exits non-zero");
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains("training diverged"), "{err}");
    let s = summary(&out);
    assert_eq!(s["stopped"]["reason"], "diverged", "{s}");
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(
        rows.lines().count() > 0,
        "the iterations before the stop are kept"
    );
    for row in rows.lines() {
        let row: serde_json::Value = serde_json::from_str(row).unwrap();
        assert_eq!(
            row["samples"], 32,
            "both workers' records in every row: {row}"
        );
    }
}

/// AgileML under processes: 1 reliable and 3 transient machines (stage 2: ActivePSs on transient
/// machines, the BackupPS on the reliable one), one process each; machine 3 is warned of an
/// eviction while the job runs. Its partitions and data move on and the final parameters are the
/// undisturbed `sim` run's, bit for bit (the tree-ordered sums make arrival order irrelevant).
#[test]
fn agileml_runs_under_processes_through_a_warned_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = "[[cluster.machines]]\ndevice = \"cpu\"\ncount = 1\nlabels = { tier = \"reliable\" }\n\
                 [[cluster.machines]]\ndevice = \"cpu\"\ncount = 3\nlabels = { tier = \"transient\" }\n";
    let text = format!(
        "seed = 7\nworkers = 4\nservers = 4\nbatch = 16\niterations = 40\neval_every = 20\n\
         block_bytes = 512\nstrategies = [\"agileml\"]\n\
         [model]\nkind = \"mlp\"\nhidden = [32]\n\
         [data]\nkind = \"teacher\"\ntrain = 2048\ntest = 256\n\
         [optimizer]\nkind = \"sgd\"\nlr = 0.1\nmomentum = 0.0\n\
         [cluster]\ndefault_device = \"cpu\"\n{tiers}\
         [process]\npeer_timeout_s = 10.0\nconnect_timeout_s = 60.0\n"
    );
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, &text).unwrap();
    let evicted = dir.path().join("evicted.toml");
    // The run takes tens of milliseconds of real time: the warning lands in it.
    let trace =
        "[[membership]]\nat_s = 0.01\nevent = \"warn\"\nmachines = [3]\ndeadline_s = 30.0\n";
    std::fs::write(&evicted, format!("{text}{trace}")).unwrap();
    sim(&plain, &dir.path().join("sim"));
    launch(4, &evicted, &dir.path().join("proc"), &[]);
    let s = summary(&dir.path().join("proc"));
    assert_eq!(s["runtime"], "process");
    let rows = std::fs::read_to_string(dir.path().join("proc").join("metrics.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 40, "one row per iteration");
    assert_eq!(
        s["figures"]["agileml.departures"], 1.0,
        "the warning landed"
    );
    assert_eq!(
        model(&dir.path().join("proc")),
        model(&dir.path().join("sim")),
        "process run with an eviction vs undisturbed sim"
    );
}

/// A machine whose `add` comes after the job ends never starts its roles: its process waits,
/// hears that every other process is done, and ends with them; the model is `sim`'s for the same
/// trace.
#[test]
fn agileml_under_processes_ends_without_a_machine_that_never_joined() {
    let dir = tempfile::tempdir().unwrap();
    let text = "seed = 7\nworkers = 4\nservers = 4\nbatch = 16\niterations = 8\neval_every = 8\n\
                block_bytes = 512\nstrategies = [\"agileml\"]\n\
                [model]\nkind = \"mlp\"\nhidden = [32]\n\
                [data]\nkind = \"teacher\"\ntrain = 2048\ntest = 256\n\
                [cluster]\ndefault_device = \"cpu\"\n\
                [[cluster.machines]]\ndevice = \"cpu\"\ncount = 2\nlabels = { tier = \"reliable\" }\n\
                [[cluster.machines]]\ndevice = \"cpu\"\ncount = 2\nlabels = { tier = \"transient\" }\n\
                [[membership]]\nat_s = 1000.0\nevent = \"add\"\nmachines = [3]\n\
                [process]\npeer_timeout_s = 10.0\nconnect_timeout_s = 60.0\n";
    let cfg = dir.path().join("late.toml");
    std::fs::write(&cfg, text).unwrap();
    sim(&cfg, &dir.path().join("sim"));
    launch(4, &cfg, &dir.path().join("proc"), &[]);
    assert_eq!(
        model(&dir.path().join("proc")),
        model(&dir.path().join("sim"))
    );
}

/// `concord launch` checks a `train` job before it starts any process: a configuration, a
/// strategy, a process count, a runtime that runs in one process or a run folder to resume that
/// is wrong is told once (not by every process), and nothing is written.
#[test]
fn a_launch_checks_the_job_once_before_starting_its_processes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2, "", "");
    let cases: [(&[&str], &str); 5] = [
        (&["--nproc", "3"], "started 3 (world size)"),
        // Each process would run the whole job and write the same run folder.
        (&["--nproc", "2", "--runtime", "sim"], "runs in one process"),
        (
            &["--nproc", "2", "--runtime", "wall"],
            "runs in one process",
        ),
        (
            &["--nproc", "2", "--set", "strategies=[\"nope\"]"],
            "unknown strategy",
        ),
        (&["--nproc", "2", "--set", "batch=0"], "`batch` = 0"),
    ];
    for (args, said) in cases {
        let (launch, train) = args.split_at(2);
        let out = concord()
            .arg("launch")
            .args(launch)
            .args(["train", "--quiet", "--config"])
            .arg(&cfg)
            .args(train)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}\n{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.matches(said).count(), 1, "{args:?}: {err}");
        assert!(!err.contains("rank 0 failed"), "{args:?}: {err}");
        common::nothing_written(dir.path(), &["job.toml"]);
    }
    // A resumed job's configuration comes from its run folder: one that holds no checkpoint is
    // told once too.
    let missing = dir.path().join("no-run");
    let out = concord()
        .args(["launch", "--nproc", "2", "train", "--quiet", "--resume"])
        .arg(&missing)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("no checkpoint.safetensors").count(), 1, "{err}");
}
