//! DLRM click-through profiles at Criteo-like sizes (Wide&Deep, DeepFM, DCN), for throughput
//! mode: Criteo-like, DLRM reference sizes.
//!
//! # Sizes
//!
//! * 26 categorical fields whose table rows are the Criteo Display Advertising Challenge
//!   (Kaggle) training set's per-feature cardinalities ([`CRITEO_KAGGLE_ROWS`]: the counts
//!   DLRM's Kaggle preprocessing reports, the list TorchRec's DLRM example passes as
//!   `num_embeddings_per_feature`, 33,762,577 ids in all), capped at [`ROW_CAP`] rows the way a
//!   run hashes ids into smaller tables: seven fields sit at the cap, the rest keep their 3 to
//!   93,145 ids, 840,543 rows in all.
//! * 13 dense features, embedding dimension 16.
//! * Bottom MLP `[512, 256]` (then the projection to 16); top MLP `[1024, 1024, 512, 256]` for
//!   Wide&Deep and DeepFM; DCN: 3 cross layers and top `[1024, 1024]`.
//!
//! # What the layers describe
//!
//! The layers are the **dense part** only, what every rank replicates and computes: one layer
//! per linear layer of the bottom MLP (`bottom.<i>`), the `interaction` (DCN's cross layers and
//! their parameters; the wide sum and FM term of the others), one per linear layer of the top
//! MLP (`top.<i>`) and the output layer (`out`). Their tensors are
//! [`DlrmSpec::dense_params`], in order and with the same names, and their forward FLOPs add up
//! to [`DlrmSpec::dense_forward_flops`]. The embedding tables are not layer tensors: they are in
//! [`ModelProfile::dlrm`], and [`crate::model::ModelSpec`] lays a DLRM profile's parameters out
//! as [`DlrmSpec::params`] (tables first), with an `embedding` stage owning them before the
//! layers.
//!
//! A layer's activation is its own output (`interaction`: the concatenation `x0` plus the wide
//! and FM partial logit, or DCN's `x0` and `x_L`); a cut inside the bottom MLP would also carry
//! the `K` looked-up rows, which these facts leave to the embedding stage.
//!
//! Cost facts follow the profile conventions: each linear layer is a matrix product, followed by
//! a ReLU where the model has one (the bottom MLP's hidden layers, every top layer), the output
//! layer by a sigmoid. The interaction's few FLOPs (sums and products, at most about 0.2% of the
//! dense part's) are charged at the matrix-product rate, since the cost model rates no element-wise
//! arithmetic; its concatenation is an element-wise pass.
//!
//! These profiles carry no operator graph: the lookups and the two-input interaction are not the
//! single-input layer graphs a memory manager walks ([`crate::model::ModelSpec::op_graph`] is
//! `None` for them).

use super::{LayerProfile, ModelProfile, TensorProfile, F32_BYTES};
use crate::cost::{ArithKind, LayerCost};
use crate::graph::OpGraph;
use crate::model::{DlrmSpec, Interaction};

/// Per-feature cardinalities of the 26 categorical features of the Criteo Display Advertising
/// Challenge (Kaggle) training set, in column order `C1..C26`, as DLRM's Kaggle preprocessing
/// counts them (and TorchRec's DLRM example lists them).
pub const CRITEO_KAGGLE_ROWS: [usize; 26] = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
];

/// The most rows a Criteo-like table keeps (larger fields are hashed down to it).
pub const ROW_CAP: usize = 100_000;

/// Dense features per sample (Criteo's integer features `I1..I13`).
pub const CRITEO_DENSE: usize = 13;

/// Embedding dimension of the Criteo-like profiles.
pub const CRITEO_DIM: usize = 16;

/// [`CRITEO_KAGGLE_ROWS`], each capped at [`ROW_CAP`]: the Criteo-like profiles' table rows.
pub fn criteo_like_rows() -> Vec<usize> {
    CRITEO_KAGGLE_ROWS.iter().map(|&r| r.min(ROW_CAP)).collect()
}

/// The Criteo-like DLRM with `interaction` (DLRM reference sizes, see the module docs).
pub fn criteo_like_spec(interaction: Interaction) -> DlrmSpec {
    let (top, cross_layers) = match interaction {
        Interaction::Dcn => (vec![1024, 1024], 3),
        Interaction::WideDeep | Interaction::DeepFm => (vec![1024, 1024, 512, 256], 0),
    };
    DlrmSpec {
        fields: criteo_like_rows(),
        dense_features: CRITEO_DENSE,
        dim: CRITEO_DIM,
        interaction,
        bottom: vec![512, 256],
        top,
        cross_layers,
    }
}

/// Wide&Deep at Criteo-like sizes (`dlrm-wide-deep`).
pub fn dlrm_wide_deep() -> ModelProfile {
    dlrm_profile("dlrm-wide-deep", criteo_like_spec(Interaction::WideDeep))
}

/// DeepFM at Criteo-like sizes (`dlrm-deep-fm`).
pub fn dlrm_deep_fm() -> ModelProfile {
    dlrm_profile("dlrm-deep-fm", criteo_like_spec(Interaction::DeepFm))
}

/// DCN at Criteo-like sizes (`dlrm-dcn`).
pub fn dlrm_dcn() -> ModelProfile {
    dlrm_profile("dlrm-dcn", criteo_like_spec(Interaction::Dcn))
}

/// The profile of `spec`'s dense part, named `name`, carrying `spec` as its
/// [`ModelProfile::dlrm`] (see the module docs). `spec` is taken as valid
/// ([`DlrmSpec::validate`]); an invalid one gives layers of zero size, not a panic.
pub fn dlrm_profile(name: &str, spec: DlrmSpec) -> ModelProfile {
    let mut layers = Vec::new();
    let bottom_out = spec.bottom.iter().copied().chain([spec.dim]);
    let mut width = spec.dense_features;
    for (i, o) in bottom_out.enumerate() {
        let relu = i < spec.bottom.len();
        layers.push(linear(&format!("bottom.{i}"), width, o, relu));
        width = o;
    }
    layers.push(interaction(&spec));
    let x0 = spec.concat_width();
    width = x0;
    for (i, &o) in spec.top.iter().enumerate() {
        layers.push(linear(&format!("top.{i}"), width, o, true));
        width = o;
    }
    let out_in = match spec.interaction {
        Interaction::Dcn => x0 + width,
        Interaction::WideDeep | Interaction::DeepFm => width,
    };
    let mut out = linear("out", out_in, 1, false);
    if spec.interaction == Interaction::Dcn {
        // concat(x_L, deep(x0)) before the output layer.
        out.cost.elementwise(to_u64(out_in), to_u64(out_in));
    }
    out.cost.elementwise(1, 1); // the sigmoid
    layers.push(out);
    ModelProfile {
        name: name.to_owned(),
        input: format!(
            "{} dense features, {} categorical ids (click-through; {} embedding rows of width {})",
            spec.dense_features,
            spec.num_tables(),
            spec.fields.iter().sum::<usize>(),
            spec.width()
        ),
        layers,
        graph: OpGraph::default(),
        dlrm: Some(spec),
    }
}

/// `usize` to `u64` (lossless on every supported target).
fn to_u64(n: usize) -> u64 {
    n as u64
}

/// A linear layer `name` from `i` to `o` features (`weight` `[o, i]`, `bias` `[o]`), with a
/// ReLU after it if `relu`.
fn linear(name: &str, i: usize, o: usize, relu: bool) -> LayerProfile {
    let (i, o) = (to_u64(i), to_u64(o));
    let mut cost = LayerCost::default();
    cost.arith(ArithKind::Matmul, i * o, i, o);
    cost.params(i * o + o);
    if relu {
        cost.activation(o);
    }
    LayerProfile {
        name: name.to_owned(),
        tensors: vec![
            TensorProfile {
                name: format!("{name}.weight"),
                elems: i * o,
            },
            TensorProfile {
                name: format!("{name}.bias"),
                elems: o,
            },
        ],
        forward_flops: 2.0 * (i * o) as f64,
        activation_bytes: o * F32_BYTES,
        kept_bytes: o * F32_BYTES * (1 + u64::from(relu)),
        cost,
    }
}

/// The interaction layer: the concatenation `x0 = concat(h, e_1..e_K)`, then the wide sum
/// (Wide&Deep), the wide sum and the FM term (DeepFM, about 4 FLOPs per value of `x0`), or the
/// cross layers (DCN, about 5 FLOPs per value each), as counted by
/// [`DlrmSpec::dense_forward_flops`].
fn interaction(spec: &DlrmSpec) -> LayerProfile {
    let k = to_u64(spec.num_tables());
    let dim = to_u64(spec.dim);
    let w = to_u64(spec.concat_width());
    let layers = to_u64(spec.cross_layers);
    let mut cost = LayerCost::default();
    // The concatenation reads h and the rows' embedding columns and writes x0.
    cost.elementwise(dim + k * dim, w);
    let mut tensors = Vec::new();
    // What the backward pass reads: x0 and the partial logit, or x0 and every cross layer's
    // output.
    let (flops, out, kept) = match spec.interaction {
        Interaction::WideDeep => {
            // Σ_k s_k: reads the K wide scalars, writes one partial logit.
            cost.elementwise(k, 1);
            (k, w + 1, w + 1)
        }
        Interaction::DeepFm => {
            cost.elementwise(k, 1);
            // ½ Σ_d ((Σ_i v_i)_d² − Σ_i v_id²): reads x0, writes one value.
            cost.elementwise(w, 1);
            (k + 4 * w, w + 1, w + 1)
        }
        Interaction::Dcn => {
            for l in 0..spec.cross_layers {
                for param in ["weight", "bias"] {
                    tensors.push(TensorProfile {
                        name: format!("cross.{l}.{param}"),
                        elems: w,
                    });
                }
                cost.params(2 * w);
                // x_{l+1} = x0 ⊙ (x_l·w_l) + b_l + x_l: reads x0 and x_l, writes x_{l+1}.
                cost.elementwise(2 * w, w);
            }
            (5 * w * layers, 2 * w, w * (1 + layers))
        }
    };
    cost.matmul_flops += flops as f64;
    LayerProfile {
        name: "interaction".into(),
        tensors,
        forward_flops: flops as f64,
        activation_bytes: out * F32_BYTES,
        kept_bytes: kept * F32_BYTES,
        cost,
    }
}
