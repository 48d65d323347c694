//! The models' convolution: cuDNN's three passes on CUDA devices, candle's `conv2d` elsewhere.
//!
//! candle runs only a convolution's forward pass on cuDNN; its backward pass is candle's own
//! `conv_transpose2d` kernel and a second forward convolution, which on a GPU made a small CNN's
//! step several times slower than PyTorch's. On a CUDA device the models' convolutions therefore
//! run forward, backward-data and backward-filter on cuDNN, as PyTorch does (the `cudnn`
//! module names the algorithms). On the CPU they are candle's op, so CPU results stay what they were.

#[cfg(feature = "cuda")]
mod cudnn;

use candle_core::{Result, Tensor};

/// `x ⋆ w`: input `[n, c, h, w]`, kernel `[k, c, r, s]`, zero `padding` and `stride` on both axes,
/// dilation 1, one group; differentiable in both operands. On a CUDA device every pass runs on
/// cuDNN with fixed algorithms and no TF32, elsewhere it is candle's `conv2d`.
pub fn conv2d(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        return cudnn::conv2d(x, w, padding, stride);
    }
    x.conv2d(w, padding, stride, 1, 1)
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
}
