//! The cost study (spec §5.3, §5.5 claim 7): one job of a fixed amount of work — `hours` on the
//! reference footprint — run under each [`Scheme`] from many seeded random start points over the
//! market's trace, and the means: cost relative to all on-demand, runtime, instance-hours
//! on-demand / spot / free, evictions, and the free share.
//!
//! BidBrain's β table and the checkpoint scheme's MTTF are learnt from the first
//! `train_fraction` of the trace; jobs start in the rest (the thesis trained on Mar–Jun 2016 and
//! simulated Jun–Aug).

use super::bidbrain::{delta_grid, AppParams, BetaTable};
use super::error::MarketError;
use super::job::Job;
use super::market::Market;
use super::scheme::Scheme;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The study's settings; defaults model the thesis's Cluster-A job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StudyParams {
    /// Job length on the reference footprint, hours (the thesis: 2 and 20).
    pub hours: f64,
    /// The reference footprint's type (Cluster-A: c4.2xlarge).
    pub reference_type: String,
    /// The reference footprint's instances (Cluster-A: 64).
    pub reference_count: u32,
    /// On-demand (reliable) instances of the reference type AgileML schemes always hold, beside
    /// spot for the whole reference footprint (default 1: Cluster-A at 63:1, the stage-3
    /// setting of Fig. 4.12; Fig. 4.1's 128-machine job held 3).
    pub reliable_count: u32,
    /// Largest spot footprint Proteus may hold, in vCPUs, as a multiple of the reference's.
    pub max_footprint: f64,
    /// Instances per allocation Proteus considers (\[C\] K = {4, 8, 16, 32}).
    pub allocation_sizes: Vec<u32>,
    /// Bid deltas Proteus considers, log-spaced over [$0.0001, $0.4].
    pub bid_deltas: usize,
    /// The application's φ, σ, λ.
    pub app: AppParams,
    /// Ratio transient : reliable instances above which reliable machines run no workers
    /// (AgileML's stage 3, 15:1).
    pub stage3_ratio: f64,
    /// Minutes to write a checkpoint, δ (Young's interval τ = √(2·δ·MTTF)); the default 4
    /// gives about the thesis's 17 % checkpointing overhead on the shipped synthetic trace.
    pub checkpoint_write_min: f64,
    /// Minutes to restart from a checkpoint after an eviction (new instances, reload).
    pub restart_min: f64,
    /// Minutes between BidBrain's decision points (the thesis: 2).
    pub decision_min: f64,
    /// Random start points.
    pub starts: usize,
    /// Seed of the start points.
    pub seed: u64,
    /// Share of the trace (from its start) BidBrain's β and the MTTF are learnt from.
    pub train_fraction: f64,
}

impl Default for StudyParams {
    fn default() -> Self {
        StudyParams {
            hours: 2.0,
            reference_type: "c4.2xlarge".into(),
            reference_count: 64,
            reliable_count: 1,
            max_footprint: 1.5,
            allocation_sizes: vec![4, 8, 16, 32],
            bid_deltas: 16,
            app: AppParams::default(),
            stage3_ratio: 15.0,
            checkpoint_write_min: 4.0,
            restart_min: 5.0,
            decision_min: 2.0,
            starts: 200,
            seed: 1,
            train_fraction: 0.25,
        }
    }
}

/// What one job cost and used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// Dollars.
    pub cost: f64,
    /// Hours from start to the end of the work.
    pub runtime_h: f64,
    /// On-demand instance-hours.
    pub on_demand_h: f64,
    /// Paid spot instance-hours.
    pub spot_h: f64,
    /// Free (refunded) spot instance-hours.
    pub free_h: f64,
    /// Allocations evicted.
    pub evictions: u32,
}

/// A scheme's means over the start points.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemeSummary {
    /// The scheme.
    pub scheme: Scheme,
    /// Jobs simulated.
    pub jobs: usize,
    /// Mean cost over the all-on-demand reference cost.
    pub cost_relative: f64,
    /// Mean runtime, hours.
    pub runtime_h: f64,
    /// Mean on-demand instance-hours.
    pub on_demand_h: f64,
    /// Mean paid spot instance-hours.
    pub spot_h: f64,
    /// Mean free spot instance-hours.
    pub free_h: f64,
    /// Mean evictions per job.
    pub evictions: f64,
    /// Free instance-hours over all instance-hours (of the means).
    pub free_share: f64,
}

/// A market prepared for the study: β tables and MTTF learnt, the reference resolved.
#[derive(Clone, Debug)]
pub struct Study {
    /// The market.
    pub market: Market,
    /// The settings.
    pub params: StudyParams,
    /// β and median time to eviction per type (same order as the market's types).
    pub betas: Vec<BetaTable>,
    /// Mean time between evictions of an on-demand bid, hours, over the training span.
    pub mttf_h: f64,
    /// Index of the reference type.
    pub reference: usize,
    /// Where the training span ends and the start points begin, s.
    pub train_end_s: f64,
}

impl Study {
    /// Checks the settings against the market and learns β and the MTTF.
    pub fn new(market: Market, params: StudyParams) -> Result<Study, MarketError> {
        let bad = |field: &str, reason: String| MarketError::Setting {
            field: field.into(),
            reason,
        };
        let pos = |x: f64| x.is_finite() && x > 0.0;
        let nonneg = |x: f64| x.is_finite() && x >= 0.0;
        if !pos(params.hours) {
            return Err(bad(
                "hours",
                format!("{} is not a length > 0", params.hours),
            ));
        }
        let reference = market.type_index(&params.reference_type).ok_or_else(|| {
            let known: Vec<&str> = market.types.iter().map(|t| t.name.as_str()).collect();
            bad(
                "reference_type",
                format!(
                    "`{}` is not a type of the market; one of {}",
                    params.reference_type,
                    known.join(", ")
                ),
            )
        })?;
        if params.reference_count == 0 {
            return Err(bad("reference_count", "must be at least 1".into()));
        }
        if params.reliable_count == 0 || params.reliable_count > params.reference_count {
            return Err(bad(
                "reliable_count",
                format!("must be in 1..={}", params.reference_count),
            ));
        }
        if !pos(params.max_footprint) {
            return Err(bad("max_footprint", "must be > 0".into()));
        }
        if params.allocation_sizes.is_empty() || params.allocation_sizes.contains(&0) {
            return Err(bad("allocation_sizes", "needs sizes ≥ 1".into()));
        }
        if params.bid_deltas == 0 {
            return Err(bad("bid_deltas", "must be at least 1".into()));
        }
        let a = params.app;
        if !(a.phi > 0.0 && a.phi <= 1.0 && nonneg(a.sigma_min) && nonneg(a.lambda_min)) {
            return Err(bad(
                "app",
                "φ must be in (0, 1], σ and λ minutes ≥ 0".into(),
            ));
        }
        if !pos(params.stage3_ratio) {
            return Err(bad("stage3_ratio", "must be > 0".into()));
        }
        if !nonneg(params.checkpoint_write_min) || !nonneg(params.restart_min) {
            return Err(bad(
                "checkpoint_write_min",
                "checkpoint and restart minutes must be ≥ 0".into(),
            ));
        }
        if !pos(params.decision_min) {
            return Err(bad("decision_min", "must be > 0".into()));
        }
        if params.starts == 0 {
            return Err(bad("starts", "must be at least 1".into()));
        }
        if !(params.train_fraction > 0.0 && params.train_fraction < 1.0) {
            return Err(bad("train_fraction", "must be in (0, 1)".into()));
        }
        let (start, end) = market.span();
        let train_end_s = start + (end - start) * params.train_fraction;
        if end - train_end_s < params.hours * 3600.0 || train_end_s - start < 3600.0 {
            return Err(bad(
                "hours",
                format!(
                    "the trace spans {:.1} h: too short to learn from {:.0} % of it and start {} h jobs in the rest",
                    (end - start) / 3600.0,
                    params.train_fraction * 100.0,
                    params.hours
                ),
            ));
        }
        let deltas = delta_grid(params.bid_deltas);
        let betas = market
            .traces
            .iter()
            .map(|tr| BetaTable::estimate(tr, start, train_end_s, 300.0, &deltas))
            .collect();
        let mttf_h = mttf_hours(&market, start, train_end_s);
        Ok(Study {
            market,
            params,
            betas,
            mttf_h,
            reference,
            train_end_s,
        })
    }

    /// The reference footprint's vCPUs.
    pub fn reference_vcpus(&self) -> f64 {
        self.params.reference_count as f64 * self.market.types[self.reference].vcpus as f64
    }

    /// The job's work: φ × reference vCPUs × hours (vCPU-hours).
    pub fn work(&self) -> f64 {
        self.params.app.phi * self.reference_vcpus() * self.params.hours
    }

    /// What the job costs all on-demand: the reference footprint for `hours` (pro rata).
    pub fn reference_cost(&self) -> f64 {
        self.params.reference_count as f64
            * self.market.types[self.reference].on_demand
            * self.params.hours
    }

    /// Young's checkpoint interval τ = √(2·δ·MTTF), seconds.
    pub fn checkpoint_interval_s(&self) -> f64 {
        (2.0 * self.params.checkpoint_write_min * 60.0 * self.mttf_h * 3600.0).sqrt()
    }

    /// The seeded start points, uniform over the span after training that leaves room for
    /// one reference-length job.
    pub fn start_points(&self) -> Vec<f64> {
        let (_, end) = self.market.span();
        let last = end - self.params.hours * 3600.0;
        let mut rng = ChaCha8Rng::seed_from_u64(self.params.seed);
        (0..self.params.starts)
            .map(|_| self.train_end_s + (last - self.train_end_s) * rng.gen::<f64>())
            .collect()
    }

    /// Simulates one job of `scheme` starting at `start_s`.
    pub fn run_job(&self, scheme: Scheme, start_s: f64) -> Result<JobOutcome, MarketError> {
        Job::new(self, scheme, start_s).run()
    }

    /// A scheme's means over every start point.
    pub fn summarize(&self, scheme: Scheme) -> Result<SchemeSummary, MarketError> {
        let starts = self.start_points();
        let mut sum = JobOutcome::default();
        let mut evictions = 0.0;
        for &s in &starts {
            let o = self.run_job(scheme, s)?;
            sum.cost += o.cost;
            sum.runtime_h += o.runtime_h;
            sum.on_demand_h += o.on_demand_h;
            sum.spot_h += o.spot_h;
            sum.free_h += o.free_h;
            evictions += o.evictions as f64;
        }
        let n = starts.len() as f64;
        let all = sum.on_demand_h + sum.spot_h + sum.free_h;
        Ok(SchemeSummary {
            scheme,
            jobs: starts.len(),
            cost_relative: sum.cost / n / self.reference_cost(),
            runtime_h: sum.runtime_h / n,
            on_demand_h: sum.on_demand_h / n,
            spot_h: sum.spot_h / n,
            free_h: sum.free_h / n,
            evictions: evictions / n,
            free_share: if all > 0.0 { sum.free_h / all } else { 0.0 },
        })
    }
}

/// Mean time between rises of the spot price above the on-demand price (what evicts a
/// standard bid), hours, over `[from, to)`, averaged over the types; the span itself where a
/// type never rose.
pub fn mttf_hours(market: &Market, from: f64, to: f64) -> f64 {
    let span_h = (to - from) / 3600.0;
    let per_type: Vec<f64> = market
        .types
        .iter()
        .zip(&market.traces)
        .map(|(t, tr)| {
            let mut above = tr.price_at(from) > t.on_demand;
            let mut rises = 0usize;
            for (time, p) in tr.points() {
                if time <= from || time >= to {
                    continue;
                }
                let now_above = p > t.on_demand;
                if now_above && !above {
                    rises += 1;
                }
                above = now_above;
            }
            span_h / rises.max(1) as f64
        })
        .collect();
    per_type.iter().sum::<f64>() / per_type.len() as f64
}
