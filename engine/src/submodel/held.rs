//! The part of the model a baseline worker holds: a contiguous range of parameter tensors (a
//! pipeline stage, the conv part, the FC block), its optimizer state, its update, its share of
//! device memory, and its report.
//!
//! The worker keeps a [`LocalModel`] of the whole model (so the engine's optimizer, snapshot
//! and report code applies unchanged) but updates and reports only its range: the run's final
//! model is the union of the holders' parts, each block exactly once.

use super::math::Grads;
use crate::collective::LocalModel;
use crate::memory::{MemEvent, TensorClass};
use crate::model::Replica;
use crate::prelude::*;
use crate::ps::ParamLayout;
use std::ops::Range;

/// Parameters `range` of the job's model, held and updated by one worker.
pub struct Held {
    range: Range<usize>,
    model: LocalModel,
    /// Elements of each held tensor.
    sizes: Vec<usize>,
}

impl Held {
    /// The job's initial values of tensors `range`.
    pub fn new(job: &Job, range: Range<usize>) -> Held {
        let sizes = job.layout.params()[range.clone()]
            .iter()
            .map(|p| p.elems())
            .collect();
        Held {
            range,
            model: LocalModel::new(job),
            sizes,
        }
    }

    /// Snapshots at the holder's iterations ([`Held::iteration_done`]) instead of by updates.
    pub fn snapshot_by_iterations(mut self) -> Held {
        self.model.snapshot_by_iterations();
        self
    }

    /// The holder has finished `iterations` of the job's iterations at `now` (see
    /// [`LocalModel::iteration_done`]).
    pub fn iteration_done(&mut self, iterations: u64, now: f64) -> Result<()> {
        self.model.iteration_done(iterations, now)
    }

    /// The current values of the held tensors (`None` in throughput mode).
    pub fn values(&self) -> Option<Vec<Vec<f32>>> {
        self.model.params().map(|p| p[self.range.clone()].to_vec())
    }

    /// Elements held.
    pub fn elems(&self) -> u64 {
        self.sizes.iter().map(|&n| n as u64).sum()
    }

    /// Tells the memory policy what the range keeps resident for the run: its parameters, their
    /// gradients and its optimizer state (not the whole model's, which this worker never uses).
    pub async fn reserve(&self, ctx: &mut RoleContext, job: &Job) -> Result<()> {
        let bytes = self.elems() * 4;
        let slots = job.config.optimizer.state_slots() as u64;
        for (class, bytes, what) in [
            (TensorClass::Params, bytes, "parameters"),
            (TensorClass::Grads, bytes, "gradients"),
            (
                TensorClass::OptimizerState,
                slots * bytes,
                "optimizer state",
            ),
        ] {
            let event = MemEvent::Allocate {
                class,
                bytes,
                what: what.into(),
            };
            ctx.memory_event(event).await?;
        }
        Ok(())
    }

    /// Loads the current parameters into `replica` (real models).
    pub fn load(&self, replica: Option<&Replica>) -> Result<()> {
        if let (Some(r), Some(p)) = (replica, self.model.params()) {
            r.set_params(p)?;
        }
        Ok(())
    }

    /// One optimizer step of the range from its summed gradients (`None`: throughput mode, the
    /// update only counted), then `replica` reloaded.
    pub fn apply(&mut self, grads: Grads, replica: Option<&Replica>, now: f64) -> Result<()> {
        match (grads, self.model.params()) {
            (Some(g), Some(params)) => {
                let mut all: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.len()]).collect();
                for (slot, g) in all[self.range.clone()].iter_mut().zip(g) {
                    *slot = g;
                }
                self.model.apply(&all, 1.0, now)?;
            }
            _ => self.model.bump(now)?,
        }
        self.load(replica)
    }

    /// Continues from a checkpoint: the range's values and optimizer state from `part` (a
    /// holder's [`Held::report`]) after `updates` updates.
    pub fn restore(&mut self, layout: &ParamLayout, part: &ModelState, updates: u64) -> Result<()> {
        self.model.restore(layout, part, updates)
    }

    /// Cuts a flat vector of the range's values (an allreduce result) into its tensors.
    pub fn unflatten(&self, flat: &[f32]) -> Vec<Vec<f32>> {
        let mut at = 0;
        self.sizes
            .iter()
            .map(|&n| {
                let t = flat[at..at + n].to_vec();
                at += n;
                t
            })
            .collect()
    }

    /// The range's final values, optimizer state and snapshots: the blocks of `layout` that
    /// lie in it.
    pub fn report(&mut self, layout: &ParamLayout) -> Result<ModelState> {
        Ok(part_of(self.model.report(layout)?, layout, &self.range))
    }
}

/// The blocks of `state` (final values, optimizer state, snapshots) that belong to parameter
/// tensors `range`.
pub fn part_of(mut state: ModelState, layout: &ParamLayout, range: &Range<usize>) -> ModelState {
    let mine = |b: BlockId| {
        layout
            .blocks()
            .get(b as usize)
            .is_some_and(|blk| range.contains(&blk.param))
    };
    state.blocks.retain(|b| mine(b.block));
    state.opt_state.retain(|b, _| mine(*b));
    for s in &mut state.snapshots {
        s.blocks.retain(|b| mine(b.block));
    }
    if let Some(timed) = &mut state.timed {
        for t in timed {
            t.blocks.retain(|b| mine(b.block));
        }
    }
    state
}
