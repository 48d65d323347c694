//! What a rank measures of its own run: each task kind's mean time after the warm-up, the
//! steady-state time per iteration, Eq. 6.1 and Eq. 6.2 evaluated on the measured stage times,
//! the device tier's hit rate, the staging buffer's share and the largest staleness seen.

use crate::options::Resolved;
use crate::schedule::{Kind, Task};
use concord_engine::prelude::*;
use std::collections::BTreeMap;

/// A rank's measurements (carried across a checkpoint, so the figures cover the whole run).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Σ seconds and count per task kind, after the warm-up.
    times: BTreeMap<Kind, (f64, u64)>,
    /// When each batch's dense update was done.
    iteration_end: BTreeMap<u64, f64>,
    /// Lookups served by the device tier, after the warm-up.
    pub device_rows: u64,
    /// Lookups served by the host tier, after the warm-up.
    pub host_rows: u64,
    /// Largest (operation + staged bytes) / operation bytes of an alltoall.
    staging_ratio: f64,
    /// Largest number of updates a lookup missed.
    pub max_staleness: u64,
    warmup: u64,
}

impl Stats {
    /// Books task `task`, run from `from` to `to`.
    pub fn task(&mut self, task: Task, from: f64, to: f64) {
        if task.batch >= self.warmup {
            let e = self.times.entry(task.kind).or_default();
            e.0 += to - from;
            e.1 += 1;
        }
    }

    /// Batch `b`'s dense update was done at `at`.
    pub fn iteration_done(&mut self, b: u64, at: f64) {
        self.iteration_end.insert(b, at);
    }

    /// An alltoall of `op_bytes` received, `staged` of them through the staging buffer.
    pub fn staging(&mut self, op_bytes: u64, staged: u64) {
        if op_bytes > 0 {
            let r = (op_bytes + staged) as f64 / op_bytes as f64;
            self.staging_ratio = self.staging_ratio.max(r);
        }
    }

    /// Starts booking stage times from batch `warmup` on (the placement's warm-up and the
    /// pipeline's fill excluded).
    pub fn skip(mut self, warmup: u64) -> Stats {
        self.warmup = warmup;
        self
    }

    fn mean(&self, k: Kind) -> f64 {
        self.times
            .get(&k)
            .map_or(0.0, |&(s, n)| if n > 0 { s / n as f64 } else { 0.0 })
    }

    /// Sets the rank's figures for the summary (`sven.*`).
    pub fn publish(&self, ctx: &mut RoleContext, opts: &Resolved) {
        let m = |k| self.mean(k);
        let eq61 = [
            Kind::Input,
            Kind::Sfp,
            Kind::FwdA2a,
            Kind::Fp,
            Kind::Bp,
            Kind::Allreduce,
            Kind::Opt,
            Kind::BwdA2a,
            Kind::Sbp,
        ]
        .into_iter()
        .map(m)
        .sum::<f64>();
        let eq62 = (m(Kind::Sfp) + m(Kind::Fp)).max(m(Kind::FwdA2a))
            + m(Kind::Bp).max(m(Kind::BwdA2a))
            + m(Kind::Allreduce).max(m(Kind::Sbp))
            + m(Kind::Opt);
        for k in [
            Kind::Input,
            Kind::Sfp,
            Kind::FwdA2a,
            Kind::Fp,
            Kind::Bp,
            Kind::BwdA2a,
            Kind::Sbp,
            Kind::Allreduce,
            Kind::Opt,
        ] {
            if self.times.contains_key(&k) {
                let name = k.label().replace(' ', "_").to_lowercase();
                ctx.set_figure(format!("sven.t_{name}_s"), m(k));
            }
        }
        ctx.set_figure("sven.eq61_s", eq61);
        ctx.set_figure("sven.eq62_s", eq62);
        let steady: Vec<f64> = self
            .iteration_end
            .range(self.warmup..)
            .map(|(_, &t)| t)
            .collect();
        if steady.len() >= 2 {
            let per = (steady[steady.len() - 1] - steady[0]) / (steady.len() - 1) as f64;
            ctx.set_figure("sven.iter_s", per);
        }
        let lookups = self.device_rows + self.host_rows;
        if lookups > 0 {
            ctx.set_figure(
                "sven.device_hit_rate",
                self.device_rows as f64 / lookups as f64,
            );
        }
        ctx.set_figure("sven.alpha", opts.alpha);
        if self.staging_ratio > 0.0 {
            ctx.set_figure("sven.staging_ratio", self.staging_ratio);
        }
        ctx.set_figure("sven.max_staleness", self.max_staleness as f64);
    }
}
