//! Persistent per-worker speed differences: explicit speeds, a linear spread (LB-BSP static
//! Homo / L2 / L3) or FlexRR's uneven workload.

use serde::{Deserialize, Serialize};

use crate::common::{d_half, in_filter, Check};
use crate::config::Pattern;
use crate::{Effect, Probe, RoleKind, Span, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "persistent";

/// Persistent per-worker speeds (time multiplier = 1/speed). Exactly one of `speeds`,
/// `spread` or `uneven`. LB-BSP's static Homo / Hetero-L2 / Hetero-L3 are
/// `spread = {min = 1, max = 1}`, `{min = 0.5, max = 1}`, `{min = 0.3333, max = 1}`.
/// Worker-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistentConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Explicit speed per worker index (> 0); must cover every built worker index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speeds: Option<Vec<f64>>,
    /// Speeds linearly spaced from `min` (worker 0, slowest) to `max` (worker N−1);
    /// a single worker gets `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Span>,
    /// FlexRR uneven workload, see [`Uneven`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uneven: Option<Uneven>,
}

/// FlexRR's uneven workload: `fraction_machines` of the machines carry `share` of the work.
///
/// Heavy machines are chosen without knowing the machine count: machine `m` is heavy iff
/// `ceil((m+1)·f) − ceil(m·f) = 1`, so machine 0 is heavy and any prefix of `M` machines holds
/// `ceil(M·f)` heavy ones (every other machine for `f = 0.5`). Time multipliers are the work per
/// machine relative to the average, `share/f` on heavy and `(1−share)/(1−f)` on light machines,
/// so the average work is unchanged when `M·f` is an integer. Defaults `f = 0.5`, `share = 0.75`
/// give 1.5 and 0.5: heavy machines take 3× as long as light ones.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Uneven {
    /// Fraction of machines that are heavy, in (0, 1). Default 0.5.
    #[serde(default = "d_half")]
    pub fraction_machines: f64,
    /// Share of the total work the heavy machines carry, in (0, 1). Default 0.75.
    #[serde(default = "d_three_quarters")]
    pub share: f64,
}

fn d_three_quarters() -> f64 {
    0.75
}

impl Default for Uneven {
    fn default() -> Self {
        Uneven {
            fraction_machines: 0.5,
            share: 0.75,
        }
    }
}

impl Pattern for PersistentConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        let given = [
            self.speeds.is_some(),
            self.spread.is_some(),
            self.uneven.is_some(),
        ];
        let n = given.iter().filter(|b| **b).count();
        if n != 1 {
            return Err(c.err(
                "speeds/spread/uneven",
                format!("{n} of them set"),
                "exactly one of `speeds`, `spread` or `uneven`",
            ));
        }
        if let Some(list) = &self.speeds {
            if list.is_empty() {
                return Err(c.err("speeds", "[]", "a non-empty list of speeds > 0"));
            }
            for &s in list {
                c.pos("speeds", s)?;
            }
        }
        if let Some(Span { min, max }) = self.spread {
            c.pos("spread.min", min)?;
            c.pos("spread.max", max)?;
            if min > max {
                return Err(c.err(
                    "spread",
                    format!("{{min = {min}, max = {max}}}"),
                    "min <= max",
                ));
            }
        }
        if let Some(Uneven {
            fraction_machines,
            share,
        }) = self.uneven
        {
            if !(fraction_machines > 0.0 && fraction_machines < 1.0) {
                return Err(c.err(
                    "uneven.fraction_machines",
                    fraction_machines,
                    "a fraction in (0, 1)",
                ));
            }
            if !(share > 0.0 && share < 1.0) {
                return Err(c.err("uneven.share", share, "a fraction in (0, 1)"));
            }
        }
        Ok(())
    }

    fn applies_to(&self, kind: RoleKind, index: u32, _machine: u32) -> bool {
        kind == RoleKind::Worker && in_filter(&self.workers, index)
    }

    fn build(
        &self,
        _seed: u64,
        _kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        let mode = if let Some(list) = &self.speeds {
            let speed = *list.get(index as usize).ok_or_else(|| {
                Check::new(NAME).err(
                    "speeds",
                    format!("a list of {} entries", list.len()),
                    &format!(
                        "one speed per worker; worker {index} needs at least {}",
                        index + 1
                    ),
                )
            })?;
            Mode::Fixed(1.0 / speed)
        } else if let Some(span) = self.spread {
            Mode::Spread(span)
        } else {
            Mode::Uneven(self.uneven.unwrap_or_default())
        };
        Ok(Box::new(Persistent::new(index, machine, mode)))
    }
}

/// Slack for floating-point products such as `10 × 0.3`.
const EPS: f64 = 1e-9;

/// How this worker's time multiplier is obtained.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// Already resolved multiplier (1/speed).
    Fixed(f64),
    /// Linear speeds, resolved per probe from `num_workers`.
    Spread(Span),
    /// Heavy/light machine split.
    Uneven(Uneven),
}

/// A constant time multiplier for one worker.
#[derive(Debug)]
pub(crate) struct Persistent {
    index: u32,
    machine: u32,
    mode: Mode,
}

/// Whether machine `m` is one of the heavy ones for fraction `f` (see [`Uneven`]).
pub(crate) fn is_heavy(machine: u32, f: f64) -> bool {
    let m = f64::from(machine);
    ((m + 1.0) * f - EPS).ceil() - (m * f - EPS).ceil() >= 1.0
}

/// Speed of worker `index` of `n` under a linear spread (worker 0 slowest).
pub(crate) fn spread_speed(span: Span, index: u32, n: u32) -> f64 {
    if n <= 1 {
        return span.max;
    }
    let i = f64::from(index.min(n - 1));
    span.min + (span.max - span.min) * i / f64::from(n - 1)
}

impl Persistent {
    pub(crate) fn new(index: u32, machine: u32, mode: Mode) -> Self {
        Persistent {
            index,
            machine,
            mode,
        }
    }

    /// The worker's time multiplier given the run's worker count.
    pub(crate) fn multiplier(&self, num_workers: u32) -> f64 {
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
