//! Dymem's claims on the papers' models in throughput mode, one iteration through the engine's
//! two-lane executor on the thesis's device (a GTX TITAN X on a 16 GB/s host link).

use concord_engine::cluster::DeviceProfile;
use concord_engine::graph::OpGraph;
use concord_engine::memory::alloc::DeviceAllocator;
use concord_engine::memory::lanes::{run_iteration, IterationReport, LaneError};
use concord_engine::memory::layers::{IterationGraph, LayerPolicy};
use concord_engine::profiles;
use concord_memory::alloc::{beta_failure_rate, replay, BestFit, Gtbm, Recording};
use concord_memory::policies::{Dymem, NoOffload, OffloadSet, SingleStream, SuperNeurons, Vdnn};
use concord_memory::study::least_memory;

fn titan_x() -> DeviceProfile {
    DeviceProfile::builtins()["titan-x"].clone()
}

fn graph(name: &str) -> OpGraph {
    profiles::builtin(name).expect("builtin profile").graph
}

fn run(
    g: &OpGraph,
    batch: u64,
    policy: &mut dyn LayerPolicy,
    allocator: &mut dyn DeviceAllocator,
    capacity: u64,
) -> Result<IterationReport, LaneError> {
    let device = titan_x();
    let it = IterationGraph::new(g, batch, |op| device.op_seconds(op, batch));
    allocator.reset(capacity);
    run_iteration(&it, policy, allocator, device.host_link())
}

const UNBOUNDED: u64 = u64::MAX / 4;

/// The least capacity under which `policy` with `allocator` completes the iteration: the
/// memory it needs to train, stalls allowed.
fn min_capacity(
    g: &OpGraph,
    batch: u64,
    policy: &mut dyn LayerPolicy,
    allocator: &mut dyn DeviceAllocator,
) -> u64 {
    let high_water = run(g, batch, policy, allocator, UNBOUNDED)
        .unwrap()
        .high_water;
    least_memory(high_water, |capacity| {
        run(g, batch, policy, allocator, capacity).is_ok()
    })
}

#[test]
fn barrier_free_beats_a_barrier_per_layer_which_beats_one_stream_on_every_net() {
    for (name, batch) in [
        ("resnet-50", 100),
        ("inception-v4", 32),
        ("resnet-32", 100),
        ("vgg16", 64),
    ] {
        let g = graph(name);
        let dymem = run(
            &g,
            batch,
            &mut Dymem::default(),
            &mut Gtbm::new(0),
            UNBOUNDED,
        )
        .unwrap();
        let vdnn = run(
            &g,
            batch,
            &mut Vdnn::new(OffloadSet::All),
            &mut BestFit::new(0),
            UNBOUNDED,
        )
        .unwrap();
        let single = run(&g, batch, &mut SingleStream, &mut Gtbm::new(0), UNBOUNDED).unwrap();
        // The same moves: only the synchronisation differs.
        assert_eq!(dymem.offloaded_bytes, vdnn.offloaded_bytes, "{name}");
        assert_eq!(dymem.offloaded_bytes, single.offloaded_bytes, "{name}");
        assert!(
            dymem.seconds < vdnn.seconds,
            "{name}: {} vs {}",
            dymem.seconds,
            vdnn.seconds
        );
        assert!(
            vdnn.seconds < single.seconds,
            "{name}: {} vs {}",
            vdnn.seconds,
            single.seconds
        );
        assert!(dymem.overlap_s > vdnn.overlap_s, "{name}");
        assert_eq!(single.overlap_s, 0.0);
        // No policy computes faster than the computation itself.
        for r in [&dymem, &vdnn, &single] {
            assert!(r.seconds >= r.compute_s - 1e-12, "{name}");
        }
    }
}

#[test]
fn superneurons_moves_only_the_inputs_of_convolutions() {
    let g = graph("resnet-50");
    let all = run(
        &g,
        100,
        &mut Vdnn::new(OffloadSet::All),
        &mut BestFit::new(0),
        UNBOUNDED,
    )
    .unwrap();
    let conv = run(&g, 100, &mut SuperNeurons, &mut BestFit::new(0), UNBOUNDED).unwrap();
    assert!(conv.offloaded_bytes < all.offloaded_bytes);
    assert!(conv.offloaded_bytes > 0);
}

#[test]
fn dymem_trains_under_sixty_percent_of_the_no_offload_peak_by_stalling() {
    for (name, batch) in [("resnet-50", 100), ("inception-v4", 32)] {
        let g = graph(name);
        let keep = run(&g, batch, &mut NoOffload, &mut BestFit::new(0), UNBOUNDED).unwrap();
        let cap = keep.high_water * 6 / 10;
        assert!(
            run(&g, batch, &mut NoOffload, &mut BestFit::new(0), cap).is_err(),
            "{name}: without offloading the iteration does not fit"
        );
        let tight = run(&g, batch, &mut Dymem::default(), &mut Gtbm::new(0), cap).unwrap();
        assert!(tight.high_water <= cap, "{name}");
        let need = min_capacity(&g, batch, &mut Dymem::default(), &mut Gtbm::new(0));
        assert!(
            need < keep.high_water / 2,
            "{name}: {need} vs {}",
            keep.high_water
        );
        assert!(run(
            &g,
            batch,
            &mut Dymem::default(),
            &mut Gtbm::new(0),
            need / 2
        )
        .is_err());
    }
}

/// The allocation trace of one unconstrained iteration of `policy` on `name`.
fn trace(
    name: &str,
    batch: u64,
    policy: &mut dyn LayerPolicy,
) -> concord_memory::alloc::AllocTrace {
    let mut rec = Recording::new(Box::new(Gtbm::new(0)));
    run(&graph(name), batch, policy, &mut rec, UNBOUNDED).unwrap();
    rec.trace().unwrap()
}

#[test]
fn a_larger_beta_fails_fewer_jittered_iterations() {
    // The thesis's Table 4.2: ResNet-101, request sizes fluctuating between iterations; the pool
    // is sized from a clean iteration plus β, and an iteration that does not fit fails.
    let t = trace("resnet-101", 16, &mut Dymem::default());
    let clean = replay(&t, &mut Gtbm::new(t.total_bytes()))
        .unwrap()
        .high_water;
    let rate = |beta: u64| beta_failure_rate(&t, &mut Gtbm::new(0), beta, 0.05, 200, 7).unwrap();
    let rates: Vec<f64> = [0, clean / 100, clean / 40, clean / 10]
        .into_iter()
        .map(rate)
        .collect();
    assert!(rates[0] > 0.0, "{rates:?}");
    assert!(rates.windows(2).all(|w| w[1] <= w[0]), "{rates:?}");
    assert_eq!(rates[3], 0.0, "{rates:?}");
    assert_eq!(rate(clean / 100), rates[1], "same seed, same rate");
}

#[test]
fn without_batch_norm_vdnn_peaks_in_the_backward_pass_of_the_first_stage() {
    // The thesis's Fig. 4.7: ResNet-32 without batch-norm, batch 100, one iteration of 190-odd
    // layer steps; the peak comes in the backward pass, among the first residual blocks (whose
    // feature maps are the largest), where the gradients meet the stashed maps coming back.
    let g = graph("resnet-32-nobn");
    let r = run(
        &g,
        100,
        &mut Vdnn::new(OffloadSet::All),
        &mut BestFit::new(0),
        UNBOUNDED,
    )
    .unwrap();
    assert!((185..=200).contains(&r.series.len()), "{}", r.series.len());
    let peak = r
        .series
        .iter()
        .max_by_key(|p| p.footprint)
        .expect("a series");
    assert_eq!(peak.pass, concord_engine::graph::Pass::Backward);
    let order = g.exec_order();
    let node = &g.nodes[order[order.len() - peak.step]];
    assert!(node.name.starts_with("stage1_"), "peak at {}", node.name);
}
