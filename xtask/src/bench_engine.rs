//! `cargo xtask bench-engine`: what the engine costs on top of the math, as a claim that can
//! fail, and how far throughput mode scales.
//!
//! Both sides run the same whole job, timed the same way: load the data, build the model from
//! the same initial values, train the same batches with SGD, evaluate once on the test set. One
//! side is a `sim` run of the engine (one worker, one parameter server, BSP); the other a plain
//! candle loop (`VarMap`-free `Var`s, `candle_nn::SGD`). Each side is warmed up once, then the two
//! are timed in alternation so that a disturbance of the machine falls on both; the report gives
//! the median and range of each, and the claim is checked on the ratio of the medians. Both
//! sides must end at the same training loss, or the comparison is refused: otherwise it would
//! not time the same work.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{Linear, Module, Optimizer};
use concord_engine::data::SampleStream;
use concord_engine::model::{ModelConfig, ModelSpec};
use concord_engine::optim::OptimizerConfig;
use concord_engine::prelude::*;
use std::time::Instant;

/// Timed runs of each side after its warm-up.
const REPEATS: usize = 11;

/// The engine's cost over plain candle that the project holds itself to: at most 15 % more wall
/// time for the same job.
const MAX_RATIO: f64 = 1.15;

/// Largest relative difference of the two sides' final training losses that still counts as
/// the same training (float sums in another order).
const SAME_LOSS: f64 = 1e-4;

/// One measured job of the overhead benchmark: an MLP, a batch size and a length.
struct Case {
    label: &'static str,
    hidden: Vec<usize>,
    batch: u64,
    iterations: u64,
}

/// Median and range of repeated wall-clock timings, seconds.
#[derive(Clone, Copy, Debug)]
struct Timing {
    median: f64,
    min: f64,
    max: f64,
}

impl Timing {
    fn of(mut samples: Vec<f64>) -> Timing {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2.0
        };
        Timing {
            median,
            min: samples[0],
            max: samples[n - 1],
        }
    }

    fn show(&self) -> String {
        format!("{:.3} ({:.3}–{:.3})", self.median, self.min, self.max)
    }
}

/// Runs the benchmark; fails when a case breaks the overhead claim or the two sides do not train
/// alike.
pub fn run() -> anyhow::Result<()> {
    // One compute thread for both sides (unless the caller says otherwise): the math is the
    // same either way, and with two threads on a small shared machine the scheduling noise is
    // larger than the difference being measured. Set before any thread starts.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    println!(
        "engine overhead: the same job (data, {REPEATS} timed repeats after a warm-up, one final \
         evaluation) as one `sim` worker with its parameter server vs a plain candle loop"
    );
    println!(
        "{:<28} {:>6} {:>24} {:>24} {:>7}  claim: engine/candle ≤ {MAX_RATIO}×",
        "case", "steps", "engine s median (range)", "candle s median (range)", "ratio"
    );
    let cases = [
        Case {
            label: "default MLP 32-64-10, b=32",
            hidden: vec![64],
            batch: 32,
            iterations: 3000,
        },
        Case {
            label: "MLP 32-512-512-10, b=256",
            hidden: vec![512, 512],
            batch: 256,
            iterations: 100,
        },
    ];
    let mut failed = Vec::new();
    for case in &cases {
        let o = overhead(case)?;
        let ratio = o.engine.median / o.candle.median;
        let holds = ratio <= MAX_RATIO;
        println!(
            "{:<28} {:>6} {:>24} {:>24} {:>6.3}×  {}  (both end at loss {:.6})",
            case.label,
            case.iterations,
            o.engine.show(),
            o.candle.show(),
            ratio,
            if holds { "✓" } else { "✗" },
            o.loss
        );
        if !holds {
            failed.push(format!("{}: {ratio:.3}× > {MAX_RATIO}×", case.label));
        }
    }
    println!();
    throughput_mode()?;
    if !failed.is_empty() {
        anyhow::bail!("engine overhead claim fails: {}", failed.join("; "));
    }
    Ok(())
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

/// One engine job: wall seconds and final training loss.
fn engine_job(cfg: &RunConfig) -> anyhow::Result<(f64, f64)> {
    let asm = concord::registry().compose(cfg)?;
    let t = Instant::now();
    let r = concord_engine::run(cfg, &asm, Default::default())?;
    let secs = t.elapsed().as_secs_f64();
    Ok((secs, r.summary.final_loss))
}

/// One plain candle job of the same work: wall seconds and final training loss.
fn plain_job(cfg: &RunConfig, lr: f64) -> anyhow::Result<(f64, f64)> {
    let t = Instant::now();
    let split = cfg.data.load(cfg.seed)?;
    let spec = ModelSpec::resolve_for_data(&cfg.model, &cfg.data, &split.train)?;
    let init = spec
        .init_values(cfg.seed)
        .ok_or_else(|| anyhow::anyhow!("the benchmark needs a real model"))?;
    let dev = Device::Cpu;
    // Layout order: each stage's bias, then its weight.
    let vars: Vec<Var> = spec
        .params()
        .iter()
        .zip(&init)
        .map(|(p, v)| Var::from_tensor(&Tensor::from_slice(v, p.shape.as_slice(), &dev)?))
        .collect::<candle_core::Result<_>>()?;
    let layers: Vec<Linear> = vars
        .chunks(2)
        .map(|bw| Linear::new(bw[1].as_tensor().clone(), Some(bw[0].as_tensor().clone())))
        .collect();
    let mut sgd = candle_nn::SGD::new(vars.clone(), lr)?;
    let forward = |x: Tensor| -> candle_core::Result<Tensor> {
        let mut h = x;
        for (i, l) in layers.iter().enumerate() {
            h = l.forward(&h)?;
            if i + 1 < layers.len() {
                h = h.relu()?;
            }
        }
        Ok(h)
    };
    let stream = SampleStream::new(split.train.len(), cfg.seed);
    let dim = split.train.sample_len();
    let batch = cfg.batch as usize;
    let mut last = f64::NAN;
    for it in 0..cfg.iterations {
        let idx = stream.indices(it, batch, 0, batch);
        let (x, y) = split.train.gather(&idx);
        let x = Tensor::from_vec(x, (batch, dim), &dev)?;
        let y = Tensor::from_vec(y, batch, &dev)?;
        let loss = candle_nn::loss::cross_entropy(&forward(x)?, &y)?;
        sgd.backward_step(&loss)?;
        last = f64::from(loss.to_scalar::<f32>()?);
    }
    let test = &split.test;
    let x = Tensor::from_slice(&test.features, (test.len(), dim), &dev)?;
    let y = Tensor::from_slice(&test.labels, test.len(), &dev)?;
    let logits = forward(x)?;
    let correct = logits
        .argmax(1)?
        .eq(&y)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    std::hint::black_box(correct);
    Ok((t.elapsed().as_secs_f64(), last))
}

/// A case's timings and the final training loss both sides reached.
struct Overhead {
    engine: Timing,
    candle: Timing,
    loss: f64,
}

/// Times both sides of a case; refuses the comparison when they end at different losses.
fn overhead(case: &Case) -> anyhow::Result<Overhead> {
    let cfg = config(case);
    let lr = match cfg.optimizer {
        OptimizerConfig::Sgd { lr, .. } => lr,
        _ => anyhow::bail!("the benchmark's plain loop runs SGD only"),
    };
    let (_, engine_loss) = engine_job(&cfg)?;
    let (_, plain_loss) = plain_job(&cfg, lr)?;
    let gap = (engine_loss - plain_loss).abs() / plain_loss.abs().max(f64::MIN_POSITIVE);
    if gap.is_nan() || gap > SAME_LOSS {
        anyhow::bail!(
            "{}: the engine ends at loss {engine_loss} and the plain loop at {plain_loss} \
             (relative gap {gap:.2e} > {SAME_LOSS:e}): they do not run the same training, so \
             their times do not compare",
            case.label
        );
    }
    // Alternating, with the order swapped every other round, so that a slow stretch of the
    // machine falls on both sides alike.
    let (mut engine, mut plain) = (Vec::new(), Vec::new());
    for round in 0..REPEATS {
        if round % 2 == 0 {
            engine.push(engine_job(&cfg)?.0);
            plain.push(plain_job(&cfg, lr)?.0);
        } else {
            plain.push(plain_job(&cfg, lr)?.0);
            engine.push(engine_job(&cfg)?.0);
        }
    }
    Ok(Overhead {
        engine: Timing::of(engine),
        candle: Timing::of(plain),
        loss: engine_loss,
    })
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
