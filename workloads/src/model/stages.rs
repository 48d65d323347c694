//! Stage definitions and their candle implementation.

use super::ParamInfo;
use crate::error::{Result, WorkloadError};
use candle_core::{DType, Device, Tensor, Var};

/// One stage of a real model.
#[derive(Clone, Debug, PartialEq)]
pub enum StageSpec {
    /// Fully connected layer (flattens its input), optionally followed by ReLU.
    Dense {
        /// Input features.
        inputs: usize,
        /// Output features.
        outputs: usize,
        /// Apply ReLU to the output.
        relu: bool,
    },
    /// 3×3 convolution (padding 1) + ReLU, optionally followed by a 2×2 max-pool.
    Conv {
        /// Input shape `[c, h, w]`.
        input: [usize; 3],
        /// Output channels.
        channels: usize,
        /// Apply a 2×2 max-pool.
        pool: bool,
    },
}

impl StageSpec {
    /// An MLP: dense ReLU layers of the given widths, then a linear classifier.
    pub fn mlp(inputs: usize, hidden: &[usize], classes: usize) -> Vec<StageSpec> {
        let mut stages = Vec::new();
        let mut width = inputs;
        for &h in hidden {
            stages.push(StageSpec::Dense {
                inputs: width,
                outputs: h,
                relu: true,
            });
            width = h;
        }
        stages.push(StageSpec::Dense {
            inputs: width,
            outputs: classes,
            relu: false,
        });
        stages
    }

    /// A conv net: per entry of `channels`, `convs` conv stages (the last one pooling), then an
    /// optional hidden dense layer and a linear classifier.
    pub fn conv_net(
        image: &[usize],
        channels: &[usize],
        convs: usize,
        dense: Option<usize>,
        classes: usize,
        key: &str,
    ) -> Result<Vec<StageSpec>> {
        if channels.is_empty() || channels.contains(&0) {
            return Err(WorkloadError::config(
                key,
                format!("{channels:?}"),
                "needs at least one block, each >= 1 channel",
            ));
        }
        let mut shape = [image[0], image[1], image[2]];
        let mut stages = Vec::new();
        for &c in channels {
            for k in 0..convs {
                let pool = k + 1 == convs;
                if pool && (shape[1] < 2 || shape[2] < 2) {
                    return Err(WorkloadError::config(
                        key,
                        format!("{channels:?}"),
                        format!(
                            "too many pooling blocks for a {}x{} image",
                            image[1], image[2]
                        ),
                    ));
                }
                stages.push(StageSpec::Conv {
                    input: shape,
                    channels: c,
                    pool,
                });
                shape = [
                    c,
                    if pool { shape[1] / 2 } else { shape[1] },
                    if pool { shape[2] / 2 } else { shape[2] },
                ];
            }
        }
        let mut width = shape.iter().product();
        if let Some(d) = dense {
            stages.push(StageSpec::Dense {
                inputs: width,
                outputs: d,
                relu: true,
            });
            width = d;
        }
        stages.push(StageSpec::Dense {
            inputs: width,
            outputs: classes,
            relu: false,
        });
        Ok(stages)
    }

    /// Parameters of stage `index` (weight, then bias).
    pub fn params(&self, index: usize) -> Vec<ParamInfo> {
        let (wshape, fan_in, bias) = match *self {
            StageSpec::Dense {
                inputs, outputs, ..
            } => (vec![outputs, inputs], inputs, outputs),
            StageSpec::Conv {
                input, channels, ..
            } => (vec![channels, input[0], 3, 3], input[0] * 9, channels),
        };
        vec![
            ParamInfo {
                name: format!("s{index:02}.bias"),
                shape: vec![bias],
                fan_in: 0,
            },
            ParamInfo {
                name: format!("s{index:02}.weight"),
                shape: wshape,
                fan_in,
            },
        ]
    }

    /// Forward FLOPs per sample (a multiply-add counts 2).
    pub fn forward_flops(&self) -> f64 {
        match *self {
            StageSpec::Dense {
                inputs, outputs, ..
            } => 2.0 * (inputs * outputs) as f64,
            StageSpec::Conv {
                input, channels, ..
            } => 2.0 * (input[0] * 9 * channels * input[1] * input[2]) as f64,
        }
    }

    /// Output elements per sample.
    pub fn out_elems(&self) -> usize {
        match *self {
            StageSpec::Dense { outputs, .. } => outputs,
            StageSpec::Conv {
                input,
                channels,
                pool,
            } => {
                let d = if pool { 2 } else { 1 };
                channels * (input[1] / d) * (input[2] / d)
            }
        }
    }
}

/// A staged candle network: each stage's parameters are `Var`s so gradients can be taken per stage.
pub struct StagedModel {
    stages: Vec<(StageSpec, Var, Var)>,
    input_shape: Vec<usize>,
    device: Device,
}

impl StagedModel {
    /// Builds the network with zero parameters (values are loaded from the servers).
    pub fn new(
        stages: &[StageSpec],
        input_shape: &[usize],
        device: &Device,
    ) -> Result<StagedModel> {
        let mut built = Vec::new();
        for (i, s) in stages.iter().enumerate() {
            let p = s.params(i);
            let b = Var::zeros(p[0].shape.as_slice(), DType::F32, device)
                .map_err(|e| tensor_err("init bias", e))?;
            let w = Var::zeros(p[1].shape.as_slice(), DType::F32, device)
                .map_err(|e| tensor_err("init weight", e))?;
            built.push((s.clone(), w, b));
        }
        Ok(StagedModel {
            stages: built,
            input_shape: input_shape.to_vec(),
            device: device.clone(),
        })
    }

    /// Number of stages.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether the model has no stages.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The device tensors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Parameter variables in layout order (per stage: bias, weight).
    pub fn vars(&self) -> Vec<&Var> {
        self.stages.iter().flat_map(|(_, w, b)| [b, w]).collect()
    }

    /// Parameter variables of one stage (bias, weight).
    pub fn stage_vars(&self, i: usize) -> [&Var; 2] {
        let (_, w, b) = &self.stages[i];
        [b, w]
    }

    /// Turns a flat batch of samples into the first stage's input tensor.
    pub fn input(&self, features: Vec<f32>, batch: usize) -> candle_core::Result<Tensor> {
        let mut shape = vec![batch];
        shape.extend(&self.input_shape);
        Tensor::from_vec(features, shape, &self.device)
    }

    /// Forward of stage `i`.
    pub fn forward_stage(&self, i: usize, x: &Tensor) -> candle_core::Result<Tensor> {
        let (spec, w, b) = &self.stages[i];
        match spec {
            StageSpec::Dense { relu, .. } => {
                let x = if x.rank() > 2 {
                    x.flatten_from(1)?
                } else {
                    x.clone()
                };
                let y = x.matmul(&w.t()?)?.broadcast_add(b.as_tensor())?;
                if *relu {
                    y.relu()
                } else {
                    Ok(y)
                }
            }
            StageSpec::Conv { channels, pool, .. } => {
                let y = x.conv2d(w.as_tensor(), 1, 1, 1, 1)?;
                let y = y
                    .broadcast_add(&b.as_tensor().reshape((1, *channels, 1, 1))?)?
                    .relu()?;
                if *pool {
                    y.max_pool2d(2)
                } else {
                    Ok(y)
                }
            }
        }
    }

    /// Forward through every stage.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        (0..self.len()).try_fold(x.clone(), |h, i| self.forward_stage(i, &h))
    }

    /// Backward of one stage from the gradient of its output: returns the gradients of the stage's
    /// parameters (bias, weight) and of its input. Uses the surrogate `sum(y · grad_y)`, whose
    /// gradient equals the chain rule through the stage.
    pub fn backward_stage(
        &self,
        i: usize,
        input: &Tensor,
        grad_out: &Tensor,
    ) -> candle_core::Result<(Vec<Tensor>, Tensor)> {
        let x = Var::from_tensor(&input.detach())?;
        let y = self.forward_stage(i, x.as_tensor())?;
        let grads = (y * grad_out)?.sum_all()?.backward()?;
        let [b, w] = self.stage_vars(i);
        let missing = || candle_core::Error::Msg(format!("no gradient for stage {i}"));
        let gb = grads.get(b.as_tensor()).ok_or_else(missing)?.clone();
        let gw = grads.get(w.as_tensor()).ok_or_else(missing)?.clone();
        let gx = grads.get(x.as_tensor()).ok_or_else(missing)?.clone();
        Ok((vec![gb, gw], gx))
    }
}

fn tensor_err(context: &str, source: candle_core::Error) -> WorkloadError {
    WorkloadError::Tensor {
        context: context.to_string(),
        source,
    }
}
