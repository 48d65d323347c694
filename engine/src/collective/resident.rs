//! Parameters that stay on the replica's device between steps, with the optimizer state beside
//! them: what a worker that applies its own updates keeps on a GPU, as a PyTorch DDP job does.
//!
//! The replica's own variables are the parameters, so a step reads them where they are and only
//! what a collective moves crosses to the host: the gradients go down for the message ring and
//! their sum comes back up. Values come down only when something on the host reads them (a
//! snapshot, the report, a checkpoint, a sub-model handed to a peer).

use crate::error::{EngineError, Result};
use crate::optim::{OptState, OptimizerConfig};
use candle_core::{CpuStorage, Device, InplaceOp1, Layout, Shape, Storage, Tensor, Var};
use std::cell::RefCell;
use std::ops::Range;

/// Bytes that crossed between the host and the device for a resident model (on a CPU replica,
/// the same accounting: what was copied into and read out of its tensors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTraffic {
    /// Host to device: values loaded, gradients (or their sum) applied.
    pub uploaded_bytes: u64,
    /// Device to host: values and optimizer state read back.
    pub downloaded_bytes: u64,
}

/// How the optimizer's update runs on the replica's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateRule {
    /// The host rule ([`OptimizerConfig::step`]) on the variables' own elements, the optimizer
    /// state in host vectors: for a CPU replica, whose tensors are host memory. Chained tensor
    /// operations would allocate a temporary per operation and take four to ten times as long.
    InPlace,
    /// Tensor operations on the device ([`OptimizerConfig::step_tensor`]), the optimizer state
    /// in device tensors: for an accelerator.
    Tensors,
}

impl UpdateRule {
    /// The rule for variables on `device`: in place on the CPU, tensor operations elsewhere.
    pub fn for_device(device: &Device) -> UpdateRule {
        if device.is_cpu() {
            UpdateRule::InPlace
        } else {
            UpdateRule::Tensors
        }
    }
}

/// One parameter's gradient as an update takes it: host values (what a collective brought
/// back), or a tensor where the backward pass left it. A worker that applies its own gradients
/// and sends them nowhere (an unreplicated pipeline stage) keeps them as tensors, so on a GPU
/// they never cross to the host and back.
pub trait Gradient {
    /// Element count.
    fn elems(&self) -> usize;

    /// Bytes an update copies up to the parameters' device to read it: the values' size for
    /// host values, nothing for a tensor.
    fn upload_bytes(&self) -> u64;

    /// Runs `f` on the values as one flat host slice: in place for host values and a
    /// contiguous CPU tensor, read back from the device otherwise.
    fn with_host<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R>;

    /// The gradient as a tensor of `shape` on `device`: the tensor itself where it already is
    /// (reshaped), else a copy uploaded there.
    fn on_device(&self, shape: &Shape, device: &Device) -> Result<Tensor>;
}

impl Gradient for [f32] {
    fn elems(&self) -> usize {
        self.len()
    }

    fn upload_bytes(&self) -> u64 {
        4 * self.len() as u64
    }

    fn with_host<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        Ok(f(self))
    }

    fn on_device(&self, shape: &Shape, device: &Device) -> Result<Tensor> {
        Tensor::from_slice(self, shape, device).map_err(|e| device_error("upload a gradient", e))
    }
}

impl Gradient for Vec<f32> {
    fn elems(&self) -> usize {
        self.len()
    }

    fn upload_bytes(&self) -> u64 {
        self.as_slice().upload_bytes()
    }

    fn with_host<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        Ok(f(self))
    }

    fn on_device(&self, shape: &Shape, device: &Device) -> Result<Tensor> {
        self.as_slice().on_device(shape, device)
    }
}

impl Gradient for &[f32] {
    fn elems(&self) -> usize {
        self.len()
    }

    fn upload_bytes(&self) -> u64 {
        (*self).upload_bytes()
    }

    fn with_host<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        Ok(f(self))
    }

    fn on_device(&self, shape: &Shape, device: &Device) -> Result<Tensor> {
        (*self).on_device(shape, device)
    }
}

impl Gradient for Tensor {
    fn elems(&self) -> usize {
        self.elem_count()
    }

    fn upload_bytes(&self) -> u64 {
        0
    }

    fn with_host<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        {
            let (storage, layout) = self.storage_and_layout();
            if let (Storage::Cpu(CpuStorage::F32(values)), Some((start, end))) =
                (&*storage, layout.contiguous_offsets())
            {
                return Ok(f(&values[start..end]));
            }
        }
        Ok(f(&download(self, "read a gradient")?))
    }

    fn on_device(&self, shape: &Shape, device: &Device) -> Result<Tensor> {
        let what = "take a gradient to the parameters' device";
        let moved;
        let here = if self.device().same_device(device) {
            self
        } else {
            moved = self.to_device(device).map_err(|e| device_error(what, e))?;
            &moved
        };
        here.reshape(shape).map_err(|e| device_error(what, e))
    }
}

/// The optimizer's state beside the variables, where its rule runs.
#[derive(Debug)]
enum HeldState {
    /// Per tensor, host vectors ([`UpdateRule::InPlace`]).
    Host(Vec<OptState>),
    /// Per tensor, device tensors and the updates applied ([`UpdateRule::Tensors`]).
    Device {
        slots: Vec<Vec<Tensor>>,
        steps: Vec<u64>,
    },
}

/// A replica's parameter variables (layout order) and their optimizer state on its device.
#[derive(Debug)]
pub struct ResidentParams {
    vars: Vec<Var>,
    rule: UpdateRule,
    state: HeldState,
    traffic: HostTraffic,
}

/// A device failure while keeping the parameters.
fn device_error(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Gpu {
        what: format!("{what} on the replica's device"),
        reason: e.to_string(),
    }
}

impl ResidentParams {
    /// Takes `vars` (a replica's parameters, layout order) as the model, loading `values` and
    /// the optimizer `states` into them; the update runs by the rule for their device
    /// ([`UpdateRule::for_device`]).
    pub fn new(vars: Vec<Var>, values: &[Vec<f32>], states: &[OptState]) -> Result<Self> {
        let rule = vars
            .first()
            .map_or(UpdateRule::InPlace, |v| UpdateRule::for_device(v.device()));
        Self::with_rule(vars, values, states, rule)
    }

    /// [`ResidentParams::new`] with the update rule given: an error for
    /// [`UpdateRule::InPlace`] on variables that are not on the CPU.
    pub fn with_rule(
        vars: Vec<Var>,
        values: &[Vec<f32>],
        states: &[OptState],
        rule: UpdateRule,
    ) -> Result<Self> {
        if rule == UpdateRule::InPlace && vars.iter().any(|v| !v.device().is_cpu()) {
            return Err(device_error(
                "update the parameters in place",
                "only a CPU replica's tensors are host memory",
            ));
        }
        let mut held = ResidentParams {
            vars,
            rule,
            state: HeldState::Host(Vec::new()),
            traffic: HostTraffic::default(),
        };
        held.load(values, states)?;
        Ok(held)
    }

    /// Replaces the values and the optimizer state with host copies (as a checkpoint or a peer
    /// holds them); an error when the counts or sizes differ from the variables'.
    pub fn load(&mut self, values: &[Vec<f32>], states: &[OptState]) -> Result<()> {
        if values.len() != self.vars.len() || states.len() != self.vars.len() {
            return Err(EngineError::Gpu {
                what: "load the parameters onto the replica's device".into(),
                reason: format!(
                    "{} values and {} optimizer states for {} parameters",
                    values.len(),
                    states.len(),
                    self.vars.len()
                ),
            });
        }
        self.set_values(values)?;
        self.traffic.uploaded_bytes += states.iter().map(OptState::bytes).sum::<u64>();
        self.state = match self.rule {
            UpdateRule::InPlace => HeldState::Host(states.to_vec()),
            UpdateRule::Tensors => {
                let upload = |v: &Vec<f32>, like: &Var| {
                    Tensor::from_slice(v, like.shape(), like.device())
                        .map_err(|e| device_error("load the optimizer state", e))
                };
                let slots = states
                    .iter()
                    .zip(&self.vars)
                    .map(|(state, var)| state.slots.iter().map(|s| upload(s, var)).collect())
                    .collect::<Result<Vec<Vec<_>>>>()?;
                HeldState::Device {
                    slots,
                    steps: states.iter().map(|s| s.step).collect(),
                }
            }
        };
        Ok(())
    }

    /// Replaces the values, keeping the optimizer state (model averaging).
    pub fn set_values(&mut self, values: &[Vec<f32>]) -> Result<()> {
        let vars: Vec<&Var> = self.vars.iter().collect();
        concord_workloads::model::load_vars(&vars, values)
            .map_err(|e| device_error("load the parameters", e))?;
        self.traffic.uploaded_bytes += bytes_of(values);
        Ok(())
    }

    /// One optimizer update of every tensor from its gradient (layout order): host gradients go
    /// up, tensors are used where they are; the update runs on the device.
    pub fn apply<G: Gradient>(&mut self, optimizer: &OptimizerConfig, grads: &[G]) -> Result<()> {
        self.apply_to(0..self.vars.len(), optimizer, grads)
    }

    /// One optimizer update of tensors `range` alone from their gradients (a sub-model's
    /// holder, such as a pipeline stage, updates only its part); an error naming a range beyond
    /// the model, a gradient count that differs from the range's or a gradient whose size
    /// differs from its tensor's, before anything changes.
    pub fn apply_to<G: Gradient>(
        &mut self,
        range: Range<usize>,
        optimizer: &OptimizerConfig,
        grads: &[G],
    ) -> Result<()> {
        let what = "apply an update";
        let vars = self
            .vars
            .get(range.clone())
            .ok_or_else(|| out_of(what, &range, self.vars.len()))?;
        if grads.len() != vars.len() {
            return Err(device_error(
                what,
                format!("{} gradients for {} parameters", grads.len(), vars.len()),
            ));
        }
        for (i, (var, g)) in range.clone().zip(vars.iter().zip(grads)) {
            if g.elems() != var.elem_count() {
                return Err(device_error(
                    what,
                    format!(
                        "a gradient of {} elements for parameter {i} of {}",
                        g.elems(),
                        var.elem_count()
                    ),
                ));
            }
        }
        for (i, (var, g)) in range.zip(vars.iter().zip(grads)) {
            self.traffic.uploaded_bytes += g.upload_bytes();
            match &mut self.state {
                HeldState::Host(states) => g.with_host(|g| {
                    let rule = HostRule {
                        optimizer,
                        grad: g,
                        state: RefCell::new(&mut states[i]),
                    };
                    var.inplace_op1(&rule).map_err(|e| device_error(what, e))
                })??,
                HeldState::Device { slots, steps } => {
                    let grad = g.on_device(var.shape(), var.device())?;
                    steps[i] += 1;
                    let updated = optimizer
                        .step_tensor(&var.as_tensor().detach(), &grad, &mut slots[i], steps[i])
                        .map_err(|e| device_error(what, e))?;
                    var.set(&updated).map_err(|e| device_error(what, e))?;
                }
            }
        }
        Ok(())
    }

    /// The values, read back to the host (layout order).
    pub fn values(&mut self) -> Result<Vec<Vec<f32>>> {
        let out = self
            .vars
            .iter()
            .map(|var| download(var.as_tensor(), "read the parameters"))
            .collect::<Result<Vec<_>>>()?;
        self.traffic.downloaded_bytes += bytes_of(&out);
        Ok(out)
    }

    /// The optimizer state, read back to the host (layout order).
    pub fn states(&mut self) -> Result<Vec<OptState>> {
        let out = match &self.state {
            HeldState::Host(states) => states.clone(),
            HeldState::Device { slots, steps } => slots
                .iter()
                .zip(steps)
                .map(|(slots, &step)| {
                    let slots = slots
                        .iter()
                        .map(|s| download(s, "read the optimizer state"))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(OptState { step, slots })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        self.traffic.downloaded_bytes += out.iter().map(OptState::bytes).sum::<u64>();
        Ok(out)
    }

    /// The values and optimizer state of tensors `range` alone, read back to the host: a
    /// sub-model handed to a peer.
    pub fn tensors(&mut self, range: Range<usize>) -> Result<(Vec<Vec<f32>>, Vec<OptState>)> {
        let what = "read a sub-model";
        let vars = self
            .vars
            .get(range.clone())
            .ok_or_else(|| out_of(what, &range, self.vars.len()))?;
        let values = vars
            .iter()
            .map(|var| download(var.as_tensor(), what))
            .collect::<Result<Vec<_>>>()?;
        let states = match &self.state {
            HeldState::Host(states) => states[range].to_vec(),
            HeldState::Device { slots, steps } => range
                .map(|i| {
                    let slots = slots[i]
                        .iter()
                        .map(|s| download(s, what))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(OptState {
                        step: steps[i],
                        slots,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        self.traffic.downloaded_bytes +=
            bytes_of(&values) + states.iter().map(OptState::bytes).sum::<u64>();
        Ok((values, states))
    }

    /// Number of parameter tensors held.
    pub fn len(&self) -> usize {
        self.vars.len()
    }

    /// Whether no tensor is held (a replica of an empty part).
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// Element count of each tensor of `range`; an error naming the range beyond the model.
    pub fn elems(&self, range: Range<usize>) -> Result<Vec<usize>> {
        let vars = self
            .vars
            .get(range.clone())
            .ok_or_else(|| out_of("size a sub-model", &range, self.vars.len()))?;
        Ok(vars.iter().map(|v| v.elem_count()).collect())
    }

    /// Replaces the values and optimizer slots of tensors `range` alone (a sub-model taken over
    /// from a peer), keeping their update counts; an error when the counts or sizes differ.
    pub fn load_tensors(
        &mut self,
        range: Range<usize>,
        values: &[Vec<f32>],
        slots: &[Vec<Vec<f32>>],
    ) -> Result<()> {
        let what = "load a sub-model";
        let vars = self
            .vars
            .get(range.clone())
            .ok_or_else(|| out_of(what, &range, self.vars.len()))?;
        if values.len() != vars.len() || slots.len() != vars.len() {
            return Err(device_error(
                what,
                format!(
                    "{} values and {} optimizer states for {} parameters",
                    values.len(),
                    slots.len(),
                    vars.len()
                ),
            ));
        }
        let refs: Vec<&Var> = vars.iter().collect();
        concord_workloads::model::load_vars(&refs, values).map_err(|e| device_error(what, e))?;
        self.traffic.uploaded_bytes += bytes_of(values);
        for (i, new) in range.zip(slots) {
            self.traffic.uploaded_bytes += new.iter().map(|v| 4 * v.len() as u64).sum::<u64>();
            match &mut self.state {
                HeldState::Host(states) => states[i].slots.clone_from(new),
                HeldState::Device { slots, .. } => {
                    let var = &self.vars[i];
                    slots[i] = new
                        .iter()
                        .map(|v| {
                            Tensor::from_slice(v, var.shape(), var.device())
                                .map_err(|e| device_error(what, e))
                        })
                        .collect::<Result<Vec<_>>>()?;
                }
            }
        }
        Ok(())
    }

    /// How the update runs.
    pub fn rule(&self) -> UpdateRule {
        self.rule
    }

    /// What crossed between host and device so far.
    pub fn traffic(&self) -> HostTraffic {
        self.traffic
    }
}

/// The optimizer's host rule run on a CPU variable's own elements, its state in host vectors.
struct HostRule<'a> {
    optimizer: &'a OptimizerConfig,
    grad: &'a [f32],
    state: RefCell<&'a mut OptState>,
}

impl InplaceOp1 for HostRule<'_> {
    fn name(&self) -> &'static str {
        "optimizer-update"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        // `apply_to` checked the gradient's size against the variable's before any update.
        let param = concord_workloads::model::f32_slice_mut(storage, layout, self.name())?;
        self.optimizer
            .step(param, self.grad, &mut self.state.borrow_mut());
        Ok(())
    }
}

/// The error for tensors `range` of a model of `len`.
fn out_of(what: &str, range: &Range<usize>, len: usize) -> EngineError {
    device_error(
        what,
        format!("tensors {}..{} of {len}", range.start, range.end),
    )
}

/// A tensor's values read back to the host, flat.
fn download(t: &Tensor, what: &str) -> Result<Vec<f32>> {
    t.flatten_all()
        .and_then(|f| f.to_vec1::<f32>())
        .map_err(|e| device_error(what, e))
}

/// Bytes of f32 vectors.
fn bytes_of(vectors: &[Vec<f32>]) -> u64 {
    vectors.iter().map(|v| 4 * v.len() as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::LocalModel;
    use crate::model::{ModelConfig, ModelSpec, Replica};
    use crate::payload::BlockPayload;
    use crate::ps::SnapshotPlan;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn optimizers() -> Vec<OptimizerConfig> {
        vec![
            OptimizerConfig::Sgd {
                lr: 0.05,
                momentum: 0.0,
                weight_decay: 1e-3,
            },
            OptimizerConfig::Sgd {
                lr: 0.05,
                momentum: 0.9,
                weight_decay: 1e-3,
            },
            OptimizerConfig::Adam {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 1e-2,
            },
        ]
    }

    fn bits(values: &[Vec<f32>]) -> Vec<Vec<u32>> {
        values
            .iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    }

    /// Either rule is the host rule, bit for bit, for every optimizer and over many steps; the
    /// tensor rule is what a GPU runs, checked here on the CPU.
    #[test]
    fn both_update_rules_give_the_host_rules_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for rule in [UpdateRule::InPlace, UpdateRule::Tensors] {
            for opt in optimizers() {
                let n = 257;
                let init: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let mut host = init.clone();
                let mut state = opt.init_state(n);
                let var = Var::from_slice(&init, n, &candle_core::Device::Cpu).unwrap();
                let mut device =
                    ResidentParams::with_rule(vec![var], &[init], &[state.clone()], rule).unwrap();
                assert_eq!(device.rule(), rule);
                for _ in 0..6 {
                    let grad: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
                    opt.step(&mut host, &grad, &mut state);
                    device.apply(&opt, &[grad]).unwrap();
                }
                assert_eq!(
                    bits(&device.values().unwrap()),
                    bits(&[host]),
                    "{rule:?} {opt:?}"
                );
                let states = device.states().unwrap();
                assert_eq!(states[0].step, state.step);
                assert_eq!(
                    bits(&states[0].slots),
                    bits(&state.slots),
                    "{rule:?} {opt:?}"
                );
                // Both count the same traffic: the load, six gradients, one read of each.
                let n = n as u64 * 4;
                let slots = opt.state_slots() as u64;
                assert_eq!(device.traffic().uploaded_bytes, n * (1 + slots + 6));
                assert_eq!(device.traffic().downloaded_bytes, n * (1 + slots));
            }
        }
    }

    /// Gradients handed over as tensors where the backward pass left them (shaped as their
    /// parameter, flat, or a strided view) give the host gradients' bits under either rule and
    /// every optimizer, and nothing goes up for them; a gradient of the wrong size is named
    /// before any tensor changes.
    #[test]
    fn gradients_left_on_the_device_update_to_the_host_gradients_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(13);
        let cpu = candle_core::Device::Cpu;
        let init = vec![
            (0..15)
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect::<Vec<f32>>(),
            (0..5).map(|_| rng.gen_range(-1.0..1.0)).collect(),
        ];
        let vars = || {
            vec![
                Var::from_slice(&init[0], (3, 5), &cpu).unwrap(),
                Var::from_slice(&init[1], 5, &cpu).unwrap(),
            ]
        };
        for rule in [UpdateRule::InPlace, UpdateRule::Tensors] {
            for opt in optimizers() {
                let states: Vec<OptState> = init.iter().map(|v| opt.init_state(v.len())).collect();
                let mut host = ResidentParams::with_rule(vars(), &init, &states, rule).unwrap();
                let mut device = ResidentParams::with_rule(vars(), &init, &states, rule).unwrap();
                let loaded = device.traffic();
                for step in 0..4 {
                    let grads: Vec<Vec<f32>> = init
                        .iter()
                        .map(|v| (0..v.len()).map(|_| rng.gen_range(-2.0..2.0)).collect())
                        .collect();
                    // The weight's gradient as the transpose of a (5, 3) tensor (not
                    // contiguous) on odd steps, shaped (3, 5) on even ones; the bias's flat.
                    let weight = if step % 2 == 1 {
                        let mut t = vec![0.0f32; 15];
                        for (i, x) in grads[0].iter().enumerate() {
                            t[(i % 5) * 3 + i / 5] = *x;
                        }
                        let t = Tensor::from_vec(t, (5, 3), &cpu).unwrap().t().unwrap();
                        assert!(!t.is_contiguous());
                        t
                    } else {
                        Tensor::from_slice(&grads[0], (3, 5), &cpu).unwrap()
                    };
                    let bias = Tensor::from_slice(&grads[1], 5, &cpu).unwrap();
                    host.apply(&opt, &grads).unwrap();
                    device.apply(&opt, &[weight, bias]).unwrap();
                }
                assert_eq!(
                    device.traffic(),
                    loaded,
                    "{rule:?} {opt:?}: no gradient went up"
                );
                assert_eq!(
                    bits(&device.values().unwrap()),
                    bits(&host.values().unwrap()),
                    "{rule:?} {opt:?}"
                );
                assert_eq!(device.states().unwrap(), host.states().unwrap());
                let before = device.values().unwrap();
                let wrong = [
                    Tensor::zeros((3, 5), candle_core::DType::F32, &cpu).unwrap(),
                    Tensor::zeros(4, candle_core::DType::F32, &cpu).unwrap(),
                ];
                let e = device.apply(&opt, &wrong).unwrap_err().to_string();
                assert!(
                    e.contains("4 elements for parameter 1 of 5"),
                    "{rule:?}: {e}"
                );
                assert_eq!(device.values().unwrap(), before, "nothing changed");
            }
        }
    }

    /// A sub-model read and loaded alone, under either rule: its values and slots move, its
    /// update count stays; a range beyond the model is named.
    #[test]
    fn sub_models_move_alone_under_both_rules() {
        let opt = optimizers()[2].clone();
        for rule in [UpdateRule::InPlace, UpdateRule::Tensors] {
            let values = vec![vec![1.0f32; 3], vec![2.0; 2], vec![3.0; 4]];
            let vars = values
                .iter()
                .map(|v| Var::from_slice(v, v.len(), &candle_core::Device::Cpu).unwrap())
                .collect();
            let states: Vec<OptState> = values.iter().map(|v| opt.init_state(v.len())).collect();
            let mut held = ResidentParams::with_rule(vars, &values, &states, rule).unwrap();
            held.apply(&opt, &[vec![0.1f32; 3], vec![0.2; 2], vec![0.3; 4]])
                .unwrap();
            let (sub, sub_states) = held.tensors(1..3).unwrap();
            assert_eq!(sub, held.values().unwrap()[1..3].to_vec(), "{rule:?}");
            assert_eq!(
                sub_states,
                held.states().unwrap()[1..3].to_vec(),
                "{rule:?}"
            );
            assert_eq!(held.elems(1..3).unwrap(), vec![2, 4]);
            let whole = held.values().unwrap();
            let new_values = vec![vec![7.0f32; 2], vec![8.0; 4]];
            let new_slots = vec![vec![vec![0.5f32; 2]; 2], vec![vec![0.25f32; 4]; 2]];
            held.load_tensors(1..3, &new_values, &new_slots).unwrap();
            let (v, st) = (held.values().unwrap(), held.states().unwrap());
            assert_eq!(v[1..3].to_vec(), new_values, "{rule:?}");
            assert_eq!(v[0], whole[0], "{rule:?}: tensor 0 untouched");
            assert_eq!(st[1].slots, new_slots[0], "{rule:?}");
            assert_eq!(st[2].step, 1, "{rule:?}: the update count stays");
            let e = held.tensors(2..5).unwrap_err().to_string();
            assert!(e.contains("tensors 2..5 of 3"), "{e}");
            let e = held
                .load_tensors(0..1, &new_values, &new_slots)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("2 values and 2 optimizer states for 1 parameters"),
                "{e}"
            );
        }
    }

    /// A part of the model updated alone (a pipeline stage's tensors), held on the host or on
    /// the device under either rule: the part gets the host rule's bits, the other tensors and
    /// their optimizer state stay as they were, and a bad range or gradient count is named
    /// before anything changes.
    #[test]
    fn a_part_updated_alone_changes_nothing_else() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let values: Vec<Vec<f32>> = [5, 3, 4]
            .iter()
            .map(|&n| (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect())
            .collect();
        let grads = vec![vec![0.5f32; 3], vec![-0.25; 4]];
        let plan = SnapshotPlan {
            every: 1,
            every_s: None,
        };
        for opt in optimizers() {
            let mut expected = values.clone();
            let mut states: Vec<OptState> =
                values.iter().map(|v| opt.init_state(v.len())).collect();
            for i in 1..3 {
                opt.step(&mut expected[i], &grads[i - 1], &mut states[i]);
            }
            let mut host = LocalModel::from_values(Some(values.clone()), opt.clone(), plan);
            host.apply_to(1..3, &grads, 0.0).unwrap();
            assert_eq!(bits(host.params().unwrap()), bits(&expected), "{opt:?}");
            for rule in [UpdateRule::InPlace, UpdateRule::Tensors] {
                let vars = values
                    .iter()
                    .map(|v| Var::from_slice(v, v.len(), &candle_core::Device::Cpu).unwrap())
                    .collect();
                let init: Vec<OptState> = values.iter().map(|v| opt.init_state(v.len())).collect();
                let mut held = ResidentParams::with_rule(vars, &values, &init, rule).unwrap();
                held.apply_to(1..3, &opt, &grads).unwrap();
                assert_eq!(bits(&held.values().unwrap()), bits(&expected), "{rule:?}");
                let after = held.states().unwrap();
                assert_eq!(after[0], init[0], "{rule:?}: tensor 0's state untouched");
                assert_eq!(after[1].step, 1, "{rule:?}");
                let e = held.apply_to(2..4, &opt, &grads).unwrap_err().to_string();
                assert!(e.contains("tensors 2..4 of 3"), "{e}");
                let e = held.apply_to(0..1, &opt, &grads).unwrap_err().to_string();
                assert!(e.contains("2 gradients for 1 parameters"), "{e}");
                assert_eq!(bits(&held.values().unwrap()), bits(&expected), "{rule:?}");
            }
            let e = host.apply_to(2..4, &grads, 1.0).unwrap_err().to_string();
            assert!(e.contains("tensors 2..4: outside tensors 0..3"), "{e}");
            assert_eq!(host.updates(), 1, "a refused update is not counted");
        }
    }

    /// A CPU replica updates in place: no temporary tensors, the chained operations' cost.
    #[test]
    fn a_cpu_replica_takes_the_in_place_rule() {
        let var = Var::from_slice(&[1.0f32, 2.0], 2, &candle_core::Device::Cpu).unwrap();
        let opt = OptimizerConfig::default();
        let held = ResidentParams::new(vec![var], &[vec![1.0, 2.0]], &[opt.init_state(2)]);
        assert_eq!(held.unwrap().rule(), UpdateRule::InPlace);
    }

    /// A replica whose model keeps its parameters in its own tensors trains to the same bits
    /// as one loaded from host values before every step, and only the gradients go up.
    #[test]
    fn a_resident_model_trains_to_the_host_models_bits_and_moves_only_gradients() {
        let spec = ModelSpec::resolve(&ModelConfig::Mlp { hidden: vec![16] }, &[8], 3).unwrap();
        let init = spec.init_values(3).unwrap();
        let param_bytes: u64 = init.iter().map(|v| 4 * v.len() as u64).sum();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for opt in optimizers() {
            let plan = SnapshotPlan {
                every: 2,
                every_s: None,
            };
            let mut host = LocalModel::from_values(Some(init.clone()), opt.clone(), plan);
            let mut resident = LocalModel::from_values(Some(init.clone()), opt.clone(), plan);
            let host_replica = Replica::cpu(&spec).unwrap().unwrap();
            let replica = Replica::cpu(&spec).unwrap().unwrap();
            assert!(resident.keep_on(&replica).unwrap());
            assert!(resident.params().is_none(), "the values live on the device");
            let state_bytes = opt.state_slots() as u64 * param_bytes;
            let loaded = resident.host_traffic().unwrap();
            assert_eq!(loaded.uploaded_bytes, param_bytes + state_bytes);
            let steps = 4;
            for t in 0..steps {
                let x: Vec<f32> = (0..5 * 8).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let y: Vec<u32> = (0..5).map(|_| rng.gen_range(0..3)).collect();
                host_replica.set_params(host.params().unwrap()).unwrap();
                let h = host_replica.step(x.clone(), &y).unwrap();
                let r = replica.step(x, &y).unwrap();
                assert_eq!(bits(&r.grads), bits(&h.grads), "{opt:?} step {t}");
                host.apply(&h.grads, 1.0, t as f64).unwrap();
                resident.apply(&r.grads, 1.0, t as f64).unwrap();
            }
            // The replicas' digests agree, read in place from the CPU replica's tensors.
            let digest = resident.digest().unwrap();
            assert!(digest.is_some());
            assert_eq!(digest, host.digest().unwrap(), "{opt:?}");
            let read = param_bytes;
            let moved = resident.host_traffic().unwrap();
            assert_eq!(
                moved.uploaded_bytes - loaded.uploaded_bytes,
                steps * param_bytes,
                "one gradient per step goes up"
            );
            // Only the two snapshots (every 2 updates) and the digest's read came down.
            assert_eq!(moved.downloaded_bytes, 2 * param_bytes + read);
            let (h, r) = (
                host.report(&spec_layout(&spec)),
                resident.report(&spec_layout(&spec)),
            );
            let (h, r) = (h.unwrap(), r.unwrap());
            assert_eq!(
                serde_json::to_string(&h).unwrap(),
                serde_json::to_string(&r).unwrap(),
                "{opt:?}: the same values, optimizer state and snapshots"
            );
        }
    }

    /// A sub-model handed over, a checkpoint restored and averaged values land on the device as
    /// they land on the host.
    #[test]
    fn exports_imports_and_restores_reach_the_device() {
        let spec = ModelSpec::resolve(&ModelConfig::Mlp { hidden: vec![4] }, &[3], 2).unwrap();
        let init = spec.init_values(5).unwrap();
        let opt = optimizers()[1].clone();
        let plan = SnapshotPlan {
            every: 100,
            every_s: None,
        };
        let mut host = LocalModel::from_values(Some(init.clone()), opt.clone(), plan);
        let mut resident = LocalModel::from_values(Some(init.clone()), opt, plan);
        let replica = Replica::cpu(&spec).unwrap().unwrap();
        resident.keep_on(&replica).unwrap();
        let grads: Vec<Vec<f32>> = init.iter().map(|v| vec![0.5; v.len()]).collect();
        host.apply(&grads, 1.0, 0.0).unwrap();
        resident.apply(&grads, 1.0, 0.0).unwrap();
        let before = resident.host_traffic().unwrap();
        assert_eq!(host.export(0..2).unwrap(), resident.export(0..2).unwrap());
        // Only the two tensors' values and momentum came down.
        let sub: u64 = init[0..2].iter().map(|v| 4 * v.len() as u64).sum();
        let after = resident.host_traffic().unwrap();
        assert_eq!(after.downloaded_bytes - before.downloaded_bytes, 2 * sub);
        let packed: Vec<f32> = (0..host.export(1..3).unwrap().len())
            .map(|i| i as f32)
            .collect();
        assert!(host.import(1..3, &packed, 1.0).unwrap());
        assert!(resident.import(1..3, &packed, 1.0).unwrap());
        // ... and only theirs went up.
        let sub: u64 = init[1..3].iter().map(|v| 4 * v.len() as u64).sum();
        let up = resident.host_traffic().unwrap().uploaded_bytes - after.uploaded_bytes;
        assert_eq!(up, 2 * sub);
        assert!(
            !resident.import(1..3, &packed[1..], 1.0).unwrap(),
            "wrong size refused"
        );
        assert_eq!(host.values().unwrap(), resident.values().unwrap());
        let layout = spec_layout(&spec);
        let saved = host.report(&layout).unwrap();
        let mut fresh = LocalModel::from_values(
            Some(init.clone()),
            optimizers()[1].clone(),
            SnapshotPlan {
                every: 100,
                every_s: None,
            },
        );
        let other = Replica::cpu(&spec).unwrap().unwrap();
        fresh.keep_on(&other).unwrap();
        fresh.restore(&layout, &saved, host.updates()).unwrap();
        assert_eq!(fresh.export(0..4).unwrap(), host.export(0..4).unwrap());
        assert_eq!(fresh.updates(), host.updates());
        // The replica computes at the restored values.
        let x = vec![0.1f32; 3];
        let (a, b) = (other.evaluate(&x, &[1]).unwrap(), {
            let r = Replica::cpu(&spec).unwrap().unwrap();
            r.set_params(host.params().unwrap()).unwrap();
            r.evaluate(&x, &[1]).unwrap()
        });
        assert_eq!(a.1.to_bits(), b.1.to_bits());
        let averaged: Vec<Vec<f32>> = init.iter().map(|v| vec![0.25; v.len()]).collect();
        fresh.set_params(averaged.clone(), 2.0).unwrap();
        assert_eq!(fresh.values().unwrap(), Some(averaged));
    }

    /// A part of the model held alone (a pipeline stage's) keeps only on a replica of its own
    /// stages, and updates, exports, reports and restores its tensors by the whole model's
    /// indices and to the whole model's bits, under every optimizer.
    #[test]
    fn a_part_held_alone_is_the_whole_models_part() {
        let spec = ModelSpec::resolve(&ModelConfig::Mlp { hidden: vec![6, 5] }, &[4], 3).unwrap();
        let init = spec.init_values(7).unwrap();
        let mine = spec.stage_param_ranges()[1].clone();
        assert_eq!(mine, 2..4);
        let layout = spec_layout(&spec);
        let plan = SnapshotPlan {
            every: 2,
            every_s: None,
        };
        let device = candle_core::Device::Cpu;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for opt in optimizers() {
            let mut whole = LocalModel::from_values(Some(init.clone()), opt.clone(), plan);
            let mut part =
                LocalModel::from_values(Some(init[mine.clone()].to_vec()), opt.clone(), plan)
                    .with_tensors(mine.clone())
                    .unwrap();
            let stage = Replica::part(&spec, &device, 1..2).unwrap().unwrap();
            let e = whole.keep_on(&stage).unwrap_err().to_string();
            assert!(
                e.contains("tensors 0..6") && e.contains("holds tensors 2..4"),
                "{e}"
            );
            let all = Replica::cpu(&spec).unwrap().unwrap();
            let e = part.keep_on(&all).unwrap_err().to_string();
            assert!(
                e.contains("tensors 2..4") && e.contains("holds tensors 0..6"),
                "{e}"
            );
            assert!(part.keep_on(&stage).unwrap());
            for step in 0..3 {
                let grads: Vec<Vec<f32>> = init[mine.clone()]
                    .iter()
                    .map(|v| (0..v.len()).map(|_| rng.gen_range(-1.0..1.0)).collect())
                    .collect();
                whole.apply_to(mine.clone(), &grads, step as f64).unwrap();
                part.apply_to(mine.clone(), &grads, step as f64).unwrap();
            }
            let want = whole.params().unwrap()[mine.clone()].to_vec();
            assert_eq!(
                bits(&part.values().unwrap().unwrap()),
                bits(&want),
                "{opt:?}"
            );
            // The stage's replica computes with them as a whole replica does.
            all.set_params(whole.params().unwrap()).unwrap();
            let x = candle_core::Tensor::ones((2, 6), candle_core::DType::F32, &device).unwrap();
            let (a, b) = (
                stage.model().unwrap().forward_stage(1, &x).unwrap(),
                all.model().unwrap().forward_stage(1, &x).unwrap(),
            );
            assert_eq!(
                a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                b.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            );
            // Tensors it does not hold are named, and nothing changes.
            let grads = vec![vec![0.5f32; init[0].len()], vec![0.5; init[1].len()]];
            let e = part.apply_to(0..2, &grads, 3.0).unwrap_err().to_string();
            assert!(
                e.contains("tensors 0..2") && e.contains("outside tensors 2..4"),
                "{e}"
            );
            assert!(part.export(3..5).is_err());
            assert_eq!(part.updates(), 3, "a refused update is not counted");
            assert_eq!(
                part.export(mine.clone()).unwrap(),
                whole.export(mine.clone()).unwrap()
            );
            // Its report is the whole model's blocks of its tensors, in the same order.
            let of_mine =
                |b: &BlockPayload| mine.contains(&layout.blocks()[b.block as usize].param);
            let full = whole.report(&layout).unwrap();
            let got = part.report(&layout).unwrap();
            let blocks: Vec<_> = full.blocks.iter().filter(|b| of_mine(b)).cloned().collect();
            assert!(!blocks.is_empty() && blocks.len() < full.blocks.len());
            assert_eq!(got.blocks, blocks);
            let states: Vec<_> = full
                .opt_state
                .iter()
                .filter(|(b, _)| mine.contains(&layout.blocks()[**b as usize].param))
                .collect();
            assert_eq!(got.opt_state.iter().collect::<Vec<_>>(), states);
            assert_eq!(got.snapshots.len(), full.snapshots.len());
            for (g, f) in got.snapshots.iter().zip(&full.snapshots) {
                let want: Vec<_> = f.blocks.iter().filter(|b| of_mine(b)).cloned().collect();
                assert_eq!(g.blocks, want);
            }
            // A fresh part restores its tensors from the whole model's checkpoint.
            let mut fresh =
                LocalModel::from_values(Some(init[mine.clone()].to_vec()), opt.clone(), plan)
                    .with_tensors(mine.clone())
                    .unwrap();
            fresh
                .keep_on(&Replica::part(&spec, &device, 1..2).unwrap().unwrap())
                .unwrap();
            fresh.restore(&layout, &full, whole.updates()).unwrap();
            assert_eq!(
                fresh.export(mine.clone()).unwrap(),
                whole.export(mine.clone()).unwrap()
            );
        }
        let e = LocalModel::from_values(Some(init.clone()), optimizers()[0].clone(), plan)
            .with_tensors(2..4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tensors 2..4") && e.contains("6 tensors of values"),
            "{e}"
        );
    }

    #[test]
    fn loading_the_wrong_number_of_tensors_is_named() {
        let var = Var::from_slice(&[1.0f32, 2.0], 2, &candle_core::Device::Cpu).unwrap();
        let opt = OptimizerConfig::default();
        let e = ResidentParams::new(
            vec![var],
            &[vec![1.0, 2.0], vec![3.0]],
            &[opt.init_state(2)],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("2 values") && e.contains("1 parameters"), "{e}");
        let var = Var::from_slice(&[1.0f32, 2.0], 2, &candle_core::Device::Cpu).unwrap();
        let mut held =
            ResidentParams::new(vec![var], &[vec![1.0, 2.0]], &[opt.init_state(2)]).unwrap();
        let e = held
            .apply(&opt, &[vec![0.5f32; 3]])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gradient of 3 elements") && e.contains("of 2"),
            "{e}"
        );
        let e = held
            .apply(&opt, &[vec![0.5f32; 2], vec![1.0]])
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 gradients for 1 parameters"), "{e}");
        assert_eq!(
            held.values().unwrap(),
            vec![vec![1.0, 2.0]],
            "nothing applied"
        );
    }

    /// The parameter layout of `spec` over two servers, in blocks of 7 elements (so blocks cut
    /// tensors).
    /// An allreduce worker's step kept on the device (gradients left by the step, fused there,
    /// the sum averaged and applied there, as under NCCL) updates to the host path's bits:
    /// step, fuse, ring sum, average, apply. Nothing but the initial load goes up.
    #[test]
    fn a_step_fused_and_reduced_on_the_device_updates_to_the_host_paths_bits() {
        use crate::collective::Fusion;
        use crate::payload::Payload;
        let spec = ModelSpec::resolve(&ModelConfig::Mlp { hidden: vec![16] }, &[8], 3).unwrap();
        let init = spec.init_values(5).unwrap();
        let fusion = Fusion::new(init.iter().map(Vec::len).collect(), 1, 64);
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        for opt in optimizers() {
            let plan = SnapshotPlan {
                every: 2,
                every_s: None,
            };
            let (host_replica, replica) = (
                Replica::cpu(&spec).unwrap().unwrap(),
                Replica::cpu(&spec).unwrap().unwrap(),
            );
            let mut host = LocalModel::from_values(Some(init.clone()), opt.clone(), plan);
            let mut kept = LocalModel::from_values(Some(init.clone()), opt.clone(), plan);
            host.keep_on(&host_replica).unwrap();
            kept.keep_on(&replica).unwrap();
            let loaded = kept.host_traffic().unwrap();
            for t in 0..4 {
                let x: Vec<f32> = (0..5 * 8).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let y: Vec<u32> = (0..5).map(|_| rng.gen_range(0..3)).collect();
                // Two peers' fused gradients: three contributors in a group of four, so the
                // mean divides by 3 (not exact in f32) and the learning rate scales by 3/4.
                let peers: Vec<Vec<f32>> = (0..2)
                    .map(|_| {
                        let mut v: Vec<f32> = (0..fusion.len() - 1)
                            .map(|_| rng.gen_range(-0.1..0.1))
                            .collect();
                        v.push(1.0);
                        v
                    })
                    .collect();
                let h = host_replica.step(x.clone(), &y).unwrap();
                let Payload::Real(mut sum) = fusion.fuse(&h.grads, &[1.0]) else {
                    panic!("a real buffer")
                };
                for peer in &peers {
                    for (s, p) in sum.iter_mut().zip(peer) {
                        *s += p;
                    }
                }
                assert_eq!(
                    host.apply_reduced(&fusion, Payload::Real(sum), 4, 0.0)
                        .unwrap(),
                    3.0
                );

                let d = replica.step_on_device(x, &y).unwrap();
                let mut on_device = fusion.fuse_tensors(&d.grads, &[1.0]).unwrap();
                for peer in &peers {
                    let peer = Tensor::from_slice(peer, peer.len(), on_device.device()).unwrap();
                    on_device = (on_device + peer).unwrap();
                }
                let w = kept
                    .apply_reduced_tensor(&fusion, &on_device, 4, 0.0)
                    .unwrap();
                assert_eq!(w, 3.0, "{opt:?} step {t}");
                assert_eq!(
                    bits(&kept.values().unwrap().unwrap()),
                    bits(&host.values().unwrap().unwrap()),
                    "{opt:?} step {t}"
                );
            }
            let (h, k) = (
                host.report(&spec_layout(&spec)).unwrap(),
                kept.report(&spec_layout(&spec)).unwrap(),
            );
            assert_eq!(
                serde_json::to_string(&h).unwrap(),
                serde_json::to_string(&k).unwrap(),
                "{opt:?}: the same values, optimizer state and snapshots"
            );
            let moved = kept.host_traffic().unwrap();
            assert_eq!(
                moved.uploaded_bytes, loaded.uploaded_bytes,
                "{opt:?}: nothing went up"
            );
            // A sum of the wrong size is named, and nothing changes.
            let before = kept.values().unwrap();
            let short = Tensor::zeros(
                fusion.len() - 1,
                candle_core::DType::F32,
                &candle_core::Device::Cpu,
            )
            .unwrap();
            let e = kept
                .apply_reduced_tensor(&fusion, &short, 4, 0.0)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "{} elements for a fused buffer of {}",
                    fusion.len() - 1,
                    fusion.len()
                )),
                "{e}"
            );
            assert_eq!(kept.values().unwrap(), before);
        }
    }

    fn spec_layout(spec: &ModelSpec) -> crate::ps::ParamLayout {
        crate::ps::ParamLayout::new(spec.params(), 7, &crate::ps::RoundRobinPlacement, 2)
    }
}
