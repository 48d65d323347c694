//! The schema of a suite file (`bench/<name>.toml`): what each table and key means.
//!
//! Pure data types, deserialized straight from TOML with unknown keys rejected, plus the few
//! queries that read the schema alone (which strategies a scenario runs, which claims it
//! carries). Checking the values is [`super::validate`]'s job, turning them into runnable cells
//! [`super::expand`]'s.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One suite file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// The suite's name (its file stem); not read from the file.
    #[serde(skip)]
    pub name: String,
    /// The file it was read from; not read from the file.
    #[serde(skip)]
    pub path: PathBuf,
    /// What the suite measures, shown at the top of the report.
    #[serde(default)]
    pub description: String,
    /// Seeds every cell is run with; at least one.
    pub seeds: Vec<u64>,
    /// Label of the strategy that speed-ups are measured against (default `bsp`).
    #[serde(default = "default_baseline")]
    pub baseline: String,
    /// Config overrides shared by every scenario, layered over each scenario's `file`.
    #[serde(default)]
    pub config: toml::Table,
    /// A sweep applied to every scenario that has none of its own.
    #[serde(default)]
    pub sweep: Option<Sweep>,
    /// The strategies compared.
    pub strategies: Vec<StrategySpec>,
    /// The scenarios they are compared in.
    #[serde(default)]
    pub scenarios: Vec<ScenarioSpec>,
}

fn default_baseline() -> String {
    "bsp".into()
}

/// One strategy composition of a suite, e.g. `ssp` with `slack = 2`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StrategySpec {
    /// Name in tables, plots and the CSV; unique within the suite.
    pub label: String,
    /// Strategy names as the registry knows them, composed in order (`strategies = [...]`);
    /// empty for a market scheme.
    #[serde(default)]
    pub strategies: Vec<String>,
    /// A spot-market scheme instead of a training strategy (`on-demand`,
    /// `standard-checkpoint`, `standard-agileml`, `proteus`, `at-market`): run only in market
    /// scenarios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Per-strategy options, by strategy name: becomes the run's `[strategy.<name>]` tables.
    #[serde(default)]
    pub options: toml::Table,
    /// Any other config overrides this strategy needs (e.g. `memory`), layered over the scenario.
    #[serde(default)]
    pub config: toml::Table,
}

/// One scenario as written: a cluster, model, data set, straggler pattern and run length.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Name in tables, plots and the CSV; unique within the suite.
    pub label: String,
    /// What the scenario models, shown in the report.
    #[serde(default)]
    pub description: String,
    /// A run config file (relative to the workspace root) the scenario starts from.
    #[serde(default)]
    pub file: Option<String>,
    /// Config overrides, layered over `file` and the suite's `config`.
    #[serde(default)]
    pub config: toml::Table,
    /// A target: the report gives the first virtual time it is reached.
    #[serde(default)]
    pub target: Option<Target>,
    /// Phases of a time-varying scenario (e.g. a bandwidth rotation): the report gives the mean
    /// iteration time in the disturbed phases relative to the undisturbed one (`phase_ratio`).
    #[serde(default)]
    pub phases: Option<Phases>,
    /// Label of the scenario that is this one without its stragglers: the report gives each
    /// cell's per-iteration delay (`per_iteration_delay_s`, Fela's PID), its time per iteration
    /// less that of the same strategy and seed there.
    #[serde(default)]
    pub calm: Option<String>,
    /// Labels of the suite's strategies run in this scenario (default: all of them, in suite
    /// order). Cells, tables, plots and claims of the scenario cover only these.
    #[serde(default)]
    pub strategies: Option<Vec<String>>,
    /// Label of the strategy this scenario's speed-up columns are measured against (default:
    /// the suite's `baseline`), e.g. `allreduce` where the papers compare with it.
    #[serde(default)]
    pub baseline: Option<String>,
    /// One paper claim measured in this scenario (kept for short suites; checked before
    /// `claims`).
    #[serde(default)]
    pub claim: Option<Claim>,
    /// Paper claims measured in this scenario.
    #[serde(default)]
    pub claims: Vec<Claim>,
    /// Sweep one key over values: one scenario per value.
    #[serde(default)]
    pub sweep: Option<Sweep>,
    /// Paper claims about a metric's shape across the sweep (needs `sweep`).
    #[serde(default)]
    pub trends: Vec<Trend>,
    /// A spot-market cost study instead of a training run: each of the scenario's scheme
    /// strategies is one row (`cost_relative`, `runtime_h`, `free_share`, `evictions`).
    #[serde(default)]
    pub market: Option<MarketStudy>,
}

/// A market scenario's study: the market file, the job length and the start points (the seed
/// of the start points is the cell's seed).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MarketStudy {
    /// The market file (TOML naming its CSV trace), relative to the workspace root.
    pub file: String,
    /// Job length on the reference footprint, hours.
    pub hours: f64,
    /// Random start points.
    pub starts: usize,
}

/// A claim about how a strategy's metric moves across a sweep's (numeric) values, checked on
/// the means over seeds.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Trend {
    /// The claim in words, as the paper states it.
    pub text: String,
    /// Where the paper states it.
    #[serde(default)]
    pub source: String,
    /// The metric (as for claims).
    pub metric: String,
    /// Label of the strategy the claim is about.
    pub strategy: String,
    /// The shape claimed.
    pub shape: Shape,
    /// A model property rather than a paper result (see [`Claim::property`]).
    #[serde(default)]
    pub property: bool,
}

/// The shape of a metric across a sweep.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Shape {
    /// Rising linearly: a least-squares line over every value has a positive slope and
    /// explains at least `min_r2` of the variance.
    Linear {
        /// Smallest coefficient of determination R² (0–1).
        min_r2: f64,
    },
    /// Flat up to a value: every point with a swept value ≤ `up_to` within `within` (relative)
    /// of the point at the smallest value.
    Flat {
        /// Largest swept value the claim covers.
        up_to: f64,
        /// Largest relative change (0.1 = 10 %).
        within: f64,
    },
}

/// A target accuracy, loss or convergence criterion (exactly one of them).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Reached at the first evaluation whose test accuracy is at least this (0–1).
    #[serde(default)]
    pub accuracy: Option<f64>,
    /// Reached at the first iteration whose (sample-weighted, all workers) training loss is at
    /// most this.
    #[serde(default)]
    pub loss: Option<f64>,
    /// Reached at the first time-indexed evaluation (the scenario sets `eval_every_s`) whose test
    /// loss is at most this: the model itself measured on held-out data at fixed run times, so
    /// strategies whose iterations mean different things (RNA rounds, asynchronous groups) and
    /// whose per-iteration training losses average different numbers of batches compare fairly.
    #[serde(default)]
    pub test_loss: Option<f64>,
    /// Reached when training has converged by the Harlap thesis's criterion (§3.4.3): the
    /// objective — the test loss where evaluated (set `eval_every = 1`), else the training loss —
    /// changed by less than `change` (relative) over the last `over` iterations.
    #[serde(default)]
    pub converged: Option<Convergence>,
}

/// A convergence criterion: relative change of the training loss below `change` over `over`
/// iterations (the thesis: 2 % over 10).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Convergence {
    /// Largest relative change that counts as converged (0.02 = 2 %).
    pub change: f64,
    /// Iterations the change is measured over (≥ 1).
    pub over: u64,
    /// Iterations before the criterion is first checked (a model that starts at a saddle, like
    /// matrix factorization from a small random start, has a flat objective there too).
    #[serde(default)]
    pub after: u64,
}

/// Time-varying scenario phases: run time is cut into slots of `period_s`; slot `k` is in phase
/// `k mod count`, and phase 0 is the undisturbed one.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Phases {
    /// Length of one phase, virtual seconds (> 0).
    pub period_s: f64,
    /// Number of phases in a cycle (≥ 2).
    pub count: u32,
    /// Iterations to skip at the start (warm-up) before measuring.
    #[serde(default)]
    pub skip: u64,
}

/// A sweep: one config key (dotted path; array elements by index, e.g. `stragglers.0.delay`)
/// and the values it takes.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The dotted config key.
    pub key: String,
    /// Its values, one scenario each.
    pub values: Vec<toml::Value>,
}

/// Which way a claim says the strategy's metric moves relative to the baseline's.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The strategy's value is lower (e.g. less time per iteration).
    Less,
    /// The strategy's value is higher (e.g. higher efficiency).
    Greater,
}

/// A paper's claim: "`strategy`'s `metric` is `expect` than `baseline`'s by at least
/// `by_at_least` (relative to the baseline)", e.g. FlexRR: 35–53 % less time per iteration
/// than BSP under Slow Worker is `expect = "less", by_at_least = 0.35, by_at_most = 0.53`.
/// Instead of a baseline strategy, a claim can compare with a constant, `than = 0.05`
/// (exactly one of the two).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The claim in words, as the paper states it.
    pub text: String,
    /// Where the paper states it (figure, table or section).
    #[serde(default)]
    pub source: String,
    /// The metric compared (a CSV column, see [`super::metrics::METRICS`], or `figure:<name>`
    /// for a strategy figure of the run summary).
    pub metric: String,
    /// Label of the strategy the claim is about.
    pub strategy: String,
    /// Label of the strategy it is compared to (or set `than`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// A constant it is compared to (or set `baseline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub than: Option<f64>,
    /// Direction of the difference.
    pub expect: Direction,
    /// Smallest relative difference that upholds the claim (0.35 = 35 %); 0 checks the direction
    /// only; a negative value is a tolerance (-0.1: at most 10 % the other way, i.e. "about equal").
    #[serde(default)]
    pub by_at_least: f64,
    /// Largest relative difference that still matches the claim, if the paper states a range.
    #[serde(default)]
    pub by_at_most: Option<f64>,
    /// A model property rather than a paper result: true by construction of the simulator or
    /// the strategy (e.g. a cost the model charges as a constant), so it is checked and shown
    /// apart and never counted among reproduced claims.
    #[serde(default)]
    pub property: bool,
}

impl ScenarioSpec {
    /// The strategy this scenario's speed-ups are measured against: its own `baseline`, else
    /// the suite's.
    pub fn speedup_baseline<'a>(&'a self, suite: &'a Suite) -> &'a str {
        self.baseline.as_deref().unwrap_or(&suite.baseline)
    }

    /// Every claim of the scenario: `claim` (if set), then `claims`, each with its key in the
    /// suite file (`claim` or `claims[j]`).
    pub fn all_claims(&self) -> Vec<(String, &Claim)> {
        self.claim
            .iter()
            .map(|c| ("claim".to_string(), c))
            .chain(
                self.claims
                    .iter()
                    .enumerate()
                    .map(|(j, c)| (format!("claims[{j}]"), c)),
            )
            .collect()
    }
}

impl Suite {
    /// Indices (into [`Suite::strategies`], in suite order) of the strategies a scenario runs:
    /// those its `strategies` lists, or all of its kind (market schemes in a market scenario,
    /// training strategies in any other).
    pub fn scenario_strategies(&self, spec: &ScenarioSpec) -> Vec<usize> {
        (0..self.strategies.len())
            .filter(|&t| {
                let s = &self.strategies[t];
                match &spec.strategies {
                    Some(l) => l.contains(&s.label),
                    None => s.scheme.is_some() == spec.market.is_some(),
                }
            })
            .collect()
    }

    /// Whether every scenario runs every strategy.
    pub fn full_matrix(&self) -> bool {
        self.scenarios
            .iter()
            .all(|s| self.scenario_strategies(s).len() == self.strategies.len())
    }
}
