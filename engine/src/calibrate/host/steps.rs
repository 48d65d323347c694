//! Timing training steps as a worker takes them: forward and backward on its batch
//! (`Replica::step`) at parameters already in the replica, on the CPU, with the caches emptied
//! first: in a job, a role's messages and its machine's other roles run between two steps. A
//! worker that loads host values into its replica first is charged that copy apart, at the
//! machine's tensor copy rate (`message_copy_gbps`); one that keeps its parameters in the replica
//! (allreduce) has none.

use super::{CacheSweep, HostError, HostModel, Repeats};
use crate::model::Replica;

/// One measured step size of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPoint {
    /// The model's name.
    pub model: String,
    /// Samples per step.
    pub batch: u32,
    /// Median seconds of a step.
    pub seconds: f64,
    /// Timed runs behind the median.
    pub runs: usize,
    /// Training FLOPs of the step (forward and backward), by the model's own count.
    pub flops: f64,
}

impl StepPoint {
    /// The sustained rate of the step, GFLOP/s.
    pub fn gflops(&self) -> f64 {
        self.flops / self.seconds / 1e9
    }
}

/// Times a worker's training step of `model` at every batch size of `batches`: forward and
/// backward on a freshly gathered batch at the model's initial parameters, loaded once; `sweep`
/// empties the caches before every run.
pub fn measure_steps(
    model: &HostModel,
    batches: &[u32],
    repeats: &Repeats,
    sweep: &mut CacheSweep,
) -> Result<Vec<StepPoint>, HostError> {
    let setup = |e: concord_workloads::WorkloadError| HostError::Setup {
        model: model.name.clone(),
        source: Box::new(e.into()),
    };
    let replica = Replica::cpu(&model.spec)
        .map_err(setup)?
        .ok_or_else(|| HostError::Model {
            model: model.name.clone(),
            reason: "it has no trainable replica".into(),
        })?;
    let params = model
        .spec
        .init_values(model.seed)
        .ok_or_else(|| HostError::Model {
            model: model.name.clone(),
            reason: "it has no initial parameters".into(),
        })?;
    replica.set_params(&params).map_err(setup)?;
    let mut out = Vec::with_capacity(batches.len());
    for &batch in batches {
        let (features, labels) = model.batch(batch as usize);
        // Every step starts from the same values, as the gradients are not applied.
        let step = || replica.step(features.clone(), &labels).map(|_| ());
        let (seconds, runs) = repeats
            .median_after(|| sweep.sweep(), step)
            .map_err(|source| HostError::Step {
                model: model.name.clone(),
                batch,
                source: Box::new(source),
            })?;
        out.push(StepPoint {
            model: model.name.clone(),
            batch,
            seconds,
            runs,
            flops: model.training_flops_per_sample() * f64::from(batch),
        });
    }
    Ok(out)
}
