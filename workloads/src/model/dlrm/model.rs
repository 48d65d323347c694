//! A whole DLRM held by one replica, for evaluation: the tables as flat host vectors and the
//! dense part as candle variables.

use super::{gather_rows, DlrmDense, DlrmSpec};
use crate::data::{split_ctr, CtrSchema};
use crate::error::{Result, WorkloadError};
use crate::metrics::auc;
use candle_core::Device;
use std::sync::RwLock;

/// Samples per evaluation chunk.
const EVAL_CHUNK: usize = 1024;

/// Test-set scores of a DLRM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DlrmEvaluation {
    /// Fraction of samples whose click probability is on the label's side of 0.5.
    pub accuracy: f64,
    /// Mean binary cross-entropy.
    pub loss: f64,
    /// Area under the ROC curve; `None` when the set lacks clicks or non-clicks.
    pub auc: Option<f64>,
}

/// A DLRM replica: every table (dimension-major) and the dense part.
pub struct DlrmModel {
    schema: CtrSchema,
    tables: RwLock<Vec<Vec<f32>>>,
    dense: DlrmDense,
}

impl DlrmModel {
    /// A zero-valued replica of `spec` whose dense part computes on `device`.
    pub fn new(spec: &DlrmSpec, device: &Device) -> Result<DlrmModel> {
        let dense = DlrmDense::new(spec, device)?;
        Ok(DlrmModel {
            schema: CtrSchema {
                dense: spec.dense_features,
                rows: spec.fields.clone(),
            },
            tables: RwLock::new(
                spec.fields
                    .iter()
                    .map(|&r| vec![0.0; r * spec.width()])
                    .collect(),
            ),
            dense,
        })
    }

    /// The dense part.
    pub fn dense(&self) -> &DlrmDense {
        &self.dense
    }

    /// Sets every parameter (tables, then dense) from flat values in layout order.
    pub fn set_params(&self, values: &[Vec<f32>]) -> Result<()> {
        let spec = self.dense.spec();
        let k = spec.num_tables();
        let sizes: Vec<usize> = spec.fields.iter().map(|r| r * spec.width()).collect();
        if values.len() < k || values[..k].iter().zip(&sizes).any(|(v, &n)| v.len() != n) {
            return Err(WorkloadError::Tensor {
                context: "load parameters".into(),
                source: candle_core::Error::Msg(format!(
                    "expected {k} tables of {sizes:?} values then the dense parameters, got {:?}",
                    values.iter().map(Vec::len).collect::<Vec<_>>()
                )),
            });
        }
        self.dense.set_params(&values[k..])?;
        let mut tables = self.tables.write().map_err(|_| poisoned())?;
        for (t, v) in tables.iter_mut().zip(values) {
            t.copy_from_slice(v);
        }
        Ok(())
    }

    /// Click probabilities of click-through samples (`[B, dense + K]`).
    pub fn predict(&self, features: &[f32]) -> Result<Vec<f32>> {
        let spec = self.dense.spec();
        let (dense_x, ids) = split_ctr(&self.schema, features);
        let (k, w) = (spec.num_tables(), spec.width());
        let b = ids.len() / k;
        let tables = self.tables.read().map_err(|_| poisoned())?;
        let mut out = Vec::with_capacity(b);
        for start in (0..b).step_by(EVAL_CHUNK) {
            let end = (start + EVAL_CHUNK).min(b);
            let mut emb = vec![0.0f32; (end - start) * k * w];
            for (f, table) in tables.iter().enumerate() {
                let field_ids: Vec<u32> = (start..end).map(|i| ids[i * k + f]).collect();
                if let Some(&bad) = field_ids.iter().find(|&&id| id as usize >= spec.fields[f]) {
                    return Err(WorkloadError::Tensor {
                        context: "dlrm lookup".into(),
                        source: candle_core::Error::Msg(format!(
                            "id {bad} of field {f} is not below its {} rows",
                            spec.fields[f]
                        )),
                    });
                }
                let rows = gather_rows(table, spec.fields[f], &field_ids, 0..w);
                for (i, row) in rows.chunks_exact(w).enumerate() {
                    emb[(i * k + f) * w..(i * k + f + 1) * w].copy_from_slice(row);
                }
            }
            let x = &dense_x[start * spec.dense_features..end * spec.dense_features];
            out.extend(self.dense.predict(&emb, x)?);
        }
        Ok(out)
    }

    /// Accuracy at threshold 0.5, mean binary cross-entropy and AUC on a labelled set.
    pub fn evaluate(&self, features: &[f32], labels: &[u32]) -> Result<DlrmEvaluation> {
        let p = self.predict(features)?;
        let n = labels.len().max(1) as f64;
        let mut correct = 0usize;
        let mut loss = 0.0f64;
        for (&p, &l) in p.iter().zip(labels) {
            let click = l != 0;
            correct += usize::from((p >= 0.5) == click);
            let q = if click { p as f64 } else { 1.0 - p as f64 };
            loss -= q.max(1e-12).ln();
        }
        Ok(DlrmEvaluation {
            accuracy: correct as f64 / n,
            loss: loss / n,
            auc: auc(&p, labels),
        })
    }
}

fn poisoned() -> WorkloadError {
    WorkloadError::Tensor {
        context: "dlrm tables".into(),
        source: candle_core::Error::Msg("a thread panicked while holding the tables".into()),
    }
}
