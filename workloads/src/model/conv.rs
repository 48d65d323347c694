//! The models' convolution: cuDNN's three passes on CUDA devices, candle's kernels elsewhere.
//!
//! candle runs only a convolution's forward pass on cuDNN; its backward pass is candle's own
//! `conv_transpose2d` kernel and a second forward convolution, which on a GPU made a small CNN's
//! step several times slower than PyTorch's. On a CUDA device the models' convolutions therefore
//! run forward, backward-data and backward-filter on cuDNN, as PyTorch does (the `cudnn`
//! module names the algorithms).
//!
//! On the CPU the forward pass and the kernel's gradient are candle's. The input's gradient is
//! where candle's backward pass is slow or wrong, so for two kinds of convolution it is our own:
//! - a stride-1 convolution with a square kernel (every 3 × 3 layer of the built-in CNNs): its
//!   input gradient is a forward convolution of the output gradient with the kernel flipped and
//!   its channel axes swapped, which candle computes as one matrix product over unfolded windows,
//!   where its `conv_transpose2d` kernel walks the windows one dot product at a time (1.2–2.8×
//!   slower for the VGG-like layers); and it is not computed at all for an input that needs none
//!   (a network's first layer reads the data), which candle's backward pass always computes;
//! - a strided convolution whose windows leave a different number of rows uncovered at the
//!   bottom than columns at the right (a stride-2 layer on a non-square image): candle pads its
//!   input gradient by the rows' remainder on both axes and stops at a shape mismatch; here each
//!   axis is cut to its own size.
//!
//! Every other convolution is candle's op as it is.

#[cfg(feature = "cuda")]
mod cudnn;

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Storage, Tensor};

/// `x ⋆ w`: input `[n, c, h, w]`, kernel `[k, c, r, s]`, zero `padding` and `stride` on both axes,
/// dilation 1, one group; differentiable in both operands. On a CUDA device every pass runs on
/// cuDNN with fixed algorithms and no TF32, elsewhere the forward pass is candle's `conv2d`.
pub fn conv2d(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        return cudnn::conv2d(x, w, padding, stride);
    }
    let (_, _, h, width) = x.dims4()?;
    let (_, _, kh, kw) = w.dims4()?;
    let uncovered = |len: usize, k: usize| (len + 2 * padding).checked_sub(k).map(|n| n % stride);
    let input_gradient = if stride == 1 && kh == kw && padding < kh {
        InputGradient::FlippedKernel
    } else if stride > 1 && uncovered(h, kh) != uncovered(width, kw) {
        InputGradient::CutPerAxis
    } else {
        return x.conv2d(w, padding, stride, 1, 1);
    };
    let out = x.detach().conv2d(&w.detach(), padding, stride, 1, 1)?;
    x.apply_op2(
        w,
        CpuConv {
            out,
            padding,
            stride,
            input_gradient,
        },
    )
}

/// How [`CpuConv`] computes its input's gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InputGradient {
    /// Stride 1, a square kernel of side `k` and padding below `k`: the output gradient
    /// convolved with the flipped, channel-swapped kernel at padding `k − 1 − padding`.
    FlippedKernel,
    /// candle's transposed convolution, each axis cut to the input's own size.
    CutPerAxis,
}

/// A convolution whose output candle computed (held in `out`), with a backward pass of our own
/// for the input (see the module's notes) and candle's for the kernel.
struct CpuConv {
    out: Tensor,
    padding: usize,
    stride: usize,
    input_gradient: InputGradient,
}

impl CpuConv {
    /// The gradient of the input `x` of shape `[n, c, h, width]`.
    fn input_gradient(&self, x: &Tensor, w: &Tensor, grad: &Tensor) -> Result<Tensor> {
        let (_, _, h, width) = x.dims4()?;
        let (_, _, kh, kw) = w.dims4()?;
        let (p, s) = (self.padding, self.stride);
        match self.input_gradient {
            InputGradient::FlippedKernel => {
                let reversed =
                    |n: usize| Tensor::new((0..n as u32).rev().collect::<Vec<_>>(), w.device());
                let flipped = w
                    .index_select(&reversed(kh)?, 2)?
                    .index_select(&reversed(kw)?, 3)?
                    .transpose(0, 1)?
                    .contiguous()?;
                grad.conv2d(&flipped, kh - 1 - p, 1, 1, 1)
            }
            InputGradient::CutPerAxis => {
                let (_, _, gh, gw) = grad.dims4()?;
                // Input rows (columns) past the last window's reach: candle's `output_padding`,
                // per axis.
                let uncovered = |len: usize, g: usize, k: usize| len + 2 * p - ((g - 1) * s + k);
                let pad = uncovered(h, gh, kh).max(uncovered(width, gw, kw));
                grad.conv_transpose2d(w, p, pad, s, 1)?
                    .narrow(2, 0, h)?
                    .narrow(3, 0, width)
            }
        }
    }
}

impl CustomOp2 for CpuConv {
    fn name(&self) -> &'static str {
        "conv2d-cpu"
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
        let (_, _, kh, kw) = w.dims4()?;
        // An input no variable leads to (the data) needs no gradient.
        let grad_x = if x.track_op() {
            Some(self.input_gradient(x, w, grad)?)
        } else {
            None
        };
        let grad_w = x
            .transpose(0, 1)?
            .conv2d(&grad.transpose(0, 1)?, self.padding, 1, self.stride, 1)?
            .transpose(0, 1)?
            .narrow(2, 0, kh)?
            .narrow(3, 0, kw)?;
        Ok((grad_x, Some(grad_w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The largest difference between `a` and `b` relative to `b`'s largest magnitude.
    fn relative_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len(), "sizes differ");
        let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
        a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs())) / scale
    }

    /// The output, the input's gradient and the kernel's gradient of `conv` on `x` and `w`, under
    /// the loss Σ y².
    fn passes(
        x: &Var,
        w: &Var,
        conv: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> [Vec<f32>; 3] {
        let y = conv(x.as_tensor(), w.as_tensor()).unwrap();
        let g = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        [
            flat(&y),
            flat(g.get(x.as_tensor()).unwrap()),
            flat(g.get(w.as_tensor()).unwrap()),
        ]
    }

    /// Asserts that each of the three passes ([`passes`]) of `ours` is within 1e-6 of
    /// `reference`'s, relative to the reference's largest magnitude; `case` names the case.
    fn assert_passes_agree(ours: &[Vec<f32>; 3], reference: &[Vec<f32>; 3], case: &str) {
        for (what, (a, b)) in ["output", "input gradient", "kernel gradient"]
            .iter()
            .zip(ours.iter().zip(reference))
        {
            let diff = relative_diff(a, b);
            assert!(diff <= 1e-6, "{what}, {case}: {diff}");
        }
    }

    #[test]
    fn every_cpu_convolution_differentiates_as_candles_op_does() {
        let dev = Device::Cpu;
        // Stride 1 with square kernels and every padding below the side (our input gradient),
        // strided and non-square ones (candle's op as it is).
        let cases = [
            (3, 3, 1, 1),
            (3, 3, 0, 1),
            (3, 3, 2, 1),
            (5, 5, 2, 1),
            (1, 1, 0, 1),
            (3, 3, 0, 2),
            (3, 3, 1, 2),
            (3, 2, 1, 1),
        ];
        for (kh, kw, padding, stride) in cases {
            let x =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 4, 8, 10), &dev).unwrap()).unwrap();
            let w =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (3, 4, kh, kw), &dev).unwrap()).unwrap();
            let ours = passes(&x, &w, |x, w| conv2d(x, w, padding, stride));
            let candle = passes(&x, &w, |x, w| x.conv2d(w, padding, stride, 1, 1));
            assert_passes_agree(
                &ours,
                &candle,
                &format!("kernel {kh}x{kw}, padding {padding}, stride {stride}"),
            );
        }
    }

    #[test]
    fn the_data_a_network_reads_gets_no_gradient_and_its_kernel_the_same_one() {
        let dev = Device::Cpu;
        let data = Tensor::randn(0f32, 1.0, (2, 3, 6, 6), &dev).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, (4, 3, 3, 3), &dev).unwrap()).unwrap();
        let kernel_gradient = |y: Tensor| {
            let g = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
            let input = g.get(&data).map(|t| t.dims().to_vec());
            let kernel = g.get(w.as_tensor()).unwrap();
            (
                input,
                kernel.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            )
        };
        let (ours_input, ours) = kernel_gradient(conv2d(&data, w.as_tensor(), 1, 1).unwrap());
        let (candle_input, candle) =
            kernel_gradient(data.conv2d(w.as_tensor(), 1, 1, 1, 1).unwrap());
        assert_eq!(ours_input, None);
        // candle's op computes it all the same.
        assert_eq!(candle_input, Some(vec![2, 3, 6, 6]));
        assert!(relative_diff(&ours, &candle) <= 1e-6);
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
            assert_passes_agree(
                &ours,
                &reference,
                &format!("padding {padding}, kernel {k}, {h}x{width}"),
            );
        }
    }
}
