//! Model profiles for throughput mode.
//!
//! The papers' big models (VGG, AlexNet, ResNet, Inception, GoogLeNet, GNMT) are described layer by
//! layer — parameter tensors with element counts, forward FLOPs per sample and output-activation
//! bytes per sample — so that the simulator can move *virtual* payloads of the true byte sizes
//! (parameter-server pushes/pulls, pipeline boundary transfers) and charge compute costs without
//! doing any tensor math.
//!
//! Profiles are derived programmatically from the architectures (see the private `builder`),
//! not pasted from tables. Conventions shared by all profiles:
//! - fp32: 4 bytes per parameter and per activation element.
//! - Only trainable tensors are listed: convolution/fc weights and biases, batch-norm `gamma`
//!   and `beta`. BN running statistics are not listed (they are not exchanged with a parameter
//!   server).
//! - Tensor names are `<layer>.<param>`, `<param>` ∈ {`weight`, `bias`, `gamma`, `beta`}; the
//!   `<layer>` part uses the reference framework's layer name (MXNet for ResNet-50/101/152, Caffe
//!   for GoogLeNet, torchvision for Inception-V3, timm/TF-slim for Inception-V4).
//! - [`ModelProfile::tensors`] yields tensors in the framework's natural parameter order
//!   (MXNet `list_arguments` order for the PSLD models), which the default parameter-server
//!   assignments (round-robin by tensor index, MXNet's key hash) depend on.
//! - A layer is a stage candidate: one weight layer or one residual/inception block, with
//!   parameter-free operations (ReLU, LRN, dropout, spatial pooling) folded into the preceding
//!   layer, so its activation is what crosses a stage boundary placed right after it. The final
//!   global average pool belongs to the classifier layer.
//! - FLOPs count the multiply-accumulates of convolutions and fc layers, 2 FLOPs each;
//!   element-wise work (bias, BN, activations, pooling, residual adds) is ignored (< 1%).
//! - Every profile also carries its operator graph ([`ModelProfile::graph`]): the same
//!   operations, one node each, with the edges between them. Node 0 is the input; a convolution
//!   or fc layer is followed by a ReLU node (the cost convention's activation pass); a residual
//!   add reads both the branch and the shortcut and is followed by a ReLU node; a concatenation
//!   reads every branch; the graph ends in a cost-free softmax. Its nodes' parameters and cost
//!   facts add up to the layers' exactly. Dropout is not a node.
//! - The DLRM profiles (`dlrm-wide-deep`, `dlrm-deep-fm`, `dlrm-dcn`; see [`dlrm_deep_fm`]) are
//!   the exception: their layers are a click-through model's dense part, their embedding tables
//!   are in [`ModelProfile::dlrm`], and they carry no operator graph.

mod alexnet;
mod builder;
mod dlrm;
mod gnmt;
mod googlenet;
mod inception;
mod inception_v4;
mod mlr;
mod resnet;
mod resnet152;
mod vgg;

pub use alexnet::{alexnet, alexnet_torchvision};
pub use dlrm::{
    criteo_like_rows, criteo_like_spec, dlrm_dcn, dlrm_deep_fm, dlrm_profile, dlrm_wide_deep,
    CRITEO_DENSE, CRITEO_DIM, CRITEO_KAGGLE_ROWS, ROW_CAP,
};
pub use gnmt::gnmt;
pub use googlenet::googlenet;
pub use inception::inception_v3;
pub use inception_v4::inception_v4;
pub use mlr::mlr_imagenet;
pub use resnet::{resnet101, resnet32, resnet32_plain, resnet50};
pub use resnet152::resnet152;
pub use vgg::{vgg16, vgg19};

use crate::cost::LayerCost;
use crate::graph::OpGraph;

/// Bytes per fp32 element.
const F32_BYTES: u64 = builder::F32;

/// One parameter tensor of a profiled model (name like "conv1_1.weight", element count, fp32
/// assumed). It is the unit the default parameter-server assignments place and the thing PSLD
/// cuts into blocks.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TensorProfile {
    /// `<layer>.<param>` name, unique within the model.
    pub name: String,
    /// Number of fp32 elements.
    pub elems: u64,
}

impl TensorProfile {
    /// Size in bytes (fp32), the virtual payload of one full push or pull of this tensor.
    pub fn bytes(&self) -> u64 {
        self.elems * F32_BYTES
    }

    /// Number of blocks when the tensor is cut into pieces of at most `unit_bytes` (PSLD
    /// partitioning: `⌈bytes / unit⌉`, a tensor is never less than one block). A zero unit is
    /// treated as one byte.
    pub fn blocks_at(&self, unit_bytes: u64) -> u64 {
        self.bytes().div_ceil(unit_bytes.max(1)).max(1)
    }
}

/// One layer (a stage candidate): its parameter tensors, forward FLOPs per sample (count
/// multiply-add as 2 FLOPs), and the bytes of its output activation per sample (fp32). Pipeline
/// and model-partition strategies cut the model between layers.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LayerProfile {
    /// Layer name, unique within the model.
    pub name: String,
    /// The layer's trainable tensors, in framework parameter order.
    pub tensors: Vec<TensorProfile>,
    /// Forward FLOPs per sample (multiply-add = 2 FLOPs).
    pub forward_flops: f64,
    /// Bytes of the layer's output activation per sample (fp32), i.e. what crosses a stage
    /// boundary placed after this layer.
    pub activation_bytes: u64,
    /// Bytes per sample (fp32) the layer keeps from its forward pass to its backward pass:
    /// the outputs of its operators in [`ModelProfile::graph`] (a residual block's
    /// convolutions, batch-norms and sum), less ReLUs computed in place
    /// ([`OpGraph::kept_elems`](crate::graph::OpGraph::kept_elems)): what training holds in
    /// memory for a minibatch in flight. At least [`LayerProfile::activation_bytes`].
    pub kept_bytes: u64,
    /// What a calibrated device's per-layer cost model charges the layer by (FLOPs per kind,
    /// bytes moved, kernels), derived from the architecture like the rest of the profile.
    #[serde(skip)]
    pub cost: LayerCost,
}

impl LayerProfile {
    /// Number of parameters (elements) in this layer.
    pub fn params(&self) -> u64 {
        self.tensors.iter().map(|t| t.elems).sum()
    }

    /// Parameter bytes (fp32) of this layer: the per-iteration gradient/parameter payload of a
    /// stage holding it.
    pub fn param_bytes(&self) -> u64 {
        self.params() * F32_BYTES
    }
}

/// A whole model profile: name, input description, layers in execution order, operator graph.
/// The simulator uses it to size virtual payloads and to charge per-sample compute; a memory
/// manager walks its graph.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModelProfile {
    /// Canonical profile name (one of [`builtin_names`] for the built-ins).
    pub name: String,
    /// Human-readable per-sample input description, e.g. `3x224x224 (ImageNet, 1000 classes)`.
    pub input: String,
    /// Layers in execution order.
    pub layers: Vec<LayerProfile>,
    /// The operator graph the layers are made of: one node per convolution, batch-norm,
    /// activation, pooling window, concatenation, residual add and fc layer, with the edges
    /// that make forks and joins visible to a memory manager, ending in a cost-free softmax.
    /// Its nodes' parameters and cost facts add up to the layers' exactly. Empty for a DLRM
    /// profile (see [`ModelProfile::dlrm`]), which has no such graph.
    #[serde(skip)]
    pub graph: OpGraph,
    /// The DLRM a click-through profile describes (tables, dense part), so a strategy that
    /// shards embedding tables knows their sizes; `None` for the other profiles, whose layers
    /// say everything. With it, the layers are the dense part alone and the tables are not
    /// among [`ModelProfile::tensors`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlrm: Option<crate::model::DlrmSpec>,
}

impl ModelProfile {
    /// Total number of parameters (elements) over all tensors.
    pub fn total_params(&self) -> u64 {
        self.tensors().map(|t| t.elems).sum()
    }

    /// Total parameter bytes (fp32): the size of one full model push or pull.
    pub fn param_bytes(&self) -> u64 {
        self.total_params() * F32_BYTES
    }

    /// All parameter tensors in framework parameter order (layer by layer, then within a layer);
    /// the index of a tensor in this sequence is its parameter-server key.
    pub fn tensors(&self) -> impl Iterator<Item = &TensorProfile> {
        self.layers.iter().flat_map(|l| l.tensors.iter())
    }

    /// Number of parameter tensors.
    pub fn tensor_count(&self) -> usize {
        self.layers.iter().map(|l| l.tensors.len()).sum()
    }

    /// The largest tensor (the first one if several tie); `None` for a parameter-free model.
    pub fn largest_tensor(&self) -> Option<&TensorProfile> {
        self.tensors()
            .fold(None, |best: Option<&TensorProfile>, t| match best {
                Some(b) if b.elems >= t.elems => Some(b),
                _ => Some(t),
            })
    }

    /// Forward FLOPs per sample (multiply-add = 2 FLOPs).
    pub fn forward_flops(&self) -> f64 {
        self.layers.iter().map(|l| l.forward_flops).sum()
    }

    /// Training FLOPs per sample, forward + backward. Convention: backward costs twice the
    /// forward (one pass for activation gradients, one for weight gradients), so training is
    /// 3 × forward.
    pub fn training_flops(&self) -> f64 {
        3.0 * self.forward_flops()
    }

    /// Number of blocks when each tensor is split into ≤ `unit_bytes` pieces (PSLD partitioning;
    /// small tensors stay whole, one block each, and are never merged). A zero unit is treated
    /// as one byte.
    pub fn blocks_at(&self, unit_bytes: u64) -> u64 {
        self.tensors().map(|t| t.blocks_at(unit_bytes)).sum()
    }
}

/// Names of the built-in profiles, sorted. `googlenet-32` is GoogLeNet at the Fela paper's
/// 32 × 32 input (same parameters as `googlenet`, smaller FLOPs and activations); the `dlrm-*`
/// profiles are click-through models at Criteo-like sizes ([`criteo_like_spec`]).
pub fn builtin_names() -> &'static [&'static str] {
    &[
        "alexnet",
        "alexnet-tv",
        "dlrm-dcn",
        "dlrm-deep-fm",
        "dlrm-wide-deep",
        "gnmt-16",
        "gnmt-8",
        "googlenet",
        "googlenet-32",
        "inception-v3",
        "inception-v4",
        "mlr-imagenet",
        "resnet-101",
        "resnet-152",
        "resnet-32",
        "resnet-32-nobn",
        "resnet-50",
        "vgg16",
        "vgg19",
    ]
}

/// Lower-cases and drops everything but letters and digits, so "VGG-16", "vgg_16" and "vgg16"
/// compare equal.
fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The built-in profile by name (case-insensitive, accepts "vgg-16"/"vgg16" style: separators
/// `-`, `_`, `.` and spaces are ignored); `None` if unknown. Profiles are built on each call
/// (cheap: microseconds).
pub fn builtin(name: &str) -> Option<ModelProfile> {
    let profile = match normalize(name).as_str() {
        "alexnet" => alexnet(),
        "alexnettv" => alexnet_torchvision(),
        "dlrmdcn" => dlrm_dcn(),
        "dlrmdeepfm" => dlrm_deep_fm(),
        "dlrmwidedeep" => dlrm_wide_deep(),
        "gnmt8" => gnmt(8),
        "gnmt16" => gnmt(16),
        "googlenet" => googlenet(224),
        "googlenet32" => googlenet(32),
        "inceptionv3" => inception_v3(),
        "inceptionv4" => inception_v4(),
        "mlrimagenet" => mlr_imagenet(),
        "resnet101" => resnet101(),
        "resnet152" => resnet152(),
        "resnet32" => resnet32(),
        "resnet32nobn" => resnet32_plain(),
        "resnet50" => resnet50(),
        "vgg16" => vgg16(),
        "vgg19" => vgg19(),
        _ => return None,
    };
    Some(profile)
}

#[cfg(test)]
mod dlrm_tests;
#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod tests;
