//! Tests for the built-in profiles against the papers' and specs' published numbers.

use super::*;
use std::collections::HashSet;

const MIB: u64 = 1 << 20;

fn all() -> Vec<ModelProfile> {
    builtin_names()
        .iter()
        .map(|n| builtin(n).expect("builtin resolves"))
        .collect()
}

fn count_ge_1m(m: &ModelProfile) -> usize {
    m.tensors().filter(|t| t.elems >= 1_000_000).count()
}

fn assert_rel(what: &str, got: f64, want: f64, tol: f64) {
    let rel = (got - want).abs() / want;
    assert!(
        rel <= tol,
        "{what}: got {got}, want {want} ± {:.1}% (off by {:.2}%)",
        tol * 100.0,
        rel * 100.0
    );
}

/// PSLD spec §5.1 profile table: tensors, params (M, 2 decimals), fp32 MB, largest tensor
/// (name fragment, MB to 1 decimal), tensors ≥ 1 M elements, blocks at 4 MiB.
#[test]
fn psld_table_5_1() {
    #[allow(clippy::type_complexity)]
    let rows: [(&str, usize, f64, u64, &str, f64, usize, u64); 4] = [
        ("vgg16", 32, 138.36, 553, "fc6.weight", 411.0, 9, 158),
        ("alexnet", 16, 62.38, 250, "fc6.weight", 151.0, 4, 70),
        ("resnet-50", 157, 25.55, 102, "_conv2.weight", 9.4, 10, 165),
        ("resnet-101", 310, 44.54, 178, "_conv2.weight", 9.4, 10, 318),
    ];
    for (name, tensors, params_m, mb, largest, largest_mb, ge_1m, blocks) in rows {
        let m = builtin(name).unwrap();
        assert_eq!(m.tensor_count(), tensors, "{name} tensors");
        assert_eq!(m.tensors().count(), tensors, "{name} tensors()");
        let p = m.total_params() as f64 / 1e6;
        assert!((p - params_m).abs() <= 0.005, "{name} params {p} M");
        assert_eq!(
            (m.param_bytes() as f64 / 1e6).round() as u64,
            mb,
            "{name} MB"
        );
        let big = m.largest_tensor().unwrap();
        assert!(big.name.ends_with(largest), "{name} largest {}", big.name);
        let big_mb = (big.bytes() as f64 / 1e6 * 10.0).round() / 10.0;
        assert!(
            (big_mb - largest_mb).abs() < 1e-9,
            "{name} largest {big_mb} MB"
        );
        assert_eq!(count_ge_1m(&m), ge_1m, "{name} tensors >= 1M");
        assert_eq!(m.blocks_at(4 * MIB), blocks, "{name} blocks at 4 MiB");
    }
}

#[test]
fn exact_known_counts() {
    // Element-exact totals from the architectures (match torchvision / Caffe / MXNet counts).
    let exact = [
        ("vgg16", 138_357_544),
        ("vgg19", 143_667_240),
        ("alexnet", 62_378_344),
        ("googlenet", 6_998_552),
        ("inception-v3", 23_834_568),
        ("inception-v4", 42_679_816), // timm's inception_v4
        ("mlr-imagenet", 21_504 * 1_000 + 1_000),
    ];
    for (name, params) in exact {
        assert_eq!(builtin(name).unwrap().total_params(), params, "{name}");
    }
    let vgg16 = vgg16();
    let fc6 = vgg16.tensors().find(|t| t.name == "fc6.weight").unwrap();
    assert_eq!(fc6.elems, 25088 * 4096);
    assert_eq!(fc6.bytes(), 411_041_792);
    let alex = alexnet();
    let fc6 = alex.tensors().find(|t| t.name == "fc6.weight").unwrap();
    assert_eq!(fc6.elems, 9216 * 4096);
}

#[test]
fn published_parameter_counts_within_2_percent() {
    let published = [
        ("vgg19", 143.67e6),
        ("resnet-32", 0.46e6),
        ("inception-v3", 23.8e6),
        ("googlenet", 7.0e6),
        ("googlenet-32", 7.0e6),
        ("resnet-152", 60.2e6),
        ("inception-v4", 42.68e6),
    ];
    for (name, want) in published {
        let got = builtin(name).unwrap().total_params() as f64;
        assert_rel(name, got, want, 0.02);
    }
    // The GoogLeNet paper's own table rounds to 6.8 M; stay within 3% of that too.
    assert_rel(
        "googlenet vs 6.8M",
        googlenet(224).total_params() as f64,
        6.8e6,
        0.03,
    );
}

#[test]
fn forward_flops_match_published() {
    assert_rel("vgg16", vgg16().forward_flops(), 30.9e9, 0.02);
    assert_rel("resnet-50", resnet50().forward_flops(), 8.2e9, 0.05);
    // MLR: one multiply-add per feature and class.
    assert_rel(
        "mlr-imagenet",
        mlr_imagenet().forward_flops(),
        2.0 * 21_504e3,
        1e-9,
    );
    // Further published multiply-accumulate counts (× 2 FLOPs).
    assert_rel("vgg19", vgg19().forward_flops(), 2.0 * 19.6e9, 0.02);
    assert_rel("resnet-101", resnet101().forward_flops(), 2.0 * 7.8e9, 0.03);
    assert_rel(
        "inception-v3",
        inception_v3().forward_flops(),
        2.0 * 5.7e9,
        0.03,
    );
    assert_rel(
        "googlenet",
        googlenet(224).forward_flops(),
        2.0 * 1.5e9,
        0.06,
    );
    assert_rel("resnet-32", resnet32().forward_flops(), 2.0 * 69e6, 0.03);
    // Without batch-norm: the same convolutions, no gamma and beta (2 per channel of the 31
    // normalised convolutions' outputs).
    let plain = resnet32_plain();
    assert_eq!(plain.forward_flops(), resnet32().forward_flops());
    let bn: u64 = 2 * (16 + 10 * 16 + 10 * 32 + 10 * 64);
    assert_eq!(plain.total_params() + bn, resnet32().total_params());
    assert!(plain
        .graph
        .nodes
        .iter()
        .all(|n| n.kind != crate::graph::OpKind::BatchNorm));
    assert_rel(
        "resnet-152",
        resnet152().forward_flops(),
        2.0 * 11.5e9,
        0.03,
    );
    assert_rel(
        "inception-v4",
        inception_v4().forward_flops(),
        2.0 * 12.3e9,
        0.03,
    );
    // Exact VGG16 hand count: sum over convs of H·W·Cout·Cin·9, plus fc weights.
    let convs: [(u64, u64, u64); 13] = [
        (224, 3, 64),
        (224, 64, 64),
        (112, 64, 128),
        (112, 128, 128),
        (56, 128, 256),
        (56, 256, 256),
        (56, 256, 256),
        (28, 256, 512),
        (28, 512, 512),
        (28, 512, 512),
        (14, 512, 512),
        (14, 512, 512),
        (14, 512, 512),
    ];
    let macs: u64 = convs
        .iter()
        .map(|&(s, ci, co)| s * s * ci * co * 9)
        .sum::<u64>()
        + 25088 * 4096
        + 4096 * 4096
        + 4096 * 1000;
    assert_eq!(vgg16().forward_flops(), 2.0 * macs as f64);
    for m in all() {
        assert_eq!(m.training_flops(), 3.0 * m.forward_flops(), "{}", m.name);
    }
}

#[test]
fn layer_invariants() {
    for m in all() {
        assert!(!m.layers.is_empty(), "{}", m.name);
        let mut layer_names = HashSet::new();
        let mut tensor_names = HashSet::new();
        for l in &m.layers {
            assert!(l.activation_bytes > 0, "{} {}", m.name, l.name);
            assert!(l.activation_bytes % 4 == 0, "{} {}", m.name, l.name);
            // An embedding only gathers rows.
            let gathers = l
                .tensors
                .iter()
                .all(|t| t.name.ends_with("embedder.weight"));
            assert!(l.forward_flops > 0.0 || gathers, "{} {}", m.name, l.name);
            // A DLRM's interaction is parameter-free but for DCN's cross layers.
            let parameter_free = m.dlrm.is_some() && l.name == "interaction";
            assert!(
                parameter_free || !l.tensors.is_empty(),
                "{} {}",
                m.name,
                l.name
            );
            assert!(layer_names.insert(l.name.as_str()), "dup layer {}", l.name);
            for t in &l.tensors {
                assert!(t.elems > 0, "{} {}", m.name, t.name);
                assert!(
                    tensor_names.insert(t.name.as_str()),
                    "dup tensor {}",
                    t.name
                );
            }
        }
        // tensors() is the layer-by-layer concatenation.
        let flat: Vec<_> = m.layers.iter().flat_map(|l| &l.tensors).collect();
        assert!(flat.iter().copied().eq(m.tensors()), "{}", m.name);
        // Execution order: the classifier is last and produces the class scores.
        let last = m.layers.last().unwrap();
        let (classes, positions) = if m.name.starts_with("resnet-32") {
            (10, 1)
        } else if m.dlrm.is_some() {
            (1, 1) // the click logit
        } else if m.name.starts_with("gnmt") {
            (32_320, gnmt::TOKENS) // a word per target token
        } else {
            (1000, 1)
        };
        assert_eq!(last.activation_bytes, classes * positions * 4, "{}", m.name);
        assert!(
            last.tensors.last().unwrap().name.ends_with(".bias"),
            "{}",
            m.name
        );
        assert_eq!(last.tensors.last().unwrap().elems, classes, "{}", m.name);
    }
}

#[test]
fn layer_order_and_sizes_vgg() {
    let names: Vec<String> = vgg19().layers.iter().map(|l| l.name.clone()).collect();
    let mut want = Vec::new();
    for (s, n) in [2, 2, 4, 4, 4].into_iter().enumerate() {
        for i in 0..n {
            want.push(format!("conv{}_{}", s + 1, i + 1));
        }
    }
    want.extend(["fc6", "fc7", "fc8"].map(String::from));
    assert_eq!(
        names, want,
        "VGG19 = 16 conv + 3 fc layers (Fela's 19 layers)"
    );
    let m = vgg16();
    let act: Vec<u64> = m.layers.iter().map(|l| l.activation_bytes / 4).collect();
    assert_eq!(act[0], 64 * 224 * 224);
    assert_eq!(act[1], 64 * 112 * 112, "pool1 folded into conv1_2");
    assert_eq!(act[12], 512 * 7 * 7, "pool5 folded into conv5_3");
    assert_eq!(act[13], 4096);
    let t: Vec<&str> = m.tensors().take(4).map(|t| t.name.as_str()).collect();
    assert_eq!(
        t,
        [
            "conv1_1.weight",
            "conv1_1.bias",
            "conv1_2.weight",
            "conv1_2.bias"
        ]
    );
}

#[test]
fn googlenet_has_felas_12_layers() {
    for hw in [224, 32] {
        let m = googlenet(hw);
        assert_eq!(m.layers.len(), 12);
        assert_eq!(m.layers[3].name, "inception_3b");
        assert_eq!(m.layers[8].name, "inception_4e");
        assert_eq!(m.layers[11].name, "loss3_classifier");
    }
    let g = googlenet(224);
    assert_eq!(g.layers[0].activation_bytes, 4 * 64 * 56 * 56);
    assert_eq!(g.layers[2].activation_bytes, 4 * 256 * 28 * 28);
    assert_eq!(g.layers[10].activation_bytes, 4 * 1024 * 7 * 7);
    let small = googlenet(32);
    assert_eq!(small.total_params(), g.total_params());
    assert!(small.forward_flops() < g.forward_flops() / 20.0);
    assert_eq!(small.layers[10].activation_bytes, 4 * 1024);
}

#[test]
fn inception_v3_shapes() {
    let m = inception_v3();
    let by = |n: &str| {
        m.layers
            .iter()
            .find(|l| l.name == n)
            .unwrap()
            .activation_bytes
            / 4
    };
    assert_eq!(by("Conv2d_1a_3x3"), 32 * 149 * 149);
    assert_eq!(by("Conv2d_4a_3x3"), 192 * 35 * 35);
    assert_eq!(by("Mixed_5b"), 256 * 35 * 35);
    assert_eq!(by("Mixed_5d"), 288 * 35 * 35);
    assert_eq!(by("Mixed_6a"), 768 * 17 * 17);
    assert_eq!(by("Mixed_7a"), 1280 * 8 * 8);
    assert_eq!(by("Mixed_7c"), 2048 * 8 * 8);
    assert!(
        m.tensors().all(|t| !t.name.contains("Aux")),
        "no auxiliary head"
    );
}

#[test]
fn resnet101_tensor_order_is_mxnet_list_arguments() {
    let m = resnet101();
    let head: Vec<(&str, u64)> = m
        .tensors()
        .take(16)
        .map(|t| (t.name.as_str(), t.elems))
        .collect();
    assert_eq!(
        head,
        [
            ("bn_data.gamma", 3),
            ("bn_data.beta", 3),
            ("conv0.weight", 64 * 3 * 7 * 7),
            ("bn0.gamma", 64),
            ("bn0.beta", 64),
            ("stage1_unit1_bn1.gamma", 64),
            ("stage1_unit1_bn1.beta", 64),
            ("stage1_unit1_conv1.weight", 64 * 64),
            ("stage1_unit1_bn2.gamma", 64),
            ("stage1_unit1_bn2.beta", 64),
            ("stage1_unit1_conv2.weight", 64 * 64 * 9),
            ("stage1_unit1_bn3.gamma", 64),
            ("stage1_unit1_bn3.beta", 64),
            ("stage1_unit1_conv3.weight", 256 * 64),
            ("stage1_unit1_sc.weight", 256 * 64),
            ("stage1_unit2_bn1.gamma", 256),
        ]
    );
    let tail: Vec<(&str, u64)> = m
        .tensors()
        .skip(306)
        .map(|t| (t.name.as_str(), t.elems))
        .collect();
    assert_eq!(
        tail,
        [
            ("bn1.gamma", 2048),
            ("bn1.beta", 2048),
            ("fc1.weight", 2048 * 1000),
            ("fc1.bias", 1000)
        ]
    );
    // Period-3 (gamma, beta, weight) pattern, broken only by the four shortcut convs.
    let sc: Vec<usize> = m
        .tensors()
        .enumerate()
        .filter(|(_, t)| t.name.ends_with("_sc.weight"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(sc.len(), 4);
    assert_eq!(m.layers.len(), 1 + 33 + 1);
}

#[test]
fn blocks_at_edges() {
    for m in all() {
        assert_eq!(m.blocks_at(u64::MAX), m.tensor_count() as u64, "{}", m.name);
        assert_eq!(m.blocks_at(4), m.total_params(), "{}", m.name);
        assert_eq!(m.blocks_at(0), m.param_bytes(), "{}", m.name);
        assert!(m.blocks_at(MIB) >= m.blocks_at(4 * MIB));
    }
    let t = TensorProfile {
        name: "x.weight".into(),
        elems: 1_048_576,
    };
    assert_eq!(t.blocks_at(4 * MIB), 1);
    assert_eq!(t.blocks_at(4 * MIB - 1), 2);
}

#[test]
fn builtin_lookup() {
    assert_eq!(builtin_names().len(), 19);
    for &name in builtin_names() {
        let m = builtin(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(m.name, name);
        assert_eq!(builtin(&name.to_uppercase()).unwrap(), m);
    }
    let mut sorted = builtin_names().to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, builtin_names());
    for (alias, canonical) in [
        ("VGG-16", "vgg16"),
        ("vgg_19", "vgg19"),
        ("ResNet50", "resnet-50"),
        ("resnet_101", "resnet-101"),
        ("ResNet-32", "resnet-32"),
        ("ResNet-32-noBN", "resnet-32-nobn"),
        ("Inception-V3", "inception-v3"),
        ("Inception-V4", "inception-v4"),
        ("ResNet-152", "resnet-152"),
        ("inception_v3", "inception-v3"),
        ("GoogLeNet", "googlenet"),
        ("AlexNet", "alexnet"),
        ("AlexNet-TV", "alexnet-tv"),
        ("DLRM-DeepFM", "dlrm-deep-fm"),
        ("dlrm_wide_deep", "dlrm-wide-deep"),
        ("DLRM DCN", "dlrm-dcn"),
    ] {
        assert_eq!(builtin(alias).unwrap().name, canonical, "{alias}");
    }
    for unknown in ["", "vgg", "resnet-18", "bert", "vgg161"] {
        assert!(builtin(unknown).is_none(), "{unknown}");
    }
}

#[test]
fn profiles_serialize() {
    fn is_serialize<T: serde::Serialize>(_: &T) {}
    is_serialize(&vgg16());
}

#[test]
fn googlenet_min_input() {
    assert_eq!(googlenet(31).layers.len(), 12);
    assert!(std::panic::catch_unwind(|| googlenet(30)).is_err());
}

/// The per-layer cost facts derive from the same architecture as the FLOP and parameter counts.
#[test]
fn layer_cost_facts_agree_with_the_flop_and_parameter_counts() {
    for name in builtin_names() {
        let m = builtin(name).unwrap();
        for l in &m.layers {
            let f = l.cost.forward_flops();
            assert!(
                (f - l.forward_flops).abs() <= 1e-12 * l.forward_flops,
                "{name}/{}: {f} vs {}",
                l.name,
                l.forward_flops
            );
            assert_eq!(
                l.cost.param_bytes,
                l.param_bytes() as f64,
                "{name}/{}",
                l.name
            );
            // Every layer reads its input and writes its output at least once.
            assert!(
                l.cost.activation_bytes >= l.activation_bytes as f64,
                "{name}/{}",
                l.name
            );
            // An arithmetic operation launches 3 kernels a step; an embedding's gather 2.
            assert!(l.cost.kernels >= 2.0, "{name}/{}", l.name);
        }
    }
    // ResNet-50 is mostly 1 × 1 convolutions by count; VGG has none.
    let total = |n: &str| {
        builtin(n)
            .unwrap()
            .layers
            .iter()
            .fold(crate::cost::LayerCost::default(), |a, l| a.plus(&l.cost))
    };
    assert_eq!(total("vgg16").pointwise_flops, 0.0);
    let resnet = total("resnet-50");
    assert!(resnet.pointwise_flops > resnet.conv3x3_flops + resnet.conv_flops);
    assert!(total("vgg16").matmul_flops > 0.0);
    // Every VGG convolution is 3 × 3 of stride 1; ResNet-50's stem (7 × 7 / 2) and strided
    // 3 × 3s are not, nor are AlexNet's 11 × 11 / 4 and 5 × 5, or Inception-V3's 1 × 7 and 7 × 1.
    assert_eq!(total("vgg16").conv_flops, 0.0);
    assert!(total("vgg16").conv3x3_flops > 0.0);
    for name in ["resnet-50", "alexnet", "inception-v3"] {
        let t = total(name);
        assert!(t.conv_flops > 0.0 && t.conv3x3_flops > 0.0, "{name}: {t:?}");
    }
    // AlexNet's first convolution: 64 × 3 × 11 × 11 weights over 55 × 55 outputs, stride 4.
    let alexnet = builtin("alexnet-tv").unwrap();
    assert_eq!(alexnet.layers[0].cost.conv3x3_flops, 0.0);
}

#[test]
fn torchvision_alexnet_matches_its_published_size() {
    let m = builtin("alexnet-tv").unwrap();
    assert_eq!(m.total_params(), 61_100_840);
    // ≈ 0.71 GMACs per sample.
    let gmacs = m.forward_flops() / 2e9;
    assert!((gmacs - 0.714).abs() < 0.01, "{gmacs}");
}

#[test]
fn inception_v4_shapes() {
    let m = inception_v4();
    let by = |n: &str| {
        m.layers
            .iter()
            .find(|l| l.name == n)
            .unwrap()
            .activation_bytes
            / 4
    };
    // The grid sizes and depths of the paper's Fig. 9.
    assert_eq!(by("Conv2d_1a_3x3"), 32 * 149 * 149);
    assert_eq!(by("Conv2d_2b_3x3"), 64 * 147 * 147);
    assert_eq!(by("Mixed_3a"), 160 * 73 * 73);
    assert_eq!(by("Mixed_4a"), 192 * 71 * 71);
    assert_eq!(by("Mixed_5a"), 384 * 35 * 35);
    assert_eq!(by("Mixed_5e"), 384 * 35 * 35);
    assert_eq!(by("Mixed_6a"), 1024 * 17 * 17);
    assert_eq!(by("Mixed_6h"), 1024 * 17 * 17);
    assert_eq!(by("Mixed_7a"), 1536 * 8 * 8);
    assert_eq!(by("Mixed_7d"), 1536 * 8 * 8);
    assert_eq!(m.layers.len(), 6 + 4 + 1 + 7 + 1 + 3 + 1);
    let fc = m.tensors().find(|t| t.name == "fc.weight").unwrap();
    assert_eq!(fc.elems, 1536 * 1000);
    // Every convolution is bias-free and followed by a batch-norm.
    let convs = m
        .tensors()
        .filter(|t| t.name.ends_with(".conv.weight"))
        .count();
    let bns = m
        .tensors()
        .filter(|t| t.name.ends_with(".bn.gamma"))
        .count();
    assert_eq!(convs, bns);
    assert_eq!(m.tensor_count(), 3 * convs + 2);
}

#[test]
fn resnet152_is_the_deep_mxnet_resnet() {
    let m = resnet152();
    // stem, 3 + 8 + 36 + 3 units, head; nine tensors a unit plus four projections, five in the
    // stem and four in the head.
    assert_eq!(m.layers.len(), 1 + 50 + 1);
    assert_eq!(m.tensor_count(), 50 * 9 + 4 + 5 + 4);
    assert_eq!(m.layers[12].name, "stage3_unit1");
    assert_eq!(m.layers[47].name, "stage3_unit36");
    // It shares ResNet-101's stem, first stage, first four units of the second stage and head.
    let r101 = resnet101();
    assert_eq!(m.layers[..8], r101.layers[..8]);
    assert_ne!(m.layers[8], r101.layers[8]);
    assert_eq!(m.layers.last(), r101.layers.last());
}

/// GNMT-8 and GNMT-16 hold exactly the parameters of PipeDream's own profiles of the two
/// models (the sum of their `parameter_size`s), in the layers the thesis counts: 8 and 16 LSTM
/// layers, the bidirectional one once.
#[test]
fn gnmt_matches_pipedreams_profiles() {
    for (name, params, lstm_layers, stage_candidates) in [
        ("gnmt-8", 193_765_952u64, 8, 11),
        ("gnmt-16", 277_717_568, 16, 19),
    ] {
        let m = builtin(name).unwrap();
        assert_eq!(m.total_params(), params, "{name}");
        assert_eq!(m.layers.len(), stage_candidates, "{name}");
        let lstms = m
            .layers
            .iter()
            .filter(|l| l.tensors.iter().any(|t| t.name.ends_with(".weight_hh_l0")))
            .count();
        assert_eq!(lstms, lstm_layers, "{name}");
        // A decoder LSTM's boundary carries its output and the attention context.
        let dec = m
            .layers
            .iter()
            .find(|l| l.name == "decoder.rnn_layers.0")
            .unwrap();
        assert_eq!(dec.activation_bytes, 2 * 1024 * gnmt::TOKENS * 4, "{name}");
        let classifier = m.layers.last().unwrap();
        assert_eq!(classifier.name, "decoder.classifier");
        assert_eq!(classifier.activation_bytes, 32_320 * gnmt::TOKENS * 4);
    }
}
