//! PipeDream's planner: the dynamic programmes against brute force, and the decisions the
//! thesis reports (pipelines for fully-connected models, data parallelism for convolutional
//! ones, "k-1" plans for VGG-16), memory limits and idle workers.

use concord_engine::cluster::DeviceProfile;
use concord_engine::model::{ModelConfig, ModelSpec};
use concord_pipeline::planner::{
    bytes_per_sample, evaluate, exhaustive, plan, validate_stages, LayerProfile, PipelinePlan,
    PlanError, PlanOptions, Profile, Search, StagePlan, Topology,
};
use proptest::prelude::*;

/// Bytes per second of `gbit` Gbit/s.
fn gbps(gbit: f64) -> f64 {
    gbit * 1e9 / 8.0
}

fn v100() -> DeviceProfile {
    DeviceProfile::builtins()["v100"].clone()
}

fn profile_of(cfg: ModelConfig, input: &[usize], classes: usize, batch: u64) -> Profile {
    let model = ModelSpec::resolve(&cfg, input, classes).expect("model");
    Profile::of_model(&model, &model.layer_costs(), &v100(), batch)
}

fn throughput_profile(name: &str, batch: u64) -> Profile {
    let cfg = ModelConfig::Profile { name: name.into() };
    profile_of(cfg, &[], 0, batch)
}

fn flat() -> PlanOptions {
    PlanOptions::default()
}

fn dp_only(profile: &Profile, workers: u32) -> Vec<StagePlan> {
    vec![StagePlan {
        layers: 0..profile.layers.len(),
        replicas: workers,
    }]
}

/// Whether no stage of `p` has more replicas than the stage before it.
fn never_grows(p: &PipelinePlan) -> bool {
    p.stages.windows(2).all(|w| w[0].replicas >= w[1].replicas)
}

fn show(name: &str, p: &PipelinePlan, profile: &Profile) {
    let stages: Vec<String> = p
        .stages
        .iter()
        .map(|s| format!("{:?}x{}", s.layers, s.replicas))
        .collect();
    println!(
        "{name}: {} ({}), NOAM {}, {:.3} ms/minibatch, {:.0} B/sample",
        p.config_string(),
        stages.join(" "),
        p.noam,
        p.predicted_s.unwrap_or(f64::NAN) * 1e3,
        bytes_per_sample(profile, &p.stages)
    );
}

fn layer() -> impl Strategy<Value = LayerProfile> {
    (0u32..100, 0u64..50, 0u64..200).prop_map(|(c, a, w)| LayerProfile {
        compute_s: f64::from(c) / 8.0,
        activation_bytes: a,
        kept_bytes: a,
        weight_bytes: w,
    })
}

fn small_profile() -> impl Strategy<Value = Profile> {
    (prop::collection::vec(layer(), 1..=6), 1u64..4)
        .prop_map(|(layers, batch)| Profile { layers, batch })
}

/// The seed of the property tests: every run tries the same cases.
const SEED: u64 = 0x91A2_2ED5;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(SEED),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The flat DP's time is brute force's minimum, and its plan evaluates to that time.
    #[test]
    fn flat_dp_equals_exhaustive(
        p in small_profile(),
        workers in 1u32..=5,
        bw in prop::sample::select(vec![1.0, 8.0, 64.0, f64::INFINITY]),
    ) {
        let t = Topology::flat(workers, bw);
        let got = plan(&p, &t, &flat()).expect("plan");
        let (best, _) = exhaustive::search(&p, &t, &flat()).expect("some plan");
        let predicted = got.predicted_s.expect("predicted");
        prop_assert_eq!(predicted, best);
        prop_assert_eq!(evaluate(&p, &t, &got.stages), predicted);
        prop_assert!(got.workers_used() <= workers);
        prop_assert!(never_grows(&got), "{:?}", got);
    }

    /// The same under a memory limit and a stage limit: equal times, or both find nothing.
    #[test]
    fn flat_dp_equals_exhaustive_under_limits(
        p in small_profile(),
        workers in 1u32..=5,
        memory in 100u64..2000,
        max_stages in 1usize..4,
        optimizer_slots in 0u32..3,
    ) {
        let t = Topology::flat(workers, 16.0);
        let options = PlanOptions {
            memory_bytes: Some(memory),
            max_stages: Some(max_stages),
            optimizer_slots,
            ..flat()
        };
        let got = plan(&p, &t, &options);
        match exhaustive::search(&p, &t, &options) {
            Some((best, _)) => {
                let got = got.expect("the DP finds a plan where brute force does");
                prop_assert_eq!(got.predicted_s, Some(best));
                prop_assert!(got.stages.len() <= max_stages);
                prop_assert!(never_grows(&got), "{:?}", got);
            }
            None => {
                let is_memory_error = matches!(got, Err(PlanError::DoesNotFit { .. }));
                prop_assert!(is_memory_error, "{:?}", got);
            }
        }
    }

    /// On one level, the thesis's level-wise DP is the flat DP.
    #[test]
    fn hierarchical_on_one_level_equals_flat(
        p in small_profile(),
        workers in 1u32..=5,
        bw in prop::sample::select(vec![1.0, 8.0, f64::INFINITY]),
    ) {
        let t = Topology::flat(workers, bw);
        let h = PlanOptions { search: Search::Hierarchical, ..flat() };
        let a = plan(&p, &t, &flat()).expect("flat");
        let b = plan(&p, &t, &h).expect("hierarchical");
        prop_assert_eq!(a.predicted_s, b.predicted_s);
        prop_assert_eq!(evaluate(&p, &t, &b.stages), b.predicted_s.expect("predicted"));
        prop_assert!(never_grows(&b), "{:?}", b);
    }

    /// On two levels, the flat DP is brute force's minimum with each stage and boundary charged
    /// at the links it spans; the level-wise DP gives a valid plan on at most the workers.
    #[test]
    fn two_levels_flat_equals_exhaustive(
        p in small_profile(),
        per_machine in 1u32..=3,
        machines in 1u32..=2,
    ) {
        let t = Topology::two_level(per_machine, 64.0, machines, 2.0);
        let got = plan(&p, &t, &flat()).expect("plan");
        let (best, _) = exhaustive::search(&p, &t, &flat()).expect("some plan");
        prop_assert_eq!(got.predicted_s, Some(best));
        let h = PlanOptions { search: Search::Hierarchical, ..flat() };
        let hier = plan(&p, &t, &h).expect("hierarchical");
        prop_assert!(validate_stages(&p, &hier.stages).is_ok());
        prop_assert!(hier.workers_used() <= t.workers());
        prop_assert!(never_grows(&got), "{:?}", got);
        prop_assert!(never_grows(&hier), "{:?}", hier);
    }
}

#[test]
fn fc_heavy_mlp_gets_a_pipeline_with_far_less_traffic() {
    let cfg = ModelConfig::Mlp {
        hidden: vec![4096, 4096, 4096],
    };
    let p = profile_of(cfg, &[784], 10, 64);
    let workers = 4;
    let t = Topology::flat(workers, gbps(10.0));
    let got = plan(&p, &t, &flat()).expect("plan");
    show("mlp 784-4096x3-10, 4 workers, 10 Gbit/s", &got, &p);
    assert!(got.stages.len() >= 2, "{got:?}");
    let pp = bytes_per_sample(&p, &got.stages);
    let dp = bytes_per_sample(&p, &dp_only(&p, workers));
    println!("bytes/sample: pipeline {pp:.0}, data parallel {dp:.0}");
    assert!(pp * 10.0 < dp, "pipeline {pp} vs dp {dp}");
    let dp_time = evaluate(&p, &t, &dp_only(&p, workers));
    assert!(got.predicted_s.expect("predicted") < dp_time);
}

#[test]
fn conv_heavy_models_get_data_parallelism_at_high_bandwidth() {
    // A small wide CNN: many channels, small weights, large activations, a small dense head.
    let cfg = ModelConfig::Cnn {
        channels: vec![64, 128],
        image: Some([3, 32, 32]),
    };
    let cnn = profile_of(cfg, &[3 * 32 * 32], 10, 64);
    let resnet = throughput_profile("resnet50", 64);
    for (name, p, workers) in [("wide cnn", &cnn, 8), ("resnet50", &resnet, 4)] {
        let t = Topology::flat(workers, gbps(100.0));
        let got = plan(p, &t, &flat()).expect("plan");
        show(&format!("{name}, {workers} workers, 100 Gbit/s"), &got, p);
        assert!(got.is_data_parallel(), "{name}: {got:?}");
        assert_eq!(got.stages[0].replicas, workers, "{name}: {got:?}");
    }
}

/// A check of a plan's shape.
type Shape = dyn Fn(&PipelinePlan) -> bool;

/// What the thesis reports for VGG-16 (Table 5.1): 4x4 → "12-1", 2x8 → "15-1" (§7.4 item 18:
/// the flat DP's), 1x4 → "3-1". Printed with `--nocapture`. Links inside a machine are free.
/// What the flat DP gives on our profile with the V100 fitted to PipeDream's own profiles:
/// - 4x4 at 10 Gbit/s: "8-1", and four single-worker machines at 10 Gbit/s: "3-1" (the "k-1"
///   shape: two stages, the first replicated, the second on one worker; "8-1" leaves 7 workers
///   idle, as "12-1" leaves 3);
/// - 2x8 at 25 Gbit/s: "14-2", not "15-1": under the thesis's sync term a 15-replica stage of
///   every convolution waits 35.2 ms per minibatch on its weight sync, while moving conv5 (half
///   the convolutions' weights) to the second stage brings it to 21.5 ms;
/// - one machine of 4 with free links: data parallelism (its weight sync costs nothing).
///
/// Neither search's replicas grow along the pipeline.
#[test]
fn vgg16_gets_replicated_first_stage_plans() {
    let p = throughput_profile("vgg16", 64);
    let free = f64::INFINITY;
    let k_minus_1 = |got: &PipelinePlan| {
        got.stages.len() == 2 && got.stages[0].replicas >= 2 && got.stages[1].replicas == 1
    };
    let replicated_in_single_out = |got: &PipelinePlan| {
        got.stages.len() >= 2
            && got.stages[0].replicas >= 2
            && got.stages.last().is_some_and(|s| s.replicas == 1)
    };
    let replicated_pipeline =
        |got: &PipelinePlan| got.stages.len() >= 2 && got.stages[0].replicas >= 2;
    let dp = |got: &PipelinePlan| got.is_data_parallel() && got.stages[0].replicas == 4;
    let cases: [(&str, Topology, &Shape); 5] = [
        (
            "2x8, 25 Gbit/s",
            Topology::two_level(8, free, 2, gbps(25.0)),
            &replicated_pipeline,
        ),
        (
            "4 machines x 1, 10 Gbit/s",
            Topology::flat(4, gbps(10.0)),
            &k_minus_1,
        ),
        (
            "4x4, 10 Gbit/s",
            Topology::two_level(4, free, 4, gbps(10.0)),
            &replicated_pipeline,
        ),
        (
            "16 machines x 1, 10 Gbit/s",
            Topology::flat(16, gbps(10.0)),
            &replicated_in_single_out,
        ),
        (
            "1x4, free links",
            Topology::two_level(4, free, 1, gbps(10.0)),
            &dp,
        ),
    ];
    for (name, t, expected) in cases {
        let got = plan(&p, &t, &flat()).expect("plan");
        show(&format!("vgg16 {name}, flat"), &got, &p);
        let h = PlanOptions {
            search: Search::Hierarchical,
            ..flat()
        };
        let hier = plan(&p, &t, &h).expect("hierarchical");
        show(&format!("vgg16 {name}, hierarchical"), &hier, &p);
        let dp_s = evaluate(&p, &t, &dp_only(&p, t.workers()));
        println!("  data parallel on {}: {:.3} ms", t.workers(), dp_s * 1e3);
        assert!(expected(&got), "{name}: {got:?}");
        assert!(never_grows(&got), "{name}: {got:?}");
        assert!(never_grows(&hier), "{name}: {hier:?}");
        assert!(got.predicted_s.expect("predicted") <= dp_s);
    }
}

/// VGG-16 (G = 64, V100) on 4 machines of 4 workers, free links inside machines and 10 Gbit/s
/// between them: a replicated input stage whose replicas never grow along the pipeline (the
/// thesis reports "12-1"; with the V100 model of an earlier release the unrestricted search
/// picked "2-13-1", whose 13-replica stage the runtime cannot keep busy).
#[test]
fn vgg16_on_4x4_plans_replicas_that_never_grow() {
    let p = throughput_profile("vgg16", 64);
    let t = Topology::two_level(4, f64::INFINITY, 4, gbps(10.0));
    let got = plan(&p, &t, &flat()).expect("plan");
    show("vgg16 4x4, 10 Gbit/s, flat", &got, &p);
    assert!(never_grows(&got), "{got:?}");
    assert!(
        got.stages.len() >= 2 && got.stages[0].replicas >= 2,
        "{got:?}"
    );
    assert_eq!(
        evaluate(&p, &t, &got.stages),
        got.predicted_s.expect("predicted")
    );
}

#[test]
fn a_plan_that_does_not_fit_memory_names_the_memory_and_the_need() {
    let p = Profile {
        layers: vec![
            LayerProfile {
                compute_s: 1.0,
                activation_bytes: 100,
                kept_bytes: 100,
                weight_bytes: 1000,
            };
            3
        ],
        batch: 1,
    };
    let t = Topology::flat(3, 1e6);
    let options = PlanOptions {
        memory_bytes: Some(500),
        ..flat()
    };
    // The least any plan needs: layer 0 on 2 workers (2 minibatches in flight each:
    // 1000·3 + 100·2 = 3200), layers 1..3 on one (1 in flight: 2000·2 + 200 = 4200).
    let e = plan(&p, &t, &options).unwrap_err();
    assert_eq!(
        e,
        PlanError::DoesNotFit {
            memory_bytes: 500,
            smallest_need: 4200
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("500") && msg.contains("4200"), "{msg}");
    // With that much memory, a plan of that time fits (on 2 workers: layer 0, then 1..3, as
    // fast as on 3 and each within 4200 bytes); the one-layer-per-stage "1-1-1", which needs
    // 4300 at its input stage, does not.
    let fits = plan(
        &p,
        &t,
        &PlanOptions {
            memory_bytes: Some(4200),
            ..flat()
        },
    )
    .expect("fits");
    assert_eq!(fits.config_string(), "1-1");
    assert_eq!(fits.predicted_s, Some(2.0));
}

#[test]
fn memory_pushes_the_plan_off_data_parallelism() {
    // Cheap to sync (infinite bandwidth) so data parallelism is fastest, but the whole model
    // (2·|W| + activations) does not fit on one worker.
    let l = LayerProfile {
        compute_s: 1.0,
        activation_bytes: 10,
        kept_bytes: 10,
        weight_bytes: 1000,
    };
    let p = Profile {
        layers: vec![l; 4],
        batch: 1,
    };
    let t = Topology::flat(4, f64::INFINITY);
    assert!(plan(&p, &t, &flat()).expect("plan").is_data_parallel());
    // 6000 bytes: data parallelism needs 8040 a worker; a pipeline whose input stage runs one
    // layer with 3 minibatches in flight needs 1000·(2 + 3 weight copies) + 10·3 = 5030 there.
    let limited = PlanOptions {
        memory_bytes: Some(6000),
        ..flat()
    };
    let got = plan(&p, &t, &limited).expect("plan");
    assert!(got.stages.len() >= 2, "{got:?}");
    assert!(evaluate(&p, &t, &got.stages) >= 1.0);
}

#[test]
fn idle_workers_where_one_more_only_adds_sync() {
    // One layer of heavy weights: a second replica halves compute but its sync costs more;
    // the best plan leaves workers idle.
    let p = Profile {
        layers: vec![LayerProfile {
            compute_s: 1.0,
            activation_bytes: 0,
            kept_bytes: 0,
            weight_bytes: 1000,
        }],
        batch: 1,
    };
    let t = Topology::flat(4, 1000.0);
    // m replicas: (1/m)·max(1, 2(m−1)) = 1, 1, 4/3, 6/4: one worker is as fast as two.
    let got = plan(&p, &t, &flat()).expect("plan");
    assert_eq!(got.workers_used(), 1, "{got:?}");
    assert_eq!(got.predicted_s, Some(1.0));
    // "12-1"-like: a cheap-to-replicate input stage and a heavy-weight output layer whose
    // replication would cost more than it saves.
    let l = |c: f64, w: u64| LayerProfile {
        compute_s: c,
        activation_bytes: 1,
        kept_bytes: 1,
        weight_bytes: w,
    };
    let p = Profile {
        layers: vec![l(6.0, 1), l(1.0, 100_000)],
        batch: 1,
    };
    let t = Topology::flat(8, 1000.0);
    let got = plan(&p, &t, &flat()).expect("plan");
    assert_eq!(got.config_string(), "6-1", "{got:?}");
    assert_eq!(got.workers_used(), 7);
    assert_eq!(got.noam, 2);
    assert_eq!(got.predicted_s, Some(1.0));
}

#[test]
fn infinite_bandwidth_makes_communication_free() {
    let p = throughput_profile("vgg16", 64);
    let t = Topology::flat(4, f64::INFINITY);
    let got = plan(&p, &t, &flat()).expect("plan");
    let total: f64 = p.layers.iter().map(|l| l.compute_s).sum();
    assert!(got.is_data_parallel(), "{got:?}");
    assert_eq!(got.predicted_s, Some(total / 4.0));
}

#[test]
fn bad_inputs_are_named_errors() {
    let p = throughput_profile("vgg16", 64);
    let e = plan(&p, &Topology::flat(0, 1.0), &flat()).unwrap_err();
    assert_eq!(e, PlanError::NoWorkers);
    assert!(e.to_string().contains("no workers"));
    let empty = Profile {
        layers: vec![],
        batch: 64,
    };
    let e = plan(&empty, &Topology::flat(2, 1.0), &flat()).unwrap_err();
    assert_eq!(e, PlanError::EmptyProfile);
    let e = plan(&p, &Topology::flat(2, -1.0), &flat()).unwrap_err();
    assert!(e.to_string().contains("bandwidth"), "{e}");
    let zero = PlanOptions {
        max_stages: Some(0),
        ..flat()
    };
    assert_eq!(
        plan(&p, &Topology::flat(2, 1.0), &zero).unwrap_err(),
        PlanError::NoStages
    );
}

/// The level-wise search's prediction is for its own layout, which the collapsed list of
/// stages on contiguous workers does not keep: here its best plan inside a machine is data
/// parallelism on the machine's two devices (4 s), replicated on both machines, which sync the
/// weights over the slow link once per machine (`max(4, 2·6/2) / 2` = 3 s); collapsed to one
/// stage "4" on workers 0..4, the four replicas sync over the slow link as one group
/// (`max(8, 2·3·6/2) / 4` = 4.5 s), and the flat search's best contiguous plan takes 4 s.
#[test]
fn the_hierarchical_prediction_is_for_its_machine_replicated_layout() {
    let l = |a: u64| LayerProfile {
        compute_s: 4.0,
        activation_bytes: a,
        kept_bytes: a,
        weight_bytes: 3,
    };
    let p = Profile {
        layers: vec![l(10), l(0)],
        batch: 1,
    };
    let t = Topology::two_level(2, 64.0, 2, 2.0);
    let flat_plan = plan(&p, &t, &flat()).expect("flat");
    let h = PlanOptions {
        search: Search::Hierarchical,
        ..flat()
    };
    let hier = plan(&p, &t, &h).expect("hierarchical");
    show("flat", &flat_plan, &p);
    show("hierarchical", &hier, &p);
    assert_eq!(hier.config_string(), "4");
    assert_eq!(hier.predicted_s, Some(3.0));
    assert_eq!(flat_plan.predicted_s, Some(4.0));
    assert_eq!(evaluate(&p, &t, &hier.stages), 4.5);
}

/// GNMT's LSTMs have far more weights than activations: on one server of four GPUs on PCIe the
/// planner (with the runtime's ring charge, the strategy's default) picks a straight pipeline,
/// as the thesis's did for GNMT-8 and GNMT-16 (Table 5.1), moving a small fraction of data
/// parallelism's bytes.
#[test]
fn gnmt_gets_a_straight_pipeline_on_one_server() {
    for name in ["gnmt-8", "gnmt-16"] {
        let p = throughput_profile(name, 64);
        let t = Topology::two_level(4, gbps(126.0), 1, gbps(10.0));
        let ring = PlanOptions {
            sync: concord_pipeline::planner::Sync::Ring,
            ..flat()
        };
        let got = plan(&p, &t, &ring).expect("plan");
        show(name, &got, &p);
        assert_eq!(got.stages.len(), 4, "{name}: {}", got.config_string());
        assert!(got.stages.iter().all(|s| s.replicas == 1), "{name}");
        let dp = bytes_per_sample(&p, &dp_only(&p, 4));
        assert!(bytes_per_sample(&p, &got.stages) < 0.1 * dp, "{name}");
    }
}

/// VGG-16 on two machines of 8 V100s joined at 2.7 Gbit/s: a stage that starts inside one
/// machine and feeds a stage reaching into the other sends most of its minibatches over the
/// slow link. The flat search once charged such a boundary at the link to the next stage's
/// first worker only, picked "7-7-1" and predicted 38.5 ms a minibatch for a schedule that
/// replays (and simulates) at about 300; its prediction now stays within 10 % of the replay.
#[test]
fn a_boundary_into_a_stage_across_machines_is_charged_at_the_slow_link() {
    use concord_pipeline::planner::replay;
    use concord_pipeline::schedule::default_depth;
    let p = throughput_profile("vgg16", 64);
    let t = Topology::two_level(8, gbps(300.0), 2, gbps(2.7));
    let options = PlanOptions {
        sync: concord_pipeline::planner::Sync::Ring,
        ..flat()
    };
    let got = plan(&p, &t, &options).expect("plan");
    show("vgg16 2x8, 2.7 Gbit/s, flat", &got, &p);
    let predicted = got.predicted_s.expect("predicted");
    let replicas: Vec<u32> = got.stages.iter().map(|s| s.replicas).collect();
    let replayed = replay(&p, &t, &got.stages, default_depth(&replicas)).expect("replay");
    assert!(
        (predicted / replayed).ln().abs() < 1.1f64.ln(),
        "{got:?}: predicted {predicted} s, replayed {replayed} s"
    );
}
