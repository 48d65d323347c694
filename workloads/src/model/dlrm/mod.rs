//! DLRM-style click-through models (Wide&Deep, DeepFM, DCN) trained with row-wise embeddings.
//!
//! # Model
//!
//! A sample has `D` dense features `x` and one id per categorical field `k = 1..K`. The bottom
//! MLP (ReLU hidden layers of widths `bottom`, then a linear projection) maps `x` to `h` of
//! dimension `dim`. Field `k`'s id looks up one row of table `k`: its embedding `e_k` (`dim`
//! values) and, for Wide&Deep and DeepFM, a scalar `s_k` (the row's first-order, "wide"
//! weight; [`DlrmSpec::width`] is then `dim + 1`). `deep` is the top MLP (ReLU hidden layers of
//! widths `top`) ending in one output, over `concat(h, e_1, …, e_K)`.
//!
//! * **Wide&Deep**: `logit = Σ_k s_k + deep(concat(h, e_1..e_K))`.
//! * **DeepFM**: `logit = Σ_k s_k + FM2(h, e_1..e_K) + deep(same)`, with the second-order
//!   factorization-machine term `FM2(v) = ½ Σ_d ((Σ_i v_i)_d² − Σ_i v_id²)`.
//! * **DCN**: `x0 = concat(h, e_1..e_K)`, cross layers `x_{l+1} = x0 ⊙ (x_l·w_l) + b_l + x_l`
//!   (`cross_layers` of them), and `logit = linear(concat(x_L, deep(x0)))`, where `deep` stops
//!   at its last hidden layer (or is `x0` itself when `top` is empty).
//!
//! The click probability is `sigmoid(logit)` and the loss the binary cross-entropy, averaged
//! over the batch, in the numerically stable form `max(z, 0) − z·y + log(1 + e^−|z|)`.
//!
//! # Embeddings are updated row-wise
//!
//! Tables are never candle variables: `index_select`'s backward would materialize a gradient
//! the size of the whole table. Instead a strategy gathers the rows a batch uses
//! ([`gather_rows`]), runs the dense part on them ([`DlrmDense::step`], which returns the
//! gradient with respect to the gathered rows), and applies it to those rows only
//! ([`sgd_rows`]). [`full_step`] is the same model with whole-table variables, the reference
//! the row-wise path is tested against.
//!
//! # Parameter layout
//!
//! [`DlrmSpec::params`]: the `K` tables first, `emb.00`, `emb.01`, …, each of shape
//! `[width, rows_k]` (dimension-major: one row per embedding column, one column per id, so a
//! column shard of a table is one contiguous range), then the dense parameters: `bottom.<i>.*`,
//! `cross.<l>.*` (DCN), `top.<i>.*`, `out.*` (`weight` `[out, in]`, `bias` `[out]`; a cross
//! layer's `weight` and `bias` are both `[width of x0]`).

mod dense;
mod model;
mod reference;
mod table;

pub use dense::{DenseStep, DlrmDense};
pub use model::{DlrmEvaluation, DlrmModel};
pub use reference::full_step;
pub use table::{add_rows, gather_rows, sgd_rows};

use super::{ParamInfo, StageFacts};
use crate::error::{Result, WorkloadError};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// How a DLRM combines the bottom MLP's output and the embeddings (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interaction {
    /// Wide&Deep: the rows' wide scalars plus a deep MLP.
    WideDeep,
    /// DeepFM: the wide scalars, the second-order FM term, and a deep MLP.
    #[default]
    DeepFm,
    /// DCN: cross layers beside a deep MLP, joined by a final linear layer.
    Dcn,
}

impl Interaction {
    /// The name as written in the TOML (`wide-deep`, `deep-fm`, `dcn`).
    pub fn name(self) -> &'static str {
        match self {
            Interaction::WideDeep => "wide-deep",
            Interaction::DeepFm => "deep-fm",
            Interaction::Dcn => "dcn",
        }
    }

    /// Whether each looked-up row carries a wide scalar after its embedding.
    pub fn has_wide(self) -> bool {
        !matches!(self, Interaction::Dcn)
    }
}

/// A resolved DLRM: table sizes from the click-through data, the rest from `[model]`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DlrmSpec {
    /// Rows of each embedding table (one table per categorical field).
    pub fields: Vec<usize>,
    /// Dense features per sample.
    pub dense_features: usize,
    /// Embedding dimension (also the bottom MLP's output width).
    pub dim: usize,
    /// The interaction.
    pub interaction: Interaction,
    /// Hidden widths of the bottom MLP (over the dense features).
    pub bottom: Vec<usize>,
    /// Hidden widths of the top (deep) MLP.
    pub top: Vec<usize>,
    /// Cross layers (DCN only).
    pub cross_layers: usize,
}

/// One linear layer of the dense part: `(name prefix, in, out)`.
type Linear = (String, usize, usize);

impl DlrmSpec {
    /// Checks the sizes, naming the `[model]` (or `[data]`) key at fault: at least one field,
    /// every table ≥ 1 row, ≥ 1 dense feature, `dim` ≥ 1, every width ≥ 1, and for DCN
    /// `cross_layers` ≥ 1.
    pub fn validate(&self) -> Result<()> {
        if self.fields.is_empty() || self.fields.contains(&0) {
            return Err(WorkloadError::config(
                "data.rows",
                format!("{:?}", self.fields),
                "a DLRM needs at least one categorical field, each with >= 1 row",
            ));
        }
        if self.dense_features == 0 {
            return Err(WorkloadError::config(
                "data.dense",
                0,
                "a DLRM needs >= 1 dense feature",
            ));
        }
        if self.dim == 0 {
            return Err(WorkloadError::config("model.dim", 0, "must be >= 1"));
        }
        for (key, widths) in [("model.bottom", &self.bottom), ("model.top", &self.top)] {
            if widths.contains(&0) {
                return Err(WorkloadError::config(
                    key,
                    format!("{widths:?}"),
                    "widths must be >= 1",
                ));
            }
        }
        if self.interaction == Interaction::Dcn && self.cross_layers == 0 {
            return Err(WorkloadError::config(
                "model.cross_layers",
                0,
                "DCN needs >= 1 cross layer",
            ));
        }
        Ok(())
    }

    /// Number of embedding tables `K`.
    pub fn num_tables(&self) -> usize {
        self.fields.len()
    }

    /// Values per looked-up row: `dim + 1` for Wide&Deep and DeepFM (the last column is the
    /// row's wide scalar), `dim` for DCN.
    pub fn width(&self) -> usize {
        self.dim + usize::from(self.interaction.has_wide())
    }

    /// Width of `concat(h, e_1..e_K)`, the deep MLP's (and DCN's cross layers') input.
    pub fn concat_width(&self) -> usize {
        (self.num_tables() + 1) * self.dim
    }

    /// The bottom MLP's linear layers: hidden layers, then the projection to `dim`.
    fn bottom_layers(&self) -> Vec<Linear> {
        chain("bottom", self.dense_features, &self.bottom, Some(self.dim))
    }

    /// The top MLP's hidden layers.
    fn top_layers(&self) -> Vec<Linear> {
        chain("top", self.concat_width(), &self.top, None)
    }

    /// The output layer's input width.
    fn out_in(&self) -> usize {
        let deep = self.top.last().copied().unwrap_or(self.concat_width());
        match self.interaction {
            Interaction::Dcn => self.concat_width() + deep,
            _ => deep,
        }
    }

    /// Every parameter: the tables `emb.NN` (`[width, rows_k]`), then the dense parameters (see
    /// the module docs). A table's `fan_in` is its row count, so the He-uniform initialisation
    /// gives embeddings of scale `√(6 / rows)`, DLRM's usual `1/√rows` order.
    pub fn params(&self) -> Vec<ParamInfo> {
        let mut out: Vec<ParamInfo> = self
            .fields
            .iter()
            .enumerate()
            .map(|(k, &rows)| ParamInfo {
                name: format!("emb.{k:02}"),
                shape: vec![self.width(), rows],
                fan_in: rows,
            })
            .collect();
        out.extend(self.dense_params());
        out
    }

    /// The dense parameters alone, in layout order.
    pub fn dense_params(&self) -> Vec<ParamInfo> {
        let mut out = Vec::new();
        let linear = |out: &mut Vec<ParamInfo>, (name, i, o): Linear| {
            out.push(ParamInfo {
                name: format!("{name}.weight"),
                shape: vec![o, i],
                fan_in: i,
            });
            out.push(ParamInfo {
                name: format!("{name}.bias"),
                shape: vec![o],
                fan_in: 0,
            });
        };
        for l in self.bottom_layers() {
            linear(&mut out, l);
        }
        if self.interaction == Interaction::Dcn {
            let w = self.concat_width();
            for l in 0..self.cross_layers {
                out.push(ParamInfo {
                    name: format!("cross.{l}.weight"),
                    shape: vec![w],
                    fan_in: w,
                });
                out.push(ParamInfo {
                    name: format!("cross.{l}.bias"),
                    shape: vec![w],
                    fan_in: 0,
                });
            }
        }
        for l in self.top_layers() {
            linear(&mut out, l);
        }
        linear(&mut out, ("out".into(), self.out_in(), 1));
        out
    }

    /// The dense parameters' indices in [`DlrmSpec::params`] (everything after the tables).
    pub fn dense_param_range(&self) -> Range<usize> {
        let k = self.num_tables();
        k..k + self.dense_params().len()
    }

    /// Elements of all dense parameters (the AllReduce payload of one step).
    pub fn dense_param_elems(&self) -> usize {
        self.dense_params().iter().map(ParamInfo::elems).sum()
    }

    /// Forward FLOPs of the dense part per sample (multiply-add = 2 FLOPs): the bottom MLP, the
    /// interaction (the wide sum, FM's two sums of squares: about 4 FLOPs per value of the
    /// concatenation; a cross layer: about 5 per value) and the top MLP with its output layer.
    /// The embedding gathers are memory traffic, not FLOPs, and are not counted.
    pub fn dense_forward_flops(&self) -> f64 {
        let mlp = |layers: Vec<Linear>| -> f64 {
            layers.iter().map(|(_, i, o)| 2.0 * (*i * *o) as f64).sum()
        };
        let w = self.concat_width() as f64;
        let k = self.num_tables() as f64;
        let interaction = match self.interaction {
            Interaction::WideDeep => k,
            Interaction::DeepFm => k + 4.0 * w,
            Interaction::Dcn => 5.0 * w * self.cross_layers as f64,
        };
        mlp(self.bottom_layers())
            + interaction
            + mlp(self.top_layers())
            + 2.0 * self.out_in() as f64
    }

    /// The `embedding` stage: the gathers, no FLOPs, its output the `K` looked-up rows (fp32).
    /// A DLRM profile's first stage too, before its dense layers.
    pub fn embedding_stage(&self) -> StageFacts {
        let rows = (self.num_tables() * self.width() * 4) as u64;
        StageFacts {
            name: "embedding".into(),
            forward_flops: 0.0,
            activation_bytes: rows,
            kept_bytes: rows,
        }
    }

    /// Two stages for the engine's costs: `embedding` (the gathers: no FLOPs, its output the
    /// `K` looked-up rows) and `dense` (the dense part's FLOPs, output one logit).
    pub fn stage_facts(&self) -> Vec<StageFacts> {
        vec![
            self.embedding_stage(),
            StageFacts {
                name: "dense".into(),
                forward_flops: self.dense_forward_flops(),
                activation_bytes: 4,
                kept_bytes: crate::profiles::dlrm_profile("dense", self.clone())
                    .layers
                    .iter()
                    .map(|l| l.kept_bytes)
                    .sum(),
            },
        ]
    }
}

/// Linear layers `name.0`, `name.1`, … from `input` through `hidden`, then to `output` if given.
fn chain(name: &str, input: usize, hidden: &[usize], output: Option<usize>) -> Vec<Linear> {
    let mut layers = Vec::new();
    let mut prev = input;
    for (i, &w) in hidden.iter().chain(output.iter()).enumerate() {
        layers.push((format!("{name}.{i}"), prev, w));
        prev = w;
    }
    layers
}

#[cfg(test)]
mod tests;
