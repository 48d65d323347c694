//! A worker's model replica: load parameters, take a training step, evaluate.

use super::{ModelSpec, StagedModel};
use crate::error::{EngineError, Result, TensorContext};
use candle_core::{Device, Tensor};

/// Result of one training step.
#[derive(Clone, Debug)]
pub struct StepOutput {
    /// Mean cross-entropy over the batch.
    pub loss: f64,
    /// Mean gradient over the batch, one flat vector per parameter in layout order.
    pub grads: Vec<Vec<f32>>,
}

/// A trainable copy of a real model.
pub struct Replica {
    model: StagedModel,
}

impl Replica {
    /// Builds a replica of `spec` on the CPU; `None` for throughput-mode profiles.
    pub fn new(spec: &ModelSpec) -> Result<Option<Replica>> {
        match spec {
            ModelSpec::Real {
                stages,
                input_shape,
                ..
            } => Ok(Some(Replica {
                model: StagedModel::new(stages, input_shape, &Device::Cpu)?,
            })),
            ModelSpec::Profile(_) => Ok(None),
        }
    }

    /// The staged network (for strategies that run stages one by one).
    pub fn model(&self) -> &StagedModel {
        &self.model
    }

    /// Sets every parameter from flat values in layout order.
    pub fn set_params(&self, values: &[Vec<f32>]) -> Result<()> {
        let vars = self.model.vars();
        if vars.len() != values.len() {
            return Err(EngineError::Tensor {
                context: "load parameters".into(),
                source: candle_core::Error::Msg(format!(
                    "{} values for {} parameters",
                    values.len(),
                    vars.len()
                )),
            });
        }
        for (var, v) in vars.into_iter().zip(values) {
            let t =
                Tensor::from_slice(v, var.shape(), self.model.device()).ctx("load parameters")?;
            var.set(&t).ctx("load parameters")?;
        }
        Ok(())
    }

    /// Forward and backward on one batch: mean loss and mean gradients.
    pub fn step(&self, features: Vec<f32>, labels: &[u32]) -> Result<StepOutput> {
        let batch = labels.len();
        let x = self.model.input(features, batch).ctx("batch input")?;
        let y = Tensor::from_slice(labels, batch, self.model.device()).ctx("batch labels")?;
        let logits = self.model.forward(&x).ctx("forward")?;
        let loss = candle_nn::loss::cross_entropy(&logits, &y).ctx("loss")?;
        let grads = loss.backward().ctx("backward")?;
        let loss = loss.to_scalar::<f32>().ctx("loss value")? as f64;
        let mut out = Vec::new();
        for var in self.model.vars() {
            let g = match grads.get(var.as_tensor()) {
                Some(g) => g
                    .flatten_all()
                    .and_then(|g| g.to_vec1::<f32>())
                    .ctx("gradient")?,
                None => vec![0.0; var.elem_count()],
            };
            out.push(g);
        }
        Ok(StepOutput { loss, grads: out })
    }

    /// Accuracy and mean loss on a labelled set, in chunks.
    pub fn evaluate(&self, features: &[f32], labels: &[u32]) -> Result<(f64, f64)> {
        let n = labels.len();
        if n == 0 {
            return Ok((0.0, 0.0));
        }
        let per = features.len() / n;
        let (mut correct, mut loss_sum) = (0usize, 0.0f64);
        for start in (0..n).step_by(1024) {
            let end = (start + 1024).min(n);
            let x = self
                .model
                .input(features[start * per..end * per].to_vec(), end - start)
                .ctx("eval input")?;
            let y = Tensor::from_slice(&labels[start..end], end - start, self.model.device())
                .ctx("eval labels")?;
            let logits = self.model.forward(&x).ctx("eval forward")?;
            let loss = candle_nn::loss::cross_entropy(&logits, &y).ctx("eval loss")?;
            loss_sum += loss.to_scalar::<f32>().ctx("eval loss")? as f64 * (end - start) as f64;
            let pred = logits
                .argmax(1)
                .and_then(|p| p.to_vec1::<u32>())
                .ctx("eval argmax")?;
            correct += pred
                .iter()
                .zip(&labels[start..end])
                .filter(|(p, l)| p == l)
                .count();
        }
        Ok((correct as f64 / n as f64, loss_sum / n as f64))
    }
}
