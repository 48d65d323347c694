//! `[strategy.flexrr]` options, their defaults (thesis Table 3.1) and their validation.

use crate::groups::HelperGroups;
use concord_engine::optim::OptimizerConfig;
use concord_engine::prelude::*;
use concord_engine::stragglers::Uneven;

/// FlexRR's options as written in the config. Every default is the thesis's (Table 3.1, §3.3).
///
/// The four systems the thesis compares are modes of this one implementation: BSP
/// (`slack = 0, reassignment = false`), SSP (`slack = 1, reassignment = false`), BSP RR
/// (`slack = 0`) and FlexRR (the defaults).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FlexrrOptions {
    /// SSP slack: clocks a worker may run ahead of the slowest (thesis: 1; 0 gives BSP RR).
    pub slack: u64,
    /// RapidReassignment on (FlexRR, BSP RR) or off (plain SSP / BSP in the same system).
    pub reassignment: bool,
    /// Work units per worker per clock: the reassignment granularity (`batch` is cut into this
    /// many mini-batches; the thesis reassigns input items, spec §4.1.5 recommends ≥ 40).
    pub units: u32,
    /// Helper group size `g` (thesis 4; 0 disables helping, = SSP).
    pub group_size: u32,
    /// Initial assignment, a fraction of the slow worker's work of the clock (thesis 2.5 %).
    pub initial: f64,
    /// Follow-up assignment (thesis 5 %, always twice the initial one in its sweeps).
    pub follow_up: f64,
    /// Message checks per iteration (thesis 100).
    pub checks: u32,
    /// Modeled cost of one message check, seconds (non-blocking probe of the peer inbox).
    pub check_cost_s: f64,
    /// Straggler trigger: how far ahead, in iterations, a helper must be (thesis 20 %).
    pub trigger: f64,
    /// Progress at which a worker reports to its helpees (thesis 75 % of an iteration).
    pub report_at: f64,
    /// Fraction ρ of each helpee's per-clock work a helper has prefetched, from the tail
    /// (thesis 100 %; Fig. 3.11 sweeps 25–100 %). Only ranges inside it can be reassigned.
    pub replication: f64,
    /// Workers see their own updates before the server has them (the LazyTable cache's
    /// read-my-writes, thesis default). Off: every unit of a clock is computed on the values
    /// read at the clock's start, so BSP and BSP RR are the same synchronous SGD.
    pub read_my_writes: bool,
    /// The thesis's uneven workload: a fraction of the machines gets a larger share of the
    /// data items (Fig. 3.10, half of the machines 75 %). Absent: every worker the same.
    pub uneven: Option<Uneven>,
}

impl Default for FlexrrOptions {
    fn default() -> Self {
        FlexrrOptions {
            slack: 1,
            reassignment: true,
            units: 100,
            group_size: 4,
            initial: 0.025,
            follow_up: 0.05,
            checks: 100,
            check_cost_s: 20e-6,
            trigger: 0.2,
            report_at: 0.75,
            replication: 1.0,
            read_my_writes: true,
            uneven: None,
        }
    }
}

/// The options checked and resolved against a run: per-worker work, the groups, the step size.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The options as given.
    pub options: FlexrrOptions,
    /// Samples per work unit.
    pub unit_batch: u64,
    /// Work units of each worker per clock (different only under `uneven`).
    pub units: Vec<u32>,
    /// First unit of each worker within a clock's slice of the sample stream.
    pub first_unit: Vec<u64>,
    /// Helper and helpee groups.
    pub groups: HelperGroups,
    /// The workers' SGD step size.
    pub lr: f32,
    /// L2 weight decay folded into each unit's gradient.
    pub weight_decay: f32,
}

impl Resolved {
    /// Units of all workers in one clock.
    pub fn units_per_clock(&self) -> u64 {
        self.units.iter().map(|&u| u64::from(u)).sum()
    }

    /// Units of the given fraction of `owner`'s work of a clock (at least one).
    pub fn units_of(&self, owner: u32, fraction: f64) -> u32 {
        let n = self.units[owner as usize];
        ((fraction * f64::from(n)).round() as u32).max(1)
    }

    /// The first unit of `owner`'s clock that helpers have prefetched (partial replication ρ).
    pub fn replicated_from(&self, owner: u32) -> u32 {
        let n = self.units[owner as usize];
        n - ((self.options.replication * f64::from(n)).ceil() as u32).min(n)
    }

    /// Position in the run's sample stream of `owner`'s unit `unit` of `clock`.
    pub fn stream_offset(&self, owner: u32, clock: u64, unit: u32) -> u64 {
        (clock * self.units_per_clock() + self.first_unit[owner as usize] + u64::from(unit))
            * self.unit_batch
    }
}

fn key(field: &str) -> String {
    format!("strategy.flexrr.{field}")
}

fn in_range(field: &str, v: f64, lo: f64, hi: f64, allowed: &str) -> Result<()> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(EngineError::config(key(field), v, allowed))
    }
}

impl FlexrrOptions {
    /// Checks every option and resolves it against `config`; errors name the key.
    pub fn resolve(self, config: &RunConfig, worker_machine: &[u32]) -> Result<Resolved> {
        let o = &self;
        if o.slack > 1_000_000 {
            return Err(EngineError::config(
                key("slack"),
                o.slack,
                "must be at most 1000000",
            ));
        }
        if o.units == 0 || !config.batch.is_multiple_of(u64::from(o.units)) {
            return Err(EngineError::config(
                key("units"),
                o.units,
                format!(
                    "must be at least 1 and divide `batch` = {} (each unit is an equal mini-batch)",
                    config.batch
                ),
            ));
        }
        in_range("initial", o.initial, 1e-9, 1.0, "must be in (0, 1]")?;
        in_range("follow_up", o.follow_up, 1e-9, 1.0, "must be in (0, 1]")?;
        in_range(
            "trigger",
            o.trigger,
            0.0,
            100.0,
            "must be in [0, 100] iterations",
        )?;
        in_range("report_at", o.report_at, 1e-9, 1.0, "must be in (0, 1]")?;
        in_range("replication", o.replication, 1e-9, 1.0, "must be in (0, 1]")?;
        in_range(
            "check_cost_s",
            o.check_cost_s,
            0.0,
            1.0,
            "must be in [0, 1] seconds",
        )?;
        if o.checks == 0 {
            return Err(EngineError::config(key("checks"), 0, "must be at least 1"));
        }
        let workers = config.workers;
        if o.group_size >= workers.max(1) && o.group_size > 0 && workers > 1 {
            return Err(EngineError::config(
                key("group_size"),
                o.group_size,
                format!("must be smaller than `workers` = {workers}"),
            ));
        }
        let (lr, weight_decay) = match config.optimizer {
            OptimizerConfig::Sgd {
                lr,
                momentum: 0.0,
                weight_decay,
            } => (lr as f32, weight_decay as f32),
            OptimizerConfig::Sgd { momentum, .. } => {
                return Err(EngineError::config(
                    "optimizer.momentum",
                    momentum,
                    "flexrr workers apply plain SGD deltas (the thesis's additive parameter-server updates); set momentum = 0",
                ))
            }
            OptimizerConfig::Adam { .. } => {
                return Err(EngineError::config(
                    "optimizer.kind",
                    "\"adam\"",
                    "flexrr workers apply plain SGD deltas (the thesis's additive parameter-server updates); use kind = \"sgd\" with momentum = 0",
                ))
            }
        };
        let units = per_worker_units(o, worker_machine)?;
        let mut first_unit = Vec::with_capacity(units.len());
        let mut acc = 0u64;
        for &u in &units {
            first_unit.push(acc);
            acc += u64::from(u);
        }
        let groups = HelperGroups::new(worker_machine, o.group_size);
        Ok(Resolved {
            unit_batch: config.batch / u64::from(o.units),
            units,
            first_unit,
            groups,
            lr,
            weight_decay,
            options: self,
        })
    }
}

/// Units per worker: equal, or skewed by machine under `uneven` (heavy machines `share/f` of the
/// average, light ones `(1 − share)/(1 − f)`, the same rule as the engine's uneven pattern).
fn per_worker_units(o: &FlexrrOptions, worker_machine: &[u32]) -> Result<Vec<u32>> {
    let Some(u) = o.uneven else {
        return Ok(vec![o.units; worker_machine.len()]);
    };
    in_range(
        "uneven.fraction_machines",
        u.fraction_machines,
        1e-9,
        1.0 - 1e-9,
        "must be in (0, 1)",
    )?;
    in_range(
        "uneven.share",
        u.share,
        1e-9,
        1.0 - 1e-9,
        "must be in (0, 1)",
    )?;
    let f = u.fraction_machines;
    let heavy = |m: u32| ((f64::from(m) + 1.0) * f).ceil() - (f64::from(m) * f).ceil() >= 1.0;
    worker_machine
        .iter()
        .map(|&m| {
            let scale = if heavy(m) {
                u.share / f
            } else {
                (1.0 - u.share) / (1.0 - f)
            };
            let n = (scale * f64::from(o.units)).round() as u32;
            if n == 0 {
                Err(EngineError::config(
                    key("uneven"),
                    format!("share = {}", u.share),
                    "leaves a worker without work; use more units or a milder share",
                ))
            } else {
                Ok(n)
            }
        })
        .collect()
}
