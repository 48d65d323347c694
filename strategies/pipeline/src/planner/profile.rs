//! The planner's profile of a job's model (thesis §5.3.1's profiler): per layer, what the
//! runtime will charge for its forward and backward passes on one minibatch, its output
//! activations and its weights.

use super::{LayerProfile, Profile};
use concord_engine::cluster::DeviceProfile;
use concord_engine::cost::LayerCost;
use concord_engine::ids::{RoleId, WorkerId};
use concord_engine::model::ModelSpec;
use concord_engine::prelude::{Job, StepPart, Work};

impl Profile {
    /// The profile of `job`'s model at its `batch` on `worker`'s device.
    pub fn of_job(job: &Job, worker: WorkerId) -> Profile {
        let device = job.cluster.device_of(RoleId::Worker(worker));
        Profile::of_model(&job.model, &job.cost_sheet, device, job.config.batch)
    }

    /// The profile of `model` at minibatch `batch` on `device`, for a job whose per-layer cost
    /// facts are `sheet` ([`Job::cost_sheet`]). Its layers are the model's stages
    /// ([`ModelSpec::stage_facts`]). A layer's `compute_s` is the charge of its whole training
    /// step on `batch` samples, which is what the runtime charges for its forward pass plus its
    /// backward pass ([`StepPart::FORWARD`] + [`StepPart::BACKWARD`] shares of the same work).
    ///
    /// A stage of several layers is predicted as the sum of its layers. On the FLOP model that
    /// is exactly what a stage is charged; on a device with a fitted per-layer model a step is
    /// the longer of its device and host-dispatch times, so a stage whose layers differ in which
    /// side dominates is charged somewhat less than the sum.
    pub fn of_model(
        model: &ModelSpec,
        sheet: &[LayerCost],
        device: &DeviceProfile,
        batch: u64,
    ) -> Profile {
        let params = model.params();
        let owned = model.stage_param_ranges();
        let layers = model
            .stage_facts()
            .iter()
            .enumerate()
            .map(|(l, facts)| {
                let part = StepPart {
                    first: l,
                    end: l + 1,
                    share: 1.0,
                };
                let work = Work::step_part(part, 3.0 * facts.forward_flops, batch as f64);
                let weight_bytes = owned
                    .get(l)
                    .and_then(|r| params.get(r.clone()))
                    .map_or(0, |ps| ps.iter().map(|p| p.elems() as u64 * 4).sum());
                LayerProfile {
                    compute_s: work.seconds_on(device, sheet),
                    activation_bytes: facts.activation_bytes * batch,
                    kept_bytes: facts.kept_bytes * batch,
                    weight_bytes,
                }
            })
            .collect();
        Profile { layers, batch }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_engine::model::ModelConfig;
    use concord_engine::submodel::SubModels;

    fn mlp() -> ModelSpec {
        let cfg = ModelConfig::Mlp {
            hidden: vec![256, 128],
        };
        ModelSpec::resolve(&cfg, &[784], 10).expect("mlp")
    }

    #[test]
    fn layers_match_what_sub_models_charge() {
        let model = mlp();
        let sheet = model.layer_costs();
        let device = DeviceProfile::builtins()["v100"].clone();
        let p = Profile::of_model(&model, &sheet, &device, 64);
        assert_eq!(p.layers.len(), 3);
        assert_eq!(p.layers[0].weight_bytes, (784 * 256 + 256) * 4);
        assert_eq!(p.layers[2].activation_bytes, 10 * 4 * 64);
        // One sub-model per layer: forward plus backward as the runtime builds them.
        let subs = SubModels::new(&model, &[1, 2], "test").expect("split");
        for (i, l) in p.layers.iter().enumerate() {
            let f = subs
                .work(i, 64, StepPart::FORWARD)
                .seconds_on(&device, &sheet);
            let b = subs
                .work(i, 64, StepPart::BACKWARD)
                .seconds_on(&device, &sheet);
            let rel = (l.compute_s - (f + b)).abs() / l.compute_s;
            assert!(rel < 1e-12, "layer {i}: {} vs {}", l.compute_s, f + b);
            assert_eq!(l.weight_bytes, subs.param_bytes(i));
        }
    }

    #[test]
    fn a_calibrated_device_charges_by_its_layer_model() {
        let model = mlp();
        let sheet = model.layer_costs();
        let h200 = DeviceProfile::builtins()["h200"].clone();
        let flops_only = DeviceProfile {
            layers: None,
            ..h200.clone()
        };
        let a = Profile::of_model(&model, &sheet, &h200, 64);
        let b = Profile::of_model(&model, &sheet, &flops_only, 64);
        assert_ne!(a.layers[0].compute_s, b.layers[0].compute_s);
        let whole = Work::training_step(0.0, 64.0).seconds_on(&h200, &sheet[..1]);
        assert_eq!(a.layers[0].compute_s, whole);
    }
}
