//! Offloading changes no math (D7): the moves each swapping policy makes in an iteration,
//! replayed on the real tensors of a graph network run layer by layer, give a loss and
//! gradients bit-identical to the same step with nothing moved — on a chain, a ResNet with and
//! without batch-norm, and a stack of Inception-A blocks, over several seeds. A plan that would
//! compute on a tensor off the device is an error, so the replay also checks every plan.

use concord_engine::cluster::DeviceProfile;
use concord_engine::graph::MovePlan;
use concord_engine::memory::alloc::DeviceAllocator;
use concord_engine::memory::lanes::run_iteration;
use concord_engine::memory::layers::{IterationGraph, LayerPolicy};
use concord_engine::model::{GraphNetSpec, ModelSpec, Replica, StepOutput};
use concord_memory::alloc::{BestFit, Gtbm};
use concord_memory::policies::{Dymem, OffloadSet, SingleStream, SuperNeurons, Vdnn};
use rand::{Rng, SeedableRng};

const BATCH: usize = 4;

fn nets() -> Vec<(&'static str, GraphNetSpec)> {
    let image = [3, 8, 8];
    vec![
        (
            "chain",
            GraphNetSpec::tiny_resnet(image, &[0], &[4], true, 3).unwrap(),
        ),
        (
            "resnet",
            GraphNetSpec::tiny_resnet(image, &[1, 1], &[4, 8], true, 3).unwrap(),
        ),
        (
            "resnet-no-bn",
            GraphNetSpec::tiny_resnet(image, &[1, 1], &[4, 8], false, 3).unwrap(),
        ),
        (
            "inception",
            GraphNetSpec::inception_stack(image, 2, 4, 3).unwrap(),
        ),
    ]
}

fn policies() -> Vec<(Box<dyn LayerPolicy>, Box<dyn DeviceAllocator>)> {
    vec![
        (Box::new(Dymem::default()), Box::new(Gtbm::new(0))),
        (
            Box::new(Vdnn::new(OffloadSet::All)),
            Box::new(BestFit::new(0)),
        ),
        (Box::new(SingleStream), Box::new(Gtbm::new(0))),
        (Box::new(SuperNeurons), Box::new(BestFit::new(0))),
    ]
}

fn step(spec: &ModelSpec, seed: u64, plan: &MovePlan) -> StepOutput {
    let replica = Replica::cpu(spec).unwrap().unwrap();
    replica
        .set_params(&spec.init_values(seed).unwrap())
        .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x: Vec<f32> = (0..BATCH * 3 * 64)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let y: Vec<u32> = (0..BATCH).map(|_| rng.gen_range(0..3)).collect();
    replica.step_with_plan(x, &y, plan).unwrap()
}

fn bits(o: &StepOutput) -> (u64, Vec<Vec<u32>>) {
    let grads = o
        .grads
        .iter()
        .map(|g| g.iter().map(|v| v.to_bits()).collect())
        .collect();
    (o.loss.to_bits(), grads)
}

#[test]
fn every_policy_s_moves_leave_loss_and_gradients_bit_identical() {
    let device = DeviceProfile::builtins()["titan-x"].clone();
    for (name, net) in nets() {
        let graph = net.op_graph();
        let spec = ModelSpec::Graph(net);
        let it = IterationGraph::new(&graph, BATCH as u64, |op| {
            device.op_seconds(op, BATCH as u64)
        });
        for (mut policy, mut allocator) in policies() {
            allocator.reset(u64::MAX / 4);
            let report =
                run_iteration(&it, policy.as_mut(), allocator.as_mut(), device.host_link())
                    .unwrap();
            assert!(
                report.offloaded_bytes > 0,
                "{name}: {} moved nothing",
                report.policy
            );
            assert!(!report.plan.moves.is_empty());
            for seed in [1, 2, 3] {
                let plain = step(&spec, seed, &MovePlan::default());
                let moved = step(&spec, seed, &report.plan);
                assert_eq!(
                    bits(&plain),
                    bits(&moved),
                    "{name} under {}, seed {seed}",
                    report.policy
                );
            }
        }
    }
}
