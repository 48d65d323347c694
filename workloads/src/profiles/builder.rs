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

use super::{LayerProfile, ModelProfile, TensorProfile};
use crate::cost::{ArithKind, LayerCost};

/// Bytes per element (fp32).
pub(crate) const F32: u64 = 4;

/// Channel-height-width shape of one sample's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Channels (or features, for a flattened vector).
    pub c: u64,
    /// Height.
    pub h: u64,
    /// Width.
    pub w: u64,
}

impl Shape {
    /// A `c × h × w` shape.
    pub(crate) const fn new(c: u64, h: u64, w: u64) -> Self {
        Self { c, h, w }
    }

    /// Number of elements.
    pub(crate) const fn elems(self) -> u64 {
        self.c * self.h * self.w
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

/// Accumulates the parameter tensors and multiply-accumulates of one layer.
pub(crate) struct Layer {
    conv_bias: bool,
    tensors: Vec<TensorProfile>,
    cost: LayerCost,
}

impl Layer {
    fn push(&mut self, layer: &str, param: &str, elems: u64) {
        self.cost.params(elems);
        self.tensors.push(TensorProfile {
            name: format!("{layer}.{param}"),
            elems,
        });
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
    /// (`cout × cin × kh × kw`) and, if the model's convolutions carry biases, `bias`.
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
        let weight = cout * x.c * k.0 * k.1;
        self.push(name, "weight", weight);
        if self.conv_bias {
            self.push(name, "bias", cout);
        }
        let kind = if k == (1, 1) {
            ArithKind::Pointwise
        } else {
            ArithKind::Conv
        };
        self.cost
            .arith(kind, y.h * y.w * weight, x.elems(), y.elems());
        self.cost.activation(y.elems());
        y
    }

    /// Batch normalisation over `x`'s channels: trainable `gamma` and `beta` only (running
    /// statistics are not trainable parameters and are not exchanged).
    pub(crate) fn bn(&mut self, name: &str, x: Shape) -> Shape {
        self.push(name, "gamma", x.c);
        self.push(name, "beta", x.c);
        self.cost.elementwise(x.elems(), x.elems());
        x
    }

    /// A fully-connected layer on the flattened `x`, with `weight` (`out × in`) and `bias`.
    pub(crate) fn fc(&mut self, name: &str, x: Shape, out: u64) -> Shape {
        let weight = x.elems() * out;
        self.push(name, "weight", weight);
        self.push(name, "bias", out);
        self.cost.arith(ArithKind::Matmul, weight, x.elems(), out);
        self.cost.activation(out);
        Shape::new(out, 1, 1)
    }

    /// A max/average pooling window applied to `x` (see [`pool`]), costed as an element-wise
    /// pass.
    pub(crate) fn pool(&mut self, x: Shape, k: u64, stride: u64, pad: u64, ceil: bool) -> Shape {
        let y = pool(x, k, stride, pad, ceil);
        self.cost.elementwise(x.elems(), y.elems());
        y
    }

    /// Global average pooling of `x` (see [`global_pool`]), costed as an element-wise pass.
    pub(crate) fn global_pool(&mut self, x: Shape) -> Shape {
        let y = global_pool(x);
        self.cost.elementwise(x.elems(), y.elems());
        y
    }

    /// Channel concatenation of branch outputs (see [`concat`]), costed as a copy.
    pub(crate) fn concat(&mut self, parts: &[Shape]) -> Shape {
        let y = concat(parts);
        self.cost.elementwise(y.elems(), y.elems());
        y
    }

    /// A residual add of two tensors of shape `y` (and its ReLU), costed as element-wise passes.
    pub(crate) fn residual_add(&mut self, y: Shape) -> Shape {
        self.cost.elementwise(2 * y.elems(), y.elems());
        self.cost.elementwise(y.elems(), y.elems());
        y
    }
}

/// Builds a [`ModelProfile`] layer by layer, threading the activation shape through.
pub(crate) struct Net {
    name: String,
    input: String,
    shape: Shape,
    conv_bias: bool,
    layers: Vec<LayerProfile>,
}

impl Net {
    /// Starts a model whose per-sample input has shape `input_shape`; `conv_bias` says whether
    /// its convolutions carry a bias tensor.
    pub(crate) fn new(name: &str, input: &str, input_shape: Shape, conv_bias: bool) -> Self {
        Self {
            name: name.to_owned(),
            input: input.to_owned(),
            shape: input_shape,
            conv_bias,
            layers: Vec::new(),
        }
    }

    /// Appends one layer: `body` receives the current activation shape and returns the layer's
    /// output shape, which becomes the layer's activation size and the next layer's input.
    pub(crate) fn layer(&mut self, name: &str, body: impl FnOnce(&mut Layer, Shape) -> Shape) {
        let mut layer = Layer {
            conv_bias: self.conv_bias,
            tensors: Vec::new(),
            cost: LayerCost::default(),
        };
        let out = body(&mut layer, self.shape);
        self.shape = out;
        self.layers.push(LayerProfile {
            name: name.to_owned(),
            tensors: layer.tensors,
            forward_flops: layer.cost.forward_flops(),
            activation_bytes: out.elems() * F32,
            cost: layer.cost,
        });
    }

    /// Finishes the model.
    pub(crate) fn finish(self) -> ModelProfile {
        ModelProfile {
            name: self.name,
            input: self.input,
            layers: self.layers,
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
        assert_eq!(m.layers[0].forward_flops, 2.0 * (64 * 4 * 27) as f64);
        assert_eq!(m.layers[1].forward_flops, 2.0 * 2560.0);
    }
}
