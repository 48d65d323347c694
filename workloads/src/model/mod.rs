//! Models: built-in staged candle networks for real training, matrix factorization (MF) on ratings
//! data, and the papers' big models as profiles for throughput mode.
//!
//! A model is a sequence of stages, each with its own named parameters. Parameters are laid out
//! in one canonical order (stage order, then name), which is how gradients are exchanged and how
//! parameter blocks are cut. Graph networks ([`GraphNetSpec`]: a tiny ResNet, a stack of
//! Inception-A blocks) are not chains: their stages are their nodes, their parameters laid out in
//! node order.

pub mod conv;
mod dlrm;
mod graph_net;
mod linear;
mod mf;
mod replica;
mod stages;
#[cfg(feature = "cuda")]
mod staging;
mod vars;

pub use crate::metrics::auc;
pub use dlrm::{
    add_rows, full_step, gather_rows, sgd_rows, DenseStep, DlrmDense, DlrmEvaluation, DlrmModel,
    DlrmSpec, Interaction,
};
pub use graph_net::{GraphNet, GraphNetSpec, NetNode, NetOp, PlanError, BN_EPS};
pub use mf::{MfModel, MfSpec, MF_LEFT, MF_RIGHT};
pub use replica::{EvalOutput, Replica, StepOutput};
pub use stages::{StageSpec, StagedModel};
pub use vars::{f32_slice_mut, host_values, load_vars};

use crate::cost::LayerCost;
use crate::data::{DataConfig, Dataset};
use crate::error::{Result, WorkloadError};
use crate::graph::OpGraph;
use crate::profiles::{self, ModelProfile};
use crate::rng::{seeded, stable_hash};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Model section of the config (`[model]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ModelConfig {
    /// Multi-layer perceptron with ReLU hidden layers (no hidden layers = softmax regression, MLR).
    Mlp {
        /// Hidden layer widths.
        #[serde(default = "default_hidden")]
        hidden: Vec<usize>,
    },
    /// Multinomial logistic regression (softmax regression), one of the thesis's workloads.
    Mlr,
    /// Small CNN: two 3×3 conv + ReLU + 2×2 max-pool blocks, then a linear classifier.
    Cnn {
        /// Channels of the two conv blocks.
        #[serde(default = "default_cnn_channels")]
        channels: Vec<usize>,
        /// Input image shape `[c, h, w]`; flat data of that size is reshaped to it.
        #[serde(default)]
        image: Option<[usize; 3]>,
    },
    /// VGG-like stack: blocks of two 3×3 convs then a 2×2 max-pool, then two dense layers.
    VggLike {
        /// Channels of each conv block.
        #[serde(default = "default_vgg_channels")]
        channels: Vec<usize>,
        /// Width of the hidden dense layer.
        #[serde(default = "default_vgg_dense")]
        dense: usize,
        /// Input image shape `[c, h, w]`; flat data of that size is reshaped to it.
        #[serde(default)]
        image: Option<[usize; 3]>,
    },
    /// Tiny ResNet (a graph network): a 3×3 stem convolution, stages of basic residual blocks
    /// (the stages after the first start with stride 2 and a 1×1 projection shortcut), global
    /// average pooling, a linear classifier. See [`GraphNetSpec::tiny_resnet`].
    TinyResnet {
        /// Basic blocks per stage (at least one stage).
        #[serde(default = "default_resnet_blocks")]
        blocks: Vec<usize>,
        /// Channels of each stage (one per entry of `blocks`, each >= 1).
        #[serde(default = "default_cnn_channels")]
        channels: Vec<usize>,
        /// Batch-norm after every convolution (training-mode batch statistics).
        #[serde(default = "default_true")]
        bn: bool,
        /// Input image shape `[c, h, w]`; flat data of that size is reshaped to it.
        #[serde(default)]
        image: Option<[usize; 3]>,
    },
    /// Stacked Inception-A blocks (a graph network): a 3×3 stem convolution, `blocks` blocks of
    /// four branches joined by a channel concatenation, global average pooling, a linear
    /// classifier. See [`GraphNetSpec::inception_stack`].
    InceptionStack {
        /// Inception-A blocks (>= 1).
        #[serde(default = "default_inception_blocks")]
        blocks: usize,
        /// Output channels of each branch (>= 1); a block outputs four times as many.
        #[serde(default = "default_inception_width")]
        width: usize,
        /// Input image shape `[c, h, w]`; flat data of that size is reshaped to it.
        #[serde(default)]
        image: Option<[usize; 3]>,
    },
    /// Matrix factorization `X ≈ L Rᵀ` on `[data] kind = "ratings"` (the thesis's MF workload).
    ///
    /// Parameters `mf.L` (`rows × rank`) and `mf.R` (`cols × rank`), sizes taken from the data;
    /// the loss of an entry is `(L_i · R_j − x_ij)² + l2 · (|L_i|² + |R_j|²)`, averaged over the
    /// batch. A regression model: evaluation reports the test MSE and no accuracy.
    Mf {
        /// Rank of the factors (≥ 1; need not equal the data's true rank).
        #[serde(default = "default_mf_rank")]
        rank: usize,
        /// L2 regularization λ on the rows an entry touches (finite, ≥ 0). The default 0.01 is
        /// small against the data term: a row of the default data has ~45 training entries,
        /// so it shrinks the factors by a few percent while keeping rarely seen rows bounded.
        #[serde(default = "default_mf_l2")]
        l2: f64,
    },
    /// A DLRM click-through model (Wide&Deep, DeepFM or DCN; see [`DlrmSpec`]) on `[data] kind
    /// = "ctr"` or `"ctr-file"`, table sizes taken from the data. Its embeddings train row-wise,
    /// so only strategies that update tables that way can run it.
    Dlrm {
        /// The interaction: `wide-deep`, `deep-fm` (default) or `dcn`.
        #[serde(default)]
        interaction: Interaction,
        /// Embedding dimension (≥ 1).
        #[serde(default = "default_dlrm_dim")]
        dim: usize,
        /// Hidden widths of the bottom MLP over the dense features (its output is projected to
        /// `dim`).
        #[serde(default = "default_dlrm_bottom")]
        bottom: Vec<usize>,
        /// Hidden widths of the top (deep) MLP.
        #[serde(default = "default_dlrm_top")]
        top: Vec<usize>,
        /// Cross layers (DCN only; ≥ 1 there).
        #[serde(default = "default_dlrm_cross_layers")]
        cross_layers: usize,
    },
    /// Throughput mode: a paper's model as a per-layer profile, with virtual payloads and no math.
    Profile {
        /// Built-in profile name (vgg16, vgg19, alexnet, resnet-32/50/101/152, inception-v3/v4,
        /// googlenet, dlrm-wide-deep/deep-fm/dcn).
        name: String,
    },
}

fn default_hidden() -> Vec<usize> {
    vec![64]
}
fn default_cnn_channels() -> Vec<usize> {
    vec![8, 16]
}
fn default_vgg_channels() -> Vec<usize> {
    vec![8, 16]
}
fn default_vgg_dense() -> usize {
    64
}
fn default_resnet_blocks() -> Vec<usize> {
    vec![2, 2]
}
fn default_true() -> bool {
    true
}
fn default_inception_blocks() -> usize {
    2
}
fn default_inception_width() -> usize {
    8
}
fn default_mf_rank() -> usize {
    10
}
fn default_mf_l2() -> f64 {
    0.01
}
fn default_dlrm_dim() -> usize {
    8
}
fn default_dlrm_bottom() -> Vec<usize> {
    vec![32]
}
fn default_dlrm_top() -> Vec<usize> {
    vec![32, 16]
}
fn default_dlrm_cross_layers() -> usize {
    2
}

impl ModelConfig {
    /// The `kind` tag as written in the TOML, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelConfig::Mlp { .. } => "mlp",
            ModelConfig::Mlr => "mlr",
            ModelConfig::Cnn { .. } => "cnn",
            ModelConfig::VggLike { .. } => "vgg-like",
            ModelConfig::TinyResnet { .. } => "tiny-resnet",
            ModelConfig::InceptionStack { .. } => "inception-stack",
            ModelConfig::Mf { .. } => "mf",
            ModelConfig::Dlrm { .. } => "dlrm",
            ModelConfig::Profile { .. } => "profile",
        }
    }

    /// Checks that the model can train on `data` before any data is generated: MF needs ratings
    /// data, and ratings data (a regression task) trains only MF; a DLRM needs click-through
    /// data (`ctr`, `ctr-file`), which trains only a DLRM. Profiles take no data.
    pub fn check_data(&self, data: &DataConfig) -> Result<()> {
        let ratings = matches!(data, DataConfig::Ratings { .. });
        match self {
            ModelConfig::Profile { .. } => Ok(()),
            ModelConfig::Dlrm { .. } if !data.is_ctr() => Err(WorkloadError::config(
                "model.kind",
                "\"dlrm\"",
                format!(
                    "a DLRM trains on click-through data (`[data] kind = \"ctr\"` or \"ctr-file\"), not data.kind = \"{}\"",
                    data.kind()
                ),
            )),
            ModelConfig::Dlrm { .. } => Ok(()),
            other if data.is_ctr() => Err(WorkloadError::config(
                "data.kind",
                format!("\"{}\"", data.kind()),
                format!(
                    "click-through data trains only `[model] kind = \"dlrm\"`, not model.kind = \"{}\"",
                    other.kind()
                ),
            )),
            ModelConfig::Mf { .. } if !ratings => Err(WorkloadError::config(
                "model.kind",
                "\"mf\"",
                format!(
                    "matrix factorization trains on `[data] kind = \"ratings\"`, not data.kind = \"{}\"",
                    data.kind()
                ),
            )),
            ModelConfig::Mf { .. } => Ok(()),
            other if ratings => Err(WorkloadError::config(
                "data.kind",
                "\"ratings\"",
                format!(
                    "ratings data trains only `[model] kind = \"mf\"`, not model.kind = \"{}\"",
                    other.kind()
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig::Mlp {
            hidden: default_hidden(),
        }
    }
}

/// One named parameter tensor of a model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParamInfo {
    /// Name, e.g. `s01.weight`.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Fan-in used for initialisation (0 for biases).
    pub fan_in: usize,
}

impl ParamInfo {
    /// Number of elements.
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Per-stage facts the engine needs for costs and memory accounting.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageFacts {
    /// Stage name.
    pub name: String,
    /// Forward FLOPs per sample.
    pub forward_flops: f64,
    /// Output activation bytes per sample: what crosses a stage boundary placed after this
    /// stage (and the gradient that comes back across it).
    pub activation_bytes: u64,
    /// Activation bytes per sample that training keeps from this stage's forward pass to its
    /// backward pass: the operator outputs inside the stage (a convolution's and its
    /// batch-norm's, a ReLU's where it is not computed in place), not only the last. What a
    /// memory ledger holds for a minibatch in flight.
    pub kept_bytes: u64,
}

/// A model resolved against its input: real (trainable) or a throughput-mode profile.
#[derive(Clone, Debug)]
pub enum ModelSpec {
    /// Matrix factorization on ratings data (trains for real, by hand).
    Mf(MfSpec),
    /// A candle network that trains for real.
    Real {
        /// Stages in execution order.
        stages: Vec<StageSpec>,
        /// Input sample shape the first stage takes.
        input_shape: Vec<usize>,
        /// Number of classes.
        classes: usize,
    },
    /// A graph network (forks and joins) that trains for real.
    Graph(GraphNetSpec),
    /// A DLRM click-through model: embedding tables trained row-wise plus a dense part.
    Dlrm(DlrmSpec),
    /// A profile: sizes and FLOPs only.
    Profile(ModelProfile),
}

impl ModelSpec {
    /// Resolves the config against its data config and loaded training set: checks the pairing
    /// ([`ModelConfig::check_data`]), takes MF's matrix sizes from the ratings config, and
    /// resolves every other model with [`ModelSpec::resolve`].
    pub fn resolve_for_data(
        cfg: &ModelConfig,
        data: &DataConfig,
        train: &Dataset,
    ) -> Result<ModelSpec> {
        cfg.check_data(data)?;
        match (cfg, data) {
            (ModelConfig::Mf { rank, l2 }, DataConfig::Ratings { rows, cols, .. }) => {
                ModelSpec::mf(*rows, *cols, *rank, *l2)
            }
            (
                ModelConfig::Dlrm {
                    interaction,
                    dim,
                    bottom,
                    top,
                    cross_layers,
                },
                _,
            ) => {
                let Some(schema) = &train.ctr else {
                    return Err(WorkloadError::config(
                        "data.kind",
                        format!("\"{}\"", data.kind()),
                        "the loaded data carries no click-through schema",
                    ));
                };
                let spec = DlrmSpec {
                    fields: schema.rows.clone(),
                    dense_features: schema.dense,
                    dim: *dim,
                    interaction: *interaction,
                    bottom: bottom.clone(),
                    top: top.clone(),
                    cross_layers: *cross_layers,
                };
                spec.validate()?;
                Ok(ModelSpec::Dlrm(spec))
            }
            _ => ModelSpec::resolve(cfg, &train.sample_shape, train.classes),
        }
    }

    /// An MF model of a `rows × cols` matrix, checking `rank` ≥ 1 and `l2` finite and ≥ 0.
    pub fn mf(rows: usize, cols: usize, rank: usize, l2: f64) -> Result<ModelSpec> {
        if rank == 0 {
            return Err(WorkloadError::config("model.rank", rank, "must be >= 1"));
        }
        if !(l2.is_finite() && l2 >= 0.0) {
            return Err(WorkloadError::config(
                "model.l2",
                l2,
                "must be finite and >= 0",
            ));
        }
        if rows.checked_mul(rank).is_none() || cols.checked_mul(rank).is_none() {
            return Err(WorkloadError::config(
                "model.rank",
                rank,
                format!("factors of {rows} x {rank} and {cols} x {rank} do not fit in memory"),
            ));
        }
        Ok(ModelSpec::Mf(MfSpec {
            rows,
            cols,
            rank,
            l2,
        }))
    }

    /// Resolves the config for data with `sample_shape` and `classes`.
    ///
    /// MF needs the ratings matrix's sizes, which only the data config knows: it is an error
    /// here (naming `model.kind`); use [`ModelSpec::resolve_for_data`].
    pub fn resolve(cfg: &ModelConfig, sample_shape: &[usize], classes: usize) -> Result<ModelSpec> {
        let flat: usize = sample_shape.iter().product();
        let image_shape = |image: &Option<[usize; 3]>| -> Result<Vec<usize>> {
            match image {
                Some(s) if s.iter().product::<usize>() == flat => Ok(s.to_vec()),
                Some(s) => Err(WorkloadError::config(
                    "model.image",
                    format!("{s:?}"),
                    format!("must have as many elements as a data sample ({flat})"),
                )),
                None if sample_shape.len() == 3 => Ok(sample_shape.to_vec()),
                None => Err(WorkloadError::config(
                    "model.image",
                    "(unset)",
                    format!(
                        "convolutional models need image-shaped data; the data's samples have shape {sample_shape:?}: set model.image = [c, h, w]"
                    ),
                )),
            }
        };
        let image_array = |image: &Option<[usize; 3]>| -> Result<[usize; 3]> {
            let s = image_shape(image)?;
            Ok([s[0], s[1], s[2]])
        };
        let stages = match cfg {
            ModelConfig::TinyResnet {
                blocks,
                channels,
                bn,
                image,
            } => {
                return GraphNetSpec::tiny_resnet(
                    image_array(image)?,
                    blocks,
                    channels,
                    *bn,
                    classes,
                )
                .map(ModelSpec::Graph)
            }
            ModelConfig::InceptionStack {
                blocks,
                width,
                image,
            } => {
                return GraphNetSpec::inception_stack(image_array(image)?, *blocks, *width, classes)
                    .map(ModelSpec::Graph)
            }
            ModelConfig::Profile { name } => {
                return profiles::builtin(name)
                    .map(ModelSpec::Profile)
                    .ok_or_else(|| {
                        WorkloadError::config(
                            "model.name",
                            format!("\"{name}\""),
                            format!(
                                "unknown profile; known: {}",
                                profiles::builtin_names().join(", ")
                            ),
                        )
                    });
            }
            ModelConfig::Mf { .. } => {
                return Err(WorkloadError::config(
                    "model.kind",
                    "\"mf\"",
                    "matrix factorization takes its sizes from `[data] kind = \"ratings\"`",
                ))
            }
            ModelConfig::Dlrm { .. } => {
                return Err(WorkloadError::config(
                    "model.kind",
                    "\"dlrm\"",
                    "a DLRM takes its table sizes from `[data] kind = \"ctr\"` or \"ctr-file\"",
                ))
            }
            ModelConfig::Mlr => StageSpec::mlp(flat, &[], classes),
            ModelConfig::Mlp { hidden } => {
                if hidden.contains(&0) {
                    return Err(WorkloadError::config(
                        "model.hidden",
                        format!("{hidden:?}"),
                        "widths must be >= 1",
                    ));
                }
                StageSpec::mlp(flat, hidden, classes)
            }
            ModelConfig::Cnn { channels, image } => StageSpec::conv_net(
                &image_shape(image)?,
                channels,
                1,
                None,
                classes,
                "model.channels",
            )?,
            ModelConfig::VggLike {
                channels,
                dense,
                image,
            } => StageSpec::conv_net(
                &image_shape(image)?,
                channels,
                2,
                Some(*dense),
                classes,
                "model.channels",
            )?,
        };
        let input_shape = match stages.first() {
            Some(StageSpec::Conv { .. }) => match cfg {
                ModelConfig::Cnn { image, .. } | ModelConfig::VggLike { image, .. } => {
                    image_shape(image)?
                }
                _ => vec![flat],
            },
            _ => vec![flat],
        };
        Ok(ModelSpec::Real {
            stages,
            input_shape,
            classes,
        })
    }

    /// Whether this model trains for real (false: throughput mode).
    pub fn is_real(&self) -> bool {
        !matches!(self, ModelSpec::Profile(_))
    }

    /// Whether the model is a classifier (evaluation reports an accuracy; a DLRM's at the 0.5
    /// threshold). MF is a regression model: its evaluation reports the test MSE and no
    /// accuracy.
    pub fn has_accuracy(&self) -> bool {
        matches!(
            self,
            ModelSpec::Real { .. } | ModelSpec::Graph(_) | ModelSpec::Dlrm(_)
        )
    }

    /// The DLRM spec: a DLRM's own, or a DLRM profile's; `None` for other models.
    pub fn dlrm(&self) -> Option<&DlrmSpec> {
        match self {
            ModelSpec::Dlrm(d) => Some(d),
            ModelSpec::Profile(p) => p.dlrm.as_ref(),
            _ => None,
        }
    }

    /// What kind of model this is, for messages: `staged`, `graph`, `mf`, `dlrm` or `profile`.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelSpec::Real { .. } => "staged",
            ModelSpec::Graph(_) => "graph",
            ModelSpec::Mf(_) => "mf",
            ModelSpec::Dlrm(_) => "dlrm",
            ModelSpec::Profile(_) => "profile",
        }
    }

    /// All parameters in the canonical layout order. A DLRM profile's are its spec's
    /// ([`DlrmSpec::params`]: the tables, then the dense part), as for a DLRM that trains, so
    /// strategies cut the same blocks in both modes.
    pub fn params(&self) -> Vec<ParamInfo> {
        match self {
            ModelSpec::Real { stages, .. } => stages
                .iter()
                .enumerate()
                .flat_map(|(i, s)| s.params(i))
                .collect(),
            ModelSpec::Mf(m) => m.params(),
            ModelSpec::Dlrm(d) => d.params(),
            ModelSpec::Graph(g) => g.params(),
            ModelSpec::Profile(p) => match &p.dlrm {
                Some(d) => d.params(),
                None => p
                    .tensors()
                    .map(|t| ParamInfo {
                        name: t.name.clone(),
                        shape: vec![t.elems as usize],
                        fan_in: 0,
                    })
                    .collect(),
            },
        }
    }

    /// Per-stage FLOPs and activation sizes. A DLRM profile's stages are the `embedding` stage
    /// ([`DlrmSpec::embedding_stage`]) and then its layers (the dense part).
    pub fn stage_facts(&self) -> Vec<StageFacts> {
        match self {
            ModelSpec::Real { stages, .. } => stages
                .iter()
                .enumerate()
                .map(|(i, s)| StageFacts {
                    name: format!("s{i:02}"),
                    forward_flops: s.forward_flops(),
                    activation_bytes: s.out_elems() as u64 * 4,
                    kept_bytes: s.kept_elems() as u64 * 4,
                })
                .collect(),
            ModelSpec::Mf(m) => m.stage_facts(),
            ModelSpec::Dlrm(d) => d.stage_facts(),
            ModelSpec::Graph(g) => g.stage_facts(),
            ModelSpec::Profile(p) => p
                .dlrm
                .iter()
                .map(DlrmSpec::embedding_stage)
                .chain(p.layers.iter().map(|l| StageFacts {
                    name: l.name.clone(),
                    forward_flops: l.forward_flops,
                    activation_bytes: l.activation_bytes,
                    kept_bytes: l.kept_bytes,
                }))
                .collect(),
        }
    }

    /// The parameters each stage owns, as index ranges into [`ModelSpec::params`], one per entry
    /// of [`ModelSpec::stage_facts`]: consecutive, with no gap or overlap, covering every
    /// parameter. For a real network they are [`StagedModel::stage_param_range`]'s; MF is one
    /// stage owning both factors; a profile's layer owns its tensors (and a DLRM profile's
    /// `embedding` stage its tables).
    pub fn stage_param_ranges(&self) -> Vec<Range<usize>> {
        let counts: Vec<usize> = match self {
            ModelSpec::Real { stages, .. } => stages
                .iter()
                .enumerate()
                .map(|(i, s)| s.params(i).len())
                .collect(),
            ModelSpec::Mf(m) => vec![m.params().len()],
            ModelSpec::Dlrm(d) => vec![d.num_tables(), d.dense_param_range().len()],
            ModelSpec::Graph(g) => g.stage_param_counts(),
            ModelSpec::Profile(p) => p
                .dlrm
                .iter()
                .map(DlrmSpec::num_tables)
                .chain(p.layers.iter().map(|l| l.tensors.len()))
                .collect(),
        };
        let mut start = 0;
        counts
            .into_iter()
            .map(|n| {
                start += n;
                start - n..start
            })
            .collect()
    }

    /// Per-layer cost facts, one per stage (what a calibrated device charges a training step
    /// by): a real network's stages, a profile's layers; empty for matrix factorization and a
    /// DLRM, whose embedding lookups the per-layer model does not describe (they are charged by
    /// FLOPs). A DLRM profile's `embedding` stage gets zero facts for the same reason (a
    /// strategy charges its lookups itself), its dense layers their own.
    pub fn layer_costs(&self) -> Vec<LayerCost> {
        match self {
            ModelSpec::Real { stages, .. } => stages.iter().map(StageSpec::cost).collect(),
            ModelSpec::Mf(_) | ModelSpec::Dlrm(_) => Vec::new(),
            ModelSpec::Graph(g) => g.layer_costs(),
            ModelSpec::Profile(p) => p
                .dlrm
                .iter()
                .map(|_| LayerCost::default())
                .chain(p.layers.iter().map(|l| l.cost))
                .collect(),
        }
    }

    /// The model's operator graph, for a memory manager that simulates an iteration over it
    /// (which feature maps are alive, which are forks and joins): a profile's or a graph
    /// network's; `None` for a staged network (described stage by stage), for matrix
    /// factorization and for a DLRM, trained or profiled.
    pub fn op_graph(&self) -> Option<OpGraph> {
        match self {
            ModelSpec::Profile(p) if p.dlrm.is_some() => None,
            ModelSpec::Profile(p) => Some(p.graph.clone()),
            ModelSpec::Graph(g) => Some(g.op_graph()),
            ModelSpec::Real { .. } => None,
            // Matrix factorization is two embedding lookups and a dot product, not a layer graph;
            // a DLRM's dense part is small beside its tables.
            ModelSpec::Mf(_) | ModelSpec::Dlrm(_) => None,
        }
    }

    /// Forward + backward FLOPs per sample (backward counted as twice the forward). For a DLRM,
    /// trained or profiled, that is 3 × [`DlrmSpec::dense_forward_flops`]: the lookups count no
    /// FLOPs.
    pub fn training_flops_per_sample(&self) -> f64 {
        3.0 * self
            .stage_facts()
            .iter()
            .map(|s| s.forward_flops)
            .sum::<f64>()
    }

    /// Initial parameter values, one vector per parameter in layout order; deterministic in `seed`.
    /// Weights are He-uniform (bound √(6 / fan_in)), biases zero (and batch-norm's beta; its
    /// gamma starts at one); MF factors are uniform within [`MfSpec::init_bound`]. Profiles get
    /// no values.
    pub fn init_values(&self, seed: u64) -> Option<Vec<Vec<f32>>> {
        if !self.is_real() {
            return None;
        }
        let mf_bound = match self {
            ModelSpec::Mf(m) => Some(m.init_bound()),
            _ => None,
        };
        let params = self.params();
        let constants = match self {
            ModelSpec::Graph(g) => g.constant_inits(),
            _ => vec![None; params.len()],
        };
        Some(
            params
                .iter()
                .zip(constants)
                .map(|(p, constant)| {
                    if let Some(c) = constant {
                        return vec![c; p.elems()];
                    }
                    if p.fan_in == 0 {
                        return vec![0.0; p.elems()];
                    }
                    let mut rng = seeded(seed, stable_hash(&p.name), 0);
                    let bound = mf_bound.unwrap_or_else(|| (6.0 / p.fan_in as f64).sqrt() as f32);
                    (0..p.elems())
                        .map(|_| rng.gen_range(-bound..bound))
                        .collect()
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn cnn() -> ModelSpec {
        let cfg = ModelConfig::Cnn {
            channels: vec![4, 6],
            image: Some([1, 8, 8]),
        };
        ModelSpec::resolve(&cfg, &[64], 3).unwrap()
    }

    /// Stage-by-stage backward through the surrogate gives the full graph's gradients.
    #[test]
    fn staged_backward_equals_full_backward() {
        let spec = cnn();
        let replica = Replica::new(&spec, &Device::Cpu).unwrap().unwrap();
        replica.set_params(&spec.init_values(3).unwrap()).unwrap();
        let batch = 5;
        let x: Vec<f32> = (0..batch * 64)
            .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
            .collect();
        let labels = [0u32, 2, 1, 1, 0];
        let full = replica.step(x.clone(), &labels).unwrap();

        let model = replica.model().unwrap();
        let mut inputs = vec![model.input(x, batch).unwrap()];
        for i in 0..model.len() {
            let y = model.forward_stage(i, &inputs[i]).unwrap();
            inputs.push(y);
        }
        let logits = inputs.pop().unwrap();
        let y = Tensor::from_slice(&labels, batch, &Device::Cpu).unwrap();
        let logits_var = candle_core::Var::from_tensor(&logits).unwrap();
        let loss = candle_nn::loss::cross_entropy(logits_var.as_tensor(), &y).unwrap();
        let mut grad = loss
            .backward()
            .unwrap()
            .get(logits_var.as_tensor())
            .unwrap()
            .clone();
        let mut staged = vec![Vec::new(); 2 * model.len()];
        for i in (0..model.len()).rev() {
            let (params, gx) = model.backward_stage(i, &inputs[i], &grad).unwrap();
            for (k, g) in params.into_iter().enumerate() {
                staged[2 * i + k] = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            }
            grad = gx;
        }
        for (a, b) in full.grads.iter().zip(&staged) {
            let diff = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            assert!(diff < 1e-5, "stage gradient differs by {diff}");
        }
    }

    #[test]
    fn staged_models_have_layer_cost_facts_per_stage() {
        let spec = cnn();
        let costs = spec.layer_costs();
        let facts = spec.stage_facts();
        assert_eq!(costs.len(), facts.len());
        let params: usize = spec.params().iter().map(ParamInfo::elems).sum();
        let param_bytes: f64 = costs.iter().map(|c| c.param_bytes).sum();
        assert_eq!(param_bytes, 4.0 * params as f64);
        for (c, f) in costs.iter().zip(&facts) {
            assert_eq!(c.forward_flops(), f.forward_flops, "{}", f.name);
        }
        assert!(costs[0].conv3x3_flops > 0.0 && costs.last().unwrap().matmul_flops > 0.0);
        let mf = ModelSpec::Mf(MfSpec {
            rows: 4,
            cols: 5,
            rank: 2,
            l2: 0.0,
        });
        assert!(mf.layer_costs().is_empty());
    }

    #[test]
    fn layout_order_is_stage_order_and_sorted() {
        let names: Vec<String> = cnn().params().into_iter().map(|p| p.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 6);
    }

    #[test]
    fn initialisation_is_seeded() {
        let spec = cnn();
        assert_eq!(spec.init_values(1), spec.init_values(1));
        assert_ne!(spec.init_values(1), spec.init_values(2));
    }

    #[test]
    fn convolutional_models_need_image_shaped_data() {
        let cfg = ModelConfig::Cnn {
            channels: vec![4],
            image: None,
        };
        let e = ModelSpec::resolve(&cfg, &[32], 10).unwrap_err().to_string();
        assert!(e.contains("model.image"), "{e}");
        let e = ModelSpec::resolve(
            &ModelConfig::Profile {
                name: "vgg99".into(),
            },
            &[],
            0,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("vgg99") && e.contains("vgg16"), "{e}");
    }

    /// A profile hands out its own graph; the networks that train for real have none yet.
    #[test]
    fn only_profiles_have_an_operator_graph() {
        let cfg = ModelConfig::Profile {
            name: "resnet-50".into(),
        };
        let spec = ModelSpec::resolve(&cfg, &[], 0).unwrap();
        let graph = spec.op_graph().unwrap();
        assert_eq!(graph, profiles::resnet50().graph);
        let params: usize = spec.params().iter().map(ParamInfo::elems).sum();
        assert_eq!(graph.param_elems(), params as u64);
        assert!(cnn().op_graph().is_none());
        assert!(ModelSpec::mf(4, 5, 2, 0.0).unwrap().op_graph().is_none());
    }
}
