//! Tests for the profiles' operator graphs: well formed, and the same model as the layers.

use super::*;
use crate::graph::{OpKind, OpNode};

/// Every built-in with an operator graph: all but the DLRM profiles, whose graph is empty.
fn all() -> Vec<ModelProfile> {
    builtin_names()
        .iter()
        .map(|n| builtin(n).expect("builtin resolves"))
        .filter(|m| m.dlrm.is_none())
        .collect()
}

fn of_kind(m: &ModelProfile, kind: OpKind) -> Vec<&OpNode> {
    m.graph.nodes.iter().filter(|n| n.kind == kind).collect()
}

fn fields(c: &LayerCost) -> [f64; 7] {
    [
        c.conv3x3_flops,
        c.conv_flops,
        c.pointwise_flops,
        c.matmul_flops,
        c.activation_bytes,
        c.param_bytes,
        c.kernels,
    ]
}

#[test]
fn every_graph_is_well_formed_and_adds_up_to_its_layers() {
    for m in all() {
        let g = &m.graph;
        g.validate()
            .unwrap_or_else(|e| panic!("{}: invalid graph: {e}", m.name));
        assert_eq!(g.param_elems(), m.total_params(), "{} params", m.name);
        assert_eq!(g.forward_flops(), m.forward_flops(), "{} FLOPs", m.name);
        let nodes = g
            .nodes
            .iter()
            .fold(LayerCost::default(), |a, n| a.plus(&n.cost));
        let layers = m
            .layers
            .iter()
            .fold(LayerCost::default(), |a, l| a.plus(&l.cost));
        assert_eq!(fields(&nodes), fields(&layers), "{} cost facts", m.name);
        for n in &g.nodes {
            assert_eq!(
                n.cost.param_bytes,
                4.0 * n.param_elems as f64,
                "{}/{}",
                m.name,
                n.name
            );
            let arith = matches!(
                n.kind,
                OpKind::Conv | OpKind::FullyConnected | OpKind::Recurrent | OpKind::Attention
            );
            assert_eq!(
                n.cost.forward_flops() > 0.0,
                arith,
                "{}/{}: only convolutions, fc, recurrent and attention layers do arithmetic",
                m.name,
                n.name
            );
        }
        // The graph ends in a cost-free softmax over the class scores, which reads the
        // classifier's activation.
        let last = g.nodes.last().unwrap();
        assert_eq!(last.kind, OpKind::Softmax, "{}", m.name);
        assert_eq!(last.cost, LayerCost::default(), "{}", m.name);
        assert_eq!(
            last.out_bytes(1),
            m.layers.last().unwrap().activation_bytes,
            "{}",
            m.name
        );
        let scores = &g.nodes[last.inputs[0]];
        assert_eq!(scores.kind, OpKind::Activation, "{}", m.name);
        assert_eq!(
            g.nodes[scores.inputs[0]].kind,
            OpKind::FullyConnected,
            "{}",
            m.name
        );
    }
}

#[test]
fn layers_keep_what_their_graph_nodes_output() {
    for m in all() {
        // Every node between the input and the cost-free softmax belongs to one layer, so the
        // layers keep what those nodes keep; at most every output, at least all but the
        // activations'.
        let last = m.graph.nodes.len() - 1;
        let kept: u64 = m.layers.iter().map(|l| l.kept_bytes).sum();
        assert_eq!(kept, 4 * m.graph.kept_elems(1..last), "{}", m.name);
        let nodes = &m.graph.nodes[1..last];
        let every: u64 = nodes.iter().map(|n| n.out_bytes(1)).sum();
        let activations: u64 = nodes
            .iter()
            .filter(|n| n.kind == OpKind::Activation)
            .map(|n| n.out_bytes(1))
            .sum();
        assert!(kept <= every && kept >= every - activations, "{}", m.name);
        for l in &m.layers {
            assert!(
                l.kept_bytes >= l.activation_bytes,
                "{}/{}: keeps less than its output",
                m.name,
                l.name
            );
        }
    }
    // ResNet-50's first (pre-activation) bottleneck unit at 56 × 56: the batch-norm over its
    // 64-channel input, conv1, bn2, conv2 and bn3 (64 channels each), conv3, the shortcut's
    // conv and the sum (256 each); every ReLU in place.
    let resnet = builtin("resnet-50").expect("builtin");
    let block = resnet
        .layers
        .iter()
        .find(|l| l.activation_bytes == 256 * 56 * 56 * 4)
        .expect("a block at 56 x 56");
    assert_eq!(
        block.kept_bytes,
        (5 * 64 + 3 * 256) * 56 * 56 * 4,
        "{}",
        block.name
    );
}

#[test]
fn every_conv_and_fc_is_followed_by_its_relu() {
    for m in all() {
        let g = &m.graph;
        let readers = g.consumers();
        for (i, n) in g.nodes.iter().enumerate() {
            if matches!(n.kind, OpKind::Conv | OpKind::FullyConnected) {
                let r = &readers[i];
                assert_eq!(r.len(), 1, "{}/{}", m.name, n.name);
                let relu = &g.nodes[r[0]];
                assert_eq!(relu.kind, OpKind::Activation, "{}/{}", m.name, n.name);
                assert_eq!(relu.name, format!("{}/relu", n.name));
                assert_eq!(relu.out_elems, n.out_elems);
                assert_eq!(relu.param_elems, 0);
            }
        }
    }
}

#[test]
fn exec_order_visits_every_node_once_after_its_inputs() {
    for m in all() {
        let g = &m.graph;
        let order = g.exec_order();
        assert_eq!(order.len(), g.len(), "{}", m.name);
        let mut position = vec![usize::MAX; g.len()];
        for (at, &node) in order.iter().enumerate() {
            assert_eq!(position[node], usize::MAX, "{}: node {node} twice", m.name);
            position[node] = at;
        }
        for (i, n) in g.nodes.iter().enumerate() {
            for &input in &n.inputs {
                assert!(
                    position[input] < position[i],
                    "{}: {} runs before its input {}",
                    m.name,
                    n.name,
                    g.nodes[input].name
                );
            }
        }
    }
}

/// One add per residual block, reading the branch and the shortcut: the projection for the
/// first unit of an MXNet stage, the block's input otherwise (and always for ResNet-32's
/// option-A shortcuts).
#[test]
fn resnet_blocks_join_branch_and_shortcut_in_one_add() {
    for name in ["resnet-32", "resnet-50", "resnet-101", "resnet-152"] {
        let m = builtin(name).unwrap();
        let g = &m.graph;
        let blocks: Vec<&LayerProfile> = m
            .layers
            .iter()
            .filter(|l| l.name.starts_with("stage"))
            .collect();
        let adds = of_kind(&m, OpKind::Add);
        assert_eq!(adds.len(), blocks.len(), "{name}");
        // The output node of each layer, in order: the node the next layer starts from.
        let mut outputs = Vec::new();
        for add in &adds {
            assert_eq!(add.inputs.len(), 2, "{name}/{}", add.name);
            assert_ne!(add.inputs[0], add.inputs[1], "{name}/{}", add.name);
            let (branch, shortcut) = (&g.nodes[add.inputs[0]], &g.nodes[add.inputs[1]]);
            let block = add.name.split('/').next().unwrap();
            let branch_end = if name == "resnet-32" {
                format!("{block}_bn2")
            } else {
                format!("{block}_conv3/relu")
            };
            assert_eq!(branch.name, branch_end, "{name}");
            let projected = name != "resnet-32" && block.ends_with("_unit1");
            if projected {
                assert_eq!(shortcut.name, format!("{block}_sc/relu"), "{name}");
            } else {
                outputs.push((block.to_owned(), add.inputs[1]));
            }
        }
        // An identity shortcut is the previous layer's output: the previous block's add (its
        // ReLU) or the stem's last operation.
        for (block, shortcut) in outputs {
            let at = m.layers.iter().position(|l| l.name == block).unwrap();
            let prev = &m.layers[at - 1].name;
            let s = &g.nodes[shortcut].name;
            if prev.starts_with("stage") {
                assert_eq!(s, &format!("{prev}/add1/relu"), "{name}/{block}");
            } else {
                assert!(s == "bn1" || s == "stem/pool1", "{name}/{block}: {s}");
            }
        }
    }
}

/// Inception modules are joins of three or more branches; Inception-V4's stem also has three
/// two-way joins.
#[test]
fn inception_modules_are_concat_joins() {
    for (name, modules, pairs) in [
        ("googlenet", 9, 0),
        ("googlenet-32", 9, 0),
        ("inception-v3", 11, 0),
        ("inception-v4", 16, 3),
    ] {
        let m = builtin(name).unwrap();
        let concats = of_kind(&m, OpKind::Concat);
        let wide = concats.iter().filter(|c| c.inputs.len() >= 3).count();
        let two = concats.iter().filter(|c| c.inputs.len() == 2).count();
        assert_eq!((wide, two), (modules, pairs), "{name}");
        assert_eq!(concats.len(), modules + pairs, "{name}");
        for c in concats {
            let parts: u64 = c.inputs.iter().map(|&i| m.graph.nodes[i].out_elems).sum();
            assert_eq!(parts, c.out_elems, "{name}/{}", c.name);
        }
    }
}

/// Inception-V4's Inception-A block forks its input four ways and runs branch by branch.
#[test]
fn inception_v4_block_forks_four_ways() {
    let m = inception_v4();
    let g = &m.graph;
    let readers = g.consumers();
    let block = |n: &str| {
        g.nodes
            .iter()
            .position(|node| node.name == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    let join = block("Mixed_5b/concat1");
    let fork = block("Mixed_5a/concat1");
    assert_eq!(readers[fork].len(), 4);
    assert_eq!(g.nodes[join].inputs.len(), 4);
    // Between the fork and the join, the forward order finishes each branch before the next.
    let order = g.exec_order();
    let from = order.iter().position(|&n| n == fork).unwrap();
    let to = order.iter().position(|&n| n == join).unwrap();
    let names: Vec<&str> = order[from + 1..to]
        .iter()
        .map(|&n| g.nodes[n].name.as_str())
        .collect();
    fn branch(node: &str) -> Option<&str> {
        node.split('.').nth(1)?.split('_').next()
    }
    let mut seen: Vec<&str> = Vec::new();
    for n in &names {
        let b = branch(n).unwrap_or("branch3"); // the unnamed average pool leads branch 3
        if seen.last() != Some(&b) {
            assert!(!seen.contains(&b), "branch {b} interleaved: {names:?}");
            seen.push(b);
        }
    }
    assert_eq!(seen, ["branch0", "branch1", "branch2", "branch3"]);
}

/// VGG and AlexNet are chains: one input per node, one reader per node but the last, and the
/// forward order is the declaration order.
#[test]
fn vgg_and_alexnet_graphs_are_chains() {
    for name in ["vgg16", "vgg19", "alexnet", "alexnet-tv"] {
        let m = builtin(name).unwrap();
        let g = &m.graph;
        for (i, n) in g.nodes.iter().enumerate().skip(1) {
            assert_eq!(n.inputs, vec![i - 1], "{name}/{}", n.name);
        }
        assert!(g.consumers().iter().all(|r| r.len() <= 1), "{name}");
        assert_eq!(g.exec_order(), (0..g.len()).collect::<Vec<_>>(), "{name}");
        assert!(of_kind(&m, OpKind::Add).is_empty() && of_kind(&m, OpKind::Concat).is_empty());
    }
}
