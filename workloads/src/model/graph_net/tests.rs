use super::*;
use crate::data::DataConfig;
use crate::graph::{Move, MovePlan, MovePoint, OpGraph, OpKind, Pass};
use crate::model::{ModelConfig, ModelSpec, ParamInfo, Replica, StepOutput};
use crate::rng::seeded;
use crate::WorkloadError;
use candle_core::Device;
use rand::Rng;

const IMAGE: [usize; 3] = [3, 8, 8];
const FLAT: usize = 3 * 8 * 8;
const CLASSES: usize = 3;

fn resnet(bn: bool) -> ModelSpec {
    let cfg = ModelConfig::TinyResnet {
        blocks: vec![1, 1],
        channels: vec![4, 6],
        bn,
        image: Some(IMAGE),
    };
    ModelSpec::resolve(&cfg, &[FLAT], CLASSES).unwrap()
}

fn inception() -> ModelSpec {
    let cfg = ModelConfig::InceptionStack {
        blocks: 2,
        width: 3,
        image: None,
    };
    ModelSpec::resolve(&cfg, &IMAGE, CLASSES).unwrap()
}

fn chain() -> ModelSpec {
    ModelSpec::Graph(GraphNetSpec::chain(IMAGE, 4, CLASSES))
}

fn graph_of(spec: &ModelSpec) -> OpGraph {
    spec.op_graph().unwrap()
}

fn replica(spec: &ModelSpec, seed: u64) -> Replica {
    let r = Replica::new(spec, &Device::Cpu).unwrap().unwrap();
    r.set_params(&spec.init_values(seed).unwrap()).unwrap();
    r
}

/// A seeded batch of uniform features in [-1, 1] and labels.
fn batch(rows: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let mut rng = seeded(seed, 77, 0);
    let x = (0..rows * FLAT).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let y = (0..rows)
        .map(|_| rng.gen_range(0..CLASSES as u32))
        .collect();
    (x, y)
}

fn norm(a: &[f32]) -> f64 {
    a.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: Vec<f32> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    norm(&diff) / norm(a).max(norm(b)).max(1e-12)
}

/// The plan of a swapping memory manager that offloads every feature map read by a
/// convolution, pooling, activation or batch-norm when its first reader's forward starts,
/// frees it after its last reader's forward, and prefetches it when the backward of the first
/// node (in backward order) that needs it starts: its last reader.
fn offload_plan(g: &OpGraph) -> MovePlan {
    let consumers = g.consumers();
    let order = g.exec_order();
    let pos = |n: usize| order.iter().position(|&o| o == n).unwrap();
    let mut plan = MovePlan::default();
    let offloadable = |c: &usize| {
        matches!(
            g.nodes[*c].kind,
            OpKind::Conv | OpKind::Pool | OpKind::Activation | OpKind::BatchNorm
        )
    };
    let at = |pass, node, before| MovePoint { pass, node, before };
    for (t, readers) in consumers.iter().enumerate() {
        if !readers.iter().any(offloadable) {
            continue;
        }
        let first = *readers.iter().min_by_key(|&&c| pos(c)).unwrap();
        let last = *readers.iter().max_by_key(|&&c| pos(c)).unwrap();
        plan.moves
            .push((at(Pass::Forward, first, true), Move::Offload(t)));
        plan.moves
            .push((at(Pass::Forward, last, false), Move::Free(t)));
        plan.moves
            .push((at(Pass::Backward, last, true), Move::Prefetch(t)));
    }
    plan
}

fn bits(out: &StepOutput) -> (u64, Vec<Vec<u32>>) {
    (
        out.loss.to_bits(),
        out.grads
            .iter()
            .map(|g| g.iter().map(|v| v.to_bits()).collect())
            .collect(),
    )
}

#[test]
fn layerwise_step_matches_whole_graph_autograd() {
    for (what, spec) in [
        ("resnet+bn", resnet(true)),
        ("resnet", resnet(false)),
        ("inception", inception()),
        ("chain", chain()),
    ] {
        for seed in [1, 2, 3] {
            let r = replica(&spec, seed);
            let (x, y) = batch(5, seed);
            // The replica trains layer by layer; the net's own `step` is whole-graph autograd.
            let whole = r.graph_net().unwrap().step(x.clone(), &y).unwrap();
            let layered = r.step_with_plan(x, &y, &MovePlan::default()).unwrap();
            let rel = (whole.loss - layered.loss).abs() / whole.loss.abs();
            assert!(rel < 1e-6, "{what} seed {seed}: loss differs by {rel}");
            assert_eq!(whole.grads.len(), spec.params().len());
            for (p, (a, b)) in spec
                .params()
                .iter()
                .zip(whole.grads.iter().zip(&layered.grads))
            {
                let rel = rel_l2(a, b);
                assert!(
                    rel < 1e-5,
                    "{what} seed {seed}: {} differs by {rel}",
                    p.name
                );
            }
            // The gradients are not trivially zero.
            assert!(whole.grads.iter().map(|g| norm(g)).sum::<f64>() > 1e-3);
        }
    }
}

#[test]
fn offloading_feature_maps_leaves_loss_and_gradients_bit_identical() {
    for (what, spec) in [
        ("chain", chain()),
        ("resnet+bn", resnet(true)),
        ("resnet", resnet(false)),
        ("inception", inception()),
    ] {
        let plan = offload_plan(&graph_of(&spec));
        let frees = plan
            .moves
            .iter()
            .filter(|(_, m)| matches!(m, Move::Free(_)))
            .count();
        assert!(
            frees >= 5,
            "{what}: the plan frees only {frees} feature maps"
        );
        for seed in [1, 2, 3] {
            let r = replica(&spec, seed);
            let (x, y) = batch(4, seed + 10);
            let plain = r
                .step_with_plan(x.clone(), &y, &MovePlan::default())
                .unwrap();
            let moved = r.step_with_plan(x, &y, &plan).unwrap();
            assert_eq!(bits(&plain), bits(&moved), "{what} seed {seed}");
        }
    }
}

/// Without its prefetches the same plan leaves the backward pass without the feature maps it
/// freed: the frees of the bit-identity test really take effect.
#[test]
fn a_freed_feature_map_never_prefetched_stops_the_backward_pass() {
    let spec = resnet(true);
    let mut plan = offload_plan(&graph_of(&spec));
    plan.moves.retain(|(_, m)| !matches!(m, Move::Prefetch(_)));
    let r = replica(&spec, 1);
    let (x, y) = batch(4, 1);
    let e = r.step_with_plan(x, &y, &plan).unwrap_err();
    // The last node freed in forward is the first one the backward pass needs back.
    let WorkloadError::Plan(PlanError::NotOnDevice { pass, .. }) = &e else {
        panic!("unexpected error {e}");
    };
    assert_eq!(*pass, "backward", "{e}");
}

#[test]
fn freeing_a_join_input_early_names_the_join_and_the_tensor() {
    let spec = resnet(false);
    let g = graph_of(&spec);
    let id = |name: &str| g.nodes.iter().position(|n| n.name == name).unwrap();
    // The stem's output feeds the first block's conv and, as the shortcut, its add.
    let plan = MovePlan {
        moves: vec![(
            MovePoint {
                pass: Pass::Forward,
                node: id("s1b1_conv1"),
                before: false,
            },
            Move::Free(id("stem_relu")),
        )],
    };
    let e = replica(&spec, 1)
        .step_with_plan(batch(2, 1).0, &batch(2, 1).1, &plan)
        .unwrap_err();
    match &e {
        WorkloadError::Plan(PlanError::NotOnDevice {
            pass,
            name,
            role,
            tensor,
            ..
        }) => {
            assert_eq!(
                (*pass, name.as_str(), *role, tensor.as_str()),
                ("forward", "s1b1_add", "input", "stem_relu")
            );
        }
        other => panic!("unexpected error {other}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("s1b1_add") && msg.contains("stem_relu"),
        "{msg}"
    );

    // Freed after its last forward reader and never brought back: the backward pass of its
    // producer needs it as its output.
    let plan = MovePlan {
        moves: vec![(
            MovePoint {
                pass: Pass::Forward,
                node: id("s1b1_add"),
                before: false,
            },
            Move::Free(id("stem_relu")),
        )],
    };
    let e = replica(&spec, 1)
        .step_with_plan(batch(2, 1).0, &batch(2, 1).1, &plan)
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("backward pass") && msg.contains("stem_relu") && msg.contains("s1b1_add"),
        "{msg}"
    );
}

#[test]
fn moves_that_cannot_be_followed_are_errors() {
    let spec = chain();
    let g = graph_of(&spec);
    let r = replica(&spec, 1);
    let (x, y) = batch(2, 1);
    let point = |pass, node, before| MovePoint { pass, node, before };
    // Prefetch of a feature map that was never offloaded.
    let plan = MovePlan {
        moves: vec![(point(Pass::Backward, 3, true), Move::Prefetch(2))],
    };
    let e = r.step_with_plan(x.clone(), &y, &plan).unwrap_err();
    assert!(
        matches!(&e, WorkloadError::Plan(PlanError::NoHostCopy { tensor, .. }) if tensor == "relu1"),
        "{e}"
    );
    // Offload of a feature map already dropped.
    let plan = MovePlan {
        moves: vec![
            (point(Pass::Forward, 1, false), Move::Free(1)),
            (point(Pass::Forward, 1, false), Move::Offload(1)),
        ],
    };
    let e = r.step_with_plan(x.clone(), &y, &plan).unwrap_err();
    assert!(
        matches!(&e, WorkloadError::Plan(PlanError::NothingToOffload { tensor, .. }) if tensor == "conv1"),
        "{e}"
    );
    // A node the network lacks.
    let plan = MovePlan {
        moves: vec![(point(Pass::Forward, 0, true), Move::Offload(g.len()))],
    };
    let e = r.step_with_plan(x.clone(), &y, &plan).unwrap_err();
    assert!(
        matches!(&e, WorkloadError::Plan(PlanError::UnknownNode { node, .. }) if *node == g.len()),
        "{e}"
    );
    // A staged model has no graph to follow a plan on.
    let mlp = ModelSpec::resolve(&ModelConfig::Mlp { hidden: vec![4] }, &[FLAT], CLASSES).unwrap();
    let e = replica(&mlp, 1)
        .step_with_plan(x, &y, &MovePlan::default())
        .unwrap_err();
    assert!(e.to_string().contains("graph network"), "{e}");
}

#[test]
fn sgd_with_offloading_lowers_the_loss_of_a_tiny_resnet() {
    let data = DataConfig::Blobs {
        dim: FLAT,
        classes: CLASSES,
        train: 64,
        test: 16,
        spread: 1.0,
        separation: 0.5,
    };
    let split = data.load(3).unwrap();
    let cfg = ModelConfig::TinyResnet {
        blocks: vec![1, 1],
        channels: vec![4, 8],
        bn: true,
        image: Some(IMAGE),
    };
    let spec = ModelSpec::resolve_for_data(&cfg, &data, &split.train).unwrap();
    let plan = offload_plan(&graph_of(&spec));
    let mut params = spec.init_values(5).unwrap();
    let r = replica(&spec, 5);
    let idx: Vec<usize> = (0..split.train.len()).collect();
    let (features, labels) = split.train.gather(&idx);
    let mut losses = Vec::new();
    for _ in 0..30 {
        let out = r.step_with_plan(features.clone(), &labels, &plan).unwrap();
        losses.push(out.loss);
        for (p, g) in params.iter_mut().zip(&out.grads) {
            for (w, d) in p.iter_mut().zip(g) {
                *w -= 0.1 * d;
            }
        }
        r.set_params(&params).unwrap();
    }
    let first = losses[0];
    let last = losses[losses.len() - 3..].iter().sum::<f64>() / 3.0;
    assert!(
        last < 0.5 * first,
        "loss went from {first} to {last}: {losses:?}"
    );
    let (acc, _) = r.evaluate(&features, &labels).unwrap();
    assert!(acc.unwrap() > 0.8, "training accuracy {acc:?}");
}

/// The autograd gradients of the stride-2 convolutions agree with central differences of the
/// loss (candle differentiates strided convolutions through transposed ones).
#[test]
fn strided_convolution_gradients_match_finite_differences() {
    let spec = resnet(false);
    let r = replica(&spec, 4);
    let (x, y) = batch(4, 4);
    let net = r.graph_net().unwrap();
    let out = net.step(x.clone(), &y).unwrap();
    let params = spec.params();
    let values = spec.init_values(4).unwrap();
    for name in ["s2b1_conv1.weight", "s2b1_proj.weight", "fc.weight"] {
        let i = params.iter().position(|p| p.name == name).unwrap();
        for k in [0, 5] {
            let h = 1e-2f32;
            let loss_at = |delta: f32| {
                let mut v = values.clone();
                v[i][k] += delta;
                r.set_params(&v).unwrap();
                net.step(x.clone(), &y).unwrap().loss
            };
            let fd = (loss_at(h) - loss_at(-h)) / (2.0 * h as f64);
            let g = out.grads[i][k] as f64;
            assert!(
                (fd - g).abs() <= 0.05 * g.abs() + 2e-4,
                "{name}[{k}]: autograd {g}, finite difference {fd}"
            );
        }
    }
}

#[test]
fn the_op_graph_is_the_network_node_for_node() {
    for spec in [resnet(true), resnet(false), inception(), chain()] {
        let ModelSpec::Graph(net) = &spec else {
            unreachable!()
        };
        let g = graph_of(&spec);
        g.validate().unwrap();
        assert_eq!(g.len(), net.nodes.len());
        for (o, n) in g.nodes.iter().zip(&net.nodes) {
            assert_eq!(
                (&o.name, &o.inputs, o.kind),
                (&n.name, &n.inputs, n.op.kind())
            );
            assert_eq!(o.out_elems as usize, n.out_elems());
        }
        let params: usize = spec.params().iter().map(ParamInfo::elems).sum();
        assert_eq!(g.param_elems() as usize, params);
        // One stage per node after the input, owning that node's parameters.
        let ranges = spec.stage_param_ranges();
        assert_eq!(ranges.len(), spec.stage_facts().len());
        assert_eq!(spec.layer_costs().len(), ranges.len());
        assert_eq!(ranges.last().unwrap().end, spec.params().len());
        let names = spec.params();
        for (r, node) in ranges.iter().zip(&net.nodes[1..]) {
            for p in &names[r.clone()] {
                assert!(p.name.starts_with(&format!("{}.", node.name)), "{}", p.name);
            }
        }
        // The real model's output shape matches the graph's.
        let r = replica(&spec, 1);
        let gn = r.graph_net().unwrap();
        let logits = gn
            .logits(&gn.input(batch(2, 1).0, 2).unwrap(), false)
            .unwrap();
        assert_eq!(logits.dims(), &[2, CLASSES]);
    }
}

#[test]
fn inception_blocks_run_branch_by_branch() {
    let g = graph_of(&inception());
    let order: Vec<&str> = g
        .exec_order()
        .into_iter()
        .map(|i| g.nodes[i].name.as_str())
        .filter(|n| n.starts_with("inc1_") && !n.ends_with("_relu"))
        .collect();
    assert_eq!(
        order,
        [
            "inc1_b1_pool",
            "inc1_b1_1x1",
            "inc1_b2_1x1",
            "inc1_b3_1x1",
            "inc1_b3_3x3",
            "inc1_b4_1x1",
            "inc1_b4_3x3a",
            "inc1_b4_3x3b",
            "inc1_concat"
        ]
    );
    let concat = g.nodes.iter().find(|n| n.name == "inc1_concat").unwrap();
    assert_eq!(concat.kind, OpKind::Concat);
    assert_eq!(concat.inputs.len(), 4);
    assert_eq!(concat.out_elems, 4 * 3 * 8 * 8);
}

#[test]
fn batch_norm_starts_as_the_identity_transform() {
    let spec = resnet(true);
    let values = spec.init_values(9).unwrap();
    for (p, v) in spec.params().iter().zip(&values) {
        if p.name.ends_with(".gamma") {
            assert!(v.iter().all(|&x| x == 1.0), "{}", p.name);
        } else if p.name.ends_with(".beta") || p.name.ends_with(".bias") {
            assert!(v.iter().all(|&x| x == 0.0), "{}", p.name);
        } else {
            assert!(v.iter().any(|&x| x != 0.0), "{}", p.name);
        }
    }
    // Convolutions followed by batch-norm have no bias; without batch-norm they do.
    let names = |s: &ModelSpec| -> Vec<String> { s.params().into_iter().map(|p| p.name).collect() };
    assert!(!names(&spec).contains(&"stem_conv.bias".to_string()));
    assert!(names(&resnet(false)).contains(&"stem_conv.bias".to_string()));
    assert!(names(&spec).contains(&"s2b1_proj_bn.gamma".to_string()));
}

fn config_error(toml_model: &str, sample: &[usize]) -> String {
    let cfg: Result<ModelConfig, _> = toml::from_str(toml_model);
    match cfg {
        Err(e) => e.to_string(),
        Ok(cfg) => ModelSpec::resolve(&cfg, sample, CLASSES)
            .unwrap_err()
            .to_string(),
    }
}

#[test]
fn config_errors_name_the_key() {
    let img = &IMAGE[..];
    let cases = [
        ("kind = \"tiny-resnet\"\ndepth = 3", "depth"),
        ("kind = \"inception-stack\"\nchannels = [3]", "channels"),
        ("kind = \"tiny-resnet\"\nblocks = []", "model.blocks"),
        (
            "kind = \"tiny-resnet\"\nchannels = [4, 0]",
            "model.channels",
        ),
        ("kind = \"tiny-resnet\"\nchannels = [4]", "model.channels"),
        (
            "kind = \"tiny-resnet\"\nblocks = [1, 1, 1, 1, 1]\nchannels = [1, 1, 1, 1, 1]",
            "model.image",
        ),
        ("kind = \"inception-stack\"\nwidth = 0", "model.width"),
        ("kind = \"inception-stack\"\nblocks = 0", "model.blocks"),
    ];
    for (toml_model, key) in cases {
        let e = config_error(toml_model, img);
        assert!(e.contains(key), "{toml_model:?}: {e}");
    }
    // Flat data needs an image shape.
    let e = config_error("kind = \"inception-stack\"", &[FLAT]);
    assert!(e.contains("model.image"), "{e}");
    // Defaults resolve: [2, 2] blocks of [8, 16] channels with batch-norm; two blocks of 8.
    let cfg: ModelConfig = toml::from_str("kind = \"tiny-resnet\"").unwrap();
    let ModelSpec::Graph(net) = ModelSpec::resolve(&cfg, img, CLASSES).unwrap() else {
        unreachable!()
    };
    assert!(net.nodes.iter().any(|n| n.name == "s2b2_conv2_bn"));
    assert_eq!(cfg.kind(), "tiny-resnet");
    let cfg: ModelConfig = toml::from_str("kind = \"inception-stack\"").unwrap();
    let ModelSpec::Graph(net) = ModelSpec::resolve(&cfg, img, CLASSES).unwrap() else {
        unreachable!()
    };
    assert!(net.nodes.iter().any(|n| n.name == "inc2_concat"));
    assert!(!net.nodes.iter().any(|n| n.name == "inc3_concat"));
}

/// A ResNet on an image whose height and width leave its stride-2 layers different remainders
/// (8 x 7) trains: candle's own backward pass stops there at a shape mismatch.
#[test]
fn a_resnet_on_a_non_square_image_steps() {
    let image = [3, 8, 7];
    let cfg = ModelConfig::TinyResnet {
        blocks: vec![1, 1],
        channels: vec![4, 6],
        bn: true,
        image: Some(image),
    };
    let spec = ModelSpec::resolve(&cfg, &[3 * 8 * 7], CLASSES).unwrap();
    let r = Replica::new(&spec, &Device::Cpu).unwrap().unwrap();
    r.set_params(&spec.init_values(1).unwrap()).unwrap();
    let x: Vec<f32> = (0..2 * 3 * 8 * 7).map(|i| (i as f32 * 0.1).sin()).collect();
    let out = r.step(x, &[0, 1]).unwrap();
    assert!(out.loss.is_finite());
    let sizes: Vec<usize> = spec.params().iter().map(|p| p.elems()).collect();
    assert_eq!(out.grads.iter().map(Vec::len).collect::<Vec<_>>(), sizes);
    assert!(out.grads.iter().flatten().all(|g| g.is_finite()));
    assert!(out.grads.iter().flatten().any(|g| *g != 0.0));
}
