//! The math of a run of stages on rows, real or virtual, shared by the strategies that split
//! the model into sub-models: the samples a piece of the global
//! batch starts from, forward, the loss and its gradient seed, backward. Virtual rows (throughput
//! mode) pass through with their row counts, so the same worker code runs both modes; the
//! workers charge the cost around these calls.

use super::{tensor_error, Rows};
use crate::model::StagedModel;
use crate::prelude::*;
use crate::submodel;
use candle_core::Tensor;
use std::ops::Range;

/// Parameter gradients of a run of stages, per tensor (`None` in throughput mode).
pub type Grads = Option<Vec<Vec<f32>>>;

/// Rows `offset..offset + rows` of iteration `iter`'s global batch of `total` samples: the
/// first stage's input and the labels (virtual rows and no labels in throughput mode). The
/// global batch of iteration `iter` is samples `iter·X .. (iter+1)·X` of the run's stream, the
/// samples BSP data parallelism trains that iteration on.
pub fn samples(
    job: &Job,
    net: Option<&StagedModel>,
    total: u64,
    iter: u64,
    offset: u64,
    rows: u64,
) -> Result<(Rows, Option<Vec<u32>>)> {
    let (Some(net), Some(data)) = (net, job.data.as_ref()) else {
        return Ok((Rows::Virtual { rows }, None));
    };
    let start = iter as u128 * total as u128 + offset as u128;
    let idx = job.stream.range(start, rows as usize);
    let (features, labels) = data.train.gather(&idx);
    let x = net
        .input(features, rows as usize)
        .map_err(|e| tensor_error("batch input", e))?;
    Ok((Rows::Real(x), Some(labels)))
}

/// The labels of rows `offset..offset + rows` of iteration `iter`'s global batch (what the
/// stage that computes the loss needs; `None` in throughput mode).
pub fn labels_of(job: &Job, total: u64, iter: u64, offset: u64, rows: u64) -> Option<Vec<u32>> {
    let data = job.data.as_ref()?;
    let start = iter as u128 * total as u128 + offset as u128;
    let idx = job.stream.range(start, rows as usize);
    Some(idx.iter().map(|&i| data.train.labels[i]).collect())
}

/// Forward of `stages` on `x`: the output, and every stage's input kept for the backward pass.
pub fn forward(
    net: Option<&StagedModel>,
    stages: Range<usize>,
    x: &Rows,
) -> Result<(Rows, Vec<Tensor>)> {
    match (net, x) {
        (Some(net), Rows::Real(t)) => {
            let (y, inputs) = submodel::forward(net, stages, t)?;
            Ok((Rows::Real(y), inputs))
        }
        _ => Ok((Rows::Virtual { rows: x.rows()? }, Vec::new())),
    }
}

/// The mean loss of the model's output `y` on `labels`, and the gradient it seeds the backward
/// pass with, scaled by `scale` (rows / X: the micro-batch's share of the iteration's mean).
pub fn loss_seed(
    net: Option<&StagedModel>,
    y: &Rows,
    labels: Option<&[u32]>,
    scale: f64,
) -> Result<(Option<f64>, Rows)> {
    match (net, y, labels) {
        (Some(net), Rows::Real(t), Some(labels)) => {
            let (loss, g) = net
                .loss_grad(t, labels)
                .map_err(|e| tensor_error("loss", e))?;
            let g = (g * scale).map_err(|e| tensor_error("scale loss gradient", e))?;
            Ok((Some(loss), Rows::Real(g)))
        }
        _ => Ok((None, Rows::Virtual { rows: y.rows()? })),
    }
}

/// Backward of `stages` from the gradient `g` of their output, given the inputs their forward
/// kept: the parameter gradients and the gradient of their input.
pub fn backward(
    net: Option<&StagedModel>,
    stages: Range<usize>,
    inputs: &[Tensor],
    g: &Rows,
) -> Result<(Grads, Rows)> {
    match (net, g) {
        (Some(net), Rows::Real(t)) => {
            let (grads, gx) = submodel::backward(net, stages, inputs, t)?;
            Ok((Some(grads), Rows::Real(gx)))
        }
        _ => Ok((None, Rows::Virtual { rows: g.rows()? })),
    }
}

/// Adds `g` into the running sum `acc`.
pub fn accumulate(acc: &mut Grads, g: Grads) {
    let Some(g) = g else { return };
    match acc {
        Some(a) => {
            for (x, y) in a.iter_mut().zip(&g) {
                for (p, q) in x.iter_mut().zip(y) {
                    *p += *q;
                }
            }
        }
        None => *acc = Some(g),
    }
}
