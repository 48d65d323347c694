//! Timing what a parameter server does with a clock's pushes, as `sim` charges it separately
//! from the workers' steps (`RoleContext::serve`): aggregate every worker's gradient
//! (`Payload::axpy`, 2 FLOPs an element) and apply the mean with the optimizer
//! (`OptimizerConfig::step`, its FLOPs per element). Both are timed with the caches emptied
//! first, as in a job, where the workers' steps run between two clocks of a server.

use super::{CacheSweep, HostModel, Repeats};
use crate::optim::OptimizerConfig;
use crate::payload::Payload;

/// A server's measured work on one clock of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdatePoint {
    /// The model's name.
    pub model: String,
    /// Parameter elements updated.
    pub elems: usize,
    /// Gradients aggregated per clock (the job's workers).
    pub pushes: u32,
    /// Median seconds to aggregate one push: a clock's aggregation, into a fresh sum as a server
    /// makes one, per push.
    pub aggregate_seconds: f64,
    /// Median seconds to apply the aggregated gradient.
    pub apply_seconds: f64,
    /// FLOPs per element of the optimizer's update, as `sim` counts them.
    pub apply_flops_per_elem: f64,
}

impl UpdatePoint {
    /// FLOPs `sim` charges for one clock on a server holding every element: `pushes`
    /// aggregations and one update.
    pub fn clock_flops(&self) -> f64 {
        (2.0 * f64::from(self.pushes) + self.apply_flops_per_elem) * self.elems as f64
    }

    /// Measured seconds of one clock: `pushes` aggregations and one update.
    pub fn clock_seconds(&self) -> f64 {
        f64::from(self.pushes) * self.aggregate_seconds + self.apply_seconds
    }

    /// The rate a server's clock runs at, GFLOP/s of `sim`'s count: what `work_seconds` must
    /// charge for the servers to take as long as here.
    pub fn clock_gflops(&self) -> f64 {
        self.clock_flops() / self.clock_seconds() / 1e9
    }

    /// The rate of aggregating alone, GFLOP/s.
    pub fn aggregate_gflops(&self) -> f64 {
        2.0 * self.elems as f64 / self.aggregate_seconds / 1e9
    }

    /// The rate of applying alone (what an allreduce worker does after the sum), GFLOP/s.
    pub fn apply_gflops(&self) -> f64 {
        self.apply_flops_per_elem * self.elems as f64 / self.apply_seconds / 1e9
    }
}

/// Times a server's clock of `model`: aggregating a push of every parameter from every worker
/// (weighted, into a fresh sum, as a server sums a clock's pushes) and applying the sum with the
/// model's optimizer; `sweep` empties the caches before every run.
pub fn measure_update(model: &HostModel, repeats: &Repeats, sweep: &mut CacheSweep) -> UpdatePoint {
    let elems = model.param_elems();
    let grad = Payload::Real(
        (0..elems)
            .map(|i| ((i % 97) as f32 - 48.0) * 1e-4)
            .collect(),
    );
    let pushes = model.workers.max(1);
    let weight = 1.0 / pushes as f32;
    // A server sums each clock's pushes into a fresh buffer (`Payload::zeros_like`), whose pages
    // the first push touches: timed the same way, a clock at a time.
    let mut sum = grad.zeros_like();
    let (clock_aggregate_seconds, _) = repeats
        .median_after(
            || sweep.sweep(),
            || {
                sum = grad.zeros_like();
                for _ in 0..pushes {
                    sum.axpy(weight, &grad);
                }
                Ok::<(), std::convert::Infallible>(())
            },
        )
        .unwrap_or((f64::NAN, 0));
    let aggregate_seconds = clock_aggregate_seconds / f64::from(pushes);
    let apply_seconds = time_apply(&model.optimizer, elems, &sum, repeats, sweep);
    UpdatePoint {
        model: model.name.clone(),
        elems,
        pushes,
        aggregate_seconds,
        apply_seconds,
        apply_flops_per_elem: model.optimizer.flops_per_elem(),
    }
}

/// Median seconds of `optimizer` applying `grad` to `elems` parameters, caches emptied first.
fn time_apply(
    optimizer: &OptimizerConfig,
    elems: usize,
    grad: &Payload,
    repeats: &Repeats,
    sweep: &mut CacheSweep,
) -> f64 {
    let mut params = vec![0.01f32; elems];
    let mut state = optimizer.init_state(elems);
    let Some(grad) = grad.values() else {
        return f64::NAN;
    };
    repeats
        .median_after(
            || sweep.sweep(),
            || {
                optimizer.step(&mut params, grad, &mut state);
                Ok::<(), std::convert::Infallible>(())
            },
        )
        .map_or(f64::NAN, |(s, _)| s)
}
