//! `dlrm-async-ps`, the asynchronous parameter-server baseline: it trains a DLRM on click-through
//! data, deterministically; with one worker and one server it is sequential SGD; its staleness
//! figure is zero for one worker and positive for several; bad compositions are named errors.

use concord_engine::config::RunConfig;
use concord_engine::data::split_ctr;
use concord_engine::model::{gather_rows, sgd_rows, DlrmDense};
use concord_engine::run::RunResult;
use concord_test_support::{compose_err, figure, param_bits, registry, run_with};

const NAME: &str = "dlrm-async-ps";

/// DeepFM with dim 8 on 8 fields of 1000 rows, `workers` workers of batch 64, `servers`
/// servers, `iterations` clocks, evaluated at the end.
fn config(workers: u32, servers: u32, iterations: u64) -> RunConfig {
    RunConfig {
        workers,
        servers,
        batch: 64,
        iterations,
        eval_every: iterations,
        model: toml::from_str("kind = \"dlrm\"\ninteraction = \"deep-fm\"\ndim = 8").unwrap(),
        data: toml::from_str("kind = \"ctr\"\nfields = 8\nrows = 1000\ntrain = 25600\ntest = 4000")
            .unwrap(),
        strategies: vec![NAME.into()],
        ..RunConfig::default()
    }
}

fn run(cfg: &RunConfig) -> RunResult {
    run_with(&registry(&[concord_sven::register]), cfg)
}

#[test]
fn four_workers_two_servers_train_and_repeat_bit_for_bit() {
    // Plain SGD: every worker's push is a step of its own, so four workers take four steps per
    // clock on stale values, and heavy-ball momentum on top of that diverges.
    let mut cfg = config(4, 2, 100);
    cfg.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.1").unwrap();
    let r = run(&cfg);
    let auc = r.summary.final_test_auc.expect("a test AUC");
    println!("dlrm-async-ps, 4 workers, 2 servers, 100 clocks: test AUC {auc:.4}");
    assert!(auc > 0.6, "test AUC {auc}");
    // A worker holds the dense part and its gradients, not the tables (they stay on the
    // servers).
    let params = r.params.as_ref().expect("real parameters");
    let bytes = |tables: bool| -> u64 {
        let chosen = params
            .iter()
            .filter(|(n, _)| n.starts_with("emb.") == tables);
        chosen.map(|(_, v)| 4 * v.len() as u64).sum()
    };
    let peak = r.summary.peak_memory["worker-0"];
    assert!(
        peak >= 2 * bytes(false) && peak < 2 * bytes(false) + bytes(true),
        "worker peak {peak}, dense {}, tables {}",
        bytes(false),
        bytes(true)
    );
    let again = run(&cfg);
    assert_eq!(param_bits(&r), param_bits(&again));
    assert_eq!(r.summary.final_test_auc, again.summary.final_test_auc);
}

/// One worker against one server is plain sequential training: each clock reads the values
/// the previous push left, so the run equals a hand loop of row-wise SGD on the looked-up rows
/// and the run's optimizer (SGD with momentum) on the dense part.
#[test]
fn one_worker_one_server_is_sequential_sgd() {
    let steps = 6u64;
    let cfg = config(1, 1, steps);
    let r = run(&cfg);
    let asm = registry(&[concord_sven::register])
        .compose(&cfg)
        .expect("composes");
    let job = concord_engine::run::prepare(&cfg, &asm).expect("job");
    let spec = job.model.dlrm().expect("a DLRM").clone();
    let data = job.data.as_ref().expect("data");
    let schema = data.train.ctr.as_ref().expect("ctr data");
    let (k, width, batch) = (spec.num_tables(), spec.width(), cfg.batch as usize);
    let lr = cfg.optimizer.lr() as f32;
    let cpu = concord_engine::gpu::tensor_device(None).expect("the CPU");
    let dense = DlrmDense::new(&spec, &cpu).expect("dense part");
    let mut values = job.init.clone().expect("real values");
    let mut states: Vec<_> = spec
        .dense_param_range()
        .map(|p| cfg.optimizer.init_state(values[p].len()))
        .collect();
    for c in 0..steps {
        let idx = job.stream.range(u128::from(c) * batch as u128, batch);
        let (features, labels) = data.train.gather(&idx);
        let (dense_x, ids) = split_ctr(schema, &features);
        let mut emb = Vec::with_capacity(batch * k * width);
        for m in 0..batch {
            for t in 0..k {
                emb.extend(gather_rows(
                    &values[t],
                    spec.fields[t],
                    &[ids[m * k + t]],
                    0..width,
                ));
            }
        }
        dense
            .set_params(&values[spec.dense_param_range()])
            .expect("load");
        let step = dense.step(&emb, &dense_x, &labels).expect("step");
        for t in 0..k {
            let field: Vec<u32> = (0..batch).map(|m| ids[m * k + t]).collect();
            let grads: Vec<f32> = (0..batch)
                .flat_map(|m| step.emb_grad[(m * k + t) * width..(m * k + t + 1) * width].iter())
                .copied()
                .collect();
            sgd_rows(&mut values[t], spec.fields[t], &field, &grads, 0..width, lr);
        }
        for (i, p) in spec.dense_param_range().enumerate() {
            cfg.optimizer
                .step(&mut values[p], &step.grads[i], &mut states[i]);
        }
    }
    let got = r.params.as_ref().expect("real parameters");
    assert_eq!(got.len(), values.len());
    let mut worst = 0.0f32;
    for ((name, a), b) in got.iter().zip(&values) {
        assert_eq!(a.len(), b.len(), "{name}");
        for (x, y) in a.iter().zip(b) {
            worst = worst.max((x - y).abs());
        }
    }
    println!("one worker, one server vs sequential SGD: max |Δ| = {worst:e}");
    assert!(worst < 1e-6, "max |run − sequential SGD| = {worst}");
    // The hand loop moved the parameters: the comparison is not between two initial states.
    let init = job.init.as_ref().expect("init");
    let moved = init
        .iter()
        .zip(&values)
        .flat_map(|(a, b)| a.iter().zip(b))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(moved > 1e-3, "sequential SGD barely moved: {moved}");
}

#[test]
fn staleness_is_zero_alone_and_positive_with_four_workers() {
    let one = run(&config(1, 2, 10));
    assert_eq!(figure(&one, "async_ps.mean_staleness"), 0.0);
    assert_eq!(figure(&one, "async_ps.max_staleness"), 0.0);
    let four = run(&config(4, 2, 10));
    let mean = figure(&four, "async_ps.mean_staleness");
    let max = figure(&four, "async_ps.max_staleness");
    println!("4 workers: mean staleness {mean:.2}, max {max}");
    assert!(mean > 0.0 && max >= mean, "mean {mean}, max {max}");
}

#[test]
fn no_servers_and_unknown_options_are_named_errors() {
    let reg = registry(&[concord_sven::register]);
    let e = compose_err(&reg, &config(2, 0, 2));
    assert!(e.contains("servers") && e.contains(NAME), "{e}");
    let mut cfg = config(2, 1, 2);
    cfg.strategy
        .insert(NAME.into(), toml::from_str("row_cost = 3.0").unwrap());
    let e = compose_err(&reg, &cfg);
    assert!(
        e.contains("strategy.dlrm-async-ps") && e.contains("row_cost"),
        "{e}"
    );
    cfg.strategy
        .insert(NAME.into(), toml::from_str("row_ns = -2.0").unwrap());
    let e = compose_err(&reg, &cfg);
    assert!(e.contains("strategy.dlrm-async-ps.row_ns"), "{e}");
}

/// The servers charge every row they read or update: at 100 µs a row, each clock of a lone
/// worker waits at least for its pull's rows (one per table at the very least) beyond what free
/// rows cost.
#[test]
fn server_row_cost_is_charged() {
    let time = |row_ns: f64| {
        let mut cfg = config(1, 1, 5);
        cfg.strategy.insert(
            NAME.into(),
            toml::from_str(&format!("row_ns = {row_ns:?}")).unwrap(),
        );
        run(&cfg).summary.time_per_iteration_s
    };
    let (free, costly) = (time(0.0), time(1e5));
    assert!(
        costly - free >= 8.0 * 1e-4,
        "per clock: {free} s with free rows, {costly} s at 100 µs a row"
    );
}
