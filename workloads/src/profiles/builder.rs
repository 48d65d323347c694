//! A tiny shape-tracking builder used by the model families to derive their profiles from the
//! architecture (convolution, batch-norm, fully-connected and pooling shapes) instead of pasting
//! tables of numbers.
//!
//! Conventions (shared by every family):
//! - fp32 everywhere: a tensor or activation element is 4 bytes.
//! - FLOPs count only the multiply-accumulate work of convolutions and fully-connected layers,
//!   one multiply-add = 2 FLOPs. Element-wise work (bias, batch-norm, activation, pooling, LRN,
//!   residual adds, concatenation) is ignored: it is below 1% of the total for these models.
//! - Per-layer cost facts ([`crate::cost::LayerCost`]) count every convolution and
//!   fully-connected layer as followed by a ReLU, every batch-norm, pooling, concatenation and
//!   residual add as an element-wise pass.
//! - Tensor names are `<layer>.<param>` with `<param>` one of `weight`, `bias`, `gamma`, `beta`.
//! - Every operation also appends a node to the model's operator graph ([`OpGraph`]): the value
//!   an operation returns ([`Shape`]) names the node that produced it, which is how the next
//!   operation knows what it reads. A convolution or fc layer adds its own node and a ReLU node,
//!   a residual add an add node and a ReLU node. Named operations' nodes take the operation's
//!   name (`<name>`, `<name>/relu`); unnamed ones are `<layer>/<kind><n>` (`pool`, `concat`,
//!   `add`), numbered from 1 within the layer.

use super::{LayerProfile, ModelProfile, TensorProfile};
use crate::cost::{ArithKind, LayerCost};
use crate::graph::{OpGraph, OpKind};
use std::collections::HashMap;

/// Bytes per element (fp32).
pub(crate) const F32: u64 = 4;

/// Channel-height-width shape of one sample's activation, and the operator-graph node that
/// produces it.
///
/// Equality compares the shape only (`c`, `h`, `w`), not the producing node: two branches that
/// must agree in shape (a projection shortcut and a residual branch) are different nodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// Channels (or features, for a flattened vector).
    pub c: u64,
    /// Height.
    pub h: u64,
    /// Width.
    pub w: u64,
    /// Index of the node of the model's [`OpGraph`] whose output this is (0: the model input).
    pub node: usize,
}

impl PartialEq for Shape {
    fn eq(&self, other: &Self) -> bool {
        (self.c, self.h, self.w) == (other.c, other.h, other.w)
    }
}

impl Eq for Shape {}

impl Shape {
    /// A `c × h × w` shape produced by the model input (node 0).
    pub(crate) const fn new(c: u64, h: u64, w: u64) -> Self {
        Self { c, h, w, node: 0 }
    }

    /// Number of elements.
    pub(crate) const fn elems(self) -> u64 {
        self.c * self.h * self.w
    }

    /// The same shape, produced by node `node` (also: a part of that node's output, where a
    /// layer reads one of the tensors a concatenation carried to it).
    pub(crate) const fn at_node(self, node: usize) -> Self {
        Self { node, ..self }
    }
}

/// Output length of a sliding window (`floor` mode, as in convolutions).
fn window_out(len: u64, k: u64, stride: u64, pad: u64) -> u64 {
    let span = len + 2 * pad;
    assert!(span >= k, "window {k} larger than padded input {span}");
    (span - k) / stride + 1
}

/// Output length of a pooling window; `ceil` selects Caffe/PyTorch `ceil_mode` (the last window
/// may hang over the edge, but must start inside the input or its left padding, as in PyTorch).
fn pool_out(len: u64, k: u64, stride: u64, pad: u64, ceil: bool) -> u64 {
    let (len, k, stride, pad) = (len as i64, k as i64, stride as i64, pad as i64);
    let span = len + 2 * pad - k;
    let mut out = if ceil {
        span.div_euclid(stride) + i64::from(span.rem_euclid(stride) != 0) + 1
    } else {
        span.div_euclid(stride) + 1
    };
    if ceil && (out - 1) * stride >= len + pad {
        out -= 1;
    }
    assert!(out >= 1, "pooling window {k} does not fit input {len}");
    out as u64
}

/// A max/average pooling window applied to `x` (no parameters, no counted FLOPs).
pub(crate) fn pool(x: Shape, k: u64, stride: u64, pad: u64, ceil: bool) -> Shape {
    Shape::new(
        x.c,
        pool_out(x.h, k, stride, pad, ceil),
        pool_out(x.w, k, stride, pad, ceil),
    )
}

/// Global average pooling: keeps the channels, collapses space to 1 × 1.
pub(crate) fn global_pool(x: Shape) -> Shape {
    Shape::new(x.c, 1, 1)
}

/// Channel concatenation of branch outputs (all branches must share the spatial size).
pub(crate) fn concat(parts: &[Shape]) -> Shape {
    let first = parts[0];
    assert!(
        parts.iter().all(|p| p.h == first.h && p.w == first.w),
        "concat of mismatched spatial sizes: {parts:?}"
    );
    Shape::new(parts.iter().map(|p| p.c).sum(), first.h, first.w)
}

/// Accumulates the parameter tensors and cost facts of one layer, and appends the layer's
/// operations to the model's operator graph as they are called.
///
/// Every operation charges its cost facts twice, with the same calls in the same order: once to
/// the layer (the stage candidate's [`LayerCost`]) and once to the graph node it creates, so the
/// nodes of a layer add up to the layer exactly.
pub(crate) struct Layer {
    /// The layer's name, the prefix of its unnamed nodes (pools, concatenations, adds).
    name: String,
    conv_bias: bool,
    tensors: Vec<TensorProfile>,
    cost: LayerCost,
    /// The model's graph so far (borrowed from the [`Net`] for the layer's duration).
    graph: OpGraph,
    /// Unnamed nodes created so far in this layer, per kind tag, to number them.
    unnamed: HashMap<&'static str, usize>,
}

impl Layer {
    /// Applies `charge` to both the layer's and a node's cost facts.
    fn charge(&mut self, node: &mut LayerCost, charge: impl Fn(&mut LayerCost)) {
        charge(&mut self.cost);
        charge(node);
    }

    /// Records the trainable tensor `<layer>.<param>` of `elems` elements, charged to `node`.
    fn push(&mut self, node: &mut LayerCost, layer: &str, param: &str, elems: u64) {
        self.charge(node, |c| c.params(elems));
        self.tensors.push(TensorProfile {
            name: format!("{layer}.{param}"),
            elems,
        });
    }

    /// A fresh name `<layer>/<tag><n>` for an unnamed operation (`n` counts from 1 per tag).
    fn unnamed(&mut self, tag: &'static str) -> String {
        let n = self.unnamed.entry(tag).or_insert(0);
        *n += 1;
        format!("{}/{tag}{n}", self.name)
    }

    /// Appends a graph node reading `inputs` that outputs `y`; returns `y` produced by it.
    fn node(
        &mut self,
        name: String,
        kind: OpKind,
        inputs: Vec<usize>,
        y: Shape,
        params: u64,
        cost: LayerCost,
    ) -> Shape {
        let id = self.graph.push(name, kind, inputs, y.elems(), params, cost);
        y.at_node(id)
    }

    /// The ReLU the cost convention puts after a convolution or fc layer named `of`: an
    /// activation node over `y`, charged as one element-wise pass.
    fn relu(&mut self, of: &str, y: Shape) -> Shape {
        let mut cost = LayerCost::default();
        self.charge(&mut cost, |c| c.activation(y.elems()));
        self.node(
            format!("{of}/relu"),
            OpKind::Activation,
            vec![y.node],
            y,
            0,
            cost,
        )
    }

    /// A square convolution (`k × k`, same stride and padding on both axes).
    pub(crate) fn conv(
        &mut self,
        name: &str,
        x: Shape,
        cout: u64,
        k: u64,
        stride: u64,
        pad: u64,
    ) -> Shape {
        self.conv2d(name, x, cout, (k, k), (stride, stride), (pad, pad))
    }

    /// A general 2-D convolution with `(kh, kw)` kernel, stride and padding. Adds `weight`
    /// (`cout × cin × kh × kw`) and, if the model's convolutions carry biases, `bias`. In the
    /// graph: a convolution node and the ReLU after it.
    pub(crate) fn conv2d(
        &mut self,
        name: &str,
        x: Shape,
        cout: u64,
        k: (u64, u64),
        stride: (u64, u64),
        pad: (u64, u64),
    ) -> Shape {
        let y = Shape::new(
            cout,
            window_out(x.h, k.0, stride.0, pad.0),
            window_out(x.w, k.1, stride.1, pad.1),
        );
        let mut cost = LayerCost::default();
        let weight = cout * x.c * k.0 * k.1;
        let mut params = weight;
        self.push(&mut cost, name, "weight", weight);
        if self.conv_bias {
            self.push(&mut cost, name, "bias", cout);
            params += cout;
        }
        let kind = ArithKind::of_conv(k, stride);
        self.charge(&mut cost, |c| {
            c.arith(kind, y.h * y.w * weight, x.elems(), y.elems())
        });
        let y = self.node(name.to_owned(), OpKind::Conv, vec![x.node], y, params, cost);
        self.relu(name, y)
    }

    /// Batch normalisation over `x`'s channels: trainable `gamma` and `beta` only (running
    /// statistics are not trainable parameters and are not exchanged).
    pub(crate) fn bn(&mut self, name: &str, x: Shape) -> Shape {
        let mut cost = LayerCost::default();
        self.push(&mut cost, name, "gamma", x.c);
        self.push(&mut cost, name, "beta", x.c);
        self.charge(&mut cost, |c| c.elementwise(x.elems(), x.elems()));
        self.node(
            name.to_owned(),
            OpKind::BatchNorm,
            vec![x.node],
            x,
            2 * x.c,
            cost,
        )
    }

    /// A fully-connected layer on the flattened `x`, with `weight` (`out × in`) and `bias`. In
    /// the graph: a fully-connected node and the ReLU after it.
    pub(crate) fn fc(&mut self, name: &str, x: Shape, out: u64) -> Shape {
        let mut cost = LayerCost::default();
        let weight = x.elems() * out;
        self.push(&mut cost, name, "weight", weight);
        self.push(&mut cost, name, "bias", out);
        self.charge(&mut cost, |c| {
            c.arith(ArithKind::Matmul, weight, x.elems(), out)
        });
        let y = self.node(
            name.to_owned(),
            OpKind::FullyConnected,
            vec![x.node],
            Shape::new(out, 1, 1),
            weight + out,
            cost,
        );
        self.relu(name, y)
    }

    /// A token embedding: a `vocab × width` table (`weight`), one row gathered per token of `x`
    /// (`tokens` ids laid out as `1 × tokens`, or several such sequences side by side), costed as
    /// an element-wise pass. The output is `width × tokens`.
    pub(crate) fn embedding(&mut self, name: &str, x: Shape, vocab: u64, width: u64) -> Shape {
        let y = Shape::new(width, x.h, 1);
        let mut cost = LayerCost::default();
        self.push(&mut cost, name, "weight", vocab * width);
        self.charge(&mut cost, |c| c.elementwise(x.elems(), y.elems()));
        self.node(
            name.to_owned(),
            OpKind::Embedding,
            vec![x.node],
            y,
            vocab * width,
            cost,
        )
    }

    /// One LSTM layer over the tokens of `x` (`features × tokens`), `directions` of them (2: a
    /// bidirectional layer whose outputs are concatenated), PyTorch's tensors per direction
    /// (`weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`, `bias_hh_l0`, `_reverse` for the second).
    /// Per token and direction, the four gates are a product with the input and the previous
    /// hidden state (`4h × (in + h)` multiply-adds) and an element-wise pass over the gates.
    pub(crate) fn lstm(&mut self, name: &str, x: Shape, hidden: u64, directions: u64) -> Shape {
        let tokens = x.h * x.w;
        let gates = 4 * hidden;
        let mut cost = LayerCost::default();
        let mut params = 0;
        for d in 0..directions {
            let suffix = if d == 0 { "" } else { "_reverse" };
            for (param, elems) in [
                ("weight_ih_l0", gates * x.c),
                ("weight_hh_l0", gates * hidden),
                ("bias_ih_l0", gates),
                ("bias_hh_l0", gates),
            ] {
                self.push(&mut cost, name, &format!("{param}{suffix}"), elems);
                params += elems;
            }
        }
        let y = Shape::new(directions * hidden, x.h, x.w);
        let macs = directions * tokens * gates * (x.c + hidden);
        self.charge(&mut cost, |c| {
            c.arith(
                ArithKind::Matmul,
                macs,
                x.elems(),
                directions * tokens * gates,
            );
            c.elementwise(directions * tokens * gates, 2 * y.elems());
        });
        self.node(
            name.to_owned(),
            OpKind::Recurrent,
            vec![x.node],
            y,
            params,
            cost,
        )
    }

    /// Bahdanau (additive) attention of every position of `query` over every position of
    /// `keys` (both `hidden × tokens`): `linear_q.weight` and `linear_k.weight` (`hidden ×
    /// hidden`, no bias) and the scoring vector `linear_att`; per query, a score per key
    /// (`hidden` multiply-adds) and the weighted sum of the keys. Returns the context, one
    /// `hidden` vector per query position.
    pub(crate) fn attention(&mut self, name: &str, query: Shape, keys: Shape) -> Shape {
        let hidden = query.c;
        let (tq, tk) = (query.h * query.w, keys.h * keys.w);
        let mut cost = LayerCost::default();
        self.push(&mut cost, name, "linear_q.weight", hidden * hidden);
        self.push(&mut cost, name, "linear_k.weight", hidden * keys.c);
        self.push(&mut cost, name, "linear_att", hidden);
        let params = hidden * hidden + hidden * keys.c + hidden;
        let y = Shape::new(hidden, query.h, query.w);
        let macs = tq * hidden * hidden + tk * hidden * keys.c + 2 * tq * tk * hidden;
        self.charge(&mut cost, |c| {
            c.arith(
                ArithKind::Matmul,
                macs,
                query.elems() + keys.elems(),
                y.elems(),
            );
            c.elementwise(tq * tk * hidden, tq * tk);
        });
        self.node(
            name.to_owned(),
            OpKind::Attention,
            vec![query.node, keys.node],
            y,
            params,
            cost,
        )
    }

    /// The same linear map on the features of every position of `x` (a per-token classifier):
    /// `weight` (`out × features`) and `bias`. In the graph: a fully-connected node and the
    /// element-wise pass the cost convention puts after every fc layer (here it stands for the
    /// softmax over the outputs).
    pub(crate) fn positionwise_fc(&mut self, name: &str, x: Shape, out: u64) -> Shape {
        let positions = x.h * x.w;
        let mut cost = LayerCost::default();
        let weight = x.c * out;
        self.push(&mut cost, name, "weight", weight);
        self.push(&mut cost, name, "bias", out);
        let y = Shape::new(out, x.h, x.w);
        self.charge(&mut cost, |c| {
            c.arith(ArithKind::Matmul, positions * weight, x.elems(), y.elems())
        });
        let y = self.node(
            name.to_owned(),
            OpKind::FullyConnected,
            vec![x.node],
            y,
            weight + out,
            cost,
        );
        self.relu(name, y)
    }

    /// A residual sum of `y` and `shortcut` with no activation after it (a recurrent stack's
    /// residual connection), costed as one element-wise pass.
    pub(crate) fn add(&mut self, y: Shape, shortcut: Shape) -> Shape {
        self.elementwise(
            "add",
            OpKind::Add,
            vec![y.node, shortcut.node],
            2 * y.elems(),
            y,
        )
    }

    /// An element-wise pass from `inputs` (reading `read` elements) to `y`: a parameter-free
    /// node named `<layer>/<tag><n>`.
    fn elementwise(
        &mut self,
        tag: &'static str,
        kind: OpKind,
        inputs: Vec<usize>,
        read: u64,
        y: Shape,
    ) -> Shape {
        let mut cost = LayerCost::default();
        self.charge(&mut cost, |c| c.elementwise(read, y.elems()));
        let name = self.unnamed(tag);
        self.node(name, kind, inputs, y, 0, cost)
    }

    /// A max/average pooling window applied to `x` (see [`pool`]), costed as an element-wise
    /// pass.
    pub(crate) fn pool(&mut self, x: Shape, k: u64, stride: u64, pad: u64, ceil: bool) -> Shape {
        let y = pool(x, k, stride, pad, ceil);
        self.elementwise("pool", OpKind::Pool, vec![x.node], x.elems(), y)
    }

    /// Global average pooling of `x` (see [`global_pool`]), costed as an element-wise pass.
    pub(crate) fn global_pool(&mut self, x: Shape) -> Shape {
        let y = global_pool(x);
        self.elementwise("pool", OpKind::Pool, vec![x.node], x.elems(), y)
    }

    /// Channel concatenation of branch outputs (see [`concat`]), costed as a copy. In the
    /// graph: one node reading every part, in order.
    pub(crate) fn concat(&mut self, parts: &[Shape]) -> Shape {
        let y = concat(parts);
        let inputs = parts.iter().map(|p| p.node).collect();
        self.elementwise("concat", OpKind::Concat, inputs, y.elems(), y)
    }

    /// The residual join: the branch output `y` plus the `shortcut` (the block input or its
    /// projection), then a ReLU; costed as two element-wise passes over `y`'s size. In the
    /// graph: an add node reading both, and the activation node after it. The shortcut may
    /// differ in shape from `y` where the net's shortcut subsamples and zero-pads it without
    /// parameters (ResNet-32's option A); the add's output has `y`'s shape.
    pub(crate) fn residual_add(&mut self, y: Shape, shortcut: Shape) -> Shape {
        let sum = self.elementwise(
            "add",
            OpKind::Add,
            vec![y.node, shortcut.node],
            2 * y.elems(),
            y,
        );
        let name = self.graph.nodes[sum.node].name.clone();
        self.relu(&name, sum)
    }
}

/// Builds a [`ModelProfile`] layer by layer, threading the activation shape through, and its
/// operator graph operation by operation.
pub(crate) struct Net {
    name: String,
    input: String,
    shape: Shape,
    conv_bias: bool,
    layers: Vec<LayerProfile>,
    /// The graph nodes each layer added, in layer order.
    layer_nodes: Vec<std::ops::Range<usize>>,
    graph: OpGraph,
}

impl Net {
    /// Starts a model whose per-sample input has shape `input_shape`; `conv_bias` says whether
    /// its convolutions carry a bias tensor.
    pub(crate) fn new(name: &str, input: &str, input_shape: Shape, conv_bias: bool) -> Self {
        Self {
            name: name.to_owned(),
            input: input.to_owned(),
            shape: input_shape.at_node(0),
            conv_bias,
            layers: Vec::new(),
            layer_nodes: Vec::new(),
            graph: OpGraph::with_input(input_shape.elems()),
        }
    }

    /// Appends one layer: `body` receives the current activation shape and returns the layer's
    /// output shape, which becomes the layer's activation size and the next layer's input.
    pub(crate) fn layer(&mut self, name: &str, body: impl FnOnce(&mut Layer, Shape) -> Shape) {
        let mut layer = Layer {
            name: name.to_owned(),
            conv_bias: self.conv_bias,
            tensors: Vec::new(),
            cost: LayerCost::default(),
            graph: std::mem::take(&mut self.graph),
            unnamed: HashMap::new(),
        };
        let first_node = layer.graph.nodes.len();
        let out = body(&mut layer, self.shape);
        self.graph = layer.graph;
        self.layer_nodes.push(first_node..self.graph.nodes.len());
        self.shape = out;
        self.layers.push(LayerProfile {
            name: name.to_owned(),
            tensors: layer.tensors,
            forward_flops: layer.cost.forward_flops(),
            activation_bytes: out.elems() * F32,
            // Known once the graph is complete (who reads a node decides whether an
            // activation after it runs in place): set by `finish`.
            kept_bytes: 0,
            cost: layer.cost,
        });
    }

    /// Finishes the model; its graph ends in a cost-free softmax (the loss) reading the last
    /// layer's output.
    pub(crate) fn finish(mut self) -> ModelProfile {
        self.graph.push(
            "softmax",
            OpKind::Softmax,
            vec![self.shape.node],
            self.shape.elems(),
            0,
            LayerCost::default(),
        );
        for (layer, nodes) in self.layers.iter_mut().zip(self.layer_nodes) {
            layer.kept_bytes = self.graph.kept_elems(nodes) * F32;
        }
        ModelProfile {
            name: self.name,
            input: self.input,
            layers: self.layers,
            graph: self.graph,
            dlrm: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_arithmetic() {
        assert_eq!(window_out(224, 7, 2, 3), 112);
        assert_eq!(window_out(227, 11, 4, 0), 55);
        assert_eq!(window_out(299, 3, 2, 0), 149);
        // floor pooling (MXNet "valid", PyTorch default)
        assert_eq!(pool_out(112, 3, 2, 1, false), 56);
        assert_eq!(pool_out(147, 3, 2, 0, false), 73);
        // ceil pooling (Caffe): 112 -> 56, 28 -> 14, 14 -> 7, 2 -> 1
        assert_eq!(pool_out(112, 3, 2, 0, true), 56);
        assert_eq!(pool_out(28, 3, 2, 0, true), 14);
        assert_eq!(pool_out(2, 3, 2, 0, true), 1);
        assert_eq!(pool_out(4, 3, 2, 0, true), 2);
        assert_eq!(pool_out(7, 3, 1, 1, true), 7);
    }

    #[test]
    fn layer_accounting() {
        let mut net = Net::new("t", "t", Shape::new(3, 8, 8), true);
        net.layer("a", |l, x| {
            let y = l.conv("c", x, 4, 3, 1, 1);
            l.bn("b", y)
        });
        net.layer("f", |l, x| l.fc("fc", x, 10));
        let m = net.finish();
        let names: Vec<_> = m.tensors().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "c.weight",
                "c.bias",
                "b.gamma",
                "b.beta",
                "fc.weight",
                "fc.bias"
            ]
        );
        assert_eq!(m.total_params(), 4 * 27 + 4 + 8 + 256 * 10 + 10);
        assert_eq!(m.layers[0].activation_bytes, 4 * 64 * 4);
        // Kept for the backward pass: the ReLU's output (computed in place over the conv's,
        // which nothing else reads) and the batch-norm's; the fc's ReLU runs in place too.
        assert_eq!(m.layers[0].kept_bytes, 2 * 4 * 64 * 4);
        assert_eq!(m.layers[1].kept_bytes, 10 * 4);
        assert_eq!(m.layers[0].forward_flops, 2.0 * (64 * 4 * 27) as f64);
        assert_eq!(m.layers[1].forward_flops, 2.0 * 2560.0);

        // The graph: input, conv + ReLU, bn, fc + ReLU, softmax; a chain.
        let g = &m.graph;
        let nodes: Vec<(&str, OpKind, &[usize], u64, u64)> = g
            .nodes
            .iter()
            .map(|n| {
                let inputs: &[usize] = &n.inputs;
                (n.name.as_str(), n.kind, inputs, n.out_elems, n.param_elems)
            })
            .collect();
        assert_eq!(
            nodes,
            [
                ("input", OpKind::Input, &[][..], 3 * 64, 0),
                ("c", OpKind::Conv, &[0][..], 4 * 64, 4 * 27 + 4),
                ("c/relu", OpKind::Activation, &[1][..], 4 * 64, 0),
                ("b", OpKind::BatchNorm, &[2][..], 4 * 64, 8),
                ("fc", OpKind::FullyConnected, &[3][..], 10, 2570),
                ("fc/relu", OpKind::Activation, &[4][..], 10, 0),
                ("softmax", OpKind::Softmax, &[5][..], 10, 0),
            ]
        );
        // The conv's arithmetic is on the conv node, its ReLU's pass on the activation node, and
        // together they are the layer's costs less the batch-norm's.
        assert_eq!(g.nodes[1].cost.conv3x3_flops, 2.0 * (64 * 4 * 27) as f64);
        assert_eq!(g.nodes[1].cost.conv_flops, 0.0);
        assert_eq!(g.nodes[1].cost.kernels, 3.0);
        assert_eq!(g.nodes[2].cost.forward_flops(), 0.0);
        assert_eq!(g.nodes[2].cost.activation_bytes, 4.0 * 2.0 * 256.0);
        assert_eq!(g.nodes[2].cost.kernels, 2.0);
        let layer = g.nodes[1..4]
            .iter()
            .fold(LayerCost::default(), |a, n| a.plus(&n.cost));
        assert_eq!(layer, m.layers[0].cost);
    }

    #[test]
    fn joins_read_every_branch() {
        let mut net = Net::new("t", "t", Shape::new(4, 8, 8), false);
        net.layer("block", |l, x| {
            let a = l.conv("a", x, 4, 3, 1, 1);
            let p = l.pool(x, 3, 1, 1, false);
            let y = l.concat(&[a, p, x]);
            let z = l.conv("z", y, 4, 1, 1, 0);
            l.residual_add(z, x)
        });
        let m = net.finish();
        let g = &m.graph;
        g.validate().unwrap();
        let by = |name: &str| g.nodes.iter().position(|n| n.name == name).unwrap();
        let concat = &g.nodes[by("block/concat1")];
        assert_eq!(concat.inputs, [by("a/relu"), by("block/pool1"), 0]);
        assert_eq!(concat.out_elems, 12 * 64);
        let add = &g.nodes[by("block/add1")];
        assert_eq!(add.kind, OpKind::Add);
        assert_eq!(add.inputs, [by("z/relu"), 0]);
        let relu = by("block/add1/relu");
        assert_eq!(g.nodes[relu].inputs, [by("block/add1")]);
        assert_eq!(g.nodes.last().unwrap().inputs, [relu]);
        // The input forks four ways: the conv, the pool, the concatenation and the add.
        assert_eq!(g.consumers()[0].len(), 4);
        // The add and its ReLU are the two element-wise passes of the residual join.
        assert_eq!(add.cost.activation_bytes, 4.0 * 3.0 * 256.0);
        assert_eq!(g.nodes[relu].cost.activation_bytes, 4.0 * 2.0 * 256.0);
        // Kept: the conv's output (its ReLU in place), the pool's, the concatenation's, the
        // 1×1 conv's (its ReLU in place) and the sum's (its ReLU in place).
        assert_eq!(m.layers[0].kept_bytes, (4 + 4 + 12 + 4 + 4) * 64 * 4);
    }

    #[test]
    fn shapes_compare_by_size_not_producer() {
        let a = Shape::new(2, 3, 3);
        assert_eq!(a.at_node(5), a);
        assert_ne!(Shape::new(2, 3, 4), a);
        assert_eq!(a.at_node(5).node, 5);
    }
}
