//! The reference DLRM step: whole tables as candle variables and autograd over the full graph.
//!
//! It materializes a dense gradient for every table (what the row-wise path avoids), so it is
//! only for checking that path: both must give the same loss and, once the row-wise gradient is
//! scattered into zero tables, the same gradients.

use super::dense::{bce, logits};
use super::DlrmSpec;
use crate::data::{split_ctr, CtrSchema};
use crate::error::{Result, TensorContext, WorkloadError};
use candle_core::{Device, Tensor, Var};

/// Loss and full gradients (one flat vector per parameter of [`DlrmSpec::params`], tables
/// dimension-major `[width, rows]`) of one batch on the CPU: `values` are all parameters in
/// layout order, `features` click-through samples `[B, dense + K]`, `labels` 0/1.
pub fn full_step(
    spec: &DlrmSpec,
    values: &[Vec<f32>],
    features: &[f32],
    labels: &[u32],
) -> Result<(f64, Vec<Vec<f32>>)> {
    spec.validate()?;
    let device = Device::Cpu;
    let params = spec.params();
    if values.len() != params.len()
        || values
            .iter()
            .zip(&params)
            .any(|(v, p)| v.len() != p.elems())
    {
        return Err(WorkloadError::Tensor {
            context: "dlrm reference parameters".into(),
            source: candle_core::Error::Msg(format!(
                "{} values for {} parameters (or a parameter of the wrong size)",
                values.len(),
                params.len()
            )),
        });
    }
    let vars = values
        .iter()
        .zip(&params)
        .map(|(v, p)| Var::from_slice(v, p.shape.as_slice(), &device))
        .collect::<candle_core::Result<Vec<_>>>()
        .ctx("dlrm reference parameters")?;
    let schema = CtrSchema {
        dense: spec.dense_features,
        rows: spec.fields.clone(),
    };
    let (dense_x, ids) = split_ctr(&schema, features);
    let (b, k) = (labels.len(), spec.num_tables());
    if ids.len() != b * k {
        return Err(WorkloadError::Tensor {
            context: "dlrm reference batch".into(),
            source: candle_core::Error::Msg(format!(
                "{} values do not make {b} samples of {} features",
                features.len(),
                schema.sample_len()
            )),
        });
    }
    let (loss, tensors) = (|| -> candle_core::Result<(Tensor, Vec<Tensor>)> {
        let mut rows = Vec::with_capacity(k);
        for (f, var) in vars[..k].iter().enumerate() {
            let field_ids: Vec<u32> = (0..b).map(|i| ids[i * k + f]).collect();
            let idx = Tensor::from_vec(field_ids, b, &device)?;
            // [width, rows] → [width, B] → [B, 1, width]
            rows.push(var.as_tensor().index_select(&idx, 1)?.t()?.unsqueeze(1)?);
        }
        let emb = Tensor::cat(&rows, 1)?;
        let x = Tensor::from_slice(&dense_x, (b, spec.dense_features), &device)?;
        let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let z = logits(spec, &tensors[k..], &emb, &x)?;
        Ok((bce(&z, labels, &device)?, tensors))
    })()
    .ctx("dlrm reference forward")?;
    let grads = loss.backward().ctx("dlrm reference backward")?;
    let out = tensors
        .iter()
        .map(|t| match grads.get(t) {
            Some(g) => g
                .flatten_all()
                .and_then(|g| g.to_vec1::<f32>())
                .ctx("dlrm reference gradient"),
            None => Ok(vec![0.0; t.elem_count()]),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((
        loss.to_scalar::<f32>().ctx("dlrm reference loss")? as f64,
        out,
    ))
}
