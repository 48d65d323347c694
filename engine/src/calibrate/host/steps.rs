//! Timing training steps as a worker takes them: forward and backward on its batch
//! (`Replica::step`) at parameters already in the replica, on the CPU, each after what a worker
//! does between two steps: its parameters arrive (a server's reply decoded into fresh values, or
//! a ring's reduced buffer averaged in place) and are loaded into the replica. That load is
//! charged apart, at the machine's tensor copy rate (`message_copy_gbps`); what the step is timed
//! after is the state it leaves the caches in. Not a sweep of the caches: a step timed after a
//! sweep of twice the last-level cache took the small MLP's step two to three times what a job's
//! took (the code and the allocator's state evicted, which the job keeps): 0.15–0.25 ms, where a
//! step after the pull took 0.062–0.086 and the jobs' 0.076–0.091 in the same half hour. Where a
//! job runs several processes on this machine, their workers step at the same time and share its
//! memory bandwidth and caches: a step is then timed while as many other threads step the same
//! model beside it, each after a pull of its own.

use super::copy::touch;
use super::timing::median;
use super::{HostError, HostModel, Repeats};
use crate::model::Replica;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

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

/// Times a worker's training step of every model of `models` at every batch size of `batches`:
/// forward and backward on a freshly gathered batch at the model's initial parameters, which are
/// written afresh and loaded into the replica before every run, as a worker's pull does. The
/// steps are timed in `passes` turns, each taking every (model, batch) point in order with its
/// share of `repeats` ([`Repeats::share`]), and a point's figure is the median of its runs over
/// all the passes: a machine whose speed drifts while it is measured (a shared host's
/// neighbours, its clock) then drifts under every point alike, and the fit sees the shape of the
/// step's cost rather than when each point was taken. `beside` other threads step the same model
/// on their own replicas meanwhile (each pulling before its steps too), as the workers of the
/// job's other processes on this machine do; 0 times the step alone. One list of points per
/// model, in `batches`' order.
pub fn measure_steps(
    models: &[HostModel],
    batches: &[u32],
    repeats: &Repeats,
    passes: usize,
    beside: usize,
) -> Result<Vec<Vec<StepPoint>>, HostError> {
    let mut pulls = models.iter().map(Pull::of).collect::<Result<Vec<_>, _>>()?;
    let share = repeats.share(passes);
    let mut times: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); batches.len()]; models.len()];
    for _ in 0..passes.max(1) {
        for ((model, pull), model_times) in models.iter().zip(&mut pulls).zip(&mut times) {
            for (&batch, batch_times) in batches.iter().zip(model_times.iter_mut()) {
                let (features, labels) = model.batch(batch as usize);
                // Every step starts from the same values, as the gradients are not applied.
                let pull = std::cell::RefCell::new(&mut *pull);
                let step = || {
                    pull.borrow()
                        .replica
                        .step(features.clone(), &labels)
                        .map(|_| ())
                };
                let runs = stepping_beside(model, batch, beside, || {
                    share
                        .times_after(|| pull.borrow_mut().arrive(), step)
                        .map_err(|e| step_error(model, batch, e))
                })?;
                batch_times.extend(runs);
            }
        }
    }
    Ok(models
        .iter()
        .zip(times)
        .map(|(model, model_times)| {
            batches
                .iter()
                .zip(model_times)
                .map(|(&batch, mut runs)| StepPoint {
                    model: model.name.clone(),
                    batch,
                    seconds: median(&mut runs),
                    runs: runs.len(),
                    flops: model.training_flops_per_sample() * f64::from(batch),
                })
                .collect()
        })
        .collect())
}

fn step_error(
    model: &HostModel,
    batch: u32,
    source: concord_workloads::WorkloadError,
) -> HostError {
    HostError::Step {
        model: model.name.clone(),
        batch,
        source: Box::new(source),
    }
}

/// A worker's CPU replica of a model and the values it pulls: what a step is timed after.
struct Pull {
    /// The replica the steps run on.
    replica: Replica,
    /// The model's initial parameters, as a decoded reply holds them.
    values: Vec<Vec<f32>>,
}

impl Pull {
    /// A CPU replica of `model` at its initial parameters.
    fn of(model: &HostModel) -> Result<Pull, HostError> {
        let setup = |e: concord_workloads::WorkloadError| HostError::Setup {
            model: model.name.clone(),
            source: Box::new(e.into()),
        };
        let replica =
            Replica::cpu(&model.spec)
                .map_err(setup)?
                .ok_or_else(|| HostError::Model {
                    model: model.name.clone(),
                    reason: "it has no trainable replica".into(),
                })?;
        let values = model
            .spec
            .init_values(model.seed)
            .ok_or_else(|| HostError::Model {
                model: model.name.clone(),
                reason: "it has no initial parameters".into(),
            })?;
        replica.set_params(&values).map_err(setup)?;
        Ok(Pull { replica, values })
    }

    /// The parameters arrive again: written afresh, as decoding a reply writes them, and loaded
    /// into the replica. They keep their values, so every step starts from the same point.
    fn arrive(&mut self) {
        for tensor in &mut self.values {
            touch(tensor);
        }
        self.replica
            .set_params(&self.values)
            .expect("values of the shapes the replica was loaded with once already");
    }
}

/// Runs `measure` while `beside` threads step `model` at `batch` on replicas of their own, each
/// pulling before every step as the timed one does; they start stepping before
/// `measure` runs and stop after it. The first error of a thread beside it, else `measure`'s.
fn stepping_beside<T>(
    model: &HostModel,
    batch: u32,
    beside: usize,
    measure: impl FnOnce() -> Result<T, HostError>,
) -> Result<T, HostError> {
    if beside == 0 {
        return measure();
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let threads: Vec<_> = (0..beside)
            .map(|_| {
                let ready = ready_tx.clone();
                let stop = &stop;
                scope.spawn(move || -> Result<(), HostError> {
                    let mut pull = Pull::of(model)?;
                    let (features, labels) = model.batch(batch as usize);
                    let step = |pull: &Pull| {
                        pull.replica
                            .step(features.clone(), &labels)
                            .map(|_| ())
                            .map_err(|e| step_error(model, batch, e))
                    };
                    // One step before saying it is stepping: the first one allocates.
                    step(&pull)?;
                    // Sent once and let go: a thread that fails before it ends the wait.
                    let _ = ready.send(());
                    drop(ready);
                    while !stop.load(Ordering::Relaxed) {
                        pull.arrive();
                        step(&pull)?;
                    }
                    Ok(())
                })
            })
            .collect();
        drop(ready_tx);
        // Every thread beside is stepping, or one has failed (and dropped its sender).
        let all_ready = (0..beside).all(|_| ready_rx.recv().is_ok());
        let measured = all_ready.then(measure);
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(HostError::Model {
                        model: model.name.clone(),
                        reason: "a thread stepping beside the timed one panicked".into(),
                    })
                }
            }
        }
        measured.unwrap_or_else(|| {
            Err(HostError::Model {
                model: model.name.clone(),
                reason: "a thread stepping beside the timed one stopped before it".into(),
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::OptimizerConfig;

    /// The replica's parameters, flattened.
    fn params_of(replica: &Replica) -> Vec<f32> {
        replica
            .param_vars()
            .unwrap()
            .iter()
            .flat_map(|v| v.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    }

    #[test]
    fn every_step_starts_from_the_same_parameters() {
        let model = HostModel::mlp("tiny", 16, &[8], 4, OptimizerConfig::default(), 2).unwrap();
        let mut pull = Pull::of(&model).unwrap();
        let loaded = params_of(&pull.replica);
        let initial: Vec<f32> = pull.values.concat();
        assert_eq!(loaded, initial);
        let (features, labels) = model.batch(8);
        for _ in 0..3 {
            pull.replica.step(features.clone(), &labels).unwrap();
            pull.arrive();
            assert_eq!(params_of(&pull.replica), initial);
        }
    }
}
