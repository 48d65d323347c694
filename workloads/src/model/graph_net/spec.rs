//! The description of a graph network: its nodes (one candle operation each), their inputs,
//! output shapes and parameters, and the [`OpGraph`] a memory manager plans on.

use crate::cost::{ArithKind, LayerCost};
use crate::graph::{OpGraph, OpKind};
use crate::model::{ParamInfo, StageFacts};

/// Batch-norm's variance epsilon.
pub const BN_EPS: f64 = 1e-5;

/// One operation of a graph network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetOp {
    /// The input batch (node 0 only).
    Input,
    /// A square convolution: `kernel` 3 (padding 1) or 1 (padding 0), stride 1 or 2, with a
    /// bias unless a batch-norm follows it (whose beta plays that role).
    Conv {
        /// Input channels.
        in_ch: usize,
        /// Output channels.
        out_ch: usize,
        /// Kernel size, 1 or 3.
        kernel: usize,
        /// Stride, 1 or 2.
        stride: usize,
        /// Whether the convolution has a bias.
        bias: bool,
    },
    /// Batch normalisation with the batch's statistics (training mode) and trainable
    /// per-channel gamma and beta.
    BatchNorm {
        /// Channels.
        channels: usize,
    },
    /// ReLU.
    Relu,
    /// A 2 × 2 max pool, stride 2.
    MaxPool2,
    /// A 3 × 3 average pool, stride 1, padding 1 (zeros counted; the inception pool branch).
    AvgPool3,
    /// The mean over the spatial dimensions: `[c, h, w]` becomes `[c]`.
    GlobalAvgPool,
    /// The element-wise sum of its inputs (a residual join).
    Add,
    /// The channel concatenation of its inputs (an inception join).
    Concat,
    /// A fully-connected layer with a bias (flattens its input).
    Fc {
        /// Input features.
        inputs: usize,
        /// Output features.
        outputs: usize,
    },
}

impl NetOp {
    /// What the operation is to a memory manager.
    pub fn kind(&self) -> OpKind {
        match self {
            NetOp::Input => OpKind::Input,
            NetOp::Conv { .. } => OpKind::Conv,
            NetOp::BatchNorm { .. } => OpKind::BatchNorm,
            NetOp::Relu => OpKind::Activation,
            NetOp::MaxPool2 | NetOp::AvgPool3 | NetOp::GlobalAvgPool => OpKind::Pool,
            NetOp::Add => OpKind::Add,
            NetOp::Concat => OpKind::Concat,
            NetOp::Fc { .. } => OpKind::FullyConnected,
        }
    }

    /// The operation's parameters (suffix, shape, fan-in, constant initial value), in layout
    /// order: a convolution's or FC's weight then bias, a batch-norm's gamma then beta.
    fn param_slots(&self) -> Vec<(&'static str, Vec<usize>, usize, Option<f32>)> {
        match *self {
            NetOp::Conv {
                in_ch,
                out_ch,
                kernel,
                bias,
                ..
            } => {
                let mut v = vec![(
                    "weight",
                    vec![out_ch, in_ch, kernel, kernel],
                    in_ch * kernel * kernel,
                    None,
                )];
                if bias {
                    v.push(("bias", vec![out_ch], 0, None));
                }
                v
            }
            NetOp::BatchNorm { channels } => vec![
                ("gamma", vec![channels], 0, Some(1.0)),
                ("beta", vec![channels], 0, None),
            ],
            NetOp::Fc { inputs, outputs } => vec![
                ("weight", vec![outputs, inputs], inputs, None),
                ("bias", vec![outputs], 0, None),
            ],
            _ => Vec::new(),
        }
    }
}

/// One node of a graph network.
#[derive(Clone, Debug, PartialEq)]
pub struct NetNode {
    /// Name, unique within the network; its parameters are `<name>.<weight|bias|gamma|beta>`.
    pub name: String,
    /// The operation.
    pub op: NetOp,
    /// The nodes it reads, in argument order.
    pub inputs: Vec<usize>,
    /// Its output's shape per sample: `[c, h, w]` for feature maps, `[n]` after pooling
    /// globally or a fully-connected layer.
    pub shape: Vec<usize>,
}

impl NetNode {
    /// Elements of its output per sample.
    pub fn out_elems(&self) -> usize {
        self.shape.iter().product()
    }

    /// Its parameters, in layout order.
    pub fn params(&self) -> Vec<ParamInfo> {
        self.op
            .param_slots()
            .into_iter()
            .map(|(suffix, shape, fan_in, _)| ParamInfo {
                name: format!("{}.{suffix}", self.name),
                shape,
                fan_in,
            })
            .collect()
    }
}

/// A network described node by node (node 0 is the input, the last node gives the logits);
/// the loss, softmax cross-entropy over the logits, is not a node. Built by
/// [`GraphNetSpec::tiny_resnet`](super::GraphNetSpec::tiny_resnet) and
/// [`GraphNetSpec::inception_stack`](super::GraphNetSpec::inception_stack).
#[derive(Clone, Debug, PartialEq)]
pub struct GraphNetSpec {
    /// Nodes in declaration (topological) order.
    pub nodes: Vec<NetNode>,
    /// Number of classes (outputs of the last node).
    pub classes: usize,
}

impl GraphNetSpec {
    /// The per-sample shape of the input (node 0's output).
    pub fn input_shape(&self) -> &[usize] {
        self.nodes
            .first()
            .map(|n| n.shape.as_slice())
            .unwrap_or(&[])
    }

    /// Every parameter in layout order (node order; per node as [`NetNode::params`]).
    pub fn params(&self) -> Vec<ParamInfo> {
        self.nodes.iter().flat_map(NetNode::params).collect()
    }

    /// Per parameter in layout order, the constant it starts at, if any (batch-norm gamma
    /// starts at 1); the others are initialised from their fan-in like every model's.
    pub fn constant_inits(&self) -> Vec<Option<f32>> {
        self.nodes
            .iter()
            .flat_map(|n| n.op.param_slots().into_iter().map(|s| s.3))
            .collect()
    }

    /// Cost facts of node `i` per sample.
    pub fn node_cost(&self, i: usize) -> LayerCost {
        let node = &self.nodes[i];
        let out = node.out_elems() as u64;
        let input: u64 = node
            .inputs
            .iter()
            .map(|&j| self.nodes[j].out_elems() as u64)
            .sum();
        let mut c = LayerCost::default();
        for p in node.params() {
            c.params(p.elems() as u64);
        }
        match node.op {
            NetOp::Input => {}
            NetOp::Conv {
                in_ch,
                out_ch,
                kernel,
                stride,
                bias,
            } => {
                let pixels = (node.shape[1] * node.shape[2]) as u64;
                let macs = (in_ch * kernel * kernel * out_ch) as u64 * pixels;
                let (k, st) = (kernel as u64, stride as u64);
                let kind = ArithKind::of_conv((k, k), (st, st));
                c.arith(kind, macs, input, out);
                if bias {
                    c.elementwise(out, out);
                }
            }
            NetOp::Fc { inputs, outputs } => {
                c.arith(
                    ArithKind::Matmul,
                    (inputs * outputs) as u64,
                    input,
                    outputs as u64,
                );
                c.elementwise(out, out);
            }
            NetOp::Relu => c.activation(out),
            NetOp::BatchNorm { .. }
            | NetOp::MaxPool2
            | NetOp::AvgPool3
            | NetOp::GlobalAvgPool
            | NetOp::Add
            | NetOp::Concat => c.elementwise(input, out),
        }
        c
    }

    /// The operator graph a memory manager plans on: the nodes one to one, with their output
    /// sizes, parameter counts and cost facts per sample.
    pub fn op_graph(&self) -> OpGraph {
        let mut g = OpGraph::default();
        for (i, node) in self.nodes.iter().enumerate() {
            let params: usize = node.params().iter().map(ParamInfo::elems).sum();
            g.push(
                node.name.clone(),
                node.op.kind(),
                node.inputs.clone(),
                node.out_elems() as u64,
                params as u64,
                self.node_cost(i),
            );
        }
        g
    }

    /// One "stage" per node after the input: name, forward FLOPs and output bytes per sample.
    /// Data-parallel strategies need no more; strategies that cut a model into a chain of
    /// stages refuse graph networks.
    pub fn stage_facts(&self) -> Vec<StageFacts> {
        (1..self.nodes.len())
            .map(|i| {
                // A stage is one node: its output is what it keeps.
                let out = self.nodes[i].out_elems() as u64 * 4;
                StageFacts {
                    name: self.nodes[i].name.clone(),
                    forward_flops: self.node_cost(i).forward_flops(),
                    activation_bytes: out,
                    kept_bytes: out,
                }
            })
            .collect()
    }

    /// The number of parameters of each stage of [`GraphNetSpec::stage_facts`].
    pub fn stage_param_counts(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .skip(1)
            .map(|n| n.op.param_slots().len())
            .collect()
    }

    /// Cost facts of each stage of [`GraphNetSpec::stage_facts`].
    pub fn layer_costs(&self) -> Vec<LayerCost> {
        (1..self.nodes.len()).map(|i| self.node_cost(i)).collect()
    }
}
