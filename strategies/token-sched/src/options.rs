//! `[strategy.fela]`: the split, the token plan, the policies and the tuner.

use crate::partition::{bin_boundaries, threshold_batch};
use concord_engine::prelude::*;
use concord_engine::submodel::SubModels;

/// What users write under `[strategy.fela]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FelaOptions {
    /// Stage indices where sub-models 2, 3, … start; unset: the bin-partitioned split.
    pub boundaries: Option<Vec<usize>>,
    /// Width of the threshold bins of the bin-partitioned split (the paper's 16).
    pub bin_width: u64,
    /// The threshold batch `b_th` of Eq. 2; unset: sub-model 1's on the workers' device.
    pub threshold_batch: Option<u64>,
    /// Parallelism weight per sub-model (`w_1 = 1`, non-decreasing powers of two up to the
    /// workers); unset: tuned at the start of the run (§IV-B).
    pub weights: Option<Vec<u32>>,
    /// Size of the CTD subset S; unset: tuned when the weights are, else every worker (CTD off).
    pub ctd_size: Option<u32>,
    /// The communication-heavy sub-model CTD restricts (from 1); unset: the one with the most
    /// parameter bytes per FLOP.
    pub ctd_submodel: Option<usize>,
    /// Aggressive depth-first scheduling.
    pub ads: bool,
    /// Hierarchical fetching.
    pub hf: bool,
    /// Iterations each tuning case runs (the paper's 5).
    pub tune_iters: u64,
    /// Whether a straggler's iteration-start delay is slept before it asks for its first token
    /// (its share can be taken meanwhile: the paper's "late start"); false: while it holds its
    /// first token.
    pub late_start: bool,
}

impl Default for FelaOptions {
    fn default() -> Self {
        FelaOptions {
            boundaries: None,
            bin_width: 16,
            threshold_batch: None,
            weights: None,
            ctd_size: None,
            ctd_submodel: None,
            ads: true,
            hf: true,
            tune_iters: 5,
            late_start: true,
        }
    }
}

/// One configuration the token server runs: weights and CTD subset size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Weight per sub-model.
    pub weights: Vec<u32>,
    /// Size of the CTD subset (the workers count: CTD off).
    pub subset: u32,
}

/// The options checked against the job.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The split.
    pub submodels: SubModels,
    /// The split's stage boundaries.
    pub boundaries: Vec<usize>,
    /// `b_th`.
    pub threshold: u64,
    /// Fixed configuration, or `None` to tune.
    pub fixed: Option<Case>,
    /// CTD's sub-model (from 0).
    pub ctd_level: usize,
    /// Policies.
    pub ads: bool,
    /// Policies.
    pub hf: bool,
    /// Iterations per tuning case.
    pub tune_iters: u64,
    /// Late-start straggling.
    pub late_start: bool,
    /// X.
    pub total_batch: u64,
}

const KEY: &str = "strategy.fela";

impl FelaOptions {
    /// Checks the options that need no job.
    pub fn check(&self, config: &RunConfig) -> Result<()> {
        if self.bin_width == 0 {
            return Err(EngineError::config(
                format!("{KEY}.bin_width"),
                0,
                "must be >= 1",
            ));
        }
        if self.threshold_batch == Some(0) {
            return Err(EngineError::config(
                format!("{KEY}.threshold_batch"),
                0,
                "must be >= 1",
            ));
        }
        if self.tune_iters == 0 {
            return Err(EngineError::config(
                format!("{KEY}.tune_iters"),
                0,
                "must be >= 1",
            ));
        }
        let n = config.workers;
        if let Some(s) = self.ctd_size {
            if s == 0 || s > n || !n.is_multiple_of(s) {
                return Err(EngineError::config(
                    format!("{KEY}.ctd_size"),
                    s,
                    format!("must divide the {n} workers"),
                ));
            }
        }
        if self.ctd_size.is_some() && self.weights.is_none() {
            return Err(EngineError::config(
                format!("{KEY}.ctd_size"),
                self.ctd_size.unwrap_or(0),
                "is tuned with the weights: set `weights` too, or neither",
            ));
        }
        if self.ctd_submodel == Some(0) {
            return Err(EngineError::config(
                format!("{KEY}.ctd_submodel"),
                0,
                "sub-models count from 1",
            ));
        }
        Ok(())
    }

    /// Resolves the options against the job: the split, `b_th`, the CTD level, the cases.
    pub fn resolve(&self, job: &Job) -> Result<Resolved> {
        self.check(&job.config)?;
        let device = job.cluster.device_of(RoleId::Worker(0));
        let boundaries = match &self.boundaries {
            Some(b) => b.clone(),
            None => {
                let thresholds: Vec<u64> = job
                    .cost_sheet
                    .iter()
                    .map(|l| threshold_batch(device, l))
                    .collect();
                bin_boundaries(&thresholds, self.bin_width)
            }
        };
        let submodels = SubModels::new(&job.model, &boundaries, &format!("{KEY}.boundaries"))?;
        let m = submodels.len();
        let threshold = match self.threshold_batch {
            Some(t) => t,
            None => {
                let first = submodels.stages(0);
                job.cost_sheet
                    .get(first)
                    .unwrap_or(&[])
                    .iter()
                    .map(|l| threshold_batch(device, l))
                    .max()
                    .unwrap_or(1)
            }
        };
        let ctd_level = match self.ctd_submodel {
            Some(c) if c > m => {
                return Err(EngineError::config(
                    format!("{KEY}.ctd_submodel"),
                    c,
                    format!("the model is split into {m} sub-models"),
                ))
            }
            Some(c) => c - 1,
            None => (0..m)
                .max_by(|&a, &b| {
                    let ratio = |i: usize| {
                        submodels.param_bytes(i) as f64 / submodels.work(i, 1, 1.0).flops().max(1.0)
                    };
                    ratio(a).total_cmp(&ratio(b))
                })
                .unwrap_or(m - 1),
        };
        let n = job.config.workers;
        let fixed = match &self.weights {
            Some(w) if w.len() != m => {
                return Err(EngineError::config(
                    format!("{KEY}.weights"),
                    format!("{w:?}"),
                    format!("needs one weight per sub-model: the model is split into {m}"),
                ))
            }
            Some(w) => Some(Case {
                weights: w.clone(),
                subset: self.ctd_size.unwrap_or(n),
            }),
            None => None,
        };
        Ok(Resolved {
            submodels,
            boundaries,
            threshold,
            fixed,
            ctd_level,
            ads: self.ads,
            hf: self.hf,
            tune_iters: self.tune_iters,
            late_start: self.late_start,
            total_batch: job.config.batch * n as u64,
        })
    }
}
