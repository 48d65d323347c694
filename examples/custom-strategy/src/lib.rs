//! # An example custom strategy: batch-size warm-up
//!
//! Shows how a strategy is written against concord's traits from outside the project: a crate
//! that depends only on `concord-engine` and imports nothing but its prelude, implements a role
//! ([`Coordinator`]) and a [`Strategy`] that installs it with the assembly's setter
//! ([`Assembly::set_coordinator`]), and is registered with one call. Name it in a config:
//!
//! ```toml
//! strategies = ["bsp", "batch-ramp"]
//! [strategy.batch-ramp]
//! start_fraction = 0.25
//! ramp_iterations = 50
//! ```
//!
//! The coordinator grows each worker's batch linearly from `start_fraction × batch` to `batch`
//! over `ramp_iterations` clocks (a common warm-up for large-batch training), telling each worker
//! its batch for the next clock as soon as it reports the current one, so it adds no barrier.

use concord_engine::prelude::*;
use std::sync::Arc;

/// Options: `[strategy.batch-ramp]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RampOptions {
    /// Fraction of the configured batch at clock 0, in (0, 1].
    pub start_fraction: f64,
    /// Clocks over which the batch grows to the configured size.
    pub ramp_iterations: u64,
}

impl Default for RampOptions {
    fn default() -> Self {
        RampOptions {
            start_fraction: 0.25,
            ramp_iterations: 50,
        }
    }
}

/// Per-worker batch at `clock`.
pub fn ramp_batch(o: &RampOptions, batch: u64, clock: u64) -> u64 {
    let progress = if o.ramp_iterations == 0 {
        1.0
    } else {
        (clock as f64 / o.ramp_iterations as f64).min(1.0)
    };
    let f = o.start_fraction + (1.0 - o.start_fraction) * progress;
    ((batch as f64 * f).round() as u64).max(1)
}

/// The coordinator: sends every worker its batch and its place in the sample stream, per clock.
#[derive(Debug)]
pub struct RampCoordinator {
    options: RampOptions,
    batch: u64,
    workers: u32,
    iterations: u64,
}

impl RampCoordinator {
    /// Stream position where clock `clock` starts (all earlier clocks' global batches).
    fn clock_start(&self, clock: u64) -> u64 {
        (0..clock)
            .map(|c| ramp_batch(&self.options, self.batch, c) * self.workers as u64)
            .sum()
    }

    fn directive(&self, worker: u32, clock: u64) -> Message {
        let b = ramp_batch(&self.options, self.batch, clock);
        Message::Directive(Directive {
            clock,
            batch: b,
            stream_offset: self.clock_start(clock) + worker as u64 * b,
            global_batch: b * self.workers as u64,
        })
    }
}

#[async_trait]
impl Coordinator for RampCoordinator {
    fn directs_batches(&self) -> bool {
        true
    }

    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let mut report = CoordinatorReport::default();
        for w in 0..self.workers {
            ctx.send(RoleId::Worker(w), self.directive(w, 0));
        }
        loop {
            let env = ctx.recv().await?;
            match (env.msg, env.from) {
                (Message::Shutdown, _) => return Ok(report),
                (Message::Report(r), RoleId::Worker(w)) => {
                    if r.clock + 1 < self.iterations {
                        ctx.send(RoleId::Worker(w), self.directive(w, r.clock + 1));
                    }
                    report.reports.push((w, r));
                }
                _ => {}
            }
        }
    }
}

/// The `batch-ramp` strategy: fills the coordinator slot.
#[derive(Debug, Default)]
pub struct BatchRamp;

impl Strategy for BatchRamp {
    fn name(&self) -> &'static str {
        "batch-ramp"
    }
    fn summary(&self) -> &'static str {
        "Example custom strategy: linear per-worker batch-size warm-up"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Coordinator]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: RampOptions = parse_options(self.name(), options)?;
        if !(o.start_fraction > 0.0 && o.start_fraction <= 1.0) {
            return Err(EngineError::config(
                "strategy.batch-ramp.start_fraction",
                o.start_fraction,
                "must be in (0, 1]",
            ));
        }
        asm.set_coordinator(move |job| {
            Ok(RampCoordinator {
                options: o.clone(),
                batch: job.config.batch,
                workers: job.config.workers,
                iterations: job.config.iterations,
            })
        });
        Ok(())
    }
}

/// Registers `batch-ramp`.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(BatchRamp))?;
    Ok(())
}
