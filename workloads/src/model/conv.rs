//! The models' convolution: cuDNN's three passes on CUDA devices, candle's `conv2d` elsewhere.
//!
//! candle runs only a convolution's forward pass on cuDNN; its backward pass is candle's own
//! `conv_transpose2d` kernel and a second forward convolution, which on a GPU made a small CNN's
//! step several times slower than PyTorch's. On a CUDA device the models' convolutions therefore
//! run forward, backward-data and backward-filter on cuDNN, as PyTorch does (the `cudnn`
//! module names the algorithms). On the CPU they are candle's op, so CPU results stay what they
//! were, except where candle's backward pass fails: a strided convolution whose windows leave a
//! different number of rows uncovered at the bottom than columns at the right (a stride-2 layer
//! on a non-square image). candle pads its input gradient by the rows' remainder on both axes
//! and stops at a shape mismatch; such a convolution runs with a backward pass of its own, the
//! same operations with each axis cut to its own size.

#[cfg(feature = "cuda")]
mod cudnn;

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Storage, Tensor};

/// `x ⋆ w`: input `[n, c, h, w]`, kernel `[k, c, r, s]`, zero `padding` and `stride` on both axes,
/// dilation 1, one group; differentiable in both operands. On a CUDA device every pass runs on
/// cuDNN with fixed algorithms and no TF32, elsewhere it is candle's `conv2d`.
pub fn conv2d(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        return cudnn::conv2d(x, w, padding, stride);
    }
    let (_, _, h, width) = x.dims4()?;
    let (_, _, kh, kw) = w.dims4()?;
    let uncovered = |len: usize, k: usize| (len + 2 * padding).checked_sub(k).map(|n| n % stride);
    if stride > 1 && uncovered(h, kh) != uncovered(width, kw) {
        let out = x.detach().conv2d(&w.detach(), padding, stride, 1, 1)?;
        return x.apply_op2(
            w,
            UnevenStridedConv {
                out,
                padding,
                stride,
            },
        );
    }
    x.conv2d(w, padding, stride, 1, 1)
}

/// A strided convolution whose output candle computed (held in `out`), with the backward pass
/// candle's own would run, each axis of the input gradient cut to its own size.
struct UnevenStridedConv {
    out: Tensor,
    padding: usize,
    stride: usize,
}

impl CustomOp2 for UnevenStridedConv {
    fn name(&self) -> &'static str {
        "conv2d-uneven-stride"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (storage, layout) = self.out.storage_and_layout();
        match &*storage {
            Storage::Cpu(s) => {
                use candle_core::backend::BackendStorage;
                Ok((s.try_clone(layout)?, self.out.shape().clone()))
            }
            _ => candle_core::bail!("{}: the output is not on the CPU", self.name()),
        }
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (_, _, h, width) = x.dims4()?;
        let (_, _, kh, kw) = w.dims4()?;
        let (_, _, gh, gw) = grad.dims4()?;
        let (p, s) = (self.padding, self.stride);
        // Input rows (columns) past the last window's reach: candle's `output_padding`, per axis.
        let uncovered = |len: usize, g: usize, k: usize| len + 2 * p - ((g - 1) * s + k);
        let pad = uncovered(h, gh, kh).max(uncovered(width, gw, kw));
        let grad_x = grad
            .conv_transpose2d(w, p, pad, s, 1)?
            .narrow(2, 0, h)?
            .narrow(3, 0, width)?;
        let grad_w = x
            .transpose(0, 1)?
            .conv2d(&grad.transpose(0, 1)?, p, 1, s, 1)?
            .transpose(0, 1)?
            .narrow(2, 0, kh)?
            .narrow(3, 0, kw)?;
        Ok((Some(grad_x), Some(grad_w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn the_cpu_runs_candles_op() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 2, 7, 9), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, (3, 2, 3, 3), &dev).unwrap()).unwrap();
        for (padding, stride) in [(1, 1), (0, 2)] {
            let grads = |y: Tensor| {
                let g = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
                let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                (
                    flat(&y),
                    flat(g.get(x.as_tensor()).unwrap()),
                    flat(g.get(w.as_tensor()).unwrap()),
                )
            };
            let ours = grads(conv2d(x.as_tensor(), w.as_tensor(), padding, stride).unwrap());
            let candle = grads(x.conv2d(w.as_tensor(), padding, stride, 1, 1).unwrap());
            assert_eq!(ours, candle, "padding {padding}, stride {stride}");
        }
    }

    /// A stride-2 convolution on an input whose rows and columns leave different remainders
    /// (which candle's backward refuses) against candle's on the input grown by a zero row or
    /// column on the axis with the smaller remainder, which makes them agree and adds no output:
    /// the same output, and the input gradient is the grown one's cut back.
    #[test]
    fn uneven_strided_convolutions_differentiate_like_the_evened_input() {
        let dev = Device::Cpu;
        for (padding, k, h, width) in [(1, 3, 8, 7), (0, 1, 8, 7), (1, 3, 7, 10), (2, 5, 9, 12)] {
            let x0 = Tensor::randn(0f32, 1.0, (2, 3, h, width), &dev).unwrap();
            let w0 = Tensor::randn(0f32, 1.0, (4, 3, k, k), &dev).unwrap();
            let rem = |len: usize| (len + 2 * padding - k) % 2;
            assert_ne!(rem(h), rem(width), "the case must be uneven");
            let axis = if rem(h) < rem(width) { 2 } else { 3 };
            let passes = |x0: &Tensor, ours: bool| {
                let x = Var::from_tensor(x0).unwrap();
                let w = Var::from_tensor(&w0).unwrap();
                let y = if ours {
                    conv2d(x.as_tensor(), w.as_tensor(), padding, 2).unwrap()
                } else {
                    x.conv2d(w.as_tensor(), padding, 2, 1, 1).unwrap()
                };
                let g = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
                let dx = g.get(x.as_tensor()).unwrap();
                let dx = dx.narrow(2, 0, h).unwrap().narrow(3, 0, width).unwrap();
                let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                [flat(&y), flat(&dx), flat(g.get(w.as_tensor()).unwrap())]
            };
            let ours = passes(&x0, true);
            let reference = passes(&x0.pad_with_zeros(axis, 0, 1).unwrap(), false);
            for (what, (a, b)) in ["output", "input gradient", "kernel gradient"]
                .iter()
                .zip(ours.iter().zip(&reference))
            {
                assert_eq!(a.len(), b.len(), "{what}: size");
                let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
                let diff = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
                assert!(
                    diff <= 1e-6 * scale,
                    "{what}, padding {padding}, kernel {k}, {h}x{width}: {diff}"
                );
            }
        }
    }
}
