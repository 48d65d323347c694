//! Tests for the DLRM profiles: their dense part is their spec's, their tables come first in the
//! model's layout, and hand counts of their sizes.

use super::*;
use crate::model::{DlrmSpec, Interaction, ModelConfig, ModelSpec, ParamInfo};

const NAMES: [(&str, Interaction); 3] = [
    ("dlrm-wide-deep", Interaction::WideDeep),
    ("dlrm-deep-fm", Interaction::DeepFm),
    ("dlrm-dcn", Interaction::Dcn),
];

/// The profile named `name` resolved as `[model] kind = "profile"`.
fn resolve(name: &str) -> ModelSpec {
    let cfg = ModelConfig::Profile { name: name.into() };
    ModelSpec::resolve(&cfg, &[], 0).expect("a built-in DLRM profile resolves")
}

fn spec_of(model: &ModelSpec) -> DlrmSpec {
    model
        .dlrm()
        .expect("a DLRM profile carries its spec")
        .clone()
}

#[test]
fn the_three_profiles_resolve_with_their_criteo_like_spec() {
    for (name, interaction) in NAMES {
        let model = resolve(name);
        assert!(!model.is_real(), "{name}");
        assert_eq!(model.kind(), "profile");
        let spec = spec_of(&model);
        assert_eq!(spec, criteo_like_spec(interaction), "{name}");
        spec.validate().unwrap();
        assert_eq!(spec.interaction, interaction);
        assert_eq!(spec.num_tables(), 26);
        assert_eq!(spec.dense_features, 13);
        assert_eq!(spec.dim, 16);
        assert_eq!(spec.bottom, [512, 256]);
        match interaction {
            Interaction::Dcn => {
                assert_eq!(spec.top, [1024, 1024]);
                assert_eq!(spec.cross_layers, 3);
            }
            _ => assert_eq!(spec.top, [1024, 1024, 512, 256]),
        }
        let ModelSpec::Profile(p) = &model else {
            panic!("{name} is not a profile");
        };
        assert_eq!(p.name, name);
    }
    // Exactly these three built-ins are DLRMs.
    let dlrms: Vec<&str> = builtin_names()
        .iter()
        .copied()
        .filter(|n| builtin(n).unwrap().dlrm.is_some())
        .collect();
    assert_eq!(dlrms, ["dlrm-dcn", "dlrm-deep-fm", "dlrm-wide-deep"]);
}

#[test]
fn criteo_rows_are_the_kaggle_counts_capped() {
    // The Kaggle training set's 33,762,577 categorical ids, seven fields above the cap.
    assert_eq!(CRITEO_KAGGLE_ROWS.iter().sum::<usize>(), 33_762_577);
    let rows = criteo_like_rows();
    assert_eq!(rows.len(), 26);
    assert_eq!(rows.iter().filter(|&&r| r == ROW_CAP).count(), 7);
    assert_eq!(rows.iter().sum::<usize>(), 840_543);
    for (&raw, &capped) in CRITEO_KAGGLE_ROWS.iter().zip(&rows) {
        assert_eq!(capped, raw.min(100_000));
    }
    assert_eq!(rows[..4], [1460, 583, 100_000, 100_000]);
    assert_eq!(*rows.iter().min().unwrap(), 3);
}

/// The layers are the dense part: the same tensors as the spec's dense parameters, the same
/// FLOPs; the tables are not among them.
#[test]
fn layers_are_the_spec_dense_part() {
    for (name, _) in NAMES {
        let p = builtin(name).unwrap();
        let spec = p.dlrm.clone().unwrap();
        let tensors: Vec<(String, u64)> = p.tensors().map(|t| (t.name.clone(), t.elems)).collect();
        let dense: Vec<(String, u64)> = spec
            .dense_params()
            .iter()
            .map(|q| (q.name.clone(), q.elems() as u64))
            .collect();
        assert_eq!(tensors, dense, "{name}");
        assert_eq!(p.total_params(), spec.dense_param_elems() as u64, "{name}");
        assert_eq!(p.forward_flops(), spec.dense_forward_flops(), "{name}");
        assert!(p.tensors().all(|t| !t.name.starts_with("emb.")), "{name}");
        // The per-layer cost facts count the same FLOPs and parameters.
        for l in &p.layers {
            assert_eq!(l.cost.forward_flops(), l.forward_flops, "{name}/{}", l.name);
            assert_eq!(
                l.cost.param_bytes,
                l.param_bytes() as f64,
                "{name}/{}",
                l.name
            );
        }
        let model = resolve(name);
        assert_eq!(
            model.training_flops_per_sample(),
            3.0 * spec.dense_forward_flops(),
            "{name}"
        );
    }
}

/// `params()` is the DLRM layout: 26 tables `emb.NN` of `[width, rows]`, then the dense part.
#[test]
fn tables_come_first_in_the_layout() {
    for (name, interaction) in NAMES {
        let model = resolve(name);
        let spec = spec_of(&model);
        let params = model.params();
        assert_eq!(params, spec.params(), "{name}");
        let width = if interaction == Interaction::Dcn {
            16
        } else {
            17
        };
        for (k, p) in params[..26].iter().enumerate() {
            assert_eq!(p.name, format!("emb.{k:02}"));
            assert_eq!(p.shape, [width, criteo_like_rows()[k]], "{}", p.name);
        }
        assert_eq!(spec.dense_param_range(), 26..params.len());
        assert!(params[26..].iter().all(|p| !p.name.starts_with("emb.")));
        assert_eq!(params[26].name, "bottom.0.weight");
        assert_eq!(params.last().unwrap().name, "out.bias");
    }
}

/// The stages: `embedding` owning the tables, then one per layer owning its tensors; cost facts
/// one per stage; no operator graph.
#[test]
fn stages_put_the_embedding_before_the_dense_layers() {
    for (name, _) in NAMES {
        let model = resolve(name);
        let spec = spec_of(&model);
        let ModelSpec::Profile(p) = &model else {
            panic!("{name} is not a profile");
        };
        let facts = model.stage_facts();
        let ranges = model.stage_param_ranges();
        let costs = model.layer_costs();
        assert_eq!(facts.len(), p.layers.len() + 1, "{name}");
        assert_eq!(ranges.len(), facts.len(), "{name}");
        assert_eq!(costs.len(), facts.len(), "{name}");
        assert_eq!(facts[0], spec.embedding_stage());
        assert_eq!(facts[0].activation_bytes, 26 * spec.width() as u64 * 4);
        assert_eq!(ranges[0], 0..26);
        assert_eq!(costs[0], crate::cost::LayerCost::default());
        let params = model.params();
        for ((layer, r), (f, c)) in p
            .layers
            .iter()
            .zip(&ranges[1..])
            .zip(facts[1..].iter().zip(&costs[1..]))
        {
            let names: Vec<&str> = params[r.clone()].iter().map(|q| q.name.as_str()).collect();
            let want: Vec<&str> = layer.tensors.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, want, "{name}/{}", layer.name);
            assert_eq!(f.name, layer.name);
            assert_eq!(f.forward_flops, layer.forward_flops);
            assert_eq!(c, &layer.cost);
        }
        assert_eq!(ranges.last().unwrap().end, params.len());
        assert!(model.op_graph().is_none(), "{name}");
        assert!(p.graph.is_empty(), "{name}");
    }
}

/// Hand counts for DeepFM: x0 = 27 × 16 = 432 values.
#[test]
fn deep_fm_hand_counts() {
    let p = dlrm_deep_fm();
    let names: Vec<&str> = p.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "bottom.0",
            "bottom.1",
            "bottom.2",
            "interaction",
            "top.0",
            "top.1",
            "top.2",
            "top.3",
            "out"
        ]
    );
    let params = |prefix: &str| -> u64 {
        p.layers
            .iter()
            .filter(|l| l.name.starts_with(prefix))
            .map(LayerProfile::params)
            .sum()
    };
    // 432→1024→1024→512→256, weights and biases.
    let top = 432 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256;
    assert_eq!(top, 2_149_120);
    assert_eq!(params("top."), top);
    // 13→512→256→16.
    assert_eq!(
        params("bottom."),
        13 * 512 + 512 + 512 * 256 + 256 + 256 * 16 + 16
    );
    assert_eq!(params("out"), 256 + 1);
    assert_eq!(params("interaction"), 0);
    assert_eq!(p.total_params(), 2_149_120 + 142_608 + 257);
    // FLOPs: 2 per multiply-add, the FM's 26 + 4 × 432.
    let interaction = p.layers.iter().find(|l| l.name == "interaction").unwrap();
    assert_eq!(interaction.forward_flops, 1754.0);
    assert_eq!(interaction.activation_bytes, (432 + 1) * 4);
    let flops = 2.0 * 141_824.0 + 1754.0 + 2.0 * 2_146_304.0 + 2.0 * 256.0;
    assert_eq!(p.forward_flops(), flops);
    assert_eq!(p.layers.last().unwrap().activation_bytes, 4);
}

/// DCN's cross layers live in the interaction layer, and its output layer reads x_L beside the
/// deep MLP's last hidden layer.
#[test]
fn dcn_hand_counts() {
    let p = dlrm_dcn();
    let interaction = p.layers.iter().find(|l| l.name == "interaction").unwrap();
    let names: Vec<&str> = interaction
        .tensors
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "cross.0.weight",
            "cross.0.bias",
            "cross.1.weight",
            "cross.1.bias",
            "cross.2.weight",
            "cross.2.bias"
        ]
    );
    assert_eq!(interaction.params(), 6 * 432);
    assert_eq!(interaction.forward_flops, 5.0 * 432.0 * 3.0);
    assert_eq!(interaction.activation_bytes, 2 * 432 * 4);
    let out = p.layers.last().unwrap();
    assert_eq!(out.tensors[0].elems, 432 + 1024);
    let spec = p.dlrm.as_ref().unwrap();
    let param = |n: &str| -> Option<ParamInfo> { spec.params().into_iter().find(|q| q.name == n) };
    assert_eq!(param("out.weight").unwrap().shape, [1, 1456]);
    assert!(param("top.2.weight").is_none());
}

/// A DLRM profile of any spec follows it, e.g. a Wide&Deep with no hidden layers at all.
#[test]
fn a_profile_follows_any_spec() {
    let spec = DlrmSpec {
        fields: vec![5, 7],
        dense_features: 3,
        dim: 2,
        interaction: Interaction::WideDeep,
        bottom: vec![],
        top: vec![],
        cross_layers: 0,
    };
    let p = dlrm_profile("tiny", spec.clone());
    let names: Vec<&str> = p.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["bottom.0", "interaction", "out"]);
    // bottom 3→2 (8 params), out over x0 = 3 × 2 (7 params).
    assert_eq!(p.total_params(), 8 + 7);
    assert_eq!(p.total_params(), spec.dense_param_elems() as u64);
    assert_eq!(p.forward_flops(), spec.dense_forward_flops());
    assert_eq!(p.forward_flops(), 2.0 * 6.0 + 2.0 + 2.0 * 6.0);
}
