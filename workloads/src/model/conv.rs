//! A stride-1 convolution whose backward pass is made of forward convolutions.
//!
//! candle differentiates `conv2d` through `conv_transpose2d` for the input gradient, which on a
//! GPU is a direct kernel many times slower than the cuDNN forward convolution. For stride 1 and
//! dilation 1 the input gradient is itself a convolution (the gradient with the kernel flipped in
//! space and its channel axes swapped, padded by `k − 1 − padding`), so on CUDA devices the staged
//! models run their convolutions through this op and every pass runs on cuDNN's forward kernels.
//! On the CPU the models keep candle's own op, so CPU results stay what they were.
//!
//! On CUDA every pass names its cuDNN algorithm (implicit precomputed GEMM, which takes every
//! shape) instead of asking cuDNN's heuristics on each call: the choice is the same in every run,
//! so GPU results repeat, and no per-call query is paid.

use candle_core::conv::CudnnFwdAlgo;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Storage, Tensor};

/// The cuDNN forward algorithm of every pass (ignored on the CPU).
const ALGO: Option<CudnnFwdAlgo> = Some(CudnnFwdAlgo::ImplicitPrecompGemm);

/// `x ⋆ w`, stride 1, with [`ALGO`].
fn conv(x: &Tensor, w: &Tensor, padding: usize) -> Result<Tensor> {
    x.conv2d_with_algo(w, padding, 1, 1, 1, ALGO)
}

/// `x ⋆ w` (NCHW, OIHW, stride 1, dilation 1, one group) with the padding given; on a CUDA
/// device with the backward of [`ForwardOnlyConv`], elsewhere candle's `conv2d`.
pub(crate) fn conv2d_stride1(x: &Tensor, w: &Tensor, padding: usize) -> Result<Tensor> {
    if !x.device().is_cuda() {
        return x.conv2d(w, padding, 1, 1, 1);
    }
    conv2d_forward_backward(x, w, padding)
}

/// The op itself, on any device (the CPU path is what tests compare with candle's).
pub(crate) fn conv2d_forward_backward(x: &Tensor, w: &Tensor, padding: usize) -> Result<Tensor> {
    let out = conv(&x.detach(), &w.detach(), padding)?;
    x.apply_op2(w, ForwardOnlyConv { out, padding })
}

/// A convolution whose output was computed by candle's forward op (held in `out`) and whose
/// backward runs as forward convolutions.
struct ForwardOnlyConv {
    out: Tensor,
    padding: usize,
}

impl ForwardOnlyConv {
    fn shape(&self) -> Shape {
        self.out.shape().clone()
    }
}

impl CustomOp2 for ForwardOnlyConv {
    fn name(&self) -> &'static str {
        "conv2d-stride1"
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
                Ok((s.try_clone(layout)?, self.shape()))
            }
            _ => candle_core::bail!("conv2d-stride1: output is not on the CPU"),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (storage, layout) = self.out.storage_and_layout();
        match &*storage {
            Storage::Cuda(s) => {
                use candle_core::backend::BackendStorage;
                Ok((s.try_clone(layout)?, self.shape()))
            }
            _ => candle_core::bail!("conv2d-stride1: output is not on a CUDA device"),
        }
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (_, _, kh, kw) = w.dims4()?;
        if kh != kw || kh < self.padding + 1 {
            candle_core::bail!(
                "conv2d-stride1: kernel {kh}x{kw} with padding {}",
                self.padding
            );
        }
        let grad = grad.contiguous()?;
        // Input gradient: the output gradient convolved with the kernel flipped in space, its
        // input and output channels swapped.
        let flip = |len: usize| -> Result<Tensor> {
            let idx: Vec<u32> = (0..len as u32).rev().collect();
            Tensor::from_vec(idx, len, w.device())
        };
        let flipped = w
            .index_select(&flip(kh)?, 2)?
            .index_select(&flip(kw)?, 3)?
            .transpose(0, 1)?
            .contiguous()?;
        let grad_x = conv(&grad, &flipped, kh - 1 - self.padding)?;
        // Kernel gradient: the input (channels as batch) convolved with the output gradient.
        let grad_w = conv(
            &x.transpose(0, 1)?.contiguous()?,
            &grad.transpose(0, 1)?.contiguous()?,
            self.padding,
        )?
        .transpose(0, 1)?
        .contiguous()?;
        Ok((Some(grad_x), Some(grad_w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Gradients of `sum(conv(x, w)²)` through `conv`.
    fn grads(
        conv: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
        x: &Var,
        w: &Var,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let y = conv(x.as_tensor(), w.as_tensor()).unwrap();
        let g = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        (
            flat(&y),
            flat(g.get(x.as_tensor()).unwrap()),
            flat(g.get(w.as_tensor()).unwrap()),
        )
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn forward_and_gradients_match_candles_convolution() {
        let dev = Device::Cpu;
        for (padding, k) in [(1, 3), (0, 3), (2, 5), (0, 1)] {
            let x =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 3, 7, 6), &dev).unwrap()).unwrap();
            let w =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (4, 3, k, k), &dev).unwrap()).unwrap();
            let reference = grads(|x, w| x.conv2d(w, padding, 1, 1, 1), &x, &w);
            let ours = grads(|x, w| conv2d_forward_backward(x, w, padding), &x, &w);
            assert_eq!(
                reference.0, ours.0,
                "forward, padding {padding}, kernel {k}"
            );
            let scale = reference.1.iter().fold(1f32, |m, v| m.max(v.abs()));
            assert!(
                max_diff(&reference.1, &ours.1) <= 1e-5 * scale,
                "input gradient, k {k}"
            );
            let scale = reference.2.iter().fold(1f32, |m, v| m.max(v.abs()));
            assert!(
                max_diff(&reference.2, &ours.2) <= 1e-5 * scale,
                "kernel gradient, k {k}"
            );
        }
    }

    #[test]
    fn the_cpu_keeps_candles_op() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, 2, 5, 5), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, (3, 2, 3, 3), &dev).unwrap()).unwrap();
        let a = grads(|x, w| x.conv2d(w, 1, 1, 1, 1), &x, &w);
        let b = grads(|x, w| conv2d_stride1(x, w, 1), &x, &w);
        assert_eq!(a, b);
    }
}
