//! A stage's weight versions on its replica's device (thesis §5.4: the stage's parameters, and
//! the versions stashed for minibatches in flight, stay in the worker's device memory).
//!
//! The replica's own parameter variables hold the latest version: the optimizer updates them in
//! place, and a pass on the latest version reads them where they are. An older version is a
//! copy of the variables taken on the device before they moved on; a pass that needs it has it
//! copied into the variables, and the latest version comes back from its own copy before the
//! next update. Nothing crosses to the host: this is how PipeDream's runtime swaps a stashed
//! version in for a backward pass and the latest one back for the optimizer.
//!
//! Copies are taken only when a version must outlive a change of the variables: the last stage
//! of a straight pipeline, whose backward pass follows its forward pass on the same version,
//! copies nothing.

use crate::versions::Versions;
use candle_core::{Tensor, Var};
use concord_engine::prelude::*;
use concord_engine::submodel::tensor_error;

/// A stage's versions and the variables that hold the one its replica computes with.
pub struct StageWeights {
    versions: Versions<Vec<Tensor>>,
    /// The stage's parameter variables in the replica (layout order); `None` in throughput mode,
    /// where versions are only counted.
    vars: Option<Vec<Var>>,
    /// The version the variables hold.
    loaded: u64,
    /// Device copies made: versions kept and versions copied into the variables.
    copies: u64,
}

impl StageWeights {
    /// `versions` (none of them with values: the latest is in `vars`), over the stage's
    /// parameter variables, which hold the latest version now.
    pub fn new(versions: Versions<Vec<Tensor>>, vars: Option<Vec<Var>>) -> StageWeights {
        StageWeights {
            loaded: versions.latest(),
            versions,
            vars,
            copies: 0,
        }
    }

    /// Readies minibatch `mb`'s forward pass (carrying `watermark` under vertical sync): the
    /// variables hold its version. Returns the version.
    pub fn forward(&mut self, mb: u64, watermark: Option<u64>) -> Result<u64> {
        let id = self.versions.forward(mb, watermark);
        self.load(id)?;
        Ok(id)
    }

    /// Readies minibatch `mb`'s backward pass: the variables hold the version its forward pass
    /// ran on (stashing, vertical sync) or the latest. Returns the version.
    pub fn backward(&mut self, mb: u64) -> Result<u64> {
        let id = self.versions.backward(mb);
        self.load(id)?;
        Ok(id)
    }

    /// Minibatch `mb` is done here: its version may go.
    pub fn release(&mut self, mb: u64) {
        self.versions.release(mb);
    }

    /// Readies the variables for the optimizer to update in place: they hold the latest
    /// version, and a copy of it is kept when a minibatch in flight (or a later watermark)
    /// still needs it after the update.
    pub fn before_update(&mut self) -> Result<()> {
        let latest = self.versions.latest();
        self.load(latest)?;
        if self.versions.latest_outlives_update() {
            self.keep_latest()?;
        }
        Ok(())
    }

    /// The optimizer has updated the variables in place: they hold a new latest version, which
    /// took in minibatches `0..watermark`.
    pub fn updated(&mut self, watermark: u64) {
        self.versions.update(None, watermark);
        self.loaded = self.versions.latest();
    }

    /// Makes the variables hold the latest version again (before the model is read for a
    /// snapshot or the report).
    pub fn restore_latest(&mut self) -> Result<()> {
        self.load(self.versions.latest())
    }

    /// The versions' bookkeeping.
    pub fn versions(&self) -> &Versions<Vec<Tensor>> {
        &self.versions
    }

    /// Device copies made so far: versions kept, and versions copied into the variables.
    pub fn copies(&self) -> u64 {
        self.copies
    }

    /// Weight copies held beside the variables: the stashed versions', and the latest's while
    /// a stashed version is loaded in its place (what a real run keeps on the device; in
    /// throughput mode, what it would keep).
    pub fn copies_held(&self) -> usize {
        self.versions.with_values()
    }

    /// Copies version `id` into the variables, unless they hold it; the latest version, when
    /// the variables are its only home, is kept first.
    fn load(&mut self, id: u64) -> Result<()> {
        if self.loaded == id {
            return Ok(());
        }
        if self.loaded == self.versions.latest() {
            self.keep_latest()?;
        }
        if let Some(vars) = &self.vars {
            let Some(values) = self.versions.values(id) else {
                return Err(tensor_error(
                    "load a weight version",
                    candle_core::Error::Msg(format!("version {id} is no longer kept")),
                ));
            };
            for (var, t) in vars.iter().zip(values) {
                var.set(t)
                    .map_err(|e| tensor_error("load a weight version", e))?;
            }
            self.copies += 1;
        }
        self.loaded = id;
        Ok(())
    }

    /// Keeps a copy of the latest version, which the variables hold, unless one is kept. In
    /// throughput mode the copy is an empty stand-in: it is counted, not made.
    fn keep_latest(&mut self) -> Result<()> {
        let latest = self.versions.latest();
        if self.loaded != latest || self.versions.values(latest).is_some() {
            return Ok(());
        }
        let Some(vars) = &self.vars else {
            self.versions.set_values(latest, Vec::new());
            return Ok(());
        };
        let copy = vars
            .iter()
            .map(|v| v.as_tensor().copy())
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| tensor_error("keep a weight version", e))?;
        self.versions.set_values(latest, copy);
        self.copies += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::Weights;
    use candle_core::Device;

    fn vars(x: f32) -> Vec<Var> {
        vec![
            Var::from_slice(&[x, x], 2, &Device::Cpu).unwrap(),
            Var::from_slice(&[x], 1, &Device::Cpu).unwrap(),
        ]
    }

    fn read(vars: &[Var]) -> Vec<f32> {
        vars.iter()
            .flat_map(|v| v.as_tensor().to_vec1::<f32>().unwrap())
            .collect()
    }

    /// The optimizer's in-place update, as the stage's `Held` makes it.
    fn step(vars: &[Var], to: f32) {
        for v in vars {
            let n = v.elem_count();
            v.set(&Tensor::from_vec(vec![to; n], n, &Device::Cpu).unwrap())
                .unwrap();
        }
    }

    fn update(w: &mut StageWeights, vars: &[Var], to: f32, watermark: u64) {
        w.before_update().unwrap();
        step(vars, to);
        w.updated(watermark);
    }

    #[test]
    fn a_backward_pass_runs_on_its_stashed_version_and_the_update_on_the_latest() {
        let v = vars(0.0);
        let mut w = StageWeights::new(Versions::new(Weights::Stash, None), Some(v.clone()));
        w.forward(0, None).unwrap();
        w.forward(1, None).unwrap();
        update(&mut w, &v, 1.0, 1);
        w.forward(2, None).unwrap();
        update(&mut w, &v, 2.0, 2);
        // Minibatch 0 ran forward on version 0: its backward pass sees version 0's values.
        assert_eq!(w.backward(0).unwrap(), 0);
        assert_eq!(read(&v), vec![0.0; 3]);
        w.release(0);
        // Minibatch 2 ran forward on version 1.
        assert_eq!(w.backward(2).unwrap(), 1);
        assert_eq!(read(&v), vec![1.0; 3]);
        w.release(2);
        // The next update starts from the latest version, not from the stashed one.
        w.before_update().unwrap();
        assert_eq!(read(&v), vec![2.0; 3]);
        step(&v, 3.0);
        w.updated(3);
        // The stashed versions were never changed by an update.
        assert_eq!(w.backward(1).unwrap(), 0);
        assert_eq!(read(&v), vec![0.0; 3]);
        w.release(1);
        w.restore_latest().unwrap();
        assert_eq!(read(&v), vec![3.0; 3]);
        assert_eq!(w.versions().alive(), 1);
    }

    #[test]
    fn a_pass_on_the_latest_version_copies_nothing() {
        let v = vars(0.0);
        let mut w = StageWeights::new(Versions::new(Weights::Stash, None), Some(v.clone()));
        for mb in 0..5 {
            w.forward(mb, None).unwrap();
            w.backward(mb).unwrap();
            w.release(mb);
            update(&mut w, &v, mb as f32 + 1.0, mb + 1);
        }
        assert_eq!(w.copies(), 0);
        assert_eq!(read(&v), vec![5.0; 3]);
    }

    #[test]
    fn one_minibatch_in_flight_costs_three_copies_an_update() {
        // Stage 0 of a two-stage pipeline in steady state: forward b+1, backward b, update.
        let v = vars(0.0);
        let mut w = StageWeights::new(Versions::new(Weights::Stash, None), Some(v.clone()));
        w.forward(0, None).unwrap();
        for mb in 0..4 {
            w.forward(mb + 1, None).unwrap();
            w.backward(mb).unwrap();
            w.release(mb);
            update(&mut w, &v, mb as f32 + 1.0, mb + 1);
        }
        // The first round's backward pass runs on the latest version, which the update then
        // keeps for minibatch 1 (one copy). Every later round: keep the latest, copy the
        // stashed one in, copy the latest back (three).
        assert_eq!(w.copies(), 1 + 3 * 3);
    }

    #[test]
    fn vertical_sync_keeps_every_version_a_later_watermark_may_need() {
        let v = vars(0.0);
        let mut w = StageWeights::new(Versions::new(Weights::VerticalSync, None), Some(v.clone()));
        update(&mut w, &v, 1.0, 1);
        update(&mut w, &v, 2.0, 2);
        assert_eq!(w.forward(5, Some(1)).unwrap(), 1);
        assert_eq!(read(&v), vec![1.0; 3]);
        w.backward(5).unwrap();
        w.release(5);
        w.restore_latest().unwrap();
        assert_eq!(read(&v), vec![2.0; 3]);
    }

    #[test]
    fn in_throughput_mode_versions_are_only_counted() {
        let mut w = StageWeights::new(Versions::new(Weights::Stash, None), None);
        w.forward(0, None).unwrap();
        w.before_update().unwrap();
        w.updated(1);
        assert_eq!(w.backward(0).unwrap(), 0);
        assert_eq!(w.versions().alive(), 2);
        assert_eq!(w.copies(), 0);
    }
}
