//! `cargo xtask bench-engine`: what the engine costs on top of the math, and how far throughput
//! mode scales. Prints ratios measured in one process, one after the other.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Module, Optimizer, VarBuilder, VarMap};
use concord_engine::data::SampleStream;
use concord_engine::model::ModelConfig;
use concord_engine::optim::OptimizerConfig;
use concord_engine::prelude::*;
use std::time::Instant;

/// Timings are the best of this many repeats: the machine is shared and noisy, and the minimum is
/// the least disturbed measurement.
const REPEATS: usize = 7;

fn best_of(n: usize, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..n {
        best = best.min(f()?);
    }
    Ok(best)
}

/// One measured configuration of the overhead benchmark.
struct Case {
    label: &'static str,
    hidden: Vec<usize>,
    batch: u64,
    iterations: u64,
}

pub fn run() -> anyhow::Result<()> {
    println!(
        "engine overhead: one `sim` worker (with its parameter server) vs a plain candle loop"
    );
    println!(
        "{:<28} {:>10} {:>12} {:>12} {:>8}",
        "case", "steps", "engine s", "candle s", "ratio"
    );
    let cases = [
        Case {
            label: "default MLP 32-64-10, b=32",
            hidden: vec![64],
            batch: 32,
            iterations: 1000,
        },
        Case {
            label: "MLP 32-512-512-10, b=256",
            hidden: vec![512, 512],
            batch: 256,
            iterations: 100,
        },
    ];
    for case in &cases {
        let (engine, candle) = overhead(case)?;
        println!(
            "{:<28} {:>10} {:>12.3} {:>12.3} {:>8.3}",
            case.label,
            case.iterations,
            engine,
            candle,
            engine / candle
        );
    }
    println!();
    throughput_mode()
}

fn config(case: &Case) -> RunConfig {
    RunConfig {
        workers: 1,
        servers: 1,
        batch: case.batch,
        iterations: case.iterations,
        eval_every: case.iterations,
        model: ModelConfig::Mlp {
            hidden: case.hidden.clone(),
        },
        optimizer: OptimizerConfig::Sgd {
            lr: 0.05,
            momentum: 0.0,
            weight_decay: 0.0,
        },
        ..RunConfig::default()
    }
}

/// Wall seconds per `case.iterations` steps for the engine and for the plain loop, same model,
/// same batches. Each side is timed at N and 2N steps and the difference taken, so fixed costs
/// (data generation, evaluation, start-up) cancel and only the per-step cost remains.
fn overhead(case: &Case) -> anyhow::Result<(f64, f64)> {
    let engine_secs = |iterations: u64| -> anyhow::Result<f64> {
        let cfg = RunConfig {
            iterations,
            eval_every: iterations,
            ..config(case)
        };
        let asm = concord::registry().compose(&cfg)?;
        let t = Instant::now();
        concord_engine::run(&cfg, &asm, Default::default())?;
        Ok(t.elapsed().as_secs_f64())
    };
    engine_secs(case.iterations)?; // warm-up
    let engine = best_of(REPEATS, || engine_secs(2 * case.iterations))?
        - best_of(REPEATS, || engine_secs(case.iterations))?;
    let cfg = config(case);

    let split = cfg.data.load(cfg.seed)?;
    let stream = SampleStream::new(split.train.len(), cfg.seed);
    let dev = Device::Cpu;
    let dim = split.train.sample_len();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
    let mut layers = Vec::new();
    let mut width = dim;
    for (i, &h) in case.hidden.iter().enumerate() {
        layers.push(candle_nn::linear(width, h, vb.pp(format!("l{i}")))?);
        width = h;
    }
    let head = candle_nn::linear(width, split.train.classes, vb.pp("head"))?;
    let mut sgd = candle_nn::SGD::new(varmap.all_vars(), 0.05)?;
    let mut step = |it: u64| -> anyhow::Result<()> {
        let idx = stream.indices(it, case.batch as usize, 0, case.batch as usize);
        let (x, y) = split.train.gather(&idx);
        let x = Tensor::from_vec(x, (case.batch as usize, dim), &dev)?;
        let y = Tensor::from_vec(y, case.batch as usize, &dev)?;
        let mut h = x;
        for l in &layers {
            h = l.forward(&h)?.relu()?;
        }
        let loss = candle_nn::loss::cross_entropy(&head.forward(&h)?, &y)?;
        sgd.backward_step(&loss)?;
        Ok(())
    };
    for it in 0..case.iterations {
        step(it)?;
    }
    let candle = best_of(REPEATS, || {
        let t = Instant::now();
        for it in 0..case.iterations {
            step(it)?;
        }
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok((engine, candle))
}

fn throughput_mode() -> anyhow::Result<()> {
    let mut cfg = RunConfig {
        workers: 64,
        servers: 4,
        iterations: 100,
        eval_every: 100,
        model: ModelConfig::Profile {
            name: "vgg16".into(),
        },
        ..RunConfig::default()
    };
    cfg.cluster.default_device = "v100".into();
    let asm = concord::registry().compose(&cfg)?;
    let t = Instant::now();
    let r = concord_engine::run(&cfg, &asm, Default::default())?;
    let wall = t.elapsed().as_secs_f64();
    println!("throughput mode: VGG16 profile, 64 workers x 4 servers (v100, 25 Gbps), 100 iterations, BSP");
    println!(
        "  wall {:.2} s   virtual {:.1} s   {:.3} s/iteration   {:.1} GB moved   {} messages",
        wall,
        r.summary.run_time_s,
        r.summary.time_per_iteration_s,
        r.summary.bytes_sent as f64 / 1e9,
        r.summary.messages_sent
    );
    Ok(())
}
