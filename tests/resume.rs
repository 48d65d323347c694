//! Checkpoint and resume: a run stopped at a checkpoint and resumed from the file continues
//! exactly where it stopped — 100 iterations in one run equal 50 and a resume of 50, bit for bit
//! (parameters, optimizer state, metrics rows, reads), for BSP, SSP, allreduce, LB-BSP, FlexRR,
//! RNA (flat and RNA-H), eager-SGD, Sven and its DLRM parameter server, PSLD, AD-PSGD, Fela (and its baselines) and the pipelines (PipeDream, GPipe, model
//! parallelism); and what cannot resume says so.

mod common;

use common::*;
use concord::engine::checkpoint;
use concord::engine::config::RunConfig;
use concord::engine::ids::RoleId;
use concord::engine::optim::OptimizerConfig;
use concord::engine::output::write_run_folder;
use concord::engine::run::{RunOptions, RunResult};
use concord::engine::EngineError;
use std::sync::Arc;

/// Four workers on slow devices with transient slowdowns (whose state the checkpoint keeps) and
/// server jitter, momentum SGD (whose state the checkpoint keeps), evaluated every 10 clocks.
fn config(strategies: &[&str], iterations: u64) -> RunConfig {
    let mut cfg = on_slow_devices(small(4, 16, iterations));
    cfg.eval_every = 10;
    cfg.strategies = strategies.iter().map(|s| s.to_string()).collect();
    cfg.optimizer = OptimizerConfig::Sgd {
        lr: 0.05,
        momentum: 0.9,
        weight_decay: 0.0,
    };
    cfg.stragglers = vec![
        straggler("pattern = \"slow-worker\"\ndelay = 2.0\nprobability = 0.2"),
        straggler("pattern = \"jitter\"\nsigma = 0.2"),
    ];
    cfg
}

/// FlexRR (SSP with slack 1 and reassignment, additive SGD servers), with stragglers slow enough
/// that work moves between the workers.
fn flexrr(iterations: u64) -> RunConfig {
    let mut cfg = config(&["flexrr"], iterations);
    cfg.optimizer = OptimizerConfig::Sgd {
        lr: 0.8,
        momentum: 0.0,
        weight_decay: 0.0,
    };
    cfg.strategy.insert(
        "flexrr".into(),
        toml::from_str("units = 8\ngroup_size = 2").unwrap(),
    );
    cfg
}

/// Where the resumed runs continue from.
const RESUMED_AT: u64 = 50;

/// Runs `cfg` with `options`, keeping the servers' reads (the fingerprint compares them).
fn run_opts(cfg: &RunConfig, options: RunOptions) -> Result<RunResult, EngineError> {
    let asm = concord::registry().compose(cfg)?;
    let options = concord_test_support::recording_reads(options);
    concord::engine::run(cfg, &asm, options)
}

/// Everything that must match bit for bit, one line per item: parameters, optimizer state,
/// metrics rows (but their wall-clock readings), reads since the checkpoint, evaluations over
/// time, run time, traffic.
fn fingerprint(r: &RunResult) -> Vec<String> {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let mut lines = Vec::new();
    for (name, v) in r.params.iter().flatten() {
        lines.push(format!("param {name} {:?}", bits(v)));
    }
    for (b, s) in &r.model.opt_state {
        let slots: Vec<Vec<u32>> = s.slots.iter().map(|v| bits(v)).collect();
        lines.push(format!("opt {b} step {} {slots:?}", s.step));
    }
    for row in &r.rows {
        let mut row = row.clone();
        row.wall_s = 0.0;
        lines.push(format!("row {}", serde_json::to_string(&row).unwrap()));
    }
    // Reads since the checkpoint: a resumed run's reads start there.
    let since = r.reads.iter().filter(|x| x.clock >= RESUMED_AT);
    lines.extend(since.map(|x| format!("read {x:?}")));
    lines.extend(r.evaluations.iter().map(|e| format!("evaluation {e:?}")));
    lines.push(format!("time {}", r.summary.run_time_s.to_bits()));
    lines.push(format!("bytes {}", r.summary.bytes_sent));
    lines.push(format!("loss {}", r.summary.final_loss.to_bits()));
    lines
}

/// Asserts two fingerprints are equal, showing the first line that differs.
fn assert_same(a: &[String], b: &[String]) {
    let cut = |s: &str| s.chars().take(400).collect::<String>();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(x == y, "line {i} differs:\n  {}\n  {}", cut(x), cut(y));
    }
    assert_eq!(a.len(), b.len(), "different number of lines");
}

/// 100 iterations with a checkpoint every 50, against 50 iterations written to a run folder and
/// resumed from its checkpoint file to 100.
fn resumed_run_equals_one_run(strategies: &[&str]) {
    resumed_equals_one_run(|iterations| config(strategies, iterations));
}

/// [`resumed_run_equals_one_run`] for the config `make` gives for a number of iterations;
/// returns the run cut by a checkpoint.
fn resumed_equals_one_run(make: impl Fn(u64) -> RunConfig) -> RunResult {
    resumed_at_equals_one_run(make, RESUMED_AT)
}

/// [`resumed_equals_one_run`] with the cut at clock `at` (of `2 · at`).
fn resumed_at_equals_one_run(make: impl Fn(u64) -> RunConfig, at: u64) -> RunResult {
    let Resumed {
        one, file, resumed, ..
    } = resumed_through_a_file(make, at);
    assert_eq!(file.point.clock, at);
    assert_eq!(resumed.rows.len() as u64, 2 * at);
    let evaluated = |rows: &[concord::engine::metrics::IterationRow]| {
        rows.iter().any(|r| r.test_accuracy.is_some())
    };
    // Throughput mode has no math to evaluate.
    if resumed.params.is_some() {
        let (before, after) = resumed.rows.split_at(at as usize);
        assert!(evaluated(after), "evaluated after the resume");
        assert!(evaluated(before), "evaluations before it kept");
    }
    assert_same(&fingerprint(&one), &fingerprint(&resumed));
    assert_eq!(
        format!("{:?}", one.summary.figures),
        format!("{:?}", resumed.summary.figures)
    );
    one
}

#[test]
fn bsp_resumes_bit_for_bit() {
    resumed_run_equals_one_run(&["bsp"]);
}

#[test]
fn ssp_resumes_bit_for_bit() {
    resumed_run_equals_one_run(&["ssp"]);
}

#[test]
fn allreduce_resumes_bit_for_bit() {
    resumed_run_equals_one_run(&["allreduce"]);
}

#[test]
fn lb_bsp_resumes_bit_for_bit() {
    resumed_run_equals_one_run(&["lb-bsp"]);
}

/// `config` over a three-layer MLP with `strategy` given `options`.
fn pipeline(strategy: &str, options: &str, iterations: u64) -> RunConfig {
    let mut cfg = config(&[strategy], iterations);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16]").unwrap();
    cfg.strategy
        .insert(strategy.into(), toml::from_str(options).unwrap());
    cfg
}

/// The figure `name` of a run.
fn figure_of(r: &RunResult, name: &str) -> f64 {
    r.summary
        .figures
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no figure {name}: {:?}", r.summary.figures))
}

/// PipeDream with a replicated input stage and weight stashing: a checkpoint is cut where the
/// pipeline has drained, and the resumed run restarts it from every stage's parameters,
/// optimizer state and update count. The figures cover the whole run either way: the cut moves
/// the same bytes per sample as a run without one, and no stage holds more versions than its
/// warm-up.
#[test]
fn pipedream_resumes_bit_for_bit() {
    let options = "boundaries = [1, 2]\nreplicas = [2, 1, 1]";
    let cut = resumed_equals_one_run(|n| pipeline("pipedream", options, n));
    let plain = run_opts(&pipeline("pipedream", options, 100), RunOptions::default()).unwrap();
    for name in [
        "pipedream.bytes_per_sample",
        "pipedream.max_versions.stage-0",
    ] {
        assert_eq!(figure_of(&cut, name), figure_of(&plain, name), "{name}");
    }
    assert!(
        figure_of(&cut, "pipedream.max_versions.stage-0")
            <= figure_of(&cut, "pipedream.warmup.stage-0")
    );
    // The drain changes the trajectory: the first minibatch after the cut sees every update.
    assert_ne!(fingerprint(&cut)[0], fingerprint(&plain)[0]);
}

/// Vertical sync carries its watermarks across the cut.
#[test]
fn pipedream_with_vertical_sync_resumes_bit_for_bit() {
    let options = "boundaries = [1, 2]\nvertical_sync = true";
    resumed_equals_one_run(|n| pipeline("pipedream", options, n));
}

/// GPipe with rounds of 3 minibatches, so the cut falls inside a round: the round before the
/// cut is flushed partial, and the rounds after it count from the checkpoint.
#[test]
fn gpipe_resumes_bit_for_bit() {
    resumed_equals_one_run(|n| pipeline("gpipe", "boundaries = [1, 2]\ndepth = 3", n));
}

#[test]
fn model_parallelism_resumes_bit_for_bit() {
    resumed_equals_one_run(|n| pipeline("pipedream-mp", "boundaries = [1, 2]", n));
}

/// LB-BSP's NARX predictors trained before the checkpoint (weights, Adam moments, history, a
/// model still being trained in the background) continue exactly after it.
/// RNA (two probes per round, the compute side never waiting for a round), plain SGD.
fn rna(iterations: u64) -> RunConfig {
    let mut cfg = config(&["rna"], iterations);
    cfg.optimizer = OptimizerConfig::Sgd {
        lr: 0.05,
        momentum: 0.0,
        weight_decay: 0.0,
    };
    cfg
}

#[test]
fn rna_resumes_bit_for_bit() {
    let one = resumed_equals_one_run(rna);
    // Every round's replicas agreed, those before the cut included.
    assert_eq!(figure_of(&one, "rna.checked_rounds"), 100.0);
    assert_eq!(figure_of(&one, "rna.replica_mismatch_rounds"), 0.0);
}

/// [`rna`]'s job under AD-PSGD.
fn ad_psgd(iterations: u64) -> RunConfig {
    RunConfig {
        strategies: vec!["ad-psgd".into()],
        ..rna(iterations)
    }
}

#[test]
fn ad_psgd_resumes_bit_for_bit() {
    resumed_equals_one_run(ad_psgd);
}

/// An AD-PSGD worker continues from its own replica and peer sampler: swapped, the runs differ.
#[test]
fn an_ad_psgd_worker_continues_from_its_own_state() {
    assert_worker_state_steers(ad_psgd);
}

#[test]
fn eager_sgd_resumes_bit_for_bit() {
    resumed_equals_one_run(|iterations| RunConfig {
        strategies: vec!["eager-sgd".into()],
        ..rna(iterations)
    });
}

/// Fela over three sub-models of a deeper MLP with `options`.
fn fela_with(iterations: u64, options: &str) -> RunConfig {
    let mut cfg = rna(iterations);
    cfg.strategies = vec!["fela".into()];
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16]").unwrap();
    let table = format!("boundaries = [1, 2]\nthreshold_batch = 4\n{options}");
    cfg.strategy
        .insert("fela".into(), toml::from_str(&table).unwrap());
    cfg
}

/// Fela tuning its configuration across the cut: each case runs 8 iterations (the weights,
/// then the CTD subsets, then the best for the rest).
fn fela(iterations: u64) -> RunConfig {
    fela_with(iterations, "tune_iters = 8")
}

#[test]
fn fela_resumes_bit_for_bit() {
    let one = resumed_equals_one_run(fela);
    // The tuning went on across the cut where it stood: the cases tried, in order, are those of
    // a run without it (their times differ: the cut moves them).
    let cases = |r: &RunResult| -> Vec<String> {
        let names = r.summary.figures.keys();
        names
            .filter(|k| k.starts_with("fela.case."))
            .cloned()
            .collect()
    };
    let plain = run_opts(&fela(100), RunOptions::default()).unwrap();
    assert!(cases(&plain).len() > 50 / 8, "{:?}", cases(&plain));
    assert_eq!(cases(&one), cases(&plain));
}

/// A cut right after the last tuning case, the smallest CTD subset: the resumed token server
/// moves to the best case at once, and the workers rejoining the subset get its sub-model from
/// a member, as at any case change.
#[test]
fn fela_resumes_at_a_case_change() {
    // Cases of 4 iterations: six weight vectors, then CTD subsets of 2 and 1 worker (24..32).
    let make = |iterations| fela_with(iterations, "tune_iters = 4");
    let one = resumed_at_equals_one_run(make, 32);
    assert!(figure_of(&one, "fela.case.7.w1-1-1.s1_s") > 0.0);
    assert!(
        figure_of(&one, "fela.ctd_size") > 1.0,
        "the best case shares the sub-model"
    );
    // Every iteration ran the case it would have without the cut: the sub-models' rings moved
    // the same bytes.
    let plain = run_opts(&make(64), RunOptions::default()).unwrap();
    assert_eq!(
        figure_of(&one, "fela.sync_bytes"),
        figure_of(&plain, "fela.sync_bytes")
    );
}

/// Fela's baselines over a four-stage MLP: `strategy` with `options`.
fn fela_baseline(strategy: &str, options: &str, iterations: u64) -> RunConfig {
    let mut cfg = rna(iterations);
    cfg.strategies = vec![strategy.into()];
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16, 16]").unwrap();
    cfg.strategy
        .insert(strategy.into(), toml::from_str(options).unwrap());
    cfg
}

#[test]
fn fela_mp_and_fela_hp_resume_bit_for_bit() {
    for (strategy, options) in [("fela-mp", "micro_batch = 4"), ("fela-hp", "fc_from = 1")] {
        let one = resumed_equals_one_run(|n| fela_baseline(strategy, options, n));
        // The busy shares cover the whole run: the same as without the cut (both are
        // synchronous, so a cut moves nothing).
        let plain = run_opts(
            &fela_baseline(strategy, options, 100),
            RunOptions::default(),
        );
        let bubble = format!("{strategy}.bubble_share");
        assert_eq!(
            figure_of(&one, &bubble),
            figure_of(&plain.unwrap(), &bubble)
        );
    }
}

/// Both baselines are BSP with a fixed schedule: cuts leave their trajectory unchanged, which
/// needs every worker's part restored at each cut.
#[test]
fn checkpoints_do_not_change_fela_mp_or_fela_hp_runs() {
    for (strategy, options) in [("fela-mp", "micro_batch = 4"), ("fela-hp", "fc_from = 1")] {
        checkpoints_do_not_change_config(fela_baseline(strategy, options, 100));
    }
}

/// Fela's iterations are SGD steps over the global batch, whoever trains which token: a run cut
/// by checkpoints (its workers' replicas restored at each cut) trains as one without, to float
/// rounding (the tokens' split between workers follows their timing, which a cut moves).
#[test]
fn checkpoints_do_not_change_what_a_fela_run_learns() {
    let cfg = fela_with(60, "weights = [1, 2, 4]");
    let plain = run_opts(&cfg, RunOptions::default()).unwrap();
    let mut cut = cfg;
    cut.checkpoint_every = Some(20);
    let cut = run_opts(&cut, RunOptions::default()).unwrap();
    let (a, b) = (plain.params.unwrap(), cut.params.unwrap());
    let diff = max_diff(&a, &b);
    assert!(diff < 1e-5, "parameters differ by {diff}");
}

/// [`flexrr`] with slack 0: BSP with RapidReassignment.
fn flexrr_bsp_rr(iterations: u64) -> RunConfig {
    let mut cfg = flexrr(iterations);
    cfg.strategy.insert(
        "flexrr".into(),
        toml::from_str("units = 8\ngroup_size = 2\nslack = 0").unwrap(),
    );
    cfg
}

#[test]
fn flexrr_resumes_bit_for_bit() {
    for make in [flexrr, flexrr_bsp_rr] {
        let one = resumed_equals_one_run(make);
        // Work moved between the workers, and the exactly-once check covered every unit of the
        // 100 clocks (4 workers × 8 units), those before the cut included.
        let moved = figure_of(&one, "flexrr.reassigned_share");
        assert!(moved > 0.01, "{moved} of the work reassigned");
        assert_eq!(figure_of(&one, "flexrr.units_verified"), 3200.0);
    }
}

/// Under BSP RR each clock reads the values of the last, so cuts leave the parameters' path
/// unchanged (the timings move: restarted roles wait for each other at the cut).
#[test]
fn checkpoints_do_not_change_the_parameters_of_a_flexrr_bsp_rr_run() {
    checkpoints_do_not_change_config(flexrr_bsp_rr(100));
}

#[test]
fn lb_bsp_narx_resumes_bit_for_bit() {
    let narx = |iterations: u64| {
        let mut cfg = config(&["lb-bsp"], iterations);
        cfg.stragglers.push(straggler(
            "pattern = \"contention\"\np_on = 0.3\np_off = 0.3\nload = [0.5, 0.4, 0.6, 0.3]",
        ));
        cfg.strategy.insert(
            "lb-bsp".into(),
            toml::from_str("predictor = \"narx\"\nwarmup = 20\nretrain_every = 15\nmax_steps = 50")
                .unwrap(),
        );
        cfg
    };
    let mut whole = narx(100);
    whole.checkpoint_every = Some(50);
    let one = run_opts(&whole, RunOptions::default()).expect("runs");
    let retrained = one
        .summary
        .figures
        .iter()
        .any(|(k, v)| k == "lb-bsp.train_s" && *v > 0.0);
    assert!(
        retrained,
        "the NARX predictors trained: {:?}",
        one.summary.figures
    );

    let dir = tempfile::tempdir().unwrap();
    let first = run_opts(&narx(50), RunOptions::default()).expect("runs");
    write_run_folder(dir.path(), &first).unwrap();
    let cp = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).expect("reads");
    let options = RunOptions {
        resume: Some(Arc::new(cp.point)),
        ..RunOptions::default()
    };
    let resumed = run_opts(&narx(100), options).expect("resumes");
    assert_same(&fingerprint(&one), &fingerprint(&resumed));
    assert_eq!(
        format!("{:?}", one.summary.figures),
        format!("{:?}", resumed.summary.figures)
    );
}

/// Under BSP every clock ends at a barrier, so cutting checkpoints does not change the run's
/// trajectory: with checkpoints every 25 iterations, the same parameters, optimizer state,
/// losses and evaluations as with none. (Run times agree to rounding only: times after a cut are
/// counted from the checkpoint's time, which moves their last bits, and a straggler's decision
/// at a time boundary can move with them.)
/// A run whose roles pack and unpack their messages' tensors (`message_copy_gbps`) resumes bit
/// for bit, and the copies cost time. (A cut finds the copy queues idle here; that a restored
/// queue delays the next message is the transport's own test.)
#[test]
fn a_run_whose_roles_copy_messages_resumes_bit_for_bit() {
    let copying = |iterations| {
        let mut cfg = config(&["ssp"], iterations);
        for device in cfg.cluster.devices.values_mut() {
            device.message_copy_gbps = Some(0.5);
        }
        cfg
    };
    let copied = resumed_equals_one_run(copying);
    let free = run_opts(&config(&["ssp"], 100), RunOptions::default()).expect("runs");
    assert!(
        copied.summary.run_time_s > free.summary.run_time_s,
        "copies took no time: {} s against {} s",
        copied.summary.run_time_s,
        free.summary.run_time_s
    );
}

#[test]
fn checkpoints_do_not_change_a_bsp_run() {
    checkpoints_do_not_change(&["bsp"]);
}

/// The same for allreduce, whose clocks end at the ring's barrier.
#[test]
fn checkpoints_do_not_change_an_allreduce_run() {
    checkpoints_do_not_change(&["allreduce"]);
}

/// Model parallelism has one minibatch in flight, so a cut, which drains the pipeline, finds it
/// drained already.
#[test]
fn checkpoints_do_not_change_a_model_parallel_run() {
    checkpoints_do_not_change_config(pipeline("pipedream-mp", "boundaries = [1, 2]", 100));
}

/// GPipe flushes after every round: a cut at a round's end (rounds of 5, a cut every 25) is
/// one of its flushes.
#[test]
fn checkpoints_at_round_ends_do_not_change_a_gpipe_run() {
    let options = "boundaries = [1, 2]\ndepth = 5";
    checkpoints_do_not_change_config(pipeline("gpipe", options, 100));
}

fn checkpoints_do_not_change(strategies: &[&str]) {
    checkpoints_do_not_change_config(config(strategies, 100));
}

/// `cfg` (100 iterations) with a checkpoint every 25 follows the same trajectory as without.
fn checkpoints_do_not_change_config(cfg: RunConfig) {
    let plain = run_opts(&cfg, RunOptions::default()).unwrap();
    let mut cut = cfg;
    cut.checkpoint_every = Some(25);
    let cut = run_opts(&cut, RunOptions::default()).unwrap();
    let trajectory = |r: &RunResult| -> Vec<String> {
        let mut lines: Vec<String> = fingerprint(r)
            .into_iter()
            .filter(|l| l.starts_with("param") || l.starts_with("opt"))
            .collect();
        lines.extend(r.rows.iter().map(|row| {
            format!(
                "row {} {} {:?}",
                row.iteration,
                row.loss.to_bits(),
                row.test_accuracy
            )
        }));
        lines
    };
    assert_same(&trajectory(&plain), &trajectory(&cut));
}

/// Mid-run checkpoints are written where the run asks, and hold the clock they were cut at.
#[test]
fn mid_run_checkpoints_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&["bsp"], 30);
    cfg.checkpoint_every = Some(20);
    let options = RunOptions {
        checkpoint_dir: Some(dir.path().to_path_buf()),
        ..RunOptions::default()
    };
    run_opts(&cfg, options).unwrap();
    let cp = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).unwrap();
    assert_eq!(cp.point.clock, 20);
    assert_eq!(cp.point.history.rows.len(), 20);
    assert_eq!(
        cp.strategies,
        vec!["bsp".to_string(), "resident".to_string()]
    );
}

/// AgileML, whose stages, backups and market events a checkpoint does not capture.
fn agileml(iterations: u64) -> RunConfig {
    RunConfig {
        servers: 4,
        ..config(&["agileml"], iterations)
    }
}

#[test]
fn a_strategy_that_cannot_resume_says_so() {
    let mut cfg = agileml(20);
    cfg.checkpoint_every = Some(10);
    let err = run_opts(&cfg, RunOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("agileml") && text.contains("cannot resume"),
        "{text}"
    );
}

/// `dlrm-async-ps`: a DeepFM on click-through data, two servers holding its tables and its dense
/// part (under Adam, whose state they keep), four workers pushing on arrival.
fn dlrm_async_ps(iterations: u64) -> RunConfig {
    let mut cfg = config(&["dlrm-async-ps"], iterations);
    cfg.servers = 2;
    cfg.model = toml::from_str("kind = \"dlrm\"\ndim = 4\nbottom = [8]\ntop = [8]").unwrap();
    cfg.data =
        toml::from_str("kind = \"ctr\"\nfields = 4\nrows = 200\ntrain = 4096\ntest = 256").unwrap();
    cfg.optimizer = toml::from_str("kind = \"adam\"\nlr = 0.01").unwrap();
    cfg
}

/// The servers' rows, dense values, Adam moments and push counts, and the workers' staleness
/// figures continue exactly; so do the workers' Zipf draws of a throughput-mode run.
#[test]
fn dlrm_async_ps_resumes_bit_for_bit() {
    let one = resumed_equals_one_run(dlrm_async_ps);
    assert!(figure_of(&one, "async_ps.max_staleness") > 0.0);
    resumed_equals_one_run(|iterations| RunConfig {
        model: toml::from_str("kind = \"profile\"\nname = \"dlrm-deep-fm\"").unwrap(),
        ..dlrm_async_ps(iterations)
    });
}

/// One `dlrm-async-ps` worker is sequential SGD, which a cut cannot reorder: with checkpoints
/// its run is the run without them, so every server continued from its own rows, dense values
/// and Adam moments.
#[test]
fn checkpoints_do_not_change_a_one_worker_dlrm_async_ps_run() {
    let mut cfg = dlrm_async_ps(100);
    cfg.workers = 1;
    cfg.stragglers.clear();
    checkpoints_do_not_change_config(cfg);
}

/// `sven` with `options`: a DeepFM on click-through data over four ranks, its input service on a
/// CPU machine of its own.
fn sven(options: &str) -> impl Fn(u64) -> RunConfig + '_ {
    move |iterations| {
        let mut cfg = dlrm_async_ps(iterations);
        cfg.strategies = vec!["sven".into()];
        cfg.servers = 1;
        cfg.cluster.dedicated_servers = true;
        cfg.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.2\nmomentum = 0.9").unwrap();
        cfg.strategy
            .insert("sven".into(), toml::from_str(options).expect("options"));
        cfg
    }
}

/// Sven's ranks continue from their shards, the dense part and its momentum, their placement
/// (the warm-up's counts, cut before the warm-up ends or after it; a device tier's residents
/// and scores) and their measurements: under the 4-stage pipeline (a cut drains it), the
/// sequential one, and in throughput mode.
#[test]
fn sven_resumes_bit_for_bit() {
    for options in [
        "warmup_iters = 5",
        "warmup_iters = 70",
        "pipeline = \"sequential\"\nplacement = \"importance\"",
        "pipeline = \"input-offload\"\nplacement = \"lru\"",
    ] {
        let one = resumed_equals_one_run(sven(options));
        assert!(figure_of(&one, "sven.device_hit_rate") > 0.0, "{options}");
    }
    resumed_equals_one_run(|iterations| RunConfig {
        model: toml::from_str("kind = \"profile\"\nname = \"dlrm-deep-fm\"").unwrap(),
        ..sven("warmup_iters = 5")(iterations)
    });
}

/// Under the sequential schedule (Eq. 6.1) a batch starts after the previous one ends, so a cut
/// changes nothing: with checkpoints the run is the run without them, and every rank continued
/// from its own shards and tier.
#[test]
fn checkpoints_do_not_change_a_sequential_sven_run() {
    for placement in ["hot", "importance"] {
        let options = format!("pipeline = \"sequential\"\nplacement = \"{placement}\"");
        let mut cfg = sven(&options)(100);
        cfg.stragglers.clear();
        checkpoints_do_not_change_config(cfg.clone());
        // The tiers decide the lookups' time, not their values: the hit rate and the run's
        // time say the placement continued too.
        let plain = run_opts(&cfg, RunOptions::default()).unwrap();
        cfg.checkpoint_every = Some(25);
        let cut = run_opts(&cfg, RunOptions::default()).unwrap();
        let hits = |r: &RunResult| figure_of(r, "sven.device_hit_rate");
        assert_eq!(hits(&plain), hits(&cut), "{placement}");
        // Within a tick of the simulated clock (0.1 µs) per cut: a resumed role restarts at its
        // stop time, which the clock reads to its tick.
        let (a, b) = (plain.summary.run_time_s, cut.summary.run_time_s);
        assert!((a - b).abs() <= 3e-7, "{placement}: {a} s, cut {b} s");
    }
}

/// PSLD with `options`: four workers, three servers over small blocks (many to move), server 1
/// with a tenth of the bandwidth.
fn psld(options: &str) -> impl Fn(u64) -> RunConfig + '_ {
    move |iterations| {
        let mut cfg = config(&["elastic-ps"], iterations);
        cfg.servers = 3;
        cfg.block_bytes = 256;
        cfg.stragglers.push(straggler(
            "pattern = \"slow-server\"\nservers = [1]\nbandwidth_factor = 0.1",
        ));
        cfg.strategy.insert(
            "elastic-ps".into(),
            toml::from_str(options).expect("options"),
        );
        cfg
    }
}

/// PSLD's placement (blocks wherever the reassignments moved them, with their optimizer state),
/// its scheduler's history and exploration stream, and servers launched and removed before the
/// cut, around it and after it, continue exactly; the parameters are also the engine's BSP's,
/// as for any placement.
#[test]
fn psld_resumes_bit_for_bit() {
    let cases = [
        "report_every = 5",
        "report_every = 2\nforce_reassign_every = 1\nepsilon = 0.5\nadd_server_at = [20]\n\
         remove_servers = [{ server = 0, at_iteration = 30 }]\nserver_start_s = 0.0",
        "report_every = 2\nforce_reassign_every = 1\nmigration = \"after-barrier\"\n\
         add_server_at = [49]\nremove_servers = [{ server = 2, at_iteration = 50 }]\n\
         server_start_s = 0.05",
    ];
    let reference = run_opts(&config(&["bsp"], 100), RunOptions::default()).unwrap();
    for options in cases {
        let one = resumed_equals_one_run(psld(options));
        let bits = |r: &RunResult| -> Vec<Vec<u32>> {
            let params = r.params.as_ref().expect("real model");
            params
                .iter()
                .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(&one), bits(&reference), "{options}");
        assert!(figure_of(&one, "elastic-ps.epochs") > 0.0, "{options}");
    }
}

/// [`rna`]'s job under RNA-H with `options`.
fn rna_h(options: &str) -> impl Fn(u64) -> RunConfig + '_ {
    move |iterations| {
        let mut cfg = rna(iterations);
        let text = format!("hierarchy = true\n{options}");
        cfg.strategy
            .insert("rna".into(), toml::from_str(&text).expect("options"));
        cfg
    }
}

/// RNA-H with given groups: each group's model (kept by its first member, or reported as the
/// run's), the averaging server's latest models and the groups' probe streams continue exactly.
#[test]
fn rna_h_with_given_groups_resumes_bit_for_bit() {
    let one = resumed_equals_one_run(rna_h("groups = [[0, 1], [2, 3]]"));
    assert_eq!(figure_of(&one, "rna.groups"), 2.0);
    assert_eq!(figure_of(&one, "rna.replica_mismatch_rounds"), 0.0);
    resumed_equals_one_run(rna_h(
        "groups = [[2, 3], [0, 1]]\nmerge = \"delta\"\nsync_period = 3",
    ));
}

/// RNA-H forming its groups from profiles: before the cut (at rounds 11 here), at it (round 50:
/// every profile was in when the checkpoint cut the warm-up) and after it (round 63).
#[test]
fn rna_h_with_profiled_groups_resumes_bit_for_bit() {
    for profile_steps in [10, 48, 60] {
        let options = format!("split_ratio = 0.02\nprofile_steps = {profile_steps}");
        let one = resumed_equals_one_run(rna_h(&options));
        let formed_at = figure_of(&one, "rna.warmup_rounds");
        assert!(
            figure_of(&one, "rna.groups") > 1.0 && formed_at > 0.0,
            "profile_steps = {profile_steps}: the groups formed at round {formed_at}"
        );
        assert_eq!(figure_of(&one, "rna.replica_mismatch_rounds"), 0.0);
    }
}

#[test]
fn resuming_a_finished_run_asks_for_more_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let first = run_opts(&config(&["bsp"], 20), RunOptions::default()).unwrap();
    write_run_folder(dir.path(), &first).unwrap();
    let cp = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).unwrap();
    let options = RunOptions {
        resume: Some(Arc::new(cp.point)),
        ..RunOptions::default()
    };
    let err = run_opts(&config(&["bsp"], 20), options).unwrap_err();
    assert!(err.to_string().contains("iterations"), "{err}");
}

#[test]
fn a_model_only_checkpoint_is_not_resumable() {
    let dir = tempfile::tempdir().unwrap();
    let first = run_opts(&agileml(10), RunOptions::default()).unwrap();
    write_run_folder(dir.path(), &first).unwrap();
    let err = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).unwrap_err();
    assert!(err.to_string().contains("model only"), "{err}");
}

#[test]
fn a_truncated_checkpoint_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&["bsp"], 20);
    cfg.checkpoint_every = Some(10);
    let run = run_opts(&cfg, RunOptions::default()).unwrap();
    write_run_folder(dir.path(), &run).unwrap();
    let path = dir.path().join(checkpoint::FILE_NAME);
    assert!(checkpoint::read(&path).is_ok());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len().min(1000)]).unwrap();
    let err = checkpoint::read(&path).unwrap_err().to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("truncated or corrupt"),
        "{err}"
    );
}

/// An RNA worker continues from the state it saved (the gradients in its buffer, the step in
/// flight, its step counter): given another worker's, its run differs.
#[test]
fn an_rna_worker_continues_from_its_own_state() {
    assert_worker_state_steers(rna);
}

/// A FlexRR worker continues from the state it saved (its timing estimates, the helpers' last
/// reports, its offer counter, its cached parameters): given another worker's, its run differs.
#[test]
fn a_flexrr_worker_continues_from_its_own_state() {
    assert_worker_state_steers(flexrr);
}

/// Resumes the run `make` gives from its checkpoint at 50 twice, once with workers 0 and 1's
/// states swapped: the two continuations differ.
fn assert_worker_state_steers(make: fn(u64) -> RunConfig) {
    assert_state_steers(make, RoleId::Worker(0), RoleId::Worker(1));
}

/// Resumes the run `make` gives from its checkpoint at 50 twice, once with roles `a` and `b`'s
/// states swapped: the two continuations differ.
fn assert_state_steers(make: impl Fn(u64) -> RunConfig, a: RoleId, b: RoleId) {
    let dir = tempfile::tempdir().unwrap();
    let first = run_opts(&make(50), RunOptions::default()).unwrap();
    write_run_folder(dir.path(), &first).unwrap();
    let cp = checkpoint::read(&dir.path().join(checkpoint::FILE_NAME)).unwrap();
    let resume = |point: concord::engine::resume::ResumePoint| {
        let options = RunOptions {
            resume: Some(Arc::new(point)),
            ..RunOptions::default()
        };
        fingerprint(&run_opts(&make(100), options).unwrap())
    };
    let own = resume(cp.point.clone());
    let mut swapped = cp.point;
    let sa = swapped.roles[&a].state.clone();
    let sb = swapped.roles[&b].state.clone();
    assert_ne!(sa, sb, "the states of {a} and {b} differ");
    swapped.roles.get_mut(&a).unwrap().state = sb;
    swapped.roles.get_mut(&b).unwrap().state = sa;
    assert_ne!(own, resume(swapped), "the swapped states changed nothing");
}

/// RNA-H's averaging server continues from the groups' models it kept: given server 1's (idle,
/// empty) state instead, the continuation differs.
#[test]
fn an_rna_h_averaging_server_continues_from_its_models() {
    let make = |iterations| RunConfig {
        servers: 2,
        ..rna_h("groups = [[0, 1], [2, 3]]")(iterations)
    };
    assert_state_steers(make, RoleId::Server(0), RoleId::Server(1));
}

/// RNA-H groups that each round wait for all their members and never average (the sync period
/// is past the run) train two models independently, so a cut, which holds the faster group back,
/// changes neither: each group continues from its own model. Group 0 is workers 2 and 3, whose
/// model the run reports; group 1's comes back from worker 0's state.
#[test]
fn checkpoints_do_not_change_rna_h_groups_that_do_not_average() {
    let mut cfg = rna_h("groups = [[2, 3], [0, 1]]\nwait_for_all = true\nsync_period = 200")(100);
    cfg.stragglers.clear();
    checkpoints_do_not_change_config(cfg);
}
