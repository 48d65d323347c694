//! `[strategy.flexrr]` options, their defaults (thesis Table 3.1) and their validation.

use crate::groups::HelperGroups;
use concord_engine::cluster::DeviceProfile;
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
    /// many mini-batches; the thesis reassigns input items, spec §4.1.5 recommends ≥ 40). Unset:
    /// the largest divisor of `batch` up to 100 whose mini-batches still keep the workers'
    /// devices at 90 % of the throughput a whole batch gets (see [`default_units`]), so any
    /// batch works and the finest split that costs little compute is taken.
    pub units: Option<u32>,
    /// Helper group size `g` (0 disables helping, = SSP). Unset: the thesis's 4, or every other
    /// worker in a job of 4 or fewer.
    pub group_size: Option<u32>,
    /// Initial assignment, a fraction of the slow worker's work of the clock (thesis 2.5 %).
    pub initial: f64,
    /// Follow-up assignment (thesis 5 %, always twice the initial one in its sweeps).
    pub follow_up: f64,
    /// Message checks per iteration. Unset: the thesis's 100, but at most one per work unit (a
    /// check inside a unit cannot act before the unit ends, so extra ones would only cost
    /// time). Set: exactly this many, spread over the units (checks between the same two units
    /// cost their time and are handled together), as the thesis's sensitivity study sweeps them.
    pub checks: Option<u32>,
    /// Modeled cost of one message check, seconds (non-blocking probe of the peer inbox).
    pub check_cost_s: f64,
    /// The largest share of a worker's compute time its message checks may cost. The thesis's
    /// checks cost a negligible share of its multi-second iterations, and its sensitivity study
    /// (Fig. 3.12c) finds that checking so often that it costs real time only slows a worker
    /// down; on short iterations 100 checks would cost more than the work they watch. So a clock
    /// makes no more checks than this share of the worker's previous clock's compute time pays
    /// for (none at all when one would not fit: the worker then reads its messages only while it
    /// waits, and FlexRR runs as SSP). 1 lets checks cost as much as the work.
    pub max_check_share: f64,
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
            units: None,
            group_size: None,
            initial: 0.025,
            follow_up: 0.05,
            checks: None,
            check_cost_s: 20e-6,
            max_check_share: 0.1,
            trigger: 0.2,
            report_at: 0.75,
            replication: 1.0,
            read_my_writes: true,
            uneven: None,
        }
    }
}

/// The thesis's helper group size (Table 3.1).
pub const DEFAULT_GROUP_SIZE: u32 = 4;

/// The thesis's message checks per iteration (Table 3.1).
pub const DEFAULT_CHECKS: u32 = 100;

/// The most work units a clock is cut into by default (the thesis's 100 message checks per
/// iteration act at unit boundaries, so finer units would not react sooner).
pub const DEFAULT_UNITS: u32 = 100;

/// The least share of a whole batch's throughput a default unit's mini-batch keeps on a device
/// that small batches do not fill.
pub const UNIT_THROUGHPUT: f64 = 0.9;

/// The default units of a clock: the largest divisor of `batch` up to [`DEFAULT_UNITS`] whose
/// mini-batch keeps [`UNIT_THROUGHPUT`] of the throughput the whole batch gets on every one of
/// the workers' `devices` (by their [`DeviceProfile::flops_at`]; a device without a
/// half-saturation batch is full at any batch, like the thesis's per-item CPU work). Cutting a
/// batch finer than that would cost more compute than moving work can win back: on the built-in
/// `cpu` profile (half its peak at 4 samples), 96 units of 4 samples run at half speed.
pub fn default_units(batch: u64, devices: &[&DeviceProfile]) -> u32 {
    let keeps_throughput = |unit_batch: u64| {
        devices
            .iter()
            .all(|d| d.flops_at(unit_batch as f64) >= UNIT_THROUGHPUT * d.flops_at(batch as f64))
    };
    (1..=DEFAULT_UNITS)
        .rev()
        .filter(|&u| batch.is_multiple_of(u64::from(u)))
        .find(|&u| keeps_throughput(batch / u64::from(u)))
        .unwrap_or(1)
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
    /// The step of one unit's delta: `optimizer.lr` over every unit of a clock (see
    /// [`crate::rate`]), so a clock moves the model as far as the engine's strategies do.
    pub lr: f32,
    /// L2 weight decay folded into each unit's gradient.
    pub weight_decay: f32,
}

impl Resolved {
    /// Units of all workers in one clock.
    pub fn units_per_clock(&self) -> u64 {
        self.units.iter().map(|&u| u64::from(u)).sum()
    }

    /// Message checks `owner` makes per clock: as configured, or the thesis's 100 but at most one
    /// per unit.
    pub fn checks(&self, owner: u32) -> u32 {
        self.options
            .checks
            .unwrap_or_else(|| DEFAULT_CHECKS.min(self.units[owner as usize]))
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
    /// Checks every option and resolves it against `config`, for workers placed on
    /// `worker_machine[w]` and computing on `worker_devices` (which the default units must keep
    /// busy); errors name the key.
    pub fn resolve(
        self,
        config: &RunConfig,
        worker_machine: &[u32],
        worker_devices: &[&DeviceProfile],
    ) -> Result<Resolved> {
        let o = &self;
        if o.slack > 1_000_000 {
            return Err(EngineError::config(
                key("slack"),
                o.slack,
                "must be at most 1000000",
            ));
        }
        let units = o
            .units
            .unwrap_or_else(|| default_units(config.batch, worker_devices));
        if units == 0 || !config.batch.is_multiple_of(u64::from(units)) {
            return Err(EngineError::config(
                key("units"),
                units,
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
        in_range(
            "max_check_share",
            o.max_check_share,
            1e-9,
            1.0,
            "must be in (0, 1]",
        )?;
        if o.checks == Some(0) {
            return Err(EngineError::config(key("checks"), 0, "must be at least 1"));
        }
        let workers = config.workers;
        let group_size = match o.group_size {
            Some(g) if g >= workers.max(1) && g > 0 && workers > 1 => {
                return Err(EngineError::config(
                    key("group_size"),
                    g,
                    format!("must be smaller than `workers` = {workers}"),
                ))
            }
            Some(g) => g,
            None => DEFAULT_GROUP_SIZE.min(workers.saturating_sub(1)),
        };
        let (lr, weight_decay) = match config.optimizer {
            OptimizerConfig::Sgd {
                lr,
                momentum: 0.0,
                weight_decay,
            } => (lr, weight_decay as f32),
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
        let unit_batch = config.batch / u64::from(units);
        let units = per_worker_units(o, units, worker_machine)?;
        let mut first_unit = Vec::with_capacity(units.len());
        let mut acc = 0u64;
        for &u in &units {
            first_unit.push(acc);
            acc += u64::from(u);
        }
        let groups = HelperGroups::new(worker_machine, group_size);
        Ok(Resolved {
            unit_batch,
            units,
            first_unit,
            groups,
            lr: crate::rate::unit_rate(lr, acc),
            weight_decay,
            options: self,
        })
    }
}

/// Units per worker: equal, or skewed by machine under `uneven` (heavy machines `share/f` of the
/// average, light ones `(1 − share)/(1 − f)`, the same rule as the engine's uneven pattern).
fn per_worker_units(o: &FlexrrOptions, units: u32, worker_machine: &[u32]) -> Result<Vec<u32>> {
    let Some(u) = o.uneven else {
        return Ok(vec![units; worker_machine.len()]);
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
            let n = (scale * f64::from(units)).round() as u32;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(batch: u64, options: FlexrrOptions) -> Result<Resolved> {
        let config = RunConfig {
            workers: 8,
            batch,
            optimizer: OptimizerConfig::Sgd {
                lr: 0.8,
                momentum: 0.0,
                weight_decay: 0.0,
            },
            ..RunConfig::default()
        };
        options.resolve(&config, &[0, 0, 0, 0, 1, 1, 1, 1], &[])
    }

    fn builtin(name: &str) -> DeviceProfile {
        DeviceProfile::builtins()
            .remove(name)
            .expect("a built-in profile")
    }

    /// A device every batch size fills.
    fn saturated() -> DeviceProfile {
        DeviceProfile {
            half_saturation_batch: 0.0,
            matmul_half_saturation_batch: None,
            ..builtin("cpu")
        }
    }

    #[test]
    fn default_units_are_the_finest_split_of_the_batch_up_to_one_hundred() {
        assert_eq!(default_units(32, &[&saturated()]), 32);
        assert_eq!(default_units(384, &[&saturated()]), 96);
        assert_eq!(default_units(400, &[&saturated()]), 100);
        assert_eq!(default_units(4000, &[&saturated()]), 100);
        assert_eq!(default_units(7, &[&saturated()]), 7);
        assert_eq!(default_units(101, &[&saturated()]), 1);
        let r = resolved(384, FlexrrOptions::default()).unwrap();
        assert_eq!((r.units.clone(), r.unit_batch), (vec![96; 8], 4));
    }

    #[test]
    fn default_units_keep_a_device_that_small_batches_do_not_fill_busy() {
        // Half-saturation 4 (the built-in `cpu`): 384 / 8 = 48 samples keep 92 % of the 99 % a
        // whole batch gets; 32 samples would keep 90 %, just short.
        let cpu = builtin("cpu");
        assert_eq!(cpu.half_saturation_batch, 4.0);
        assert_eq!(default_units(384, &[&cpu]), 8);
        let kept = |u: u64| {
            let b = (384 / u) as f64;
            (b / (b + 4.0)) / (384.0 / 388.0)
        };
        assert!(kept(8) >= UNIT_THROUGHPUT && kept(12) < UNIT_THROUGHPUT);
        // Half-saturation 64 (a GPU): a per-worker batch of 384 is best left whole.
        let gpu = builtin("h100");
        assert_eq!(gpu.half_saturation_batch, 64.0);
        assert_eq!(default_units(384, &[&gpu]), 1);
        assert_eq!(default_units(4000, &[&cpu]), 100);
        // Every worker's device must stay busy: the least saturated one decides.
        assert_eq!(default_units(384, &[&saturated(), &cpu]), 8);
    }

    #[test]
    fn the_default_group_fits_a_small_job_and_a_set_size_must() {
        let small = |workers: u32, options: FlexrrOptions| {
            let config = RunConfig {
                workers,
                batch: 32,
                optimizer: OptimizerConfig::Sgd {
                    lr: 0.8,
                    momentum: 0.0,
                    weight_decay: 0.0,
                },
                ..RunConfig::default()
            };
            let machines: Vec<u32> = (0..workers).collect();
            options.resolve(&config, &machines, &[])
        };
        let r = small(3, FlexrrOptions::default()).unwrap();
        assert_eq!(r.groups.helpers(0).len(), 2);
        let r = small(8, FlexrrOptions::default()).unwrap();
        assert_eq!(r.groups.helpers(0).len(), 4);
        let set = FlexrrOptions {
            group_size: Some(4),
            ..FlexrrOptions::default()
        };
        let e = small(4, set).expect_err("a group as large as the job");
        assert!(e.to_string().contains("strategy.flexrr.group_size"), "{e}");
    }

    #[test]
    fn default_checks_are_one_hundred_at_most_one_per_unit_and_a_set_value_stands() {
        let r = resolved(32, FlexrrOptions::default()).unwrap();
        assert_eq!(r.checks(0), 32);
        let r = resolved(4000, FlexrrOptions::default()).unwrap();
        assert_eq!(r.checks(0), 100);
        let set = FlexrrOptions {
            checks: Some(10_000),
            ..FlexrrOptions::default()
        };
        assert_eq!(resolved(32, set).unwrap().checks(0), 10_000);
    }

    #[test]
    fn a_unit_steps_by_the_rate_over_every_unit_of_a_clock() {
        // 8 workers × 8 units.
        let r = resolved(
            32,
            FlexrrOptions {
                units: Some(8),
                ..FlexrrOptions::default()
            },
        )
        .unwrap();
        assert_eq!(r.lr, (0.8f64 / 64.0) as f32);
    }
}
