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

/// Parameter gradients of a run of stages, one tensor per parameter on the device the pass ran
/// on, shaped as the parameter (`None` in throughput mode). They stay there for a holder's own
/// update ([`crate::submodel::Held::apply`]); only what a collective sums is read back
/// ([`host_flat`]).
pub type Grads = Option<Vec<Tensor>>;

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

/// Adds `g` into the running sum `acc`, where the gradients are.
pub fn accumulate(acc: &mut Grads, g: Grads) -> Result<()> {
    let Some(g) = g else { return Ok(()) };
    match acc {
        Some(a) => {
            for (x, y) in a.iter_mut().zip(&g) {
                *x = x.add(y).map_err(|e| tensor_error("sum gradients", e))?;
            }
        }
        None => *acc = Some(g),
    }
    Ok(())
}

/// Multiplies every gradient by `k` where it is (a sum of `n` minibatches' gradients by `1/n`),
/// element by element in f32 as on the host.
pub fn scale(grads: &mut [Tensor], k: f32) -> Result<()> {
    for t in grads.iter_mut() {
        let by = Tensor::new(k, t.device()).map_err(|e| tensor_error("scale gradients", e))?;
        *t = t
            .broadcast_mul(&by)
            .map_err(|e| tensor_error("scale gradients", e))?;
    }
    Ok(())
}

/// The gradients read back to the host as one flat vector, in order: the buffer a collective
/// sums.
pub fn host_flat(grads: &[Tensor]) -> Result<Vec<f32>> {
    let mut flat = Vec::with_capacity(grads.iter().map(Tensor::elem_count).sum());
    for t in grads {
        let values =
            StagedModel::flat_values(t).map_err(|e| tensor_error("read gradients back", e))?;
        flat.extend_from_slice(&values);
    }
    Ok(flat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn bits(values: &[f32]) -> Vec<u32> {
        values.iter().map(|x| x.to_bits()).collect()
    }

    /// Summing and averaging gradients where they are gives the host arithmetic's bits (the
    /// same f32 additions in the same order, the same multiplications), and reading them back
    /// lays them out flat in order.
    #[test]
    fn gradients_summed_and_scaled_in_place_are_the_host_arithmetics() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let shapes: [&[usize]; 2] = [&[4, 3], &[3]];
        let mut acc: Grads = None;
        let mut host: Vec<Vec<f32>> = shapes
            .iter()
            .map(|s| vec![0.0; s.iter().product()])
            .collect();
        for _ in 0..3 {
            let values: Vec<Vec<f32>> = host
                .iter()
                .map(|v| (0..v.len()).map(|_| rng.gen_range(-1.0..1.0)).collect())
                .collect();
            let tensors = values
                .iter()
                .zip(shapes)
                .map(|(v, s)| Tensor::from_slice(v, s, &Device::Cpu).unwrap())
                .collect();
            accumulate(&mut acc, Some(tensors)).unwrap();
            for (h, v) in host.iter_mut().zip(&values) {
                for (p, q) in h.iter_mut().zip(v) {
                    *p += *q;
                }
            }
        }
        accumulate(&mut acc, None).unwrap();
        let mut acc = acc.unwrap();
        scale(&mut acc, 1.0 / 3.0).unwrap();
        for x in host.iter_mut().flatten() {
            *x *= 1.0 / 3.0;
        }
        assert_eq!(acc[0].dims(), &[4, 3], "shapes kept");
        assert_eq!(bits(&host_flat(&acc).unwrap()), bits(&host.concat()));
    }
}
