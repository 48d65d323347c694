//! Suite files (`bench/<name>.toml`): their schema, loading, and expansion into cells.
//!
//! A suite is strategies × scenarios × seeds. Each scenario may sweep one config key over a list
//! of values, which turns it into one scenario per value. A cell's run configuration is built by
//! layering TOML tables (see [`Suite::cells`]) and deserializing the result into
//! [`RunConfig`], so every key the engine accepts can be set from a suite, and a strategy added
//! to the registry later is benchmarked by naming it here, with no change to the bench code.

use super::BenchError;
use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
    /// Strategy names as the registry knows them, composed in order (`strategies = [...]`).
    pub strategies: Vec<String>,
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
    /// Labels of the suite's strategies run in this scenario (default: all of them, in suite
    /// order). Cells, tables, plots and claims of the scenario cover only these.
    #[serde(default)]
    pub strategies: Option<Vec<String>>,
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
    /// The metric compared (a CSV column, see [`super::report::METRICS`], or `figure:<name>`
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
}

impl ScenarioSpec {
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

/// One scenario after sweep expansion.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Label, with ` key=value` appended for a swept scenario (the key's last part:
    /// `stragglers.0.delay` shows as `delay`).
    pub label: String,
    /// The label as written (shared by every value of a sweep).
    pub group: String,
    /// The spec it came from.
    pub spec: ScenarioSpec,
    /// The swept key and this scenario's value, if swept.
    pub swept: Option<(String, toml::Value)>,
}

/// One cell: a strategy in a scenario with a seed, and its resolved run config.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Index of the scenario in [`Suite::scenarios_expanded`].
    pub scenario: usize,
    /// Index of the strategy in [`Suite::strategies`].
    pub strategy: usize,
    /// The seed.
    pub seed: u64,
    /// The resolved, validated run config.
    pub config: RunConfig,
}

impl Cell {
    /// `scenario / strategy / seed`, what `--filter` matches against.
    pub fn id(&self, suite: &Suite, scenarios: &[Scenario]) -> String {
        format!(
            "{} / {} / seed {}",
            scenarios[self.scenario].label, suite.strategies[self.strategy].label, self.seed
        )
    }
}

/// The workspace root (where `bench/` and `configs/` live).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The folder suite files live in.
pub fn bench_dir() -> PathBuf {
    workspace_root().join("bench")
}

/// Every suite file in `dir` (`*.toml`), sorted.
pub fn suite_files(dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let io = |source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl Suite {
    /// Loads `bench/<name>.toml`.
    pub fn load_named(name: &str) -> Result<Suite, BenchError> {
        let path = bench_dir().join(format!("{name}.toml"));
        if !path.exists() {
            let known = suite_files(&bench_dir())
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(BenchError::NoSuite {
                name: name.into(),
                known,
            });
        }
        Suite::load(&path)
    }

    /// Loads and checks one suite file (schema and labels; configs are checked by [`Suite::cells`]).
    pub fn load(path: &Path) -> Result<Suite, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Suite::parse(&text, path)
    }

    /// Parses suite text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Suite, BenchError> {
        let bad = |key: &str, reason: String| BenchError::Suite {
            file: path.to_path_buf(),
            key: key.to_string(),
            reason,
        };
        let de = toml::Deserializer::new(text);
        let mut suite: Suite = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            bad(&key, e.into_inner().message().trim().to_string())
        })?;
        suite.path = path.to_path_buf();
        suite.name = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        if suite.seeds.is_empty() {
            return Err(bad("seeds", "needs at least one seed".into()));
        }
        if suite.strategies.is_empty() {
            return Err(bad("strategies", "needs at least one strategy".into()));
        }
        let mut labels = BTreeSet::new();
        for (i, s) in suite.strategies.iter().enumerate() {
            if s.label.trim().is_empty() || !labels.insert(s.label.clone()) {
                return Err(bad(
                    &format!("strategies[{i}].label"),
                    format!("{:?} is empty or used twice", s.label),
                ));
            }
            if s.strategies.is_empty() {
                return Err(bad(
                    &format!("strategies[{i}].strategies"),
                    "names no strategy".into(),
                ));
            }
        }
        let mut labels = BTreeSet::new();
        for (i, s) in suite.scenarios.iter().enumerate() {
            if s.label.trim().is_empty() || !labels.insert(s.label.clone()) {
                return Err(bad(
                    &format!("scenarios[{i}].label"),
                    format!("{:?} is empty or used twice", s.label),
                ));
            }
            if let Some(t) = &s.target {
                let ok = match (t.accuracy, t.loss, t.test_loss, t.converged) {
                    (Some(a), None, None, None) => a.is_finite(),
                    (None, Some(l), None, None) | (None, None, Some(l), None) => l.is_finite(),
                    (None, None, None, Some(c)) => {
                        c.change.is_finite() && c.change > 0.0 && c.over >= 1
                    }
                    _ => false,
                };
                if !ok {
                    return Err(bad(
                        &format!("scenarios[{i}].target"),
                        "set exactly one of `accuracy`, `loss` or `test_loss` (a finite number) or `converged` (`change` > 0, `over` ≥ 1)".into(),
                    ));
                }
            }
            if let Some(subset) = &s.strategies {
                let key = format!("scenarios[{i}].strategies");
                if subset.is_empty() {
                    return Err(bad(&key, "names no strategy (leave it out for all)".into()));
                }
                let mut seen = BTreeSet::new();
                for (k, label) in subset.iter().enumerate() {
                    if !suite.strategies.iter().any(|t| &t.label == label) {
                        let known: Vec<&str> =
                            suite.strategies.iter().map(|t| t.label.as_str()).collect();
                        return Err(bad(
                            &format!("{key}[{k}]"),
                            format!(
                                "{label:?} is not a strategy label of this suite; one of {}",
                                known.join(", ")
                            ),
                        ));
                    }
                    if !seen.insert(label) {
                        return Err(bad(
                            &format!("{key}[{k}]"),
                            format!("{label:?} is listed twice"),
                        ));
                    }
                }
            }
            let in_scenario: Vec<&str> = suite
                .scenario_strategies(s)
                .into_iter()
                .map(|t| suite.strategies[t].label.as_str())
                .collect();
            for (name, c) in s.all_claims() {
                check_claim(c, &format!("scenarios[{i}].{name}"), &in_scenario, &bad)?;
            }
            if let Some(sw) = &s.sweep {
                check_sweep(sw, &format!("scenarios[{i}].sweep"), &bad)?;
            }
            for (j, t) in s.trends.iter().enumerate() {
                check_trend(
                    t,
                    &format!("scenarios[{i}].trends[{j}]"),
                    s,
                    &in_scenario,
                    &bad,
                )?;
            }
        }
        if let Some(sw) = &suite.sweep {
            check_sweep(sw, "sweep", &bad)?;
        }
        Ok(suite)
    }

    /// Indices (into [`Suite::strategies`], in suite order) of the strategies a scenario runs:
    /// those its `strategies` lists, or all.
    pub fn scenario_strategies(&self, spec: &ScenarioSpec) -> Vec<usize> {
        (0..self.strategies.len())
            .filter(|&t| {
                spec.strategies
                    .as_ref()
                    .is_none_or(|l| l.contains(&self.strategies[t].label))
            })
            .collect()
    }

    /// Whether every scenario runs every strategy.
    pub fn full_matrix(&self) -> bool {
        self.scenarios
            .iter()
            .all(|s| self.scenario_strategies(s).len() == self.strategies.len())
    }

    /// The scenarios with sweeps expanded: a swept scenario becomes one per value, labelled
    /// `label key=value` (the key's last dotted part), in value order.
    pub fn scenarios_expanded(&self) -> Vec<Scenario> {
        let mut out = Vec::new();
        for spec in &self.scenarios {
            match spec.sweep.as_ref().or(self.sweep.as_ref()) {
                None => out.push(Scenario {
                    label: spec.label.clone(),
                    group: spec.label.clone(),
                    spec: spec.clone(),
                    swept: None,
                }),
                Some(sweep) => {
                    for v in &sweep.values {
                        out.push(Scenario {
                            label: format!(
                                "{} {}={}",
                                spec.label,
                                sweep.key.rsplit('.').next().unwrap_or(&sweep.key),
                                show_value(v)
                            ),
                            group: spec.label.clone(),
                            spec: spec.clone(),
                            swept: Some((sweep.key.clone(), v.clone())),
                        });
                    }
                }
            }
        }
        out
    }

    /// Every cell, scenario-major then strategy then seed, with its config resolved and
    /// validated, and its composition checked against the registry: a bad key or an unknown
    /// strategy fails here, before any cell runs.
    pub fn cells(&self, scenarios: &[Scenario]) -> Result<Vec<Cell>, BenchError> {
        let registry = concord::registry();
        let mut cells = Vec::new();
        for (si, scenario) in scenarios.iter().enumerate() {
            let scenario_index = self
                .scenarios
                .iter()
                .position(|s| s.label == scenario.group)
                .unwrap_or(0);
            for ti in self.scenario_strategies(&scenario.spec) {
                let strategy = &self.strategies[ti];
                for &seed in &self.seeds {
                    let where_ = format!(
                        "scenarios[{scenario_index}] ({}) × strategies[{ti}] ({})",
                        scenario.label, strategy.label
                    );
                    let config = self.resolve(scenario, strategy, seed, &where_)?;
                    registry.compose(&config).map_err(|e| BenchError::Suite {
                        file: self.path.clone(),
                        key: format!("strategies[{ti}].strategies"),
                        reason: format!("in {where_}: {e}"),
                    })?;
                    cells.push(Cell {
                        scenario: si,
                        strategy: ti,
                        seed,
                        config,
                    });
                }
            }
        }
        Ok(cells)
    }

    /// A cell's config, by layers: engine defaults < scenario `file` < suite `config` <
    /// scenario `config` < swept value < strategy `config` < strategy names and options <
    /// `seed`, `runtime = "sim"`.
    fn resolve(
        &self,
        scenario: &Scenario,
        strategy: &StrategySpec,
        seed: u64,
        where_: &str,
    ) -> Result<RunConfig, BenchError> {
        let bad = |key: &str, reason: String| BenchError::Suite {
            file: self.path.clone(),
            key: key.to_string(),
            reason: format!("in {where_}: {reason}"),
        };
        let mut user = toml::Table::new();
        if let Some(file) = &scenario.spec.file {
            let path = workspace_root().join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                bad(
                    "scenarios.file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                bad(
                    "scenarios.file",
                    format!("{}: {}", path.display(), e.message()),
                )
            })?;
            merge(&mut user, table);
        }
        merge(&mut user, self.config.clone());
        merge(&mut user, scenario.spec.config.clone());
        if let Some((key, value)) = &scenario.swept {
            set_path(&mut user, key, value.clone()).map_err(|r| bad("sweep.key", r))?;
        }
        merge(&mut user, strategy.config.clone());
        user.insert(
            "strategies".into(),
            toml::Value::Array(
                strategy
                    .strategies
                    .iter()
                    .map(|s| toml::Value::String(s.clone()))
                    .collect(),
            ),
        );
        if !strategy.options.is_empty() {
            let mut t = toml::Table::new();
            t.insert(
                "strategy".into(),
                toml::Value::Table(strategy.options.clone()),
            );
            merge(&mut user, t);
        }
        user.insert("seed".into(), toml::Value::Integer(seed as i64));
        user.insert("runtime".into(), toml::Value::String("sim".into()));

        let mut defaults = toml::Table::try_from(RunConfig::default())
            .map_err(|e| bad("(defaults)", e.to_string()))?;
        // A layer that picks another `kind` of model/data/optimizer replaces that section's
        // defaults instead of merging into them (as `concord::config::load` does).
        for section in ["model", "data", "optimizer"] {
            let kind = |t: &toml::Table| {
                t.get(section)
                    .and_then(|s| s.get("kind"))
                    .and_then(|k| k.as_str())
                    .map(str::to_string)
            };
            let chosen = kind(&user);
            if chosen.is_some() && chosen != kind(&defaults) {
                defaults.remove(section);
            }
        }
        merge(&mut defaults, user);
        let config: RunConfig = serde_path_to_error::deserialize(toml::Value::Table(defaults))
            .map_err(|e| {
                let key = e.path().to_string();
                bad(&key, e.into_inner().message().trim().to_string())
            })?;
        config
            .validate()
            .map_err(|e| bad("(config)", e.to_string()))?;
        if scenario
            .spec
            .target
            .as_ref()
            .is_some_and(|t| t.test_loss.is_some())
            && config.eval_every_s.is_none()
        {
            return Err(bad(
                "scenarios.target.test_loss",
                "a test-loss target reads time-indexed evaluations: set `eval_every_s` in the config".into(),
            ));
        }
        Ok(config)
    }
}

/// Checks one trend claim: a swept scenario, a known metric, a strategy of the scenario, a
/// sensible shape.
fn check_trend(
    t: &Trend,
    key: &str,
    s: &ScenarioSpec,
    strategies: &[&str],
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    if s.sweep.is_none() {
        return Err(bad(key, "a trend needs the scenario's `sweep`".into()));
    }
    if !super::report::known_metric(&t.metric) {
        return Err(bad(
            &format!("{key}.metric"),
            format!("unknown metric {:?} (as for claims)", t.metric),
        ));
    }
    if !strategies.contains(&t.strategy.as_str()) {
        return Err(bad(
            &format!("{key}.strategy"),
            format!(
                "{:?} is not a strategy of this scenario; one of {}",
                t.strategy,
                strategies.join(", ")
            ),
        ));
    }
    let ok = match t.shape {
        Shape::Linear { min_r2 } => (0.0..=1.0).contains(&min_r2),
        Shape::Flat { up_to, within } => up_to.is_finite() && within.is_finite() && within >= 0.0,
    };
    if !ok {
        return Err(bad(
            &format!("{key}.shape"),
            "linear needs 0 ≤ min_r2 ≤ 1; flat needs a finite up_to and within ≥ 0".into(),
        ));
    }
    Ok(())
}

/// Checks one claim; `key` is where it is (`scenarios[0].claims[1]`), `strategies` the labels
/// of the scenario's strategies.
fn check_claim(
    c: &Claim,
    key: &str,
    strategies: &[&str],
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    if !super::report::known_metric(&c.metric) {
        let allowed: Vec<&str> = super::report::METRICS.iter().map(|(m, _)| *m).collect();
        return Err(bad(
            &format!("{key}.metric"),
            format!(
                "unknown metric {:?}; one of {}, or figure:<name> (a strategy figure of the run \
                 summary, e.g. figure:lb-bsp.rmse_relative)",
                c.metric,
                allowed.join(", ")
            ),
        ));
    }
    let mut sides = vec![("strategy", &c.strategy)];
    sides.extend(c.baseline.as_ref().map(|b| ("baseline", b)));
    for (field, label) in sides {
        if !strategies.contains(&label.as_str()) {
            return Err(bad(
                &format!("{key}.{field}"),
                format!(
                    "{label:?} is not a strategy of this scenario; one of {}",
                    strategies.join(", ")
                ),
            ));
        }
    }
    match (&c.baseline, c.than) {
        (Some(_), None) => {}
        (None, Some(t)) if t.is_finite() => {}
        (None, Some(_)) => {
            return Err(bad(
                &format!("{key}.than"),
                "must be a finite number".into(),
            ));
        }
        _ => {
            return Err(bad(
                key,
                "set exactly one of `baseline` (a strategy label) or `than` (a number)".into(),
            ));
        }
    }
    if !(c.by_at_least.is_finite() && c.by_at_least >= -1.0) {
        return Err(bad(
            &format!("{key}.by_at_least"),
            "must be a relative difference ≥ -1 (0.35 = at least 35 % in the claimed direction; -0.1 = at most 10 % the other way)".into(),
        ));
    }
    if c.by_at_most
        .is_some_and(|m| !(m.is_finite() && m >= c.by_at_least))
    {
        return Err(bad(
            &format!("{key}.by_at_most"),
            "must be at least by_at_least".into(),
        ));
    }
    Ok(())
}

fn check_sweep(
    sweep: &Sweep,
    key: &str,
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    if sweep.key.trim().is_empty() {
        return Err(bad(&format!("{key}.key"), "is empty".into()));
    }
    if sweep.values.is_empty() {
        return Err(bad(
            &format!("{key}.values"),
            "needs at least one value".into(),
        ));
    }
    Ok(())
}

/// A TOML value as written in a label: strings bare, numbers as TOML writes them.
pub fn show_value(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Deep-merges `over` into `base`: tables merge key by key, anything else is replaced.
pub fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Sets a dotted key (`a.b.c`; an all-digit part indexes an existing array element) in `root`,
/// creating missing tables.
pub fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("{key:?} is not a dotted key"));
    }
    let mut node = root
        .entry(parts[0].to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if parts.len() == 1 {
        *node = value;
        return Ok(());
    }
    for (depth, part) in parts.iter().enumerate().skip(1) {
        let last = depth == parts.len() - 1;
        let here = parts[..depth].join(".");
        node = match node {
            toml::Value::Array(items) => {
                let i: usize = part.parse().map_err(|_| {
                    format!("`{here}` is an array: index it with a number, not {part:?}")
                })?;
                let len = items.len();
                items
                    .get_mut(i)
                    .ok_or_else(|| format!("`{here}` has {len} elements, no index {i}"))?
            }
            toml::Value::Table(t) => {
                if last {
                    t.insert(part.to_string(), value);
                    return Ok(());
                }
                t.entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            }
            other => {
                return Err(format!(
                    "`{here}` is a {}, not a table or array",
                    other.type_str()
                ))
            }
        };
        if last {
            *node = value;
            return Ok(());
        }
    }
    Ok(())
}
