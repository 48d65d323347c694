//! `concord plan`: PipeDream's planner on a job's configuration. Builds the model's profile on
//! the first worker's device and the workers' topology, and prints the plan that minimises the
//! slowest stage's time, beside plain data parallelism on the same workers.

use super::ConfigArgs;
use clap::{Args, ValueEnum};
use concord_engine::cluster::Cluster;
use concord_engine::error::EngineError;
use concord_engine::ids::RoleId;
use concord_engine::model::{ModelConfig, ModelSpec};
use concord_engine::RunConfig;
use concord_pipeline::planner::{
    bytes_per_sample, evaluate_under, plan, replay, stage_memory_bytes, PlanOptions, Profile,
    Search, StagePlan, Sync, Topology,
};
use concord_pipeline::schedule::default_depth;
use serde::Serialize;

/// Arguments of `plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Configuration layers (the model, batch, cluster and workers are what the plan uses).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Workers to plan for (default: the configuration's `workers`).
    #[arg(long)]
    pub workers: Option<u32>,
    /// The search: `flat` (one level over all workers) or `hierarchical` (the thesis's
    /// level-by-level search, machines first).
    #[arg(long, value_enum, default_value_t = SearchArg::Flat)]
    pub search: SearchArg,
    /// How a replicated stage's weight sync is charged: `ring` (this runtime's ring allreduce
    /// after the backward passes, what `train` uses by default) or `thesis` (the thesis's formula).
    #[arg(long, value_enum, default_value_t = CostArg::Ring)]
    pub cost: CostArg,
    /// Print the plan as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `--search` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SearchArg {
    /// One level over all workers.
    Flat,
    /// Level by level.
    Hierarchical,
}

/// `--cost` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CostArg {
    /// `(1/m)·max(compute, 2(m−1)·|w|/B)`.
    Thesis,
    /// `(compute + 2(m−1)/m·|w|/B) / m`.
    Ring,
}

/// What `plan` prints (`--json` prints it as is).
#[derive(Debug, Serialize)]
pub struct PlanReport {
    /// The model's name (`mlp`, a profile's name, ...).
    pub model: String,
    /// Samples per minibatch the profile was taken at (the config's `batch`).
    pub batch: u64,
    /// Workers planned for.
    pub workers: u32,
    /// The search that ran.
    pub search: String,
    /// The topology's levels, lowest first: units and link bandwidth (bytes/s; `null`: free).
    pub levels: Vec<LevelReport>,
    /// The plan's stages, input first.
    pub stages: Vec<StageReport>,
    /// The configuration, e.g. "3-1".
    pub config: String,
    /// Minibatches the input stage admits per replica before its first backward pass.
    pub noam: u32,
    /// Workers the plan uses (the rest idle).
    pub workers_used: u32,
    /// Predicted time per minibatch in steady state (the slowest stage), seconds.
    pub predicted_s: f64,
    /// Time per minibatch of the plan's schedule replayed on the same costs (lock-step
    /// averages, shared links), seconds.
    pub replayed_s: Option<f64>,
    /// Predicted throughput, samples per second.
    pub samples_per_s: f64,
    /// Bytes sent per sample (boundaries and replicated stages' weight sync).
    pub bytes_per_sample: f64,
    /// Plain data parallelism on all the workers, for comparison.
    pub data_parallel: Alternative,
}

/// One level of the topology.
#[derive(Debug, Serialize)]
pub struct LevelReport {
    /// Units of the level below in one unit of this level.
    pub components: u32,
    /// Link bandwidth, bytes per second; `None` for links that cost nothing.
    pub bandwidth: Option<f64>,
}

/// One stage of the plan.
#[derive(Debug, Serialize)]
pub struct StageReport {
    /// First layer (model stage) and one past the last.
    pub layers: [usize; 2],
    /// Names of the first and last layer.
    pub names: [String; 2],
    /// Workers the stage is replicated on.
    pub replicas: u32,
    /// Forward plus backward time of the stage's layers on one minibatch on one worker, s.
    pub compute_s: f64,
    /// Estimated memory per worker (weights, stashed versions, activations in flight), bytes.
    pub memory_bytes: u64,
}

/// A configuration's predicted figures.
#[derive(Debug, Serialize)]
pub struct Alternative {
    /// The configuration.
    pub config: String,
    /// Predicted time per minibatch, seconds.
    pub predicted_s: f64,
    /// Time per minibatch of its schedule replayed on the same costs, seconds.
    pub replayed_s: Option<f64>,
    /// Predicted throughput, samples per second.
    pub samples_per_s: f64,
    /// Bytes sent per sample.
    pub bytes_per_sample: f64,
}

/// Runs `concord plan`.
pub fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let extra: Vec<String> = args
        .workers
        .iter()
        .map(|w| format!("workers={w}"))
        .collect();
    let sourced = args.config.load(&extra)?;
    let cfg = &sourced.config;
    let (model, names) = model_of(cfg).map_err(|e| sourced.attribute(e))?;
    let cluster = Cluster::resolve(&cfg.cluster, cfg.workers, cfg.servers)
        .map_err(|e| sourced.attribute(e))?;
    let device = cluster.device_of(RoleId::Worker(0));
    let profile = Profile::of_model(&model, &model.layer_costs(), device, cfg.batch);
    let topology = Topology::of_cluster(&cluster, cfg.workers);
    let options = PlanOptions {
        search: match args.search {
            SearchArg::Flat => Search::Flat,
            SearchArg::Hierarchical => Search::Hierarchical,
        },
        memory_bytes: Some(device.memory_bytes()),
        max_stages: None,
        sync: match args.cost {
            CostArg::Thesis => Sync::Thesis,
            CostArg::Ring => Sync::Ring,
        },
        optimizer_slots: cfg.optimizer.state_slots() as u32,
    };
    let found = plan(&profile, &topology, &options)?;
    let predicted = found.predicted_s.unwrap_or(f64::NAN);
    let memory = stage_memory_bytes(&profile, &found.stages, options.optimizer_slots);
    let stages = found
        .stages
        .iter()
        .zip(memory)
        .map(|(s, memory_bytes)| StageReport {
            layers: [s.layers.start, s.layers.end],
            names: [
                names.get(s.layers.start).cloned().unwrap_or_default(),
                names.get(s.layers.end - 1).cloned().unwrap_or_default(),
            ],
            replicas: s.replicas,
            compute_s: profile.layers[s.layers.clone()]
                .iter()
                .map(|l| l.compute_s)
                .sum(),
            memory_bytes,
        })
        .collect();
    let dp = vec![StagePlan {
        layers: 0..profile.layers.len(),
        replicas: topology.workers(),
    }];
    let dp_s = evaluate_under(&profile, &topology, &dp, options.sync);
    let replayed = |stages: &[StagePlan]| {
        let replicas: Vec<u32> = stages.iter().map(|s| s.replicas).collect();
        replay(&profile, &topology, stages, default_depth(&replicas))
    };
    let batch = profile.batch as f64;
    let report = PlanReport {
        model: match &cfg.model {
            ModelConfig::Profile { name } => name.clone(),
            other => other.kind().to_string(),
        },
        batch: profile.batch,
        workers: topology.workers(),
        search: format!("{:?}", args.search).to_lowercase(),
        levels: topology
            .levels
            .iter()
            .map(|l| LevelReport {
                components: l.components,
                bandwidth: l.bandwidth.is_finite().then_some(l.bandwidth),
            })
            .collect(),
        stages,
        config: found.config_string(),
        noam: found.noam,
        workers_used: found.workers_used(),
        predicted_s: predicted,
        replayed_s: replayed(&found.stages),
        samples_per_s: batch / predicted,
        bytes_per_sample: bytes_per_sample(&profile, &found.stages),
        data_parallel: Alternative {
            config: topology.workers().to_string(),
            predicted_s: dp_s,
            replayed_s: replayed(&dp),
            samples_per_s: batch / dp_s,
            bytes_per_sample: bytes_per_sample(&profile, &dp),
        },
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out!("{}", table(&report))?;
    }
    Ok(())
}

/// The job's model and its layer names, resolved as a run resolves them (loading the data a
/// real model's input shape comes from).
pub(super) fn model_of(cfg: &RunConfig) -> Result<(ModelSpec, Vec<String>), EngineError> {
    let model = match &cfg.model {
        ModelConfig::Profile { .. } => ModelSpec::resolve(&cfg.model, &[], 0)?,
        _ => {
            cfg.model.check_data(&cfg.data)?;
            let split = cfg.data.load(cfg.seed)?;
            ModelSpec::resolve_for_data(&cfg.model, &cfg.data, &split.train)?
        }
    };
    let names = model.stage_facts().into_iter().map(|f| f.name).collect();
    Ok((model, names))
}

/// Seconds as milliseconds with three decimals, or with three significant digits below 1 ms
/// (a small model's minibatch takes microseconds, which three decimals print as 0.000).
fn ms(seconds: f64) -> String {
    let v = seconds * 1e3;
    if v >= 1.0 || v <= 0.0 || !v.is_finite() {
        return format!("{v:.3}");
    }
    let decimals = (2 - v.log10().floor() as i32).max(3) as usize;
    format!("{v:.decimals$}")
}

/// The report as a small table.
fn table(r: &PlanReport) -> String {
    let mut out = String::new();
    let levels: Vec<String> = r
        .levels
        .iter()
        .map(|l| match l.bandwidth {
            Some(b) => format!("{} x {:.2} Gbit/s", l.components, b * 8.0 / 1e9),
            None => format!("{} x free", l.components),
        })
        .collect();
    out.push_str(&format!(
        "PipeDream plan: model {}, batch {}, {} workers ({}), {} search\n\n",
        r.model,
        r.batch,
        r.workers,
        levels.join(" / "),
        r.search
    ));
    out.push_str(&format!(
        "{:<6} {:<26} {:>8} {:>12} {:>12}\n",
        "stage", "layers", "replicas", "compute ms", "memory MiB"
    ));
    for (k, s) in r.stages.iter().enumerate() {
        let layers = format!(
            "{}..{} ({}..{})",
            s.layers[0], s.layers[1], s.names[0], s.names[1]
        );
        out.push_str(&format!(
            "{:<6} {:<26} {:>8} {:>12} {:>12.1}\n",
            k,
            layers,
            s.replicas,
            ms(s.compute_s),
            s.memory_bytes as f64 / (1u64 << 20) as f64
        ));
    }
    out.push_str(&format!(
        "\nconfig {} ({} of {} workers), NOAM {}\n",
        r.config, r.workers_used, r.workers, r.noam
    ));
    out.push_str(&format!(
        "pipeline:      {:>10} ms/minibatch {:>12.1} samples/s {:>14.0} bytes/sample\n",
        ms(r.predicted_s),
        r.samples_per_s,
        r.bytes_per_sample
    ));
    let dp = &r.data_parallel;
    out.push_str(&format!(
        "data parallel: {:>10} ms/minibatch {:>12.1} samples/s {:>14.0} bytes/sample ({})\n",
        ms(dp.predicted_s),
        dp.samples_per_s,
        dp.bytes_per_sample,
        dp.config
    ));
    if let (Some(p), Some(d)) = (r.replayed_s, dp.replayed_s) {
        out.push_str(&format!(
            "replayed schedules (lock-step averages, shared links): pipeline {} ms/minibatch, \
             data parallel {} ms/minibatch\n",
            ms(p),
            ms(d)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::ms;

    #[test]
    fn milliseconds_keep_three_significant_digits_below_one() {
        assert_eq!(ms(2.5), "2500.000");
        assert_eq!(ms(0.0012345), "1.234");
        assert_eq!(ms(0.0005), "0.500");
        assert_eq!(ms(0.000084), "0.0840");
        assert_eq!(ms(0.0000004), "0.000400");
        assert_eq!(ms(0.0), "0.000");
    }
}
