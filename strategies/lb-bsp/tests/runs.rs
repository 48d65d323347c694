//! End-to-end runs through concord: exactness (L-T1), static heterogeneity (L-T3), bad input,
//! determinism, GPU mode, and the predictor figures.

use concord_engine::config::RunConfig;
use concord_engine::run::{RunOptions, RunResult};
use concord_engine::stragglers::StragglerConfig;
use concord_test_support::max_diff;

/// Compute-bound simulated cores (1 GFLOP/s sustained, no saturation offset), as in
/// `configs/stragglers/persistent.toml`: compute dominates communication.
fn on_cores(cfg: RunConfig) -> RunConfig {
    concord_test_support::on_device(cfg, "core", concord_test_support::slow_device(4.0))
}

fn base(workers: u32, batch: u64, iterations: u64) -> RunConfig {
    on_cores(RunConfig {
        workers,
        servers: 2,
        batch,
        iterations,
        eval_every: iterations,
        ..RunConfig::default()
    })
}

fn straggler(text: &str) -> StragglerConfig {
    toml::from_str(text).expect("valid straggler TOML")
}

fn spread(min: f64) -> StragglerConfig {
    straggler(&format!(
        "pattern = \"persistent\"\nspread = {{ min = {min}, max = 1.0 }}"
    ))
}

fn lb_bsp(mut cfg: RunConfig, options: &str) -> RunConfig {
    cfg.strategies = vec!["bsp".into(), "lb-bsp".into()];
    cfg.strategy
        .insert("lb-bsp".into(), toml::from_str(options).expect("options"));
    cfg
}

fn run(cfg: &RunConfig) -> RunResult {
    let asm = concord_test_support::registry(&[concord_lb_bsp::register])
        .compose(cfg)
        .expect("composes");
    concord_engine::run(cfg, &asm, RunOptions::default()).expect("runs")
}

fn compose_err(cfg: &RunConfig) -> String {
    match concord_test_support::registry(&[concord_lb_bsp::register]).compose(cfg) {
        Ok(_) => panic!("expected a start-up error"),
        Err(e) => e.to_string(),
    }
}

/// Batch of every worker at every clock.
fn batches(r: &RunResult) -> Vec<Vec<u64>> {
    let clocks = r.worker_records[0].len();
    (0..clocks)
        .map(|c| r.worker_records.iter().map(|w| w[c].samples).collect())
        .collect()
}

fn figure(r: &RunResult, name: &str) -> f64 {
    *r.summary
        .figures
        .get(name)
        .unwrap_or_else(|| panic!("figure {name} missing: {:?}", r.summary.figures))
}

/// L-T1: an uneven split directed by LB-BSP trains the same parameters as one worker with the
/// whole global batch (the servers weight pushes by sample count: B1.5).
#[test]
fn uneven_split_equals_one_worker_with_the_global_batch() {
    let mut cfg = lb_bsp(base(4, 8, 10), "predictor = \"memoryless\"");
    cfg.stragglers = vec![spread(0.25)];
    let lb = run(&cfg);
    let b = batches(&lb);
    assert!(b.iter().all(|c| c.iter().sum::<u64>() == 32));
    assert!(
        b[1..].iter().all(|c| c[0] < c[3]),
        "sizes must be uneven: {b:?}"
    );
    let one = run(&base(1, 32, 10));
    let diff = max_diff(&lb.params.clone().unwrap(), &one.params.unwrap());
    assert!(
        diff <= 1e-5,
        "LB-BSP 4 uneven workers vs 1 × 32 differ by {diff}"
    );
    let init = run(&base(1, 32, 1)).params.unwrap();
    assert!(max_diff(&lb.params.unwrap(), &init) > 1e-3);
}

/// Steady-state time per iteration (skipping the first `skip` clocks) and barrier-wait share.
fn steady(r: &RunResult, skip: usize) -> (f64, f64) {
    let rows = &r.rows;
    let t = (rows[rows.len() - 1].time_s - rows[skip - 1].time_s) / (rows.len() - skip) as f64;
    let mut wait = 0.0;
    let mut busy = 0.0;
    for w in &r.worker_records {
        for rec in &w[skip..] {
            wait += rec.wait_s;
            busy += rec.end_s - rec.start_s;
        }
    }
    (t, wait / busy)
}

/// Per-worker batch of the static-heterogeneity runs: iterations of about 10 ms of compute, so
/// the 50 µs network latency is small beside them, as in the paper (iterations of seconds).
const BATCH: u64 = 512;

/// L-T3 (Fig. 8/9b analogue): under static heterogeneity LB-BSP's iteration time is close to the
/// ideal `X / Σ v` and its wait share is below 5%, while BSP waits `1 − v_min·mean(1/v)`.
#[test]
fn static_heterogeneity_l2_and_l3() {
    let n = 8u32;
    for min in [0.5, 1.0 / 3.0] {
        let mut cfg = base(n, BATCH, 40);
        cfg.stragglers = vec![spread(min)];
        let bsp = run(&cfg);
        let lb = run(&lb_bsp(cfg.clone(), "warmup = 500"));
        // Speeds as measured by the workers (samples/s of compute).
        let v: Vec<f64> = lb
            .coordinator
            .reports
            .iter()
            .filter(|(_, r)| r.clock == 0)
            .map(|(w, r)| (*w, r.speed))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_values()
            .collect();
        let sum_v: f64 = v.iter().sum();
        let v_min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let ideal = (u64::from(n) * BATCH) as f64 / sum_v;
        let analytic_wait = 1.0 - v_min * v.iter().map(|x| 1.0 / x).sum::<f64>() / v.len() as f64;
        let (t_lb, w_lb) = steady(&lb, 2);
        let (t_bsp, w_bsp) = steady(&bsp, 2);
        // Communication per iteration: the homogeneous BSP iteration minus its compute.
        let mut homo = base(n, BATCH, 10);
        homo.stragglers = vec![spread(1.0)];
        let h = run(&homo);
        let (t_homo, _) = steady(&h, 2);
        let comm = t_homo - BATCH as f64 / v.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "min speed {min:.3}: ideal {:.3} ms, LB-BSP {:.3} ms ({:.3}x ideal, comm {:.3} ms), \
             BSP {:.3} ms; wait LB {:.2}% (summary {:.2}%), BSP {:.2}% (summary {:.2}%, analytic {:.2}%); \
             speedup {:.2}x; overhead share {:.4}%",
            ideal * 1e3,
            t_lb * 1e3,
            t_lb / ideal,
            comm * 1e3,
            t_bsp * 1e3,
            w_lb * 100.0,
            lb.summary.wait_share * 100.0,
            w_bsp * 100.0,
            bsp.summary.wait_share * 100.0,
            analytic_wait * 100.0,
            t_bsp / t_lb,
            figure(&lb, "lb-bsp.overhead_share") * 100.0,
        );
        assert!(
            t_lb <= 1.05 * ideal + comm,
            "LB-BSP {t_lb} vs ideal {ideal} + comm {comm}"
        );
        assert!(w_lb < 0.05, "LB-BSP wait share {w_lb}");
        assert!(lb.summary.wait_share < 0.05);
        assert!(
            (w_bsp - analytic_wait).abs() < 0.05,
            "BSP wait {w_bsp} vs analytic {analytic_wait}"
        );
        assert!(figure(&lb, "lb-bsp.overhead_share") < 0.02);
    }
}

#[test]
fn bad_input_is_a_clear_start_up_error() {
    // X = 4 × 1 < 4 workers × min_batch 2.
    let e = compose_err(&lb_bsp(base(4, 1, 2), "min_batch = 2"));
    assert!(
        e.contains("strategy.lb-bsp.min_batch") && e.contains("X"),
        "{e}"
    );
    let e = compose_err(&lb_bsp(base(2, 8, 2), "predictor = \"lstm\""));
    assert!(
        e.contains("strategy.lb-bsp.predictor") && e.contains("lstm") && e.contains("narx"),
        "{e}"
    );
    let e = compose_err(&lb_bsp(base(2, 8, 2), "alpha = -0.1"));
    assert!(
        e.contains("strategy.lb-bsp.alpha") && e.contains("-0.1"),
        "{e}"
    );
    let e = compose_err(&lb_bsp(base(2, 8, 2), "alpha = 1.5"));
    assert!(e.contains("strategy.lb-bsp.alpha"), "{e}");
    let e = compose_err(&lb_bsp(base(2, 8, 2), "predcitor = \"ema\""));
    assert!(
        e.contains("strategy.lb-bsp") && e.contains("predcitor"),
        "{e}"
    );
    let e = compose_err(&lb_bsp(base(2, 8, 2), "mode = \"tpu\""));
    assert!(e.contains("strategy.lb-bsp"), "{e}");
    let e = compose_err(&lb_bsp(
        base(2, 8, 2),
        "mode = \"gpu\"\npredictor = \"ema\"",
    ));
    assert!(e.contains("strategy.lb-bsp.predictor"), "{e}");
}

fn contention() -> StragglerConfig {
    straggler(
        "pattern = \"contention\"\np_on = 0.05\np_off = 0.1\nload_spread = { min = 0.3, max = 0.7 }",
    )
}

#[test]
fn same_seed_gives_identical_batch_vectors() {
    let mut cfg = lb_bsp(
        base(4, 32, 60),
        "warmup = 20\nretrain_every = 10\nmax_steps = 100",
    );
    cfg.stragglers = vec![contention()];
    let a = run(&cfg);
    let b = run(&cfg);
    assert_eq!(batches(&a), batches(&b));
    assert_eq!(a.summary.figures, b.summary.figures);
    assert!(batches(&a).iter().all(|c| c.iter().sum::<u64>() == 128));
    cfg.seed += 1;
    assert_ne!(batches(&run(&cfg)), batches(&a));
}

#[test]
fn oracle_allocates_on_the_true_speeds() {
    let mut cfg = lb_bsp(base(4, BATCH, 30), "predictor = \"oracle\"");
    cfg.stragglers = vec![contention()];
    let r = run(&cfg);
    let rel = figure(&r, "lb-bsp.rmse_relative");
    assert!(rel < 1e-3, "oracle relative RMSE {rel}");
    let (_, wait) = steady(&r, 1);
    assert!(wait < 0.05, "oracle wait share {wait}");
}

/// L-T5 analogue in the engine: dynamic contention with spikes; prints RMSE and time per
/// iteration per predictor and checks NARX beats EMA in RMSE.
#[test]
fn predictor_figures_under_dynamic_contention() {
    let mut out = Vec::new();
    for p in ["narx", "ema", "memoryless", "oracle"] {
        let mut cfg = lb_bsp(
            base(4, BATCH, 400),
            &format!("predictor = \"{p}\"\nwarmup = 150\nretrain_every = 50"),
        );
        cfg.stragglers = vec![contention()];
        let r = run(&cfg);
        let (t, wait) = steady(&r, 150);
        out.push((p, figure(&r, "lb-bsp.rmse"), t, wait));
        eprintln!(
            "{p}: rmse {:.1} samples/s ({:.3} relative), time/iter after warm-up {:.3} ms, wait {:.2}%, train {:.4} s",
            figure(&r, "lb-bsp.rmse"),
            figure(&r, "lb-bsp.rmse_relative"),
            t * 1e3,
            wait * 100.0,
            figure(&r, "lb-bsp.train_s"),
        );
    }
    let mut bsp = base(4, BATCH, 400);
    bsp.stragglers = vec![contention()];
    let (t_bsp, w_bsp) = steady(&run(&bsp), 150);
    eprintln!(
        "bsp: time/iter {:.3} ms, wait {:.2}%; per-iteration time normalized to BSP: {}",
        t_bsp * 1e3,
        w_bsp * 100.0,
        out.iter()
            .map(|(p, _, t, _)| format!("{p} {:.3}", t / t_bsp))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(out[0].1 < out[1].1, "NARX RMSE must beat EMA: {out:?}");
    assert!(
        out[0].2 < t_bsp,
        "NARX LB-BSP must beat BSP: {out:?} vs {t_bsp}"
    );
}

/// Non-blocking mode in CPU mode: the vector for clock k+2 is published once clock k is complete,
/// so workers never wait on the manager; under static speeds it balances as well as blocking.
#[test]
fn non_blocking_mode_keeps_the_sum_and_balances() {
    let mut cfg = lb_bsp(base(8, BATCH, 30), "blocking = false\npredictor = \"ema\"");
    cfg.stragglers = vec![spread(1.0 / 3.0)];
    let r = run(&cfg);
    let b = batches(&r);
    assert!(b.iter().all(|c| c.iter().sum::<u64>() == 8 * BATCH));
    assert_eq!(b[0], b[1], "clocks 0 and 1 are sized before any report");
    assert!(b[2][0] < b[2][7]);
    let (_, wait) = steady(&r, 3);
    eprintln!("non-blocking wait share {:.2}%", wait * 100.0);
    assert!(wait < 0.05, "non-blocking wait share {wait}");
}

/// L-T6 smoke: GPU mode on mixed devices keeps batches within the profiled bounds and gives the
/// slower device less.
#[test]
fn gpu_mode_on_mixed_devices() {
    let mut cfg = RunConfig {
        workers: 4,
        servers: 1,
        batch: 64,
        iterations: 12,
        eval_every: 12,
        model: concord_engine::model::ModelConfig::Profile {
            name: "resnet-32".into(),
        },
        ..RunConfig::default()
    };
    cfg.cluster.machines = toml::from_str::<toml::Table>(
        "m = [{ device = \"k40c\", count = 2 }, { device = \"v100\", count = 2 }]",
    )
    .unwrap()["m"]
        .clone()
        .try_into()
        .unwrap();
    let cfg = lb_bsp(cfg, "mode = \"gpu\"");
    let r = run(&cfg);
    eprintln!(
        "GPU batches {:?} figures {:?}",
        batches(&r),
        r.summary.figures
    );
    for c in batches(&r) {
        assert_eq!(c.iter().sum::<u64>(), 256);
        assert!(c[0] < c[2], "k40c should get less than v100: {c:?}");
        for (w, &x) in c.iter().enumerate() {
            let lo = figure(&r, &format!("lb-bsp.saturation_w{w}")) as u64;
            assert!(x >= lo, "worker {w}: {x} < x^s {lo}");
        }
    }
}
