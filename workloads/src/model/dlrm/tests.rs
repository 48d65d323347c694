//! The row-wise path against whole-table autograd, and a student DLRM learning the planted
//! teacher.

use super::*;
use crate::data::{split_ctr, CtrSchema, DataConfig};
use crate::metrics::auc;
use crate::model::{ModelConfig, ModelSpec};
use candle_core::Device;

fn small(interaction: Interaction) -> DlrmSpec {
    DlrmSpec {
        fields: vec![7, 5, 9],
        dense_features: 3,
        dim: 4,
        interaction,
        bottom: vec![6],
        top: vec![5, 3],
        cross_layers: 2,
    }
}

const ALL: [Interaction; 3] = [Interaction::WideDeep, Interaction::DeepFm, Interaction::Dcn];

/// A batch of 6 samples with repeated ids (ids 2 of field 0 and 4 of field 2 appear twice).
fn batch() -> (Vec<f32>, Vec<u32>) {
    let ids = [
        [2u32, 0, 4],
        [6, 4, 8],
        [2, 1, 4],
        [0, 3, 0],
        [5, 0, 1],
        [1, 2, 7],
    ];
    let mut features = Vec::new();
    for (i, row) in ids.iter().enumerate() {
        for d in 0..3 {
            features.push(((i * 3 + d) as f32 * 0.37).sin() * 1.5);
        }
        features.extend(row.iter().map(|&id| id as f32));
    }
    (features, vec![1, 0, 0, 1, 0, 1])
}

/// Parameters with embeddings of order one (the He init with fan-in = rows makes them small),
/// so every term of the interaction carries weight in the gradients.
fn values(spec: &DlrmSpec, seed: u64) -> Vec<Vec<f32>> {
    let mut v = ModelSpec::Dlrm(spec.clone()).init_values(seed).unwrap();
    for t in v.iter_mut().take(spec.num_tables()) {
        for x in t.iter_mut() {
            *x *= 0.6 * (spec.fields[0] as f32).sqrt();
        }
    }
    // Non-zero biases.
    for (p, t) in spec.params().iter().zip(v.iter_mut()) {
        if p.fan_in == 0 {
            for (i, x) in t.iter_mut().enumerate() {
                *x = 0.05 * ((i as f32) - 1.0);
            }
        }
    }
    v
}

/// Gather the batch's rows, step the dense part, scatter `emb_grad` into zero tables: the
/// gradients (and loss) of whole-table autograd, for all three interactions.
#[test]
fn row_wise_gradients_equal_full_autograd() {
    for interaction in ALL {
        let spec = small(interaction);
        let values = values(&spec, 11);
        let (features, labels) = batch();
        let (full_loss, full) = full_step(&spec, &values, &features, &labels).unwrap();

        let schema = CtrSchema {
            dense: 3,
            rows: spec.fields.clone(),
        };
        let (dense_x, ids) = split_ctr(&schema, &features);
        let (b, k, w) = (labels.len(), spec.num_tables(), spec.width());
        let mut emb = vec![0.0f32; b * k * w];
        for f in 0..k {
            let field_ids: Vec<u32> = (0..b).map(|i| ids[i * k + f]).collect();
            let rows = gather_rows(&values[f], spec.fields[f], &field_ids, 0..w);
            for i in 0..b {
                emb[(i * k + f) * w..(i * k + f + 1) * w]
                    .copy_from_slice(&rows[i * w..(i + 1) * w]);
            }
        }
        let dense = DlrmDense::new(&spec, &Device::Cpu).unwrap();
        dense.set_params(&values[spec.dense_param_range()]).unwrap();
        let step = dense.step(&emb, &dense_x, &labels).unwrap();
        assert!((step.loss - full_loss).abs() < 1e-6 * full_loss.max(1.0));

        let mut grads: Vec<Vec<f32>> = spec.fields.iter().map(|&r| vec![0.0; r * w]).collect();
        for f in 0..k {
            let field_ids: Vec<u32> = (0..b).map(|i| ids[i * k + f]).collect();
            let g: Vec<f32> = (0..b)
                .flat_map(|i| step.emb_grad[(i * k + f) * w..(i * k + f + 1) * w].to_vec())
                .collect();
            add_rows(&mut grads[f], spec.fields[f], &field_ids, &g, 0..w, 1.0);
        }
        grads.extend(step.grads.iter().cloned());
        assert_eq!(grads.len(), full.len());
        for ((p, a), e) in spec.params().iter().zip(&grads).zip(&full) {
            let scale = e.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            assert!(scale > 0.0, "{interaction:?} {}: zero gradient", p.name);
            let diff = a
                .iter()
                .zip(e)
                .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                diff <= 1e-5 * scale,
                "{interaction:?} {}: differs by {diff} (scale {scale})",
                p.name
            );
        }
        // Rows no sample looks up (ids 3 and 4 of field 0) get exactly zero.
        for c in 0..w {
            assert_eq!(grads[0][c * 7 + 3], 0.0);
            assert_eq!(grads[0][c * 7 + 4], 0.0);
        }
    }
}

/// Layout: tables first, `[width, rows]`; the dense range covers the rest; widths per
/// interaction; FLOPs count the MLPs.
#[test]
fn layout_and_sizes() {
    let s = small(Interaction::DeepFm);
    let p = s.params();
    assert_eq!(p[0].name, "emb.00");
    assert_eq!(p[2].shape, vec![5, 9]);
    assert_eq!(s.dense_param_range(), 3..p.len());
    assert_eq!(
        s.dense_param_elems(),
        p[3..].iter().map(|q| q.elems()).sum::<usize>()
    );
    assert_eq!(small(Interaction::Dcn).width(), 4);
    assert_eq!(small(Interaction::WideDeep).width(), 5);
    // bottom 3→6→4, top 16→5→3, out 3→1: 2·(18+24+80+15+3) = 280, plus FM 4·16 + 3 wide.
    assert_eq!(s.dense_forward_flops(), 280.0 + 64.0 + 3.0);
    let dcn = small(Interaction::Dcn);
    assert!(dcn.params().iter().any(|q| q.name == "cross.1.weight"));
    let mut bad = small(Interaction::Dcn);
    bad.cross_layers = 0;
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("model.cross_layers"));
    bad = small(Interaction::WideDeep);
    bad.top = vec![4, 0];
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("model.top"));
}

/// A DLRM refuses non-click data and other models refuse click data, naming the key.
#[test]
fn dlrm_and_ctr_data_pair_only_with_each_other() {
    let dlrm: ModelConfig = toml::from_str("kind = \"dlrm\"").unwrap();
    let e = dlrm
        .check_data(&DataConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("model.kind") && e.contains("ctr"), "{e}");
    let ctr: DataConfig = toml::from_str("kind = \"ctr\"").unwrap();
    assert!(dlrm.check_data(&ctr).is_ok());
    let e = ModelConfig::default()
        .check_data(&ctr)
        .unwrap_err()
        .to_string();
    assert!(e.contains("data.kind") && e.contains("dlrm"), "{e}");
}

/// A DeepFM student trained by plain SGD (the dense part on its gradients, the tables row-wise
/// on the rows each batch touched) learns the planted teacher of the default data: 400 steps
/// of 256 samples (two epochs) at one learning rate, 0.5, for every parameter. Measured test
/// AUC: 0.720 on seed 0 (0.730, 0.729, 0.736 on seeds 1–3); learning rates 0.1–1.0 all give
/// 0.70–0.72. Much of the teacher's signal sits in rows of the Zipf tail that two epochs see a
/// handful of times, so the student stays well below the teacher.
#[test]
fn student_dlrm_learns_the_teacher() {
    let data: DataConfig = toml::from_str("kind = \"ctr\"").unwrap();
    let split = data.load(0).unwrap();
    let cfg: ModelConfig = toml::from_str("kind = \"dlrm\"").unwrap();
    let spec = ModelSpec::resolve_for_data(&cfg, &data, &split.train).unwrap();
    let ModelSpec::Dlrm(d) = &spec else {
        panic!("not a DLRM")
    };
    let mut values = spec.init_values(1).unwrap();
    let dense = DlrmDense::new(d, &Device::Cpu).unwrap();
    let schema = split.train.ctr.clone().unwrap();
    let (k, w, batch, lr) = (d.num_tables(), d.width(), 256usize, 0.5f32);
    let steps = 400;
    let n = split.train.len();
    for step in 0..steps {
        let idx: Vec<usize> = (0..batch).map(|i| (step * batch + i) % n).collect();
        let (features, labels) = split.train.gather(&idx);
        let (dense_x, ids) = split_ctr(&schema, &features);
        let mut emb = vec![0.0f32; batch * k * w];
        let field_ids = |f: usize| -> Vec<u32> { (0..batch).map(|i| ids[i * k + f]).collect() };
        for f in 0..k {
            let rows = gather_rows(&values[f], d.fields[f], &field_ids(f), 0..w);
            for i in 0..batch {
                emb[(i * k + f) * w..(i * k + f + 1) * w]
                    .copy_from_slice(&rows[i * w..(i + 1) * w]);
            }
        }
        dense.set_params(&values[d.dense_param_range()]).unwrap();
        let out = dense.step(&emb, &dense_x, &labels).unwrap();
        for (v, g) in values[d.dense_param_range()].iter_mut().zip(&out.grads) {
            for (x, g) in v.iter_mut().zip(g) {
                *x -= lr * g;
            }
        }
        for (f, table) in values[..k].iter_mut().enumerate() {
            let g: Vec<f32> = (0..batch)
                .flat_map(|i| out.emb_grad[(i * k + f) * w..(i * k + f + 1) * w].to_vec())
                .collect();
            sgd_rows(table, d.fields[f], &field_ids(f), &g, 0..w, lr);
        }
    }
    let model = DlrmModel::new(d, &Device::Cpu).unwrap();
    model.set_params(&values).unwrap();
    let e = model
        .evaluate(&split.test.features, &split.test.labels)
        .unwrap();
    let p = model.predict(&split.test.features).unwrap();
    assert_eq!(e.auc, auc(&p, &split.test.labels));
    let a = e.auc.unwrap();
    eprintln!(
        "student DeepFM test AUC after {steps} steps: {a:.4} (loss {:.4})",
        e.loss
    );
    assert!(a > 0.70, "test AUC {a}");
}
