//! Persistent per-worker speed differences: explicit speeds, a linear spread (LB-BSP static
//! Homo / L2 / L3) or FlexRR's uneven workload.

use super::{Effect, Probe, Span, Straggler, Uneven};

/// Slack for floating-point products such as `10 × 0.3`.
const EPS: f64 = 1e-9;

/// How this worker's time multiplier is obtained.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    /// Already resolved multiplier (1/speed).
    Fixed(f64),
    /// Linear speeds, resolved per probe from `num_workers`.
    Spread(Span),
    /// Heavy/light machine split.
    Uneven(Uneven),
}

/// A constant time multiplier for one worker.
#[derive(Debug)]
pub(super) struct Persistent {
    index: u32,
    machine: u32,
    mode: Mode,
}

/// Whether machine `m` is one of the heavy ones for fraction `f` (see [`Uneven`]).
pub(super) fn is_heavy(machine: u32, f: f64) -> bool {
    let m = f64::from(machine);
    ((m + 1.0) * f - EPS).ceil() - (m * f - EPS).ceil() >= 1.0
}

/// Speed of worker `index` of `n` under a linear spread (worker 0 slowest).
pub(super) fn spread_speed(span: Span, index: u32, n: u32) -> f64 {
    if n <= 1 {
        return span.max;
    }
    let i = f64::from(index.min(n - 1));
    span.min + (span.max - span.min) * i / f64::from(n - 1)
}

impl Persistent {
    pub(super) fn new(index: u32, machine: u32, mode: Mode) -> Self {
        Persistent {
            index,
            machine,
            mode,
        }
    }

    /// The worker's time multiplier given the run's worker count.
    pub(super) fn multiplier(&self, num_workers: u32) -> f64 {
        match self.mode {
            Mode::Fixed(m) => m,
            Mode::Spread(span) => 1.0 / spread_speed(span, self.index, num_workers),
            Mode::Uneven(Uneven {
                fraction_machines: f,
                share,
            }) => {
                if is_heavy(self.machine, f) {
                    share / f
                } else {
                    (1.0 - share) / (1.0 - f)
                }
            }
        }
    }
}

impl Straggler for Persistent {
    fn effect(&mut self, p: &Probe) -> Effect {
        Effect::compute(self.multiplier(p.num_workers))
    }
}
