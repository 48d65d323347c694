//! The candle math of one node: its output from its inputs and parameters. The same function
//! runs the whole-graph autograd step, the layer-by-layer forward, and the local re-execution
//! of a layer-by-layer backward, so all three compute the same values.

use super::spec::{NetOp, BN_EPS};
use crate::model::conv::conv2d;
use crate::model::linear::linear;
use candle_core::{Result, Tensor};

/// The output of `op` on `inputs` (batched, NCHW or `[batch, features]`) with its parameters
/// `params` in layout order (see [`NetOp`]).
pub(crate) fn forward(op: &NetOp, inputs: &[&Tensor], params: &[&Tensor]) -> Result<Tensor> {
    let first = || {
        inputs
            .first()
            .copied()
            .ok_or_else(|| candle_core::Error::Msg(format!("{op:?} has no input")))
    };
    let param = |i: usize| {
        params
            .get(i)
            .copied()
            .ok_or_else(|| candle_core::Error::Msg(format!("{op:?} lacks parameter {i}")))
    };
    match *op {
        NetOp::Input => Ok(first()?.clone()),
        NetOp::Conv {
            out_ch,
            kernel,
            stride,
            bias,
            ..
        } => {
            let x = first()?;
            let padding = kernel / 2;
            let y = conv2d(x, param(0)?, padding, stride)?;
            if bias {
                y.broadcast_add(&param(1)?.reshape((1, out_ch, 1, 1))?)
            } else {
                Ok(y)
            }
        }
        NetOp::BatchNorm { channels } => {
            let x = first()?;
            let mean = x.mean_keepdim((0, 2, 3))?;
            let centred = x.broadcast_sub(&mean)?;
            let var = centred.sqr()?.mean_keepdim((0, 2, 3))?;
            let normed = centred.broadcast_div(&(var + BN_EPS)?.sqrt()?)?;
            let gamma = param(0)?.reshape((1, channels, 1, 1))?;
            let beta = param(1)?.reshape((1, channels, 1, 1))?;
            normed.broadcast_mul(&gamma)?.broadcast_add(&beta)
        }
        NetOp::Relu => first()?.relu(),
        NetOp::MaxPool2 => first()?.max_pool2d(2),
        NetOp::AvgPool3 => avg_pool3(first()?),
        NetOp::GlobalAvgPool => first()?.mean((2, 3)),
        NetOp::Add => {
            let mut sum = first()?.clone();
            for x in &inputs[1..] {
                sum = (sum + *x)?;
            }
            Ok(sum)
        }
        NetOp::Concat => Tensor::cat(inputs, 1),
        NetOp::Fc { .. } => {
            let x = first()?;
            let x = if x.rank() > 2 {
                x.flatten_from(1)?
            } else {
                x.clone()
            };
            linear(&x, param(0)?, param(1)?)
        }
    }
}

/// A 3 × 3 average pool with stride 1 and zero padding 1 (the padding counts in the mean), as
/// the sum of the nine shifted windows of the padded input: candle's pooling op has no padding
/// and differentiates only non-overlapping windows.
fn avg_pool3(x: &Tensor) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    let padded = x.pad_with_zeros(2, 1, 1)?.pad_with_zeros(3, 1, 1)?;
    let mut sum: Option<Tensor> = None;
    for di in 0..3 {
        for dj in 0..3 {
            let window = padded.narrow(2, di, h)?.narrow(3, dj, w)?;
            sum = Some(match sum {
                None => window,
                Some(s) => (s + window)?,
            });
        }
    }
    match sum {
        Some(s) => s / 9.0,
        None => candle_core::bail!("empty pooling window"),
    }
}
