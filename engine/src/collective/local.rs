//! A model replica's parameters and optimizer state, held and updated by a worker.

use super::resident::{Gradient, HostTraffic, ResidentParams};
use super::Fusion;
use crate::contract::ModelState;
use crate::error::Result;
use crate::job::Job;
use crate::model::Replica;
use crate::optim::{OptState, OptimizerConfig};
use crate::payload::BlockPayload;
use crate::payload::Payload;
use crate::ps::{ParamLayout, Snapshot, SnapshotPlan, TimedSnapshot, TimedSnapshots};
use candle_core::Tensor;
use std::ops::Range;

/// A snapshot kept until the report: updates applied, run time, parameter values.
type HeldSnapshot = (u64, f64, Option<Vec<Vec<f32>>>);

/// Host copies of the parameter values and their optimizer state (per tensor, layout order).
type HostState = (Vec<Vec<f32>>, Vec<OptState>);

/// Where the parameters and their optimizer state are.
#[derive(Debug)]
enum Held {
    /// Throughput mode: no values.
    Virtual,
    /// Host vectors, updated by the host optimizer.
    Host {
        params: Vec<Vec<f32>>,
        states: Vec<OptState>,
    },
    /// The replica's own device tensors ([`LocalModel::keep_on`]).
    Device(ResidentParams),
}

/// Parameters and optimizer state a worker holds when there is no parameter server (allreduce
/// data parallelism, RNA). Every member applies the same updates in the same order, so replicas
/// stay identical; at the end one worker reports the model's state
/// ([`LocalModel::report`]) for evaluation and the checkpoint.
///
/// The values live on the host, or, once [`LocalModel::keep_on`] hands them to a replica, in the
/// replica's own tensors on its device, where the updates then run too.
#[derive(Debug)]
pub struct LocalModel {
    held: Held,
    /// The model's parameter tensors held, in layout order (`None`: all of them).
    tensors: Option<Range<usize>>,
    optimizer: OptimizerConfig,
    updates: u64,
    snapshot_every: u64,
    /// Snapshot every this many of the holder's own iterations instead of by updates
    /// ([`LocalModel::snapshot_by_iterations`]).
    by_iterations: Option<u64>,
    /// `(updates, run time, values)` every `snapshot_every` updates.
    snapshots: Vec<HeldSnapshot>,
    /// Values at fixed run times (`eval_every_s`).
    timed: TimedSnapshots<Option<Vec<Vec<f32>>>>,
}

impl LocalModel {
    /// The job's initial parameters (none in throughput mode), its optimizer, and snapshots as
    /// the job asks (`eval_every`, `eval_every_s`).
    pub fn new(job: &Job) -> LocalModel {
        LocalModel::from_values(
            job.init.clone(),
            job.config.optimizer.clone(),
            SnapshotPlan::of(&job.config),
        )
    }

    /// A model with the given parameters (`None`: throughput mode), optimizer and snapshot plan.
    pub fn from_values(
        params: Option<Vec<Vec<f32>>>,
        optimizer: OptimizerConfig,
        snapshots: SnapshotPlan,
    ) -> LocalModel {
        let held = match params {
            Some(params) => Held::Host {
                states: params
                    .iter()
                    .map(|v| optimizer.init_state(v.len()))
                    .collect(),
                params,
            },
            None => Held::Virtual,
        };
        LocalModel {
            held,
            tensors: None,
            optimizer,
            updates: 0,
            snapshot_every: snapshots.every.max(1),
            by_iterations: None,
            snapshots: Vec::new(),
            timed: TimedSnapshots::new(snapshots.every_s),
        }
    }

    /// The job's initial values of parameter tensors `tensors` alone, with their optimizer
    /// state: what a worker that holds and trains one part of the model keeps (a pipeline
    /// stage). See [`LocalModel::with_tensors`]; an error for a range beyond the model.
    pub fn part(job: &Job, tensors: Range<usize>) -> Result<LocalModel> {
        let count = job.layout.params().len();
        if tensors.start > tensors.end || tensors.end > count {
            return Err(range_error("a part of the model", &tensors, 0..count));
        }
        let values = job.init.as_ref().map(|init| init[tensors.clone()].to_vec());
        LocalModel::from_values(
            values,
            job.config.optimizer.clone(),
            SnapshotPlan::of(&job.config),
        )
        .with_tensors(tensors)
    }

    /// Says that the values held are the model's parameter tensors `tensors` (not all of them):
    /// tensor indices stay the model's, so updates, exports and imports name tensors as for the
    /// whole model, and reports and restores cover those tensors' blocks alone. An error when
    /// real values do not count `tensors.len()` tensors.
    pub fn with_tensors(mut self, tensors: Range<usize>) -> Result<LocalModel> {
        let held = self.count().unwrap_or(tensors.len());
        if held != tensors.len() {
            return Err(crate::error::EngineError::Tensor {
                context: format!(
                    "holding parameter tensors {}..{}",
                    tensors.start, tensors.end
                ),
                source: candle_core::Error::Msg(format!("{held} tensors of values")),
            });
        }
        self.tensors = Some(tensors);
        Ok(self)
    }

    /// Moves the parameters and optimizer state into `replica`'s own tensors, on its device
    /// (a GPU, or the CPU), where they stay: steps then read them in place
    /// ([`ParamSource::Resident`](crate::dp::ParamSource::Resident)) and updates run there.
    /// The replica must hold exactly the tensors this model holds (the whole model, or a
    /// [`LocalModel::part`]'s: a [`Replica::part`] of the same stages), else an error names
    /// both. Returns whether they moved: not in throughput mode, nor for a replica whose model
    /// keeps no tensors of its own (matrix factorization, DLRM).
    pub fn keep_on(&mut self, replica: &Replica) -> Result<bool> {
        let (Some(vars), Some(theirs)) = (replica.param_vars(), replica.held_params()) else {
            return Ok(false);
        };
        let Held::Host { params, states } = &self.held else {
            return Ok(matches!(self.held, Held::Device(_)));
        };
        let mine = self.tensors.clone().unwrap_or(0..params.len());
        if theirs != mine {
            return Err(crate::error::EngineError::Tensor {
                context: format!(
                    "keeping parameter tensors {}..{} on a replica",
                    mine.start, mine.end
                ),
                source: candle_core::Error::Msg(format!(
                    "the replica holds tensors {}..{}",
                    theirs.start, theirs.end
                )),
            });
        }
        self.held = Held::Device(ResidentParams::new(vars, params, states)?);
        Ok(true)
    }

    /// How many tensors of values are held (`None` in throughput mode).
    fn count(&self) -> Option<usize> {
        match &self.held {
            Held::Virtual => None,
            Held::Host { params, .. } => Some(params.len()),
            Held::Device(d) => Some(d.len()),
        }
    }

    /// The parameter tensors held (`layout` counts the model's, for a whole model in
    /// throughput mode).
    fn span(&self, layout: &ParamLayout) -> Range<usize> {
        self.tensors.clone().unwrap_or(0..layout.params().len())
    }

    /// Model tensors `tensors` as indices into the held ones, or an error naming a range this
    /// model does not hold or a gradient count (`given`) that differs from the range's.
    fn local(&self, tensors: &Range<usize>, given: Option<usize>) -> Result<Range<usize>> {
        let first = self.tensors.as_ref().map_or(0, |r| r.start);
        let Some(count) = self.count() else {
            return Ok(tensors.clone());
        };
        let held = first..first + count;
        if tensors.start < held.start || tensors.start > tensors.end || tensors.end > held.end {
            return Err(range_error("parameter tensors", tensors, held));
        }
        if let Some(n) = given.filter(|&n| n != tensors.len()) {
            return Err(crate::error::EngineError::Tensor {
                context: format!(
                    "an update of parameter tensors {}..{}",
                    tensors.start, tensors.end
                ),
                source: candle_core::Error::Msg(format!("{n} gradients")),
            });
        }
        Ok(tensors.start - first..tensors.end - first)
    }

    /// The held parameters (per tensor, layout order) when they are on the host; `None` in
    /// throughput mode and when they live on a replica's device ([`LocalModel::values`] reads
    /// them from there).
    pub fn params(&self) -> Option<&[Vec<f32>]> {
        match &self.held {
            Held::Host { params, .. } => Some(params),
            Held::Virtual | Held::Device(_) => None,
        }
    }

    /// A host copy of the held parameters wherever they live; `None` in throughput mode.
    pub fn values(&mut self) -> Result<Option<Vec<Vec<f32>>>> {
        match &mut self.held {
            Held::Virtual => Ok(None),
            Held::Host { params, .. } => Ok(Some(params.clone())),
            Held::Device(d) => d.values().map(Some),
        }
    }

    /// A digest of the parameters' bits ([`super::digest`]), to check that replicas agree:
    /// `None` in throughput mode, and for values on an accelerator, where reading them back after
    /// every round would cost the transfer keeping them there saves (on the CPU the replica's
    /// tensors are host memory, and they are read in place).
    pub fn digest(&mut self) -> Result<Option<u64>> {
        match &mut self.held {
            Held::Virtual => Ok(None),
            Held::Host { params, .. } => Ok(Some(super::digest(params))),
            Held::Device(d) if d.rule() == super::UpdateRule::InPlace => {
                d.values().map(|v| Some(super::digest(&v)))
            }
            Held::Device(_) => Ok(None),
        }
    }

    /// Whether the parameters are real (not throughput mode).
    pub fn is_real(&self) -> bool {
        !matches!(self.held, Held::Virtual)
    }

    /// What crossed between the host and the device since [`LocalModel::keep_on`]; `None` while
    /// the parameters are on the host.
    pub fn host_traffic(&self) -> Option<HostTraffic> {
        match &self.held {
            Held::Device(d) => Some(d.traffic()),
            Held::Virtual | Held::Host { .. } => None,
        }
    }

    /// Updates applied so far (the model's version).
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Records the current values for every timed snapshot due before `now`, ahead of a change.
    fn before_change(&mut self, now: f64) -> Result<()> {
        if !self.timed.due_before(now) {
            return Ok(());
        }
        let values = self.values()?;
        self.timed.before_change(now, || values);
        Ok(())
    }

    /// Applies one optimizer step from `grads` (one per tensor, layout order) with the learning
    /// rate scaled by `lr_scale` (1 in plain data parallelism; RNA's Σw/P), then snapshots if
    /// due at `now`.
    pub fn apply<G: Gradient>(&mut self, grads: &[G], lr_scale: f64, now: f64) -> Result<()> {
        let opt = self.optimizer.with_lr_scale(lr_scale);
        self.step(None, grads, &opt, now)
    }

    /// [`LocalModel::apply`] for model tensors `tensors` alone, from their gradients (one
    /// per tensor of the range): the update of a worker that trains only that part of the
    /// model (a pipeline stage); the other tensors and their optimizer state do not change.
    /// An error names a range this model does not hold or a gradient count that differs from
    /// the range's, before anything changes.
    pub fn apply_to<G: Gradient>(
        &mut self,
        tensors: Range<usize>,
        grads: &[G],
        now: f64,
    ) -> Result<()> {
        let local = self.local(&tensors, Some(grads.len()))?;
        let opt = self.optimizer.clone();
        self.step(Some(local), grads, &opt, now)
    }

    /// One step of `opt` on held tensors `tensors` (indices among the held ones; `None`: every
    /// tensor) where they are held, then the update counted (and snapshotted if due at `now`).
    fn step<G: Gradient>(
        &mut self,
        tensors: Option<Range<usize>>,
        grads: &[G],
        opt: &OptimizerConfig,
        now: f64,
    ) -> Result<()> {
        self.before_change(now)?;
        match &mut self.held {
            Held::Virtual => {}
            Held::Host { params, states } => {
                let range = tensors.unwrap_or(0..params.len());
                for ((p, g), st) in params[range.clone()]
                    .iter_mut()
                    .zip(grads)
                    .zip(&mut states[range])
                {
                    g.with_host(|g| opt.step(p, g, st))?;
                }
            }
            Held::Device(d) => match tensors {
                Some(range) => d.apply_to(range, opt, grads)?,
                None => d.apply(opt, grads)?,
            },
        }
        self.bump(now)
    }

    /// Applies the result of an allreduce of `[Σ gradients, Σw]` fused by `fusion` (one trailing
    /// scalar, the contributors' weight): the update uses the mean `Σg / Σw` with the learning
    /// rate scaled by `Σw / group_size` (the linear scaling rule, RNA §5.1.3; 1 when every member
    /// contributed). The sum is taken by value and averaged where it lies, so a step of a large
    /// model copies nothing. Virtual buffers only count the update. Returns Σw (0 for a virtual
    /// buffer).
    pub fn apply_reduced(
        &mut self,
        fusion: &Fusion,
        sum: Payload,
        group_size: usize,
        now: f64,
    ) -> Result<f64> {
        match sum {
            Payload::Real(mut flat) if self.is_real() => {
                let tensors = fusion.tensor_elems().min(flat.len());
                let w = flat.get(tensors).copied().unwrap_or(0.0);
                if w > 0.0 {
                    for x in &mut flat[..tensors] {
                        *x /= w;
                    }
                    let (grads, _) = fusion.views(&flat);
                    self.apply(&grads, w as f64 / group_size as f64, now)?;
                } else {
                    self.bump(now)?;
                }
                Ok(w as f64)
            }
            _ => {
                self.bump(now)?;
                Ok(0.0)
            }
        }
    }

    /// [`LocalModel::apply_reduced`] for a sum left on the device by a collective that reduces
    /// there (NCCL): the mean is taken and the tensors cut out where the sum lies, so only the
    /// contributors' weight (one scalar) crosses to the host. Given the same sum it makes the
    /// host form's update bit for bit (the same f32 division). An error names a sum whose size
    /// is not the fused layout's. Returns Σw (0 in throughput mode).
    pub fn apply_reduced_tensor(
        &mut self,
        fusion: &Fusion,
        sum: &Tensor,
        group_size: usize,
        now: f64,
    ) -> Result<f64> {
        if !self.is_real() {
            self.bump(now)?;
            return Ok(0.0);
        }
        let fail = |what: &str, source: candle_core::Error| crate::error::EngineError::Tensor {
            context: format!("{what} of an allreduced sum"),
            source,
        };
        if sum.elem_count() != fusion.len() {
            return Err(fail(
                "the size",
                candle_core::Error::Msg(format!(
                    "{} elements for a fused buffer of {}",
                    sum.elem_count(),
                    fusion.len()
                )),
            ));
        }
        let tensors = fusion.tensor_elems();
        let flat = sum.flatten_all().map_err(|e| fail("the layout", e))?;
        let w = if fusion.len() > tensors {
            flat.narrow(0, tensors, 1)
                .and_then(|w| w.to_vec1::<f32>())
                .map_err(|e| fail("the weight", e))?[0]
        } else {
            0.0
        };
        if w <= 0.0 {
            self.bump(now)?;
            return Ok(w as f64);
        }
        let mean = Tensor::new(w, flat.device())
            .and_then(|w| flat.narrow(0, 0, tensors)?.broadcast_div(&w))
            .map_err(|e| fail("the mean", e))?;
        let grads = fusion.tensor_views(&mean)?;
        self.apply(&grads, w as f64 / group_size as f64, now)?;
        Ok(w as f64)
    }

    /// Snapshots at the holder's own iterations ([`LocalModel::iteration_done`]) rather than
    /// every `eval_every` updates: for a holder whose updates do not count the job's iterations
    /// (a pipeline stage updates once per minibatch, or per round of its replicas).
    pub fn snapshot_by_iterations(&mut self) {
        self.by_iterations = Some(self.snapshot_every);
    }

    /// The holder has finished `iterations` of the job's iterations at `now`: a snapshot when due
    /// under [`LocalModel::snapshot_by_iterations`] (nothing otherwise).
    pub fn iteration_done(&mut self, iterations: u64, now: f64) -> Result<()> {
        if let Some(every) = self.by_iterations {
            if iterations.is_multiple_of(every) {
                let values = self.values()?;
                self.snapshots.push((iterations, now, values));
            }
        }
        Ok(())
    }

    /// Counts an update with no math (throughput mode, or an update made elsewhere).
    pub fn bump(&mut self, now: f64) -> Result<()> {
        self.updates += 1;
        if self.by_iterations.is_none() && self.updates.is_multiple_of(self.snapshot_every) {
            // Blocks are cut at report time; keep the values (one copy per snapshot).
            let values = self.values()?;
            self.snapshots.push((self.updates, now, values));
        }
        Ok(())
    }

    /// Replaces the parameters (model averaging) at run time `now`, keeping the optimizer state.
    pub fn set_params(&mut self, values: Vec<Vec<f32>>, now: f64) -> Result<()> {
        self.before_change(now)?;
        match &mut self.held {
            Held::Virtual => {}
            Held::Host { params, .. } => *params = values,
            Held::Device(d) => d.set_values(&values)?,
        }
        Ok(())
    }

    /// Host copies of the values and optimizer state, wherever they live (`None` in throughput
    /// mode).
    fn host_state(&mut self) -> Result<Option<HostState>> {
        match &mut self.held {
            Held::Virtual => Ok(None),
            Held::Host { params, states } => Ok(Some((params.clone(), states.clone()))),
            Held::Device(d) => Ok(Some((d.values()?, d.states()?))),
        }
    }

    /// The values and optimizer state of model tensors `tensors`, packed into one vector
    /// (values, then each optimizer slot, tensor by tensor): what a worker hands a peer that
    /// starts keeping those tensors (a sub-model changing hands). Empty in throughput mode. Only
    /// those tensors come down from a replica's device; an error for tensors not held.
    pub fn export(&mut self, tensors: Range<usize>) -> Result<Vec<f32>> {
        let tensors = self.local(&tensors, None)?;
        Ok(match &mut self.held {
            Held::Virtual => Vec::new(),
            Held::Host { params, states } => pack(&params[tensors.clone()], &states[tensors]),
            Held::Device(d) => {
                let (params, states) = d.tensors(tensors)?;
                pack(&params, &states)
            }
        })
    }

    /// Takes over model tensors `tensors` from a peer's [`LocalModel::export`] at run time
    /// `now`; `false` (and nothing changed) when `packed` does not have their size. Only those
    /// tensors go up to a replica's device; each keeps its own update count. An error for
    /// tensors not held.
    pub fn import(&mut self, tensors: Range<usize>, packed: &[f32], now: f64) -> Result<bool> {
        let tensors = self.local(&tensors, None)?;
        let slots = self.optimizer.state_slots();
        let elems = match &self.held {
            Held::Virtual => return Ok(true),
            Held::Host { params, .. } => params[tensors.clone()].iter().map(Vec::len).collect(),
            Held::Device(d) => d.elems(tensors.clone())?,
        };
        let need: usize = elems.iter().map(|n| n * (1 + slots)).sum();
        if need != packed.len() {
            return Ok(false);
        }
        self.before_change(now)?;
        let mut at = 0;
        let mut take = |n: usize| {
            let v = packed[at..at + n].to_vec();
            at += n;
            v
        };
        let mut values = Vec::with_capacity(elems.len());
        let mut new_slots = Vec::with_capacity(elems.len());
        for &n in &elems {
            values.push(take(n));
            new_slots.push((0..slots).map(|_| take(n)).collect::<Vec<_>>());
        }
        match &mut self.held {
            Held::Virtual => {}
            Held::Host { params, states } => {
                for ((i, v), s) in tensors.zip(values).zip(new_slots) {
                    params[i] = v;
                    states[i].slots = s;
                }
            }
            Held::Device(d) => d.load_tensors(tensors, &values, &new_slots)?,
        }
        Ok(true)
    }

    /// Replaces the values and optimizer state with host copies, wherever they live.
    fn put_host_state(&mut self, values: Vec<Vec<f32>>, new: Vec<OptState>) -> Result<()> {
        match &mut self.held {
            Held::Virtual => Ok(()),
            Held::Host { params, states } => {
                *params = values;
                *states = new;
                Ok(())
            }
            Held::Device(d) => d.load(&values, &new),
        }
    }

    /// Continues from a checkpoint: the parameters and optimizer state of `model` (cut into
    /// `layout`'s blocks, as [`LocalModel::report`] gives them) after `updates` updates.
    pub fn restore(
        &mut self,
        layout: &ParamLayout,
        model: &ModelState,
        updates: u64,
    ) -> Result<()> {
        self.updates = updates;
        let span = self.span(layout);
        let Some((mut params, mut states)) = self.host_state()? else {
            return Ok(());
        };
        layout.write_part(&model.blocks, span.clone(), &mut params);
        for b in layout.blocks().iter().filter(|b| span.contains(&b.param)) {
            let (Some(state), Some(saved)) = (
                states.get_mut(b.param - span.start),
                model.opt_state.get(&b.id),
            ) else {
                continue;
            };
            state.step = saved.step;
            for (slot, saved) in state.slots.iter_mut().zip(&saved.slots) {
                slot[b.offset..b.offset + b.len].copy_from_slice(saved);
            }
        }
        self.put_host_state(params, states)
    }

    /// The model's state: every block of `layout` (of the held tensors, for a
    /// [`LocalModel::part`]), its optimizer state, the snapshots.
    pub fn report(&mut self, layout: &ParamLayout) -> Result<ModelState> {
        let span = self.span(layout);
        let blocks_of = |values: Option<&[Vec<f32>]>| -> Vec<BlockPayload> {
            (0..layout.servers())
                .flat_map(|s| layout.slice_part(s, span.clone(), values))
                .collect()
        };
        let (params, states) = self.host_state()?.unzip();
        let mut report = ModelState {
            blocks: blocks_of(params.as_deref()),
            ..ModelState::default()
        };
        for b in layout.blocks().iter().filter(|b| span.contains(&b.param)) {
            if let Some(st) = states.as_ref().and_then(|s| s.get(b.param - span.start)) {
                report.opt_state.insert(
                    b.id,
                    OptState {
                        step: st.step,
                        slots: st
                            .slots
                            .iter()
                            .map(|s| s[b.offset..b.offset + b.len].to_vec())
                            .collect(),
                    },
                );
            }
        }
        report.snapshots = self
            .snapshots
            .iter()
            .map(|(iterations, time_s, values)| Snapshot {
                iterations: *iterations,
                time_s: *time_s,
                blocks: blocks_of(values.as_deref()),
            })
            .collect();
        report.timed = self.timed.enabled().then(|| {
            self.timed
                .map(|values| blocks_of(values.as_deref()))
                .into_iter()
                .map(|(indices, blocks)| TimedSnapshot { indices, blocks })
                .collect()
        });
        Ok(report)
    }
}

/// An error naming tensors `tensors` as not among `there` (the model's, or those held).
fn range_error(
    what: &str,
    tensors: &Range<usize>,
    there: Range<usize>,
) -> crate::error::EngineError {
    crate::error::EngineError::Tensor {
        context: format!("{what} {}..{}", tensors.start, tensors.end),
        source: candle_core::Error::Msg(format!("outside tensors {}..{}", there.start, there.end)),
    }
}

/// Values and optimizer slots packed into one vector, tensor by tensor (values, then each
/// slot): [`LocalModel::export`]'s layout.
fn pack(params: &[Vec<f32>], states: &[OptState]) -> Vec<f32> {
    let mut out = Vec::new();
    for (values, state) in params.iter().zip(states) {
        out.extend_from_slice(values);
        for slot in &state.slots {
            out.extend_from_slice(slot);
        }
    }
    out
}
