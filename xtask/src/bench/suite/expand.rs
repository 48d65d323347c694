//! Expansion of a suite into what runs: sweeps into one scenario per value, and scenarios ×
//! strategies × seeds into cells, each with its run config resolved by layering TOML tables and
//! validated against the engine and the strategy registry.

use super::load::workspace_root;
use super::schema::{ScenarioSpec, StrategySpec, Suite};
use super::toml_tables::{merge, merge_layer, set_path, show_value};
use crate::bench::error::BenchError;
use concord_engine::config::RunConfig;

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
    /// The resolved, validated run config (the defaults for a market cell).
    pub config: RunConfig,
    /// A market cell's study: the scenario's, with this cell's scheme.
    pub market: Option<MarketCell>,
}

/// What a market cell runs: the study of one scheme.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MarketCell {
    /// The market file, relative to the workspace root.
    pub file: String,
    /// Job length, hours.
    pub hours: f64,
    /// Random start points.
    pub starts: usize,
    /// The scheme's name.
    pub scheme: String,
    /// Seed of the start points.
    pub seed: u64,
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

impl Suite {
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
                    if let (Some(m), Some(scheme)) = (&scenario.spec.market, &strategy.scheme) {
                        cells.push(Cell {
                            scenario: si,
                            strategy: ti,
                            seed,
                            config: RunConfig::default(),
                            market: Some(MarketCell {
                                file: m.file.clone(),
                                hours: m.hours,
                                starts: m.starts,
                                scheme: scheme.clone(),
                                seed,
                            }),
                        });
                        continue;
                    }
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
                        market: None,
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
        // Layers, lowest first: the built-in defaults, the scenario's file, the suite's config,
        // the scenario's, the swept value, the strategy's.
        let mut layered = toml::Table::try_from(RunConfig::default())
            .map_err(|e| bad("(defaults)", e.to_string()))?;
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
            merge_layer(&mut layered, table);
        }
        merge_layer(&mut layered, self.config.clone());
        merge_layer(&mut layered, scenario.spec.config.clone());
        if let Some((key, value)) = &scenario.swept {
            set_path(&mut layered, key, value.clone()).map_err(|r| bad("sweep.key", r))?;
        }
        merge_layer(&mut layered, strategy.config.clone());
        layered.insert(
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
            merge(&mut layered, t);
        }
        layered.insert("seed".into(), toml::Value::Integer(seed as i64));
        layered.insert("runtime".into(), toml::Value::String("sim".into()));

        let config: RunConfig = serde_path_to_error::deserialize(toml::Value::Table(layered))
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

/// Swept scenarios grouped by the scenario they came from, in suite order.
pub fn sweep_groups(scenarios: &[Scenario]) -> Vec<(&str, Vec<&Scenario>)> {
    let mut out: Vec<(&str, Vec<&Scenario>)> = Vec::new();
    for s in scenarios.iter().filter(|s| s.swept.is_some()) {
        match out.iter_mut().find(|(g, _)| *g == s.group) {
            Some((_, v)) => v.push(s),
            None => out.push((s.group.as_str(), vec![s])),
        }
    }
    out
}
