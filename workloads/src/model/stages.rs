//! Stage definitions and their candle implementation.

use super::ParamInfo;
use crate::cost::{ArithKind, LayerCost};
use crate::error::{Result, WorkloadError};
use candle_core::{DType, Device, Tensor, Var};
use std::ops::Range;

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

    /// Per-layer cost facts of the stage: its convolution or matrix product, the bias add and
    /// ReLU, and the pool.
    pub fn cost(&self) -> LayerCost {
        let mut c = LayerCost::default();
        for p in self.params(0) {
            c.params(p.elems() as u64);
        }
        match *self {
            StageSpec::Dense {
                inputs,
                outputs,
                relu,
            } => {
                c.arith(
                    ArithKind::Matmul,
                    (inputs * outputs) as u64,
                    inputs as u64,
                    outputs as u64,
                );
                c.elementwise(outputs as u64, outputs as u64);
                if relu {
                    c.activation(outputs as u64);
                }
            }
            StageSpec::Conv {
                input,
                channels,
                pool,
            } => {
                let pixels = input[1] * input[2];
                let out = (channels * pixels) as u64;
                let macs = (input[0] * 9 * channels * pixels) as u64;
                c.arith(
                    ArithKind::of_conv((3, 3), (1, 1)),
                    macs,
                    (input[0] * pixels) as u64,
                    out,
                );
                c.elementwise(out, out);
                c.activation(out);
                if pool {
                    c.elementwise(out, self.out_elems() as u64);
                }
            }
        }
        c
    }

    /// The per-sample shape of the stage's input: `[c, h, w]` for a convolution, `[features]` for
    /// a dense layer (which flattens whatever it is given).
    pub fn input_shape(&self) -> Vec<usize> {
        match self {
            StageSpec::Dense { inputs, .. } => vec![*inputs],
            StageSpec::Conv { input, .. } => input.to_vec(),
        }
    }

    /// The per-sample shape of the stage's output: `[outputs]` for a dense layer, `[channels,
    /// h, w]` for a convolution (halved by its pooling). It differs from the next stage's input
    /// shape where a convolution feeds a dense layer, which flattens it.
    pub fn output_shape(&self) -> Vec<usize> {
        match *self {
            StageSpec::Dense { outputs, .. } => vec![outputs],
            StageSpec::Conv {
                input,
                channels,
                pool,
            } => {
                let d = if pool { 2 } else { 1 };
                vec![channels, input[1] / d, input[2] / d]
            }
        }
    }

    /// Output elements per sample.
    pub fn out_elems(&self) -> usize {
        self.output_shape().iter().product()
    }

    /// Elements per sample the stage keeps for its backward pass: every tensor its forward
    /// pass ([`StagedModel::forward_stage`]) creates, which candle's autograd graph holds until
    /// the backward pass (its ReLU is not computed in place): a dense layer's product, the bias
    /// sum and the ReLU's output; a convolution's output, the bias sum, the ReLU's and the
    /// pool's.
    pub fn kept_elems(&self) -> usize {
        match *self {
            StageSpec::Dense { outputs, relu, .. } => outputs * (2 + usize::from(relu)),
            StageSpec::Conv {
                input,
                channels,
                pool,
            } => {
                let conv = channels * input[1] * input[2];
                3 * conv + if pool { self.out_elems() } else { 0 }
            }
        }
    }
}

/// A staged candle network: each stage's parameters are `Var`s so gradients can be taken per stage.
///
/// A copy may hold the parameters of a run of its stages alone ([`StagedModel::part`]): a
/// pipeline stage's worker computes only its own layers, so only theirs take device memory. It
/// still knows every stage's shape, so parameter indices stay the whole model's.
pub struct StagedModel {
    stages: Vec<StageSpec>,
    /// Weight and bias of each stage of `held`, in stage order.
    vars: Vec<(Var, Var)>,
    /// The stages whose parameters this copy holds.
    held: Range<usize>,
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
        StagedModel::part(stages, input_shape, device, 0..stages.len())
    }

    /// Builds the network holding zero parameters for stages `held` alone: the copy a worker
    /// that computes only those stages needs. Passes through any other stage are errors naming
    /// it; `held` must lie inside the model's stages (an error otherwise).
    pub fn part(
        stages: &[StageSpec],
        input_shape: &[usize],
        device: &Device,
        held: Range<usize>,
    ) -> Result<StagedModel> {
        if held.start > held.end || held.end > stages.len() {
            return Err(WorkloadError::Tensor {
                context: "build a part of a staged model".into(),
                source: candle_core::Error::Msg(format!(
                    "stages {}..{} of a model of {} stages",
                    held.start,
                    held.end,
                    stages.len()
                )),
            });
        }
        let mut vars = Vec::with_capacity(held.len());
        for i in held.clone() {
            let p = stages[i].params(i);
            let b = Var::zeros(p[0].shape.as_slice(), DType::F32, device)
                .map_err(|e| tensor_err("init bias", e))?;
            let w = Var::zeros(p[1].shape.as_slice(), DType::F32, device)
                .map_err(|e| tensor_err("init weight", e))?;
            vars.push((w, b));
        }
        Ok(StagedModel {
            stages: stages.to_vec(),
            vars,
            held,
            input_shape: input_shape.to_vec(),
            device: device.clone(),
        })
    }

    /// Number of stages of the model (held or not).
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether the model has no stages.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stages whose parameters this copy holds (all of them unless built as a
    /// [`StagedModel::part`]).
    pub fn held(&self) -> Range<usize> {
        self.held.clone()
    }

    /// The parameters this copy holds: their indices in the model's parameter list
    /// ([`StagedModel::params`]), which [`StagedModel::vars`] lists in order.
    pub fn held_params(&self) -> Range<usize> {
        self.param_start(self.held.start)..self.param_start(self.held.end)
    }

    /// The device tensors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The held parameter variables in layout order (per stage: bias, weight): every parameter
    /// of a whole model, those of [`StagedModel::held_params`] for a part.
    pub fn vars(&self) -> Vec<&Var> {
        self.vars.iter().flat_map(|(w, b)| [b, w]).collect()
    }

    /// Parameter variables of stage `i` (bias, weight); `None` for a stage this copy does not
    /// hold.
    pub fn stage_vars(&self, i: usize) -> Option<[&Var; 2]> {
        let k = i.checked_sub(self.held.start)?;
        let (w, b) = self.vars.get(k).filter(|_| self.held.contains(&i))?;
        Some([b, w])
    }

    /// The parameters of the whole model in layout order (stage order; per stage bias, then
    /// weight): names, shapes and fan-ins, index for index like the [`ModelSpec::params`] of
    /// the spec it was built from (and like [`StagedModel::vars`] for a whole model).
    ///
    /// [`ModelSpec::params`]: super::ModelSpec::params
    pub fn params(&self) -> Vec<ParamInfo> {
        (0..self.len()).flat_map(|i| self.stage_params(i)).collect()
    }

    /// Index of stage `i`'s first parameter in the model's parameter list.
    fn param_start(&self, i: usize) -> usize {
        (0..i).map(|k| self.stage_params(k).len()).sum()
    }

    /// The parameters stage `i` owns: their indices in the model's parameter list
    /// ([`StagedModel::params`], and the gradients of a step).
    ///
    /// The ranges of stages `0..len()` follow one another with no gap or overlap and cover the
    /// list, so a pipeline strategy can give stage `i` exactly the values `values[range]` and
    /// put the gradients [`StagedModel::backward_stage`] returns back at the same indices.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn stage_param_range(&self, i: usize) -> Range<usize> {
        assert!(
            i < self.len(),
            "stage {i} out of range for a model of {} stages",
            self.len()
        );
        let start = self.param_start(i);
        start..start + self.stage_params(i).len()
    }

    /// The parameters of stage `i` (bias, then weight, as [`StagedModel::stage_vars`] and
    /// [`StagedModel::backward_stage`] order them): the entries
    /// [`StagedModel::stage_param_range`] selects from [`StagedModel::params`].
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn stage_params(&self, i: usize) -> Vec<ParamInfo> {
        self.stages[i].params(i)
    }

    /// Stage `i`'s spec and parameters, or an error naming a stage this copy does not hold.
    fn held_stage(&self, i: usize) -> candle_core::Result<(&StageSpec, [&Var; 2])> {
        match (self.stages.get(i), self.stage_vars(i)) {
            (Some(spec), Some(vars)) => Ok((spec, vars)),
            _ => Err(candle_core::Error::Msg(format!(
                "stage {i} is not held by this copy of the model (it holds stages {}..{} of {})",
                self.held.start,
                self.held.end,
                self.len()
            ))),
        }
    }

    /// Turns a flat batch of samples into the first stage's input tensor.
    pub fn input(&self, features: Vec<f32>, batch: usize) -> candle_core::Result<Tensor> {
        let mut shape = vec![batch];
        shape.extend(&self.input_shape);
        Tensor::from_vec(features, shape, &self.device)
    }

    /// Forward of stage `i` (an error for a stage this copy does not hold).
    pub fn forward_stage(&self, i: usize, x: &Tensor) -> candle_core::Result<Tensor> {
        let (spec, [b, w]) = self.held_stage(i)?;
        match spec {
            StageSpec::Dense { relu, .. } => {
                let x = if x.rank() > 2 {
                    x.flatten_from(1)?
                } else {
                    x.clone()
                };
                let y = super::linear::linear(&x, w, b.as_tensor())?;
                if *relu {
                    y.relu()
                } else {
                    Ok(y)
                }
            }
            StageSpec::Conv { channels, pool, .. } => {
                let y = super::conv::conv2d(x, w.as_tensor(), 1, 1)?;
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
    /// parameters (bias, weight) and of its input (an error for a stage this copy does not
    /// hold). Uses the surrogate `sum(y · grad_y)`, whose gradient equals the chain rule through
    /// the stage.
    pub fn backward_stage(
        &self,
        i: usize,
        input: &Tensor,
        grad_out: &Tensor,
    ) -> candle_core::Result<(Vec<Tensor>, Tensor)> {
        let x = Var::from_tensor(&input.detach())?;
        let y = self.forward_stage(i, x.as_tensor())?;
        let grads = (y * grad_out)?.sum_all()?.backward()?;
        let (_, [b, w]) = self.held_stage(i)?;
        let missing = || candle_core::Error::Msg(format!("no gradient for stage {i}"));
        let gb = grads.get(b.as_tensor()).ok_or_else(missing)?.clone();
        let gw = grads.get(w.as_tensor()).ok_or_else(missing)?.clone();
        let gx = grads.get(x.as_tensor()).ok_or_else(missing)?.clone();
        Ok((vec![gb, gw], gx))
    }

    /// The mean loss of a batch and its gradient with respect to the last stage's output, the
    /// seed of a stage-by-stage backward pass.
    ///
    /// `logits` is the last stage's output (`[batch, classes]`) and `labels` the batch's classes;
    /// the loss is the mean cross-entropy, the loss a whole training step
    /// ([`Replica::step`](super::Replica::step)) reports. Feeding the gradient to
    /// [`StagedModel::backward_stage`] of the last stage, and each stage's input gradient to the
    /// stage before it, gives the step's parameter gradients; the caller never builds a loss
    /// graph itself. `logits` is detached first, so calling this leaves no graph behind.
    pub fn loss_grad(&self, logits: &Tensor, labels: &[u32]) -> candle_core::Result<(f64, Tensor)> {
        let logits = Var::from_tensor(&logits.detach())?;
        let y = Tensor::from_slice(labels, labels.len(), &self.device)?;
        let loss = candle_nn::loss::cross_entropy(logits.as_tensor(), &y)?;
        let grad = loss
            .backward()?
            .get(logits.as_tensor())
            .ok_or_else(|| candle_core::Error::Msg("no gradient for the logits".into()))?
            .clone();
        Ok((loss.to_scalar::<f32>()? as f64, grad))
    }

    /// A tensor's values as one flat row-major vector: how a parameter gradient from
    /// [`StagedModel::backward_stage`] becomes the flat vector a step reports for it.
    pub fn flat_values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
        t.flatten_all()?.to_vec1::<f32>()
    }
}

fn tensor_err(context: &str, source: candle_core::Error) -> WorkloadError {
    WorkloadError::Tensor {
        context: context.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelConfig, ModelSpec, Replica, StepOutput};

    fn mlp() -> ModelSpec {
        let cfg = ModelConfig::Mlp {
            hidden: vec![16, 12],
        };
        ModelSpec::resolve(&cfg, &[20], 5).unwrap()
    }

    fn cnn() -> ModelSpec {
        let cfg = ModelConfig::Cnn {
            channels: vec![4, 6],
            image: Some([1, 8, 8]),
        };
        ModelSpec::resolve(&cfg, &[64], 3).unwrap()
    }

    /// Each stage's declared output shape is what its forward pass gives, and the next stage's
    /// input holds as many elements.
    #[test]
    fn declared_shapes_match_the_forward_pass() {
        for spec in [mlp(), cnn()] {
            let ModelSpec::Real { stages, .. } = &spec else {
                panic!("a real model");
            };
            let r = replica(&spec, 3);
            let net = r.model().unwrap();
            let mut shape = vec![2];
            shape.extend(stages[0].input_shape());
            let mut x = Tensor::zeros(shape.as_slice(), DType::F32, &Device::Cpu).unwrap();
            for (i, stage) in stages.iter().enumerate() {
                let y = net.forward_stage(i, &x).unwrap();
                assert_eq!(&y.dims()[1..], stage.output_shape().as_slice(), "stage {i}");
                if let Some(next) = stages.get(i + 1) {
                    let n: usize = next.input_shape().iter().product();
                    assert_eq!(n, stage.out_elems(), "stage {i} into {}", i + 1);
                }
                x = y;
            }
        }
    }

    /// A replica of `spec` with its seeded initial parameters.
    fn replica(spec: &ModelSpec, seed: u64) -> Replica {
        let replica = Replica::new(spec, &Device::Cpu).unwrap().unwrap();
        replica
            .set_params(&spec.init_values(seed).unwrap())
            .unwrap();
        replica
    }

    /// A deterministic batch of `batch` samples of `sample_len` features over `classes` classes.
    fn batch_of(batch: usize, sample_len: usize, classes: u32) -> (Vec<f32>, Vec<u32>) {
        let x = (0..batch * sample_len)
            .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
            .collect();
        let labels = (0..batch as u32).map(|i| (i * 7 + 1) % classes).collect();
        (x, labels)
    }

    /// One training step run the way a pipeline strategy runs it: forward stage by stage,
    /// [`StagedModel::loss_grad`] on the last output, backward stage by stage from it, each
    /// stage's gradients put at its [`StagedModel::stage_param_range`].
    fn pipelined_step(model: &StagedModel, features: Vec<f32>, labels: &[u32]) -> StepOutput {
        let mut acts = vec![model.input(features, labels.len()).unwrap()];
        for i in 0..model.len() {
            let y = model.forward_stage(i, &acts[i]).unwrap();
            acts.push(y);
        }
        let logits = acts.pop().unwrap();
        let (loss, mut grad) = model.loss_grad(&logits, labels).unwrap();
        let mut grads = vec![Vec::new(); model.params().len()];
        for i in (0..model.len()).rev() {
            let (params, grad_in) = model.backward_stage(i, &acts[i], &grad).unwrap();
            assert_eq!(params.len(), model.stage_param_range(i).len());
            for (slot, g) in model.stage_param_range(i).zip(params) {
                grads[slot] = StagedModel::flat_values(&g).unwrap();
            }
            grad = grad_in;
        }
        StepOutput { loss, grads }
    }

    /// The pipelined step gives the whole step's loss and parameter gradients.
    fn assert_pipelined_matches_step(spec: &ModelSpec, batch: usize, sample_len: usize) {
        let classes = match spec {
            ModelSpec::Real { classes, .. } => *classes as u32,
            _ => unreachable!("a staged network"),
        };
        for seed in [1, 2] {
            let replica = replica(spec, seed);
            let (x, labels) = batch_of(batch, sample_len, classes);
            let whole = replica.step(x.clone(), &labels).unwrap();
            let piped = pipelined_step(replica.model().unwrap(), x, &labels);
            assert!(
                (whole.loss - piped.loss).abs() < 1e-6,
                "loss {} vs {}",
                whole.loss,
                piped.loss
            );
            assert_eq!(whole.grads.len(), piped.grads.len());
            for (k, (a, b)) in whole.grads.iter().zip(&piped.grads).enumerate() {
                assert_eq!(a.len(), b.len(), "parameter {k}");
                let diff = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                assert!(diff < 1e-6, "parameter {k}: gradients differ by {diff}");
            }
        }
    }

    /// A step that leaves its gradients on the device gives `step`'s loss and gradients bit
    /// for bit, each gradient shaped like its parameter.
    #[test]
    fn a_step_on_the_device_gives_the_host_steps_bits() {
        for (spec, sample_len) in [(mlp(), 20), (cnn(), 64)] {
            let ModelSpec::Real { classes, .. } = &spec else {
                panic!("a real model");
            };
            let replica = replica(&spec, 4);
            let (x, labels) = batch_of(6, sample_len, *classes as u32);
            let host = replica.step(x.clone(), &labels).unwrap();
            let kept = replica.step_on_device(x, &labels).unwrap();
            assert_eq!(host.loss.to_bits(), kept.loss.to_bits());
            let params = replica.model().unwrap().vars();
            assert_eq!(kept.grads.len(), params.len());
            for (k, ((g, h), p)) in kept.grads.iter().zip(&host.grads).zip(params).enumerate() {
                assert_eq!(g.dims(), p.dims(), "parameter {k}'s gradient shape");
                let back = StagedModel::flat_values(g).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&back), bits(h), "parameter {k}");
            }
        }
    }

    #[test]
    fn pipelined_step_equals_whole_step_mlp() {
        assert_pipelined_matches_step(&mlp(), 7, 20);
    }

    #[test]
    fn pipelined_step_equals_whole_step_cnn() {
        assert_pipelined_matches_step(&cnn(), 5, 64);
    }

    /// The loss and gradient are the mean cross-entropy's: `(softmax − one-hot) / batch`.
    #[test]
    fn loss_grad_is_mean_cross_entropy() {
        let model = replica(&mlp(), 0);
        let model = model.model().unwrap();
        let logits =
            Tensor::from_slice(&[1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0], (2, 3), &Device::Cpu).unwrap();
        let (loss, grad) = model.loss_grad(&logits, &[2, 1]).unwrap();
        let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        let p0: Vec<f64> = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp() / z).collect();
        let want_loss = (-p0[2].ln() - (1.0f64 / 3.0).ln()) / 2.0;
        assert!(
            (loss - want_loss).abs() < 1e-6,
            "loss {loss} vs {want_loss}"
        );
        let want_grad = [
            p0[0] / 2.0,
            p0[1] / 2.0,
            (p0[2] - 1.0) / 2.0,
            1.0 / 6.0,
            (1.0 / 3.0 - 1.0) / 2.0,
            1.0 / 6.0,
        ];
        assert_eq!(grad.dims(), &[2, 3]);
        for (g, w) in StagedModel::flat_values(&grad)
            .unwrap()
            .iter()
            .zip(want_grad)
        {
            assert!((*g as f64 - w).abs() < 1e-6, "gradient {g} vs {w}");
        }
        // The input is left as it was: no variable, no graph.
        assert!(!logits.is_variable());
    }

    #[test]
    fn a_stage_keeps_every_tensor_its_forward_pass_creates() {
        let dense = |relu| StageSpec::Dense {
            inputs: 32,
            outputs: 64,
            relu,
        };
        // The product and the bias sum, and the ReLU's output.
        assert_eq!(dense(true).kept_elems(), 3 * 64);
        assert_eq!(dense(false).kept_elems(), 2 * 64);
        let conv = |pool| StageSpec::Conv {
            input: [3, 8, 8],
            channels: 4,
            pool,
        };
        // The convolution, the bias sum and the ReLU at 8 × 8, and the pool's 4 × 4.
        assert_eq!(conv(false).kept_elems(), 3 * 4 * 64);
        assert_eq!(conv(true).kept_elems(), 3 * 4 * 64 + 4 * 16);
    }

    /// Stage parameter ranges partition the parameter list, in order, and name each stage's own.
    #[test]
    fn stage_param_ranges_partition_the_parameters() {
        for spec in [mlp(), cnn()] {
            let replica = replica(&spec, 0);
            let model = replica.model().unwrap();
            let params = spec.params();
            assert_eq!(model.params(), params);
            assert_eq!(model.vars().len(), params.len());
            let mut next = 0;
            for i in 0..model.len() {
                let range = model.stage_param_range(i);
                assert_eq!(range.start, next, "stage {i} starts after a gap or overlap");
                assert!(!range.is_empty(), "stage {i} owns no parameter");
                let own = model.stage_params(i);
                assert_eq!(own, params[range.clone()], "stage {i}");
                for (p, var) in own.iter().zip(model.stage_vars(i).unwrap()) {
                    assert!(p.name.starts_with(&format!("s{i:02}.")), "{}", p.name);
                    assert_eq!(var.dims(), p.shape.as_slice(), "{}", p.name);
                }
                next = range.end;
            }
            assert_eq!(next, params.len(), "the ranges leave parameters out");
            let ranges: Vec<_> = (0..model.len())
                .map(|i| model.stage_param_range(i))
                .collect();
            assert_eq!(spec.stage_param_ranges(), ranges);
        }
    }

    /// The spec-level ranges partition every kind of model's parameters, one range per stage.
    #[test]
    fn spec_stage_param_ranges_cover_every_kind() {
        let profile = ModelSpec::resolve(
            &ModelConfig::Profile {
                name: "resnet-32".into(),
            },
            &[],
            0,
        )
        .unwrap();
        let mf = ModelSpec::mf(6, 4, 3, 0.1).unwrap();
        for spec in [mlp(), cnn(), mf, profile] {
            let ranges = spec.stage_param_ranges();
            assert_eq!(ranges.len(), spec.stage_facts().len());
            let mut next = 0;
            for r in &ranges {
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, spec.params().len());
        }
        let ModelSpec::Profile(p) = ModelSpec::resolve(
            &ModelConfig::Profile {
                name: "vgg16".into(),
            },
            &[],
            0,
        )
        .unwrap() else {
            unreachable!("a profile")
        };
        let spec = ModelSpec::Profile(p.clone());
        let params = spec.params();
        for (layer, r) in p.layers.iter().zip(spec.stage_param_ranges()) {
            let names: Vec<_> = params[r].iter().map(|t| t.name.clone()).collect();
            let want: Vec<_> = layer.tensors.iter().map(|t| t.name.clone()).collect();
            assert_eq!(names, want, "layer {}", layer.name);
        }
    }

    /// A part holds its stages' parameters alone, at the whole model's indices, and computes
    /// them as the whole model does; a pass through a stage it does not hold, or a part beyond
    /// the model, is an error naming it.
    #[test]
    fn a_part_holds_and_computes_its_stages_alone() {
        for spec in [mlp(), cnn()] {
            let ModelSpec::Real { stages, .. } = &spec else {
                panic!("a real model");
            };
            let values = spec.init_values(4).unwrap();
            let whole = replica(&spec, 4);
            let part = Replica::part(&spec, &Device::Cpu, 1..3).unwrap().unwrap();
            part.set_params(&values).unwrap();
            let (net, all) = (part.model().unwrap(), whole.model().unwrap());
            let ranges = spec.stage_param_ranges();
            let held = ranges[1].start..ranges[2].end;
            assert_eq!(net.held(), 1..3);
            assert_eq!(net.held_params(), held);
            assert_eq!(part.held_params(), Some(held.clone()));
            assert_eq!(whole.held_params(), Some(0..values.len()));
            assert_eq!(net.vars().len(), held.len());
            assert_eq!(
                net.params(),
                spec.params(),
                "it still knows the whole model"
            );
            for (var, info) in net.vars().iter().zip(&spec.params()[held.clone()]) {
                assert_eq!(var.dims(), info.shape.as_slice(), "{}", info.name);
            }
            let mut shape = vec![2];
            shape.extend(stages[1].input_shape());
            let n: usize = shape.iter().product();
            let x = Tensor::from_vec(
                (0..n).map(|i| (i % 7) as f32 * 0.1).collect(),
                shape.as_slice(),
                &Device::Cpu,
            )
            .unwrap();
            let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (y, z) = (
                net.forward_stage(1, &x).unwrap(),
                all.forward_stage(1, &x).unwrap(),
            );
            assert_eq!(flat(&y), flat(&z));
            let g = Tensor::ones_like(&y).unwrap();
            let (pg, px) = net.backward_stage(1, &x, &g).unwrap();
            let (wg, wx) = all.backward_stage(1, &x, &g).unwrap();
            assert_eq!(flat(&px), flat(&wx));
            for (a, b) in pg.iter().zip(&wg) {
                assert_eq!(flat(a), flat(b));
            }
            assert!(net.stage_vars(0).is_none() && net.stage_vars(3).is_none());
            let e = net.forward_stage(0, &x).unwrap_err().to_string();
            assert!(
                e.contains("stage 0 is not held") && e.contains("stages 1..3"),
                "{e}"
            );
            let n0: usize = stages[0].input_shape().iter().product();
            let e = part
                .step(vec![0.0; 2 * n0], &[0, 1])
                .unwrap_err()
                .to_string();
            assert!(e.contains("stage 0 is not held"), "{e}");
            let e = part.set_params(&values[held]).unwrap_err().to_string();
            assert!(e.contains("for a model of"), "{e}");
            let e = Replica::part(&spec, &Device::Cpu, 2..9)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("stages 2..9 of a model of"), "{e}");
        }
    }

    /// A stage index past the end is a caller bug, reported as such.
    #[test]
    #[should_panic(expected = "stage 3 out of range")]
    fn stage_param_range_rejects_a_missing_stage() {
        let replica = replica(&mlp(), 0);
        replica.model().unwrap().stage_param_range(3);
    }
}
