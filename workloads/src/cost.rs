//! Per-layer cost facts: what a calibrated device's cost model needs to know about a layer
//! beyond its FLOP count.
//!
//! A training step on a GPU is not one big matrix product: it is a sequence of kernels, some
//! bound by arithmetic (convolutions and matrix products, at rates that differ by kind), some by
//! memory traffic (batch-norm, activations, pooling, concatenation, residual adds), and each
//! paying a launch overhead. [`LayerCost`] records, per layer and per sample, the forward FLOPs of
//! each arithmetic kind, the activation bytes every operation reads and writes, the parameter
//! bytes, and the kernels a training step launches, all derived from the architecture.
//!
//! Conventions: fp32 bytes (4 per element; a reduced-precision mode's smaller traffic is part of
//! that mode's fitted bandwidth); an element-wise operation reads its input and writes its output
//! once in the forward pass; a training step launches three kernels per convolution or matrix product (forward, gradient of
//! the input, gradient of the weight) and two per element-wise operation (forward, backward).

use serde::Serialize;

/// Bytes per fp32 element.
const F32: f64 = 4.0;

/// Kernels a training step launches per convolution or matrix product.
const ARITH_KERNELS: f64 = 3.0;
/// Kernels a training step launches per element-wise operation.
const ELEMENTWISE_KERNELS: f64 = 2.0;

/// The arithmetic kinds a device's cost model rates separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ArithKind {
    /// A 3 × 3 convolution of stride 1: the shape fast-convolution algorithms (Winograd's)
    /// accelerate, so it runs at its own rate, which may exceed the device's peak.
    Conv3x3,
    /// Any other convolution with a spatial kernel (larger than 1 × 1, or strided): run as a
    /// direct or implicit-GEMM convolution, at most at the device's peak.
    Conv,
    /// A 1 × 1 (pointwise) convolution: a matrix product over channels.
    Pointwise,
    /// A fully-connected layer: a matrix product over features.
    Matmul,
}

impl ArithKind {
    /// The kind of a convolution with a `(height, width)` kernel and `(vertical, horizontal)`
    /// stride: the one rule every model's cost facts classify convolutions by.
    pub fn of_conv(kernel: (u64, u64), stride: (u64, u64)) -> ArithKind {
        match (kernel, stride) {
            ((1, 1), _) => ArithKind::Pointwise,
            ((3, 3), (1, 1)) => ArithKind::Conv3x3,
            _ => ArithKind::Conv,
        }
    }
}

/// Cost facts of one layer (per sample unless said otherwise); see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LayerCost {
    /// Forward FLOPs per sample of 3 × 3 stride-1 convolutions (multiply-add = 2 FLOPs).
    pub conv3x3_flops: f64,
    /// Forward FLOPs per sample of other spatial convolutions (larger kernels, non-square
    /// kernels, strides).
    pub conv_flops: f64,
    /// Forward FLOPs per sample of 1 × 1 convolutions.
    pub pointwise_flops: f64,
    /// Forward FLOPs per sample of fully-connected layers.
    pub matmul_flops: f64,
    /// Activation bytes per sample the forward pass's operations read and write (fp32).
    pub activation_bytes: f64,
    /// Parameter bytes of the layer (fp32), per step, not per sample.
    pub param_bytes: f64,
    /// Kernels one training step launches for the layer (forward and backward), per step.
    pub kernels: f64,
}

impl LayerCost {
    /// Forward FLOPs per sample, all kinds.
    pub fn forward_flops(&self) -> f64 {
        self.conv3x3_flops + self.conv_flops + self.pointwise_flops + self.matmul_flops
    }

    /// Records an arithmetic operation of `macs` multiply-adds per sample reading `input` and
    /// writing `output` elements per sample.
    pub fn arith(&mut self, kind: ArithKind, macs: u64, input: u64, output: u64) {
        let flops = 2.0 * macs as f64;
        match kind {
            ArithKind::Conv3x3 => self.conv3x3_flops += flops,
            ArithKind::Conv => self.conv_flops += flops,
            ArithKind::Pointwise => self.pointwise_flops += flops,
            ArithKind::Matmul => self.matmul_flops += flops,
        }
        self.activation_bytes += F32 * (input + output) as f64;
        self.kernels += ARITH_KERNELS;
    }

    /// Records an activation function (ReLU) over `elems` elements per sample.
    pub fn activation(&mut self, elems: u64) {
        self.elementwise(elems, elems);
    }

    /// Records an element-wise (memory-bound) operation reading `input` and writing `output`
    /// elements per sample: batch-norm, pooling, concatenation, a residual add.
    pub fn elementwise(&mut self, input: u64, output: u64) {
        self.activation_bytes += F32 * (input + output) as f64;
        self.kernels += ELEMENTWISE_KERNELS;
    }

    /// Records `elems` parameter elements (fp32).
    pub fn params(&mut self, elems: u64) {
        self.param_bytes += F32 * elems as f64;
    }

    /// The sum of two layers' facts (a stage of several layers).
    pub fn plus(&self, o: &LayerCost) -> LayerCost {
        LayerCost {
            conv3x3_flops: self.conv3x3_flops + o.conv3x3_flops,
            conv_flops: self.conv_flops + o.conv_flops,
            pointwise_flops: self.pointwise_flops + o.pointwise_flops,
            matmul_flops: self.matmul_flops + o.matmul_flops,
            activation_bytes: self.activation_bytes + o.activation_bytes,
            param_bytes: self.param_bytes + o.param_bytes,
            kernels: self.kernels + o.kernels,
        }
    }
}
