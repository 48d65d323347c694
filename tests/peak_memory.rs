//! Every registered strategy's workers report the device memory they measured: a non-zero peak
//! for each worker, at least the replica's parameters and gradients, more once a step's
//! activations are resident, and the optimizer state on top where workers apply updates
//! themselves.

use concord::engine::config::RunConfig;
use concord::engine::run::{RunOptions, RunResult};
use std::collections::BTreeSet;

/// A tiny training run of `strategies`: 4 workers, 2 servers, 3 clocks of 8 samples, the default
/// MLP on a small teacher task, plain SGD (which every strategy accepts) with momentum.
fn tiny(strategies: &[&str], options: &[(&str, &str)]) -> RunConfig {
    let mut cfg = RunConfig {
        workers: 4,
        servers: 2,
        batch: 8,
        iterations: 3,
        eval_every: 3,
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        ..RunConfig::default()
    };
    cfg.data = toml::from_str("kind = \"teacher\"\ntrain = 512\ntest = 64").expect("data");
    for (name, text) in options {
        cfg.strategy
            .insert(name.to_string(), toml::from_str(text).expect("options"));
    }
    cfg
}

/// Optimizer state slots per parameter under the default optimizer (SGD with momentum).
const MOMENTUM_SLOTS: u64 = 1;

/// How much of the model each worker of a strategy holds.
#[derive(Clone, Copy, Debug)]
enum Holds {
    /// A whole replica, with this many parameter-sized optimizer slots beside it.
    Replica(u64),
    /// A part (a pipeline stage, a hybrid worker's layers): the workers' parts together hold
    /// the whole model's parameters and gradients, with this many optimizer slots.
    Part(u64),
    /// A DLRM's dense part whole on every worker (parameters and gradients); the embedding
    /// tables, which get no dense gradient, sharded over the workers or on the servers.
    DenseReplica,
}

/// `tiny` training a small DeepFM on click-through data.
fn dlrm(strategies: &[&str], options: &[(&str, &str)]) -> RunConfig {
    let mut cfg = tiny(strategies, options);
    cfg.model = toml::from_str("kind = \"dlrm\"\ndim = 4\nbottom = [8]\ntop = [8]").expect("model");
    cfg.data = toml::from_str("kind = \"ctr\"\nfields = 4\nrows = 200\ntrain = 512\ntest = 64")
        .expect("data");
    cfg.cluster.dedicated_servers = true;
    cfg
}

/// `tiny` with a deeper MLP (four stages), for strategies that split the model by stages.
fn staged(strategies: &[&str], options: &[(&str, &str)]) -> RunConfig {
    let mut cfg = tiny(strategies, options);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 16, 16]").expect("model");
    cfg
}

/// `tiny` under the memory strategy `memory`.
fn swapping(memory: &str) -> RunConfig {
    let mut cfg = tiny(&["bsp"], &[]);
    cfg.memory = Some(memory.into());
    cfg
}

/// One run per strategy, with the smallest valid config, and what its workers hold.
fn cases() -> Vec<(&'static str, RunConfig, Holds)> {
    let mut resident = tiny(&["bsp"], &[]);
    resident.memory = Some("resident".into());
    let mut flexrr = tiny(&["flexrr"], &[("flexrr", "units = 4\ngroup_size = 2")]);
    flexrr.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.05\nmomentum = 0.0").expect("sgd");
    let fela = staged(
        &["fela"],
        &[("fela", "boundaries = [1, 3]\nthreshold_batch = 4")],
    );
    let mut agileml = tiny(&["agileml"], &[]);
    agileml.servers = 4;
    use Holds::{DenseReplica, Part, Replica};
    vec![
        ("bsp", tiny(&["bsp"], &[]), Replica(0)),
        ("ssp", tiny(&["ssp"], &[]), Replica(0)),
        ("asp", tiny(&["asp"], &[]), Replica(0)),
        ("lb-bsp", tiny(&["bsp", "lb-bsp"], &[]), Replica(0)),
        // A placement moves blocks between servers, not what a worker holds.
        ("balanced", tiny(&["bsp", "balanced"], &[]), Replica(0)),
        ("resident", resident, Replica(0)),
        // The swapping policies on a model without an operator graph keep its per-stage
        // activations resident, like `resident`.
        ("dymem", swapping("dymem"), Replica(0)),
        ("vdnn", swapping("vdnn"), Replica(0)),
        ("single-stream", swapping("single-stream"), Replica(0)),
        ("superneurons", swapping("superneurons"), Replica(0)),
        ("elastic-ps", tiny(&["elastic-ps"], &[]), Replica(0)),
        // AgileML runs one server role per machine (here 4 reliable machines, stage 1).
        ("agileml", agileml, Replica(0)),
        // Workers that apply the update themselves keep the optimizer state beside the replica.
        (
            "allreduce",
            tiny(&["allreduce"], &[]),
            Replica(MOMENTUM_SLOTS),
        ),
        ("rna", tiny(&["rna"], &[]), Replica(MOMENTUM_SLOTS)),
        (
            "eager-sgd",
            tiny(&["eager-sgd"], &[]),
            Replica(MOMENTUM_SLOTS),
        ),
        ("ad-psgd", tiny(&["ad-psgd"], &[]), Replica(MOMENTUM_SLOTS)),
        // FlexRR workers apply plain SGD deltas: no optimizer state.
        ("flexrr", flexrr, Replica(0)),
        // Any Fela worker may run any sub-model: a whole replica each.
        ("fela", fela, Replica(MOMENTUM_SLOTS)),
        // Fela's baselines split the model: a stage per worker, or conv and FC workers.
        ("fela-mp", staged(&["fela-mp"], &[]), Part(MOMENTUM_SLOTS)),
        (
            "fela-hp",
            staged(&["fela-hp"], &[("fela-hp", "fc_from = 2")]),
            Part(MOMENTUM_SLOTS),
        ),
        // Pipelines: a stage per worker, its optimizer state beside it (PipeDream also keeps
        // stashed weight versions).
        (
            "pipedream",
            staged(&["pipedream"], &[("pipedream", "boundaries = [1, 2, 3]")]),
            Part(MOMENTUM_SLOTS),
        ),
        (
            "pipedream-mp",
            staged(
                &["pipedream-mp"],
                &[("pipedream-mp", "boundaries = [1, 2, 3]")],
            ),
            Part(MOMENTUM_SLOTS),
        ),
        (
            "gpipe",
            staged(&["gpipe"], &[("gpipe", "boundaries = [1, 2, 3]")]),
            Part(MOMENTUM_SLOTS),
        ),
        ("sven", dlrm(&["sven"], &[]), DenseReplica),
        ("dlrm-async-ps", dlrm(&["dlrm-async-ps"], &[]), DenseReplica),
    ]
}

fn run(cfg: &RunConfig) -> RunResult {
    let asm = concord::registry().compose(cfg).expect("composes");
    concord::engine::run(cfg, &asm, RunOptions::default()).expect("runs")
}

/// Bytes of the model's parameters, from the run's final values (fp32).
fn param_bytes(r: &RunResult) -> u64 {
    let params = r.params.as_ref().expect("a real model");
    params.iter().map(|(_, v)| 4 * v.len() as u64).sum()
}

#[test]
fn the_cases_cover_every_registered_strategy() {
    let registered: BTreeSet<&str> = concord::registry().strategies().map(|s| s.name()).collect();
    let covered: BTreeSet<&str> = cases().iter().map(|(name, ..)| *name).collect();
    assert_eq!(
        registered, covered,
        "every registered strategy needs a peak-memory case"
    );
    for (name, cfg, _) in cases() {
        let named = cfg.strategies.iter().chain(&cfg.memory);
        assert!(named.into_iter().any(|s| s == name), "{name}: {cfg:?}");
    }
}

#[test]
fn every_strategy_reports_each_workers_measured_peak_memory() {
    for (name, cfg, holds) in cases() {
        let r = run(&cfg);
        let p = param_bytes(&r);
        assert!(p > 0, "{name}");
        let peaks: Vec<u64> = (0..cfg.workers)
            .map(|w| {
                let role = format!("worker-{w}");
                let peak = *r
                    .summary
                    .peak_memory
                    .get(&role)
                    .unwrap_or_else(|| panic!("{name}: no peak for {role}: {:?}", r.summary));
                assert!(peak > 0, "{name}: {role} peak is zero");
                peak
            })
            .collect();
        // Parameters and gradients (and optimizer state where the worker keeps it) are resident
        // all run; a step's activations come on top.
        match holds {
            Holds::Replica(extra) => {
                let floor = (2 + extra) * p;
                for (w, peak) in peaks.iter().enumerate() {
                    assert!(
                        *peak > floor,
                        "{name}: worker-{w} peak {peak} B, parameters {p} B: expected more than {floor} B"
                    );
                }
            }
            Holds::DenseReplica => {
                let dense: u64 = r
                    .params
                    .iter()
                    .flatten()
                    .filter(|(n, _)| !n.starts_with("emb."))
                    .map(|(_, v)| 4 * v.len() as u64)
                    .sum();
                for (w, peak) in peaks.iter().enumerate() {
                    assert!(
                        *peak > 2 * dense,
                        "{name}: worker-{w} peak {peak} B, dense part {dense} B"
                    );
                }
            }
            Holds::Part(extra) => {
                let floor = (2 + extra) * p;
                let total: u64 = peaks.iter().sum();
                assert!(
                    total > floor,
                    "{name}: worker peaks {peaks:?} sum to {total} B, parameters {p} B: expected more than {floor} B"
                );
            }
        }
        eprintln!(
            "{name}: parameters {p} B, worker peaks {:?}",
            (0..cfg.workers)
                .map(|w| r.summary.peak_memory[&format!("worker-{w}")])
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_throughput_mode_step_keeps_every_operator_output_but_in_place_relus() {
    let mut cfg = tiny(&["bsp"], &[]);
    cfg.workers = 1;
    cfg.servers = 1;
    cfg.model = toml::from_str("kind = \"profile\"\nname = \"resnet-32\"").expect("model");
    let r = run(&cfg);
    let profile = concord::engine::profiles::builtin("resnet-32").expect("builtin");
    let graph = &profile.graph;
    // Every node between the input and the cost-free softmax, counted from the graph alone:
    // an activation whose input only it reads runs in place.
    let readers = graph.consumers();
    let last = graph.nodes.len() - 1;
    let kept: u64 = (1..last)
        .filter(|&n| {
            let node = &graph.nodes[n];
            let in_place = node.kind == concord::engine::graph::OpKind::Activation
                && readers[node.inputs[0]] == [n];
            !in_place
        })
        .map(|n| graph.nodes[n].out_bytes(1))
        .sum();
    let outputs: u64 = profile.layers.iter().map(|l| l.activation_bytes).sum();
    assert!(
        kept > 3 * outputs,
        "{kept} vs the layers' outputs {outputs}"
    );
    // A BSP worker: the replica's parameters and gradients, and one batch's kept activations.
    assert_eq!(
        r.summary.peak_memory["worker-0"],
        2 * profile.param_bytes() + cfg.batch * kept
    );
}
