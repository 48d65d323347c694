//! Parameters that stay on the replica's device between steps, with the optimizer state beside
//! them: what a worker that applies its own updates keeps on a GPU, as a PyTorch DDP job does.
//!
//! The replica's own variables are the parameters, so a step reads them where they are and only
//! what a collective moves crosses to the host: the gradients go down for the message ring and
//! their sum comes back up. Values come down only when something on the host reads them (a
//! snapshot, the report, a checkpoint, a sub-model handed to a peer).

use crate::error::{EngineError, Result};
use crate::optim::{OptState, OptimizerConfig};
use candle_core::{Tensor, Var};

/// Bytes that crossed between the host and the device for a resident model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTraffic {
    /// Host to device: values loaded, gradients (or their sum) applied.
    pub uploaded_bytes: u64,
    /// Device to host: values and optimizer state read back.
    pub downloaded_bytes: u64,
}

/// A replica's parameter variables (layout order) and their optimizer state on its device.
#[derive(Debug)]
pub struct ResidentParams {
    vars: Vec<Var>,
    /// Per tensor, the optimizer's per-element slots.
    slots: Vec<Vec<Tensor>>,
    /// Per tensor, the updates applied.
    steps: Vec<u64>,
    traffic: HostTraffic,
}

/// A device failure while keeping the parameters.
fn device_error(what: &str, e: candle_core::Error) -> EngineError {
    EngineError::Gpu {
        what: format!("{what} on the replica's device"),
        reason: e.to_string(),
    }
}

impl ResidentParams {
    /// Takes `vars` (a replica's parameters, layout order) as the model, loading `values` and
    /// the optimizer `states` into them.
    pub fn new(vars: Vec<Var>, values: &[Vec<f32>], states: &[OptState]) -> Result<Self> {
        let mut held = ResidentParams {
            vars,
            slots: Vec::new(),
            steps: Vec::new(),
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
        let upload = |v: &Vec<f32>, like: &Var| {
            Tensor::from_slice(v, like.shape(), like.device())
                .map_err(|e| device_error("load the optimizer state", e))
        };
        let mut slots = Vec::with_capacity(states.len());
        for (state, var) in states.iter().zip(&self.vars) {
            let tensors = state
                .slots
                .iter()
                .map(|s| upload(s, var))
                .collect::<Result<Vec<_>>>()?;
            self.traffic.uploaded_bytes += state.bytes();
            slots.push(tensors);
        }
        self.slots = slots;
        self.steps = states.iter().map(|s| s.step).collect();
        Ok(())
    }

    /// Replaces the values, keeping the optimizer state (model averaging).
    pub fn set_values(&mut self, values: &[Vec<f32>]) -> Result<()> {
        let what = "load the parameters";
        if values.len() != self.vars.len() {
            return Err(EngineError::Gpu {
                what: format!("{what} onto the replica's device"),
                reason: format!("{} values for {} parameters", values.len(), self.vars.len()),
            });
        }
        for (var, v) in self.vars.iter().zip(values) {
            let t = Tensor::from_slice(v, var.shape(), var.device())
                .map_err(|e| device_error(what, e))?;
            var.set(&t).map_err(|e| device_error(what, e))?;
            self.traffic.uploaded_bytes += 4 * v.len() as u64;
        }
        Ok(())
    }

    /// One optimizer update of every tensor from host gradients (layout order): the gradients
    /// go up, the update runs on the device.
    pub fn apply<G: AsRef<[f32]>>(
        &mut self,
        optimizer: &OptimizerConfig,
        grads: &[G],
    ) -> Result<()> {
        let what = "apply an update";
        for (i, (var, g)) in self.vars.iter().zip(grads).enumerate() {
            let g = g.as_ref();
            let grad = Tensor::from_slice(g, var.shape(), var.device())
                .map_err(|e| device_error(what, e))?;
            self.traffic.uploaded_bytes += 4 * g.len() as u64;
            self.steps[i] += 1;
            let updated = optimizer
                .step_tensor(
                    &var.as_tensor().detach(),
                    &grad,
                    &mut self.slots[i],
                    self.steps[i],
                )
                .map_err(|e| device_error(what, e))?;
            var.set(&updated).map_err(|e| device_error(what, e))?;
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
        let mut out = Vec::with_capacity(self.slots.len());
        for (slots, &step) in self.slots.iter().zip(&self.steps) {
            let slots = slots
                .iter()
                .map(|s| download(s, "read the optimizer state"))
                .collect::<Result<Vec<_>>>()?;
            self.traffic.downloaded_bytes += bytes_of(&slots);
            out.push(OptState { step, slots });
        }
        Ok(out)
    }

    /// What crossed between host and device so far.
    pub fn traffic(&self) -> HostTraffic {
        self.traffic
    }
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

    /// The device rule is the host rule, bit for bit, for every optimizer and over many steps.
    #[test]
    fn tensor_updates_give_the_host_rules_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for opt in optimizers() {
            let n = 257;
            let init: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let mut host = init.clone();
            let mut state = opt.init_state(n);
            let var = Var::from_slice(&init, n, &candle_core::Device::Cpu).unwrap();
            let mut device = ResidentParams::new(vec![var], &[init], &[state.clone()]).unwrap();
            for _ in 0..6 {
                let grad: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
                opt.step(&mut host, &grad, &mut state);
                device.apply(&opt, &[grad]).unwrap();
            }
            assert_eq!(bits(&device.values().unwrap()), bits(&[host]), "{opt:?}");
            let states = device.states().unwrap();
            assert_eq!(states[0].step, state.step);
            assert_eq!(bits(&states[0].slots), bits(&state.slots), "{opt:?}");
        }
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
            let moved = resident.host_traffic().unwrap();
            assert_eq!(
                moved.uploaded_bytes - loaded.uploaded_bytes,
                steps * param_bytes,
                "one gradient per step goes up"
            );
            // Only the two snapshots (every 2 updates) came down.
            assert_eq!(moved.downloaded_bytes, 2 * param_bytes);
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
        assert_eq!(host.export(0..2).unwrap(), resident.export(0..2).unwrap());
        let packed: Vec<f32> = (0..host.export(1..3).unwrap().len())
            .map(|i| i as f32)
            .collect();
        assert!(host.import(1..3, &packed, 1.0).unwrap());
        assert!(resident.import(1..3, &packed, 1.0).unwrap());
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
    }

    /// The parameter layout of `spec` over two servers, in blocks of 7 elements (so blocks cut
    /// tensors).
    fn spec_layout(spec: &ModelSpec) -> crate::ps::ParamLayout {
        crate::ps::ParamLayout::new(spec.params(), 7, &crate::ps::RoundRobinPlacement, 2)
    }
}
