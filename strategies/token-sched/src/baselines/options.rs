//! `[strategy.fela-mp]` and `[strategy.fela-hp]`: the options of the two baselines, checked
//! against the config at composition and resolved against the job (the model's split, the
//! micro-batches, each conv worker's share of the global batch) when the roles are built.

use super::balance::{balanced_cuts, layer_seconds};
use concord_engine::model::ModelSpec;
use concord_engine::prelude::*;
use concord_engine::submodel::SubModels;

const MP: &str = "strategy.fela-mp";
const HP: &str = "strategy.fela-hp";

/// What users write under `[strategy.fela-mp]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MpOptions {
    /// Samples per micro-batch (the paper's 16). When it does not divide the global batch the
    /// last micro-batch is smaller; above the global batch there is one micro-batch.
    pub micro_batch: u64,
    /// Stage indices where pipeline stages 2, 3, … start (one per worker after the first);
    /// unset: the compute-balanced split on the workers' device.
    pub boundaries: Option<Vec<usize>>,
}

impl Default for MpOptions {
    fn default() -> Self {
        MpOptions {
            micro_batch: 16,
            boundaries: None,
        }
    }
}

/// What users write under `[strategy.fela-hp]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HpOptions {
    /// The stage index the FC block starts at (it and every later stage live on the FC worker);
    /// unset: the first fully-connected stage.
    pub fc_from: Option<usize>,
}

/// The MP baseline resolved against a job.
#[derive(Clone, Debug)]
pub struct MpPlan {
    /// One sub-model per worker: worker `i` runs pipeline stage `i`.
    pub submodels: SubModels,
    /// Where stages 2, 3, … start.
    pub boundaries: Vec<usize>,
    /// `(offset in the global batch, rows)` of each micro-batch, in order.
    pub micro_batches: Vec<(u64, u64)>,
    /// The global batch X.
    pub total_batch: u64,
}

/// The HP baseline resolved against a job.
#[derive(Clone, Debug)]
pub struct HpPlan {
    /// Two sub-models: the conv part (0) and the FC block (1).
    pub submodels: SubModels,
    /// The stage the FC block starts at.
    pub fc_from: usize,
    /// `(offset in the global batch, rows)` of each conv worker's share.
    pub shares: Vec<(u64, u64)>,
    /// The global batch X.
    pub total_batch: u64,
}

impl HpPlan {
    /// The FC worker: the last one.
    pub fn fc_worker(&self) -> WorkerId {
        self.shares.len() as WorkerId
    }
}

/// Refuses models that are not a stack of stages.
fn staged(job: &Job, name: &str) -> Result<()> {
    if let ModelSpec::Mf(_) | ModelSpec::Graph(_) = job.model {
        return Err(EngineError::config(
            "model.kind",
            format!("{:?}", job.config.model.kind()),
            format!("`{name}` cuts a model into stages: use a staged network or a profile"),
        ));
    }
    Ok(())
}

/// Cuts `total` rows into `parts` runs in order, as even as can be (the first `total % parts`
/// one row longer).
pub fn even_shares(total: u64, parts: u64) -> Vec<(u64, u64)> {
    let (q, r) = (total / parts.max(1), total % parts.max(1));
    let mut at = 0;
    (0..parts)
        .map(|i| {
            let n = q + u64::from(i < r);
            at += n;
            (at - n, n)
        })
        .collect()
}

impl MpOptions {
    /// Checks the options that need no job.
    pub fn check(&self, _config: &RunConfig) -> Result<()> {
        if self.micro_batch == 0 {
            return Err(EngineError::config(
                format!("{MP}.micro_batch"),
                0,
                "must be >= 1",
            ));
        }
        Ok(())
    }

    /// The pipeline: one stage per worker, balanced in compute unless `boundaries` is given.
    pub fn resolve(&self, job: &Job) -> Result<MpPlan> {
        self.check(&job.config)?;
        staged(job, "fela-mp")?;
        let n = job.config.workers as usize;
        let layers = job.model.stage_facts().len();
        if n > layers {
            return Err(EngineError::config(
                "workers",
                n,
                format!(
                    "`fela-mp` runs one pipeline stage per worker, but the model has only {layers} \
                     stage{}",
                    if layers == 1 { "" } else { "s" }
                ),
            ));
        }
        let total = job.config.batch * n as u64;
        let micro = self.micro_batch.min(total);
        let boundaries = match &self.boundaries {
            Some(b) if b.len() + 1 != n => {
                return Err(EngineError::config(
                    format!("{MP}.boundaries"),
                    format!("{b:?}"),
                    format!("needs one boundary per worker after the first: {}", n - 1),
                ))
            }
            Some(b) => b.clone(),
            None => {
                let device = job.cluster.device_of(RoleId::Worker(0));
                let costs = layer_seconds(device, &job.model.stage_facts(), &job.cost_sheet, micro);
                balanced_cuts(&costs, n)
            }
        };
        let submodels = SubModels::new(&job.model, &boundaries, &format!("{MP}.boundaries"))?;
        let mut micro_batches = Vec::new();
        let mut at = 0;
        while at < total {
            let m = micro.min(total - at);
            micro_batches.push((at, m));
            at += m;
        }
        Ok(MpPlan {
            submodels,
            boundaries,
            micro_batches,
            total_batch: total,
        })
    }
}

impl HpOptions {
    /// Checks the options that need no job.
    pub fn check(&self, config: &RunConfig) -> Result<()> {
        if config.workers < 2 {
            return Err(EngineError::config(
                "workers",
                config.workers,
                "`fela-hp` needs at least 2 workers: one or more conv workers and the FC worker",
            ));
        }
        if self.fc_from == Some(0) {
            return Err(EngineError::config(
                format!("{HP}.fc_from"),
                0,
                "the conv workers need at least one stage before the FC block",
            ));
        }
        Ok(())
    }

    /// The conv / FC split and the conv workers' shares of the global batch.
    pub fn resolve(&self, job: &Job) -> Result<HpPlan> {
        self.check(&job.config)?;
        staged(job, "fela-hp")?;
        let fc_from = match self.fc_from {
            Some(f) => f,
            None => first_fc(&job.cost_sheet).ok_or_else(|| {
                EngineError::config(
                    format!("{HP}.fc_from"),
                    "(unset)",
                    "the model has no fully-connected stage after a first convolutional one: set fc_from",
                )
            })?,
        };
        let submodels = SubModels::new(&job.model, &[fc_from], &format!("{HP}.fc_from"))?;
        let n = job.config.workers as u64;
        let total = job.config.batch * n;
        Ok(HpPlan {
            submodels,
            fc_from,
            shares: even_shares(total, n - 1),
            total_batch: total,
        })
    }
}

/// The first stage that is a fully-connected layer (matrix products only) after at least one
/// stage that is not.
fn first_fc(sheet: &[concord_engine::cost::LayerCost]) -> Option<usize> {
    let is_fc = |l: &concord_engine::cost::LayerCost| {
        l.matmul_flops > 0.0 && l.conv3x3_flops + l.conv_flops + l.pointwise_flops == 0.0
    };
    sheet.iter().position(is_fc).filter(|&i| i > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_batch_in_order() {
        assert_eq!(even_shares(64, 7).iter().map(|s| s.1).sum::<u64>(), 64);
        assert_eq!(even_shares(10, 3), vec![(0, 4), (4, 3), (7, 3)]);
        assert_eq!(even_shares(8, 1), vec![(0, 8)]);
    }

    #[test]
    fn the_fc_block_starts_at_the_first_dense_layer_after_a_conv() {
        use concord_engine::cost::LayerCost;
        let conv = LayerCost {
            conv3x3_flops: 1.0,
            ..LayerCost::default()
        };
        let fc = LayerCost {
            matmul_flops: 1.0,
            ..LayerCost::default()
        };
        assert_eq!(first_fc(&[conv, conv, fc, fc]), Some(2));
        // An MLP is all FC: no conv part.
        assert_eq!(first_fc(&[fc, fc]), None);
        assert_eq!(first_fc(&[conv]), None);
        // A layer with any convolution (of either spatial kind) is not FC.
        let mixed = LayerCost {
            matmul_flops: 1.0,
            ..conv
        };
        assert_eq!(first_fc(&[conv, mixed, fc]), Some(2));
    }
}
