//! The dense part of a DLRM as candle variables, stepped on gathered embedding rows.

use super::{DlrmSpec, Interaction};
use crate::error::{Result, TensorContext, WorkloadError};
use crate::model::linear::linear;
use crate::model::load_vars;
use candle_core::{DType, Device, Tensor, Var, D};

/// One training step of the dense part on a batch of gathered rows.
#[derive(Clone, Debug)]
pub struct DenseStep {
    /// Mean binary cross-entropy over the batch.
    pub loss: f64,
    /// Gradients of the dense parameters, one flat vector each, in layout order.
    pub grads: Vec<Vec<f32>>,
    /// Gradient of the loss with respect to the gathered rows, `[B, K, width]` row-major: what
    /// the tables' owners apply to the rows the batch looked up.
    pub emb_grad: Vec<f32>,
}

/// The dense parameters of a DLRM (bottom MLP, interaction, top MLP) as candle variables on a
/// device; the embedding tables live elsewhere and come in as gathered rows.
pub struct DlrmDense {
    spec: DlrmSpec,
    vars: Vec<Var>,
    device: Device,
}

impl DlrmDense {
    /// Zero-valued dense parameters of `spec` on `device` (values come from
    /// [`DlrmDense::set_params`]).
    pub fn new(spec: &DlrmSpec, device: &Device) -> Result<DlrmDense> {
        spec.validate()?;
        let vars = spec
            .dense_params()
            .iter()
            .map(|p| Var::zeros(p.shape.as_slice(), DType::F32, device))
            .collect::<candle_core::Result<Vec<_>>>()
            .ctx("dlrm dense parameters")?;
        Ok(DlrmDense {
            spec: spec.clone(),
            vars,
            device: device.clone(),
        })
    }

    /// The spec this part belongs to.
    pub fn spec(&self) -> &DlrmSpec {
        &self.spec
    }

    /// The device the dense math runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Sets the dense parameters from flat values in layout order (the entries of
    /// [`DlrmSpec::dense_param_range`]).
    pub fn set_params(&self, values: &[Vec<f32>]) -> Result<()> {
        let vars: Vec<&Var> = self.vars.iter().collect();
        load_vars(&vars, values)
    }

    /// The dense parameters' current values, in layout order.
    pub fn params(&self) -> Result<Vec<Vec<f32>>> {
        self.vars
            .iter()
            .map(|v| {
                v.as_tensor()
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .ctx("dlrm dense parameters")
            })
            .collect()
    }

    /// Checks the batch's shapes; returns the batch size.
    fn batch(&self, emb: &[f32], dense_x: &[f32]) -> Result<usize> {
        let per_row = self.spec.num_tables() * self.spec.width();
        let d = self.spec.dense_features;
        let b = dense_x.len() / d;
        if dense_x.len() != b * d || emb.len() != b * per_row {
            return Err(WorkloadError::Tensor {
                context: "dlrm batch".into(),
                source: candle_core::Error::Msg(format!(
                    "{} dense values and {} embedding values do not make whole samples of {d} dense features and {per_row} embedding values",
                    dense_x.len(),
                    emb.len()
                )),
            });
        }
        Ok(b)
    }

    fn inputs(&self, emb: &[f32], dense_x: &[f32], b: usize) -> Result<(Tensor, Tensor)> {
        let (k, w) = (self.spec.num_tables(), self.spec.width());
        let e = Tensor::from_slice(emb, (b, k, w), &self.device).ctx("dlrm embedding rows")?;
        let x = Tensor::from_slice(dense_x, (b, self.spec.dense_features), &self.device)
            .ctx("dlrm dense features")?;
        Ok((e, x))
    }

    /// Forward and backward on one batch: `emb` holds the gathered rows `[B, K, width]`,
    /// `dense_x` the dense features `[B, D]`, `labels` the 0/1 clicks. Returns the mean loss,
    /// the dense gradients and the gradient with respect to `emb`.
    pub fn step(&self, emb: &[f32], dense_x: &[f32], labels: &[u32]) -> Result<DenseStep> {
        let b = self.batch(emb, dense_x)?;
        if labels.len() != b {
            return Err(WorkloadError::Tensor {
                context: "dlrm batch".into(),
                source: candle_core::Error::Msg(format!("{} labels for {b} samples", labels.len())),
            });
        }
        let (e, x) = self.inputs(emb, dense_x, b)?;
        let e = Var::from_tensor(&e).ctx("dlrm embedding rows")?;
        let tensors: Vec<Tensor> = self.vars.iter().map(|v| v.as_tensor().clone()).collect();
        let z = logits(&self.spec, &tensors, e.as_tensor(), &x).ctx("dlrm forward")?;
        let loss = bce(&z, labels, &self.device).ctx("dlrm loss")?;
        let grads = loss.backward().ctx("dlrm backward")?;
        let flat = |t: &Tensor| -> Result<Vec<f32>> {
            match grads.get(t) {
                Some(g) => g
                    .flatten_all()
                    .and_then(|g| g.to_vec1::<f32>())
                    .ctx("dlrm gradient"),
                None => Ok(vec![0.0; t.elem_count()]),
            }
        };
        Ok(DenseStep {
            loss: loss.to_scalar::<f32>().ctx("dlrm loss")? as f64,
            grads: tensors.iter().map(flat).collect::<Result<_>>()?,
            emb_grad: flat(e.as_tensor())?,
        })
    }

    /// Click probabilities of a batch (`emb` `[B, K, width]`, `dense_x` `[B, D]`).
    pub fn predict(&self, emb: &[f32], dense_x: &[f32]) -> Result<Vec<f32>> {
        let b = self.batch(emb, dense_x)?;
        let (e, x) = self.inputs(emb, dense_x, b)?;
        let tensors: Vec<Tensor> = self.vars.iter().map(|v| v.as_tensor().clone()).collect();
        logits(&self.spec, &tensors, &e, &x)
            .and_then(|z| candle_nn::ops::sigmoid(&z))
            .and_then(|p| p.to_vec1::<f32>())
            .ctx("dlrm predict")
    }
}

/// Runs linear layers from `params` (weight, bias pairs, advancing the cursor), ReLU after
/// every layer but the last when `relu_last` is false.
fn mlp(
    x: Tensor,
    params: &mut std::slice::Iter<'_, Tensor>,
    layers: usize,
    relu_last: bool,
) -> candle_core::Result<Tensor> {
    let mut x = x;
    for i in 0..layers {
        let (Some(w), Some(b)) = (params.next(), params.next()) else {
            candle_core::bail!("dlrm: missing dense parameters");
        };
        x = linear(&x, w, b)?;
        if relu_last || i + 1 < layers {
            x = x.relu()?;
        }
    }
    Ok(x)
}

/// The logits `[B]` of a batch: `emb` `[B, K, width]` looked-up rows, `x` `[B, D]` dense
/// features, `dense` the dense parameters in layout order (see the module docs for the math).
pub(super) fn logits(
    spec: &DlrmSpec,
    dense: &[Tensor],
    emb: &Tensor,
    x: &Tensor,
) -> candle_core::Result<Tensor> {
    let (b, k, _) = emb.dims3()?;
    let dim = spec.dim;
    let mut params = dense.iter();
    let h = mlp(x.clone(), &mut params, spec.bottom.len() + 1, false)?;
    let e = emb.narrow(2, 0, dim)?;
    // [B, K + 1, dim]: h first, then the fields' embeddings.
    let vectors = Tensor::cat(&[h.unsqueeze(1)?, e], 1)?;
    let x0 = vectors.reshape((b, (k + 1) * dim))?;
    let wide = || -> candle_core::Result<Tensor> { emb.narrow(2, dim, 1)?.sum((1, 2)) };
    let logit = match spec.interaction {
        Interaction::WideDeep | Interaction::DeepFm => {
            let deep = mlp(x0, &mut params, spec.top.len(), true)?;
            let (Some(w), Some(bias)) = (params.next(), params.next()) else {
                candle_core::bail!("dlrm: missing output layer");
            };
            let mut z = (linear(&deep, w, bias)?.squeeze(1)? + wide()?)?;
            if spec.interaction == Interaction::DeepFm {
                let sum = vectors.sum(1)?; // [B, dim]
                let square_of_sum = sum.sqr()?.sum(D::Minus1)?;
                let sum_of_squares = vectors.sqr()?.sum((1, 2))?;
                z = (z + ((square_of_sum - sum_of_squares)? * 0.5)?)?;
            }
            z
        }
        Interaction::Dcn => {
            let mut xl = x0.clone();
            for _ in 0..spec.cross_layers {
                let (Some(w), Some(bias)) = (params.next(), params.next()) else {
                    candle_core::bail!("dlrm: missing cross layer");
                };
                // x_l · w_l: one scalar per sample.
                let s = xl.broadcast_mul(w)?.sum_keepdim(1)?;
                xl = ((x0.broadcast_mul(&s)?.broadcast_add(bias))? + xl)?;
            }
            let deep = if spec.top.is_empty() {
                x0
            } else {
                mlp(x0, &mut params, spec.top.len(), true)?
            };
            let (Some(w), Some(bias)) = (params.next(), params.next()) else {
                candle_core::bail!("dlrm: missing output layer");
            };
            linear(&Tensor::cat(&[xl, deep], 1)?, w, bias)?.squeeze(1)?
        }
    };
    Ok(logit)
}

/// Mean binary cross-entropy of logits `z` `[B]` against 0/1 `labels`, stable form
/// `max(z, 0) − z·y + log(1 + e^−|z|)`.
pub(super) fn bce(z: &Tensor, labels: &[u32], device: &Device) -> candle_core::Result<Tensor> {
    let y: Vec<f32> = labels.iter().map(|&l| f32::from(l != 0)).collect();
    let y = Tensor::from_vec(y, labels.len(), device)?;
    let soft = (z.abs()?.neg()?.exp()? + 1.0)?.log()?;
    ((z.relu()? - (z * y)?)? + soft)?.mean_all()
}
