//! The part of the model a baseline worker holds: a contiguous range of parameter tensors (a
//! pipeline stage, the conv part, the FC block), its optimizer state, its update, its share of
//! device memory, and its report.
//!
//! The worker keeps a [`LocalModel::part`] of its range alone (so the engine's optimizer,
//! snapshot and report code applies unchanged, and nothing of the rest of the model is kept):
//! the run's final model is the union of the holders' parts, each block exactly once. Real
//! parameters live in the worker's replica once [`Held::keep_on`] moves them there, as on a GPU
//! they should; a [`Replica::part`] of the range's stages holds them and nothing else.

#[cfg(doc)]
use super::math::Grads;
use crate::collective::{Gradient, HostTraffic, LocalModel};
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
    /// The job's initial values of tensors `range`; an error for a range beyond the model.
    pub fn new(job: &Job, range: Range<usize>) -> Result<Held> {
        let model = LocalModel::part(job, range.clone())?;
        let sizes = job.layout.params()[range.clone()]
            .iter()
            .map(|p| p.elems())
            .collect();
        Ok(Held {
            range,
            model,
            sizes,
        })
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

    /// Moves the parameters and the range's optimizer state into `replica`'s own tensors on its
    /// device, where they stay: the holder's passes then read them in place, and its updates run
    /// there ([`LocalModel::keep_on`]). `replica` must hold the range alone (a [`Replica::part`]
    /// of its stages), else an error names both. Returns whether they moved (not in throughput
    /// mode).
    pub fn keep_on(&mut self, replica: &Replica) -> Result<bool> {
        self.model.keep_on(replica)
    }

    /// What crossed between the host and the replica's device since [`Held::keep_on`]; `None`
    /// while the parameters are on the host.
    pub fn host_traffic(&self) -> Option<HostTraffic> {
        self.model.host_traffic()
    }

    /// One optimizer step of the range alone from its summed gradients at run time `now`, one
    /// per tensor: device tensors as the backward pass left them ([`Grads`]), or host values
    /// (a collective's sum, [`Held::unflatten`]); `None`: throughput mode, the update only
    /// counted. Where the parameters live in a replica ([`Held::keep_on`]), the step runs there
    /// and the replica's passes see it; gradients already on its device stay there.
    pub fn apply<G: Gradient>(&mut self, grads: Option<Vec<G>>, now: f64) -> Result<()> {
        match grads {
            Some(g) if self.model.is_real() => self.model.apply_to(self.range.clone(), &g, now),
            _ => self.model.bump(now),
        }
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
        self.model.report(layout)
    }
}
