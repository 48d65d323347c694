//! `cargo xtask bench-plans`: how well the pipeline planner's two predictions of a
//! configuration's time per minibatch (its closed form, which the search ranks by, and the
//! replay of the configuration's schedule) match the simulated run, over random configurations
//! of mixed widths. The thesis claims only a linear correlation for the closed form (Fig. 5.15);
//! this measures the error itself, where configurations stall in ways the closed form cannot
//! see, and keeps the draw fixed by a seed so the figures can be re-measured after a planner
//! change.

use crate::bench::runner::result::CellResult;
use crate::bench::runner::run_cell;
use anyhow::Context;
use concord_engine::metrics::{r_squared, steady_seconds_per_iteration};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Options of `cargo xtask bench-plans`.
#[derive(Debug, clap::Args)]
pub struct PlansArgs {
    /// How many configurations to draw.
    #[arg(long, default_value_t = 80, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    configs: usize,
    /// Seed of the draw: the same seed draws the same configurations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Models to draw from (built-in profiles, run in throughput mode).
    #[arg(long, value_delimiter = ',', default_value = "vgg16,alexnet")]
    models: Vec<String>,
    /// Machines of the cluster.
    #[arg(long, default_value_t = 4)]
    machines: u32,
    /// Devices (worker slots) per machine.
    #[arg(long, default_value_t = 4)]
    slots: u32,
    /// Device profile of every machine (a built-in).
    #[arg(long, default_value = "v100-pcie")]
    device: String,
    /// Minibatch per worker.
    #[arg(long, default_value_t = 64)]
    batch: u64,
    /// Pipeline stages per configuration, at least and at most.
    #[arg(long, default_value_t = 2)]
    min_stages: usize,
    /// See `--min-stages`.
    #[arg(long, default_value_t = 4)]
    max_stages: usize,
    /// Iterations of each run (rounds of as many minibatches as the output stage has replicas);
    /// the first fifth (warm-up) and the last minibatches in flight (drain) are left out of the
    /// steady state.
    #[arg(long, default_value_t = 240)]
    iterations: u64,
    /// Configurations simulated at once (default: the machine's processors).
    #[arg(long)]
    jobs: Option<usize>,
    /// Output folder (results.csv, REPORT.md).
    #[arg(long, default_value = "bench/out/plans")]
    out: PathBuf,
}

/// One drawn configuration: stages split at `boundaries` (layer indices), `replicas` per stage.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Candidate {
    model: String,
    boundaries: Vec<usize>,
    replicas: Vec<u32>,
}

/// One configuration measured.
#[derive(Clone, Debug, Serialize)]
struct Measured {
    model: String,
    boundaries: String,
    replicas: String,
    /// Simulated seconds per minibatch in steady state.
    simulated_s: f64,
    /// The schedule's replay, seconds per minibatch.
    replayed_s: f64,
    /// The planner's closed form, seconds per minibatch.
    predicted_s: f64,
}

/// Draws `count` configurations with `seed`, none of them in `seen`: a model, 2–4 stages split
/// at distinct layer boundaries, and widths that use between one device per stage and the whole
/// cluster, input stages at least as wide as later ones (the shape data-parallel input stages
/// give, "k-…-1").
fn draw(
    args: &PlansArgs,
    layers: &[(String, usize)],
    count: usize,
    seed: u64,
    seen: &[Candidate],
) -> anyhow::Result<Vec<Candidate>> {
    let devices = args.machines * args.slots;
    let most_stages = args.max_stages.min(devices as usize);
    if layers.is_empty() || args.min_stages < 2 || args.min_stages > most_stages {
        anyhow::bail!(
            "--min-stages {} and --max-stages {} on {devices} devices: need 2 <= min <= max <= devices",
            args.min_stages,
            args.max_stages
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out: Vec<Candidate> = Vec::with_capacity(count);
    let mut attempts = 0;
    while out.len() < count {
        attempts += 1;
        if attempts > 1000 * count.max(1) {
            anyhow::bail!(
                "drew only {} distinct configurations of {} wanted: too few layers or devices",
                seen.len() + out.len(),
                seen.len() + count
            );
        }
        let (model, n_layers) = &layers[rng.gen_range(0..layers.len())];
        if *n_layers < args.min_stages {
            continue;
        }
        let stages = rng.gen_range(args.min_stages..=most_stages.min(*n_layers));
        let mut boundaries: Vec<usize> = sample(&mut rng, n_layers - 1, stages - 1)
            .into_iter()
            .map(|b| b + 1)
            .collect();
        boundaries.sort_unstable();
        let used = rng.gen_range(stages as u32..=devices);
        // A random composition of `used` into `stages` positive widths: cuts at distinct points.
        let mut cuts: Vec<u32> = sample(&mut rng, used as usize - 1, stages - 1)
            .into_iter()
            .map(|c| c as u32 + 1)
            .collect();
        cuts.sort_unstable();
        let mut replicas: Vec<u32> = cuts
            .iter()
            .chain(std::iter::once(&used))
            .scan(0, |last, &c| {
                let w = c - *last;
                *last = c;
                Some(w)
            })
            .collect();
        replicas.sort_unstable_by(|a, b| b.cmp(a));
        let candidate = Candidate {
            model: model.clone(),
            boundaries,
            replicas,
        };
        if !out.contains(&candidate) && !seen.contains(&candidate) {
            out.push(candidate);
        }
    }
    Ok(out)
}

/// The run of `c` on the cluster of `args`, as a bench cell.
fn simulate(args: &PlansArgs, c: &Candidate) -> anyhow::Result<CellResult> {
    let sets = [
        format!("workers={}", args.machines * args.slots),
        format!("batch={}", args.batch),
        format!("iterations={}", args.iterations),
        format!("eval_every={}", args.iterations),
        "model.kind=\"profile\"".into(),
        format!("model.name=\"{}\"", c.model),
        format!("cluster.default_device=\"{}\"", args.device),
        format!(
            "cluster.machines=[{{ device = \"{}\", count = {}, slots = {} }}]",
            args.device, args.machines, args.slots
        ),
        "strategies=[\"pipedream\"]".into(),
        format!("strategy.pipedream.boundaries={:?}", c.boundaries),
        format!("strategy.pipedream.replicas={:?}", c.replicas),
        "stragglers=[]".into(),
    ];
    run_cell(&concord::config::load(None, &sets)?)
}

/// Seconds per minibatch of a run's steady state: after the first fifth of its iterations
/// (warm-up) and before its drain, the last `in_flight` minibatches, which finish with nothing
/// behind them (each iteration being as many minibatches as the output stage has replicas;
/// iterations closed together count as one group).
fn steady_per_minibatch(r: &CellResult, out_replicas: u32, in_flight: u64) -> Option<f64> {
    let ends: Vec<f64> = r.curve.iter().map(|point| point.time_s).collect();
    let out = u64::from(out_replicas.max(1));
    let drain = usize::try_from(in_flight.div_ceil(out)).ok()?;
    steady_seconds_per_iteration(&ends, drain).map(|s| s / out as f64)
}

/// A figure of the run's summary, by name.
fn figure(r: &CellResult, name: &str) -> anyhow::Result<f64> {
    r.metrics
        .figures
        .get(name)
        .copied()
        .with_context(|| format!("the run reports no `{name}`"))
}

/// Minibatches in flight at once: the input stage's depth for each of its replicas.
fn in_flight(r: &CellResult, c: &Candidate) -> anyhow::Result<u64> {
    let depth = figure(r, "pipedream.depth")?;
    Ok(depth as u64 * u64::from(*c.replicas.first().context("a configuration has stages")?))
}

fn measure(args: &PlansArgs, c: &Candidate) -> anyhow::Result<Measured> {
    let r = simulate(args, c)?;
    let out = *c.replicas.last().context("a configuration has stages")?;
    Ok(Measured {
        model: c.model.clone(),
        boundaries: format!("{:?}", c.boundaries),
        replicas: format!("{:?}", c.replicas),
        // What the input stage keeps in flight: its replicas' minibatches each.
        simulated_s: steady_per_minibatch(&r, out, in_flight(&r, c)?)
            .context("too few iterations for a steady state")?,
        replayed_s: figure(&r, "pipedream.replayed_s")?,
        predicted_s: figure(&r, "pipedream.predicted_s")?,
    })
}

/// How one prediction compares with the simulated time over every configuration.
struct Accuracy {
    /// Smallest and largest simulated / predicted.
    range: (f64, f64),
    /// Mean |ln(predicted / simulated)|.
    mean_log_error: f64,
    /// Configurations predicted within 15 %.
    within_15: usize,
    /// R² of the simulated time on the prediction.
    r2: f64,
}

fn accuracy(rows: &[Measured], predicted: impl Fn(&Measured) -> f64) -> Accuracy {
    let ratios: Vec<f64> = rows.iter().map(|m| m.simulated_s / predicted(m)).collect();
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let x: Vec<f64> = rows.iter().map(&predicted).collect();
    let y: Vec<f64> = rows.iter().map(|m| m.simulated_s).collect();
    Accuracy {
        range: (lo, hi),
        mean_log_error: ratios.iter().map(|r| r.ln().abs()).sum::<f64>() / ratios.len() as f64,
        within_15: ratios
            .iter()
            .filter(|r| (r.ln().abs()) <= 1.15f64.ln())
            .count(),
        r2: r_squared(&x, &y),
    }
}

fn report(args: &PlansArgs, rows: &[Measured], refused: &[(Candidate, String)]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Pipeline plans: predicted against simulated\n");
    let _ = writeln!(
        md,
        "{} random configurations (seed {}) of {} over {}×{} `{}`, minibatch {}, {} iterations each; \
         the simulated time is the steady state per minibatch (after the first fifth of the iterations, before the last minibatches in flight drain).\n",
        rows.len(),
        args.seed,
        args.models.join(", "),
        args.machines,
        args.slots,
        args.device,
        args.batch,
        args.iterations
    );
    let _ = writeln!(
        md,
        "| prediction | simulated / predicted | mean \\|log error\\| | within 15 % | R² |\n|---|---|---|---|---|"
    );
    for (name, a) in [
        (
            "closed form (the planner's search)",
            accuracy(rows, |m| m.predicted_s),
        ),
        ("schedule replayed", accuracy(rows, |m| m.replayed_s)),
    ] {
        let _ = writeln!(
            md,
            "| {name} | {:.2}–{:.2}× | {:.3} | {} of {} | {:.3} |",
            a.range.0,
            a.range.1,
            a.mean_log_error,
            a.within_15,
            rows.len(),
            a.r2
        );
    }
    if !refused.is_empty() {
        let _ = writeln!(
            md,
            "\n{} drawn configurations were refused at start-up and redrawn:\n",
            refused.len()
        );
        for (c, why) in refused {
            let _ = writeln!(
                md,
                "- {} {:?} {:?}: {why}",
                c.model, c.boundaries, c.replicas
            );
        }
    }
    let _ = writeln!(
        md,
        "\n| model | boundaries | replicas | simulated ms | replayed ms | closed form ms |\n|---|---|---|---|---|---|"
    );
    for m in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            m.model,
            m.boundaries,
            m.replicas,
            m.simulated_s * 1e3,
            m.replayed_s * 1e3,
            m.predicted_s * 1e3
        );
    }
    md
}

/// Measures every configuration of `drawn`, `jobs` at a time; the outcomes in `drawn`'s order.
fn measure_all(
    args: &PlansArgs,
    drawn: &[Candidate],
    jobs: usize,
) -> Vec<anyhow::Result<Measured>> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(drawn.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(c) = drawn.get(i) else { break };
                let outcome = measure(args, c);
                let said = match &outcome {
                    Ok(m) => format!(
                        "simulated {:.1} ms, replayed {:.1}, closed form {:.1}",
                        m.simulated_s * 1e3,
                        m.replayed_s * 1e3,
                        m.predicted_s * 1e3
                    ),
                    Err(e) => format!("refused: {e:#}"),
                };
                eprintln!("{} {:?} {:?}: {said}", c.model, c.boundaries, c.replicas);
                if let Ok(mut d) = done.lock() {
                    d.push((i, outcome));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}

/// Runs the task.
pub fn run(args: PlansArgs, root: &Path) -> anyhow::Result<()> {
    let layers: Vec<(String, usize)> = args
        .models
        .iter()
        .map(|m| {
            let profile = concord_engine::profiles::builtin(m).with_context(|| {
                format!(
                    "--models: unknown profile `{m}`; known: {}",
                    concord_engine::profiles::builtin_names().join(", ")
                )
            })?;
            Ok((m.clone(), profile.layers.len()))
        })
        .collect::<anyhow::Result<_>>()?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let mut rows: Vec<Measured> = Vec::new();
    let mut refused: Vec<(Candidate, String)> = Vec::new();
    let mut seen: Vec<Candidate> = Vec::new();
    let mut seed = args.seed;
    // A drawn configuration that does not fit the devices' memory is refused at start-up (the
    // planner would never pick it) and replaced by a fresh draw of another seed.
    while rows.len() < args.configs {
        if refused.len() > 4 * args.configs {
            anyhow::bail!(
                "{} drawn configurations were refused (last: {}): the devices may be too small for these models",
                refused.len(),
                refused.last().map_or("", |(_, e)| e.as_str())
            );
        }
        let drawn = draw(&args, &layers, args.configs - rows.len(), seed, &seen)?;
        seen.extend(drawn.iter().cloned());
        for (c, outcome) in drawn.iter().zip(measure_all(&args, &drawn, jobs)) {
            match outcome {
                Ok(m) => rows.push(m),
                Err(e) => refused.push((c.clone(), format!("{e:#}"))),
            }
        }
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    }
    let out = root.join(&args.out);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = csv::Writer::from_path(out.join("results.csv"))?;
    for m in &rows {
        w.serialize(m)?;
    }
    w.flush()?;
    let md = report(&args, &rows, &refused);
    std::fs::write(out.join("REPORT.md"), &md)?;
    let summary: String = md.lines().skip(2).take(6).collect::<Vec<_>>().join("\n");
    println!("{summary}\n\nreport: {}", out.join("REPORT.md").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: PlansArgs,
    }

    fn args(extra: &[&str]) -> PlansArgs {
        Cli::parse_from(std::iter::once("bench-plans").chain(extra.iter().copied())).args
    }

    fn layers() -> Vec<(String, usize)> {
        vec![("vgg16".into(), 16), ("alexnet".into(), 8)]
    }

    #[test]
    fn the_draw_is_fixed_by_its_seed_and_every_configuration_is_well_formed() {
        let a = args(&[]);
        let first = draw(&a, &layers(), 80, 1, &[]).expect("a draw");
        assert_eq!(first, draw(&a, &layers(), 80, 1, &[]).expect("a draw"));
        assert_ne!(first, draw(&a, &layers(), 80, 2, &[]).expect("a draw"));
        for c in &first {
            let n = layers()
                .iter()
                .find(|(m, _)| *m == c.model)
                .expect("model")
                .1;
            let stages = c.replicas.len();
            assert!((2..=4).contains(&stages), "{c:?}");
            assert_eq!(c.boundaries.len(), stages - 1, "{c:?}");
            assert!(c.boundaries.windows(2).all(|w| w[0] < w[1]), "{c:?}");
            assert!(c.boundaries.iter().all(|&b| (1..n).contains(&b)), "{c:?}");
            assert!(c.replicas.windows(2).all(|w| w[0] >= w[1]), "{c:?}");
            assert!(c.replicas.iter().all(|&r| r >= 1), "{c:?}");
            assert!(c.replicas.iter().sum::<u32>() <= 16, "{c:?}");
        }
        let distinct: std::collections::HashSet<_> = first
            .iter()
            .map(|c| (c.model.clone(), c.boundaries.clone(), c.replicas.clone()))
            .collect();
        assert_eq!(distinct.len(), first.len());
        // A redraw avoids what was drawn before.
        let more = draw(&a, &layers(), 10, 1, &first).expect("a redraw");
        assert!(more.iter().all(|c| !first.contains(c)));
    }

    #[test]
    fn impossible_draws_are_refused_by_name() {
        let none = Cli::try_parse_from(["bench-plans", "--configs", "0"]);
        assert!(none.is_err_and(|e| e.to_string().contains("--configs")));
        let e = draw(&args(&["--min-stages", "5"]), &layers(), 1, 1, &[]).unwrap_err();
        assert!(e.to_string().contains("--min-stages 5"), "{e}");
        // Two stages of a two-layer model on two devices: one configuration exists.
        let tiny = args(&["--machines", "1", "--slots", "2", "--max-stages", "2"]);
        let e = draw(&tiny, &[("m".into(), 2)], 2, 1, &[]).unwrap_err();
        assert!(e.to_string().contains("drew only 1"), "{e}");
        // Minibatches no device holds: every draw is refused, and the task gives up saying why.
        let dir = tempfile::tempdir().expect("temp dir");
        let huge = args(&[
            "--configs",
            "1",
            "--models",
            "alexnet",
            "--batch",
            "1000000",
        ]);
        let e = run(huge, dir.path()).unwrap_err();
        assert!(e.to_string().contains("were refused"), "{e}");
        assert!(!dir.path().join("bench/out/plans").exists());
    }

    #[test]
    fn a_measurement_writes_every_configuration_with_its_three_times() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("plans");
        let a = args(&[
            "--configs",
            "3",
            "--models",
            "alexnet",
            "--iterations",
            "40",
            "--out",
            out.to_str().expect("a path"),
        ]);
        run(a, dir.path()).expect("a measurement");
        let rows: Vec<csv::StringRecord> = csv::Reader::from_path(out.join("results.csv"))
            .expect("results.csv")
            .records()
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows.len(), 3);
        for r in &rows {
            for col in 3..6 {
                let t: f64 = r[col].parse().expect("seconds");
                assert!(t.is_finite() && t > 0.0, "{r:?}");
            }
        }
        let report = std::fs::read_to_string(out.join("REPORT.md")).expect("REPORT.md");
        assert!(report.contains("| schedule replayed |"), "{report}");
    }
}
