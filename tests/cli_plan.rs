//! `concord plan`: the table and the JSON agree with the planner's library result for the same
//! configuration; a configuration it cannot load names the key.

mod common;

use common::concord;
use concord::engine::cluster::DeviceProfile;
use concord::engine::model::{ModelConfig, ModelSpec};
use concord_pipeline::planner::{plan, PlanOptions, Profile, Sync, Topology};

/// VGG-16 at batch 64 on four one-worker v100-like machines with 10 Gbit/s NICs.
const JOB: [&str; 10] = [
    "--set",
    "model={kind=\"profile\",name=\"vgg16\"}",
    "--set",
    "batch=64",
    "--set",
    "cluster.devices.v100-10g={peak_tflops=15.7,half_saturation_batch=32.0,memory_gib=16.0,nic_gbps=10.0,latency_us=10.0}",
    "--set",
    "cluster.default_device=\"v100-10g\"",
    "--workers",
    "4",
];

fn expected() -> concord_pipeline::planner::PipelinePlan {
    let cfg = ModelConfig::Profile {
        name: "vgg16".into(),
    };
    let model = ModelSpec::resolve(&cfg, &[], 0).expect("vgg16");
    // The job's device: the built-in v100's figures, without its per-layer model (the FLOP model).
    let v100 = DeviceProfile {
        nic_gbps: 10.0,
        layers: None,
        ..DeviceProfile::builtins()["v100"].clone()
    };
    let profile = Profile::of_model(&model, &model.layer_costs(), &v100, 64);
    let topology = Topology::flat(4, v100.nic_bytes_per_s());
    // `concord plan` charges a replicated stage's sync as the runtime does by default.
    let options = PlanOptions {
        memory_bytes: Some(v100.memory_bytes()),
        sync: Sync::Ring,
        ..PlanOptions::default()
    };
    plan(&profile, &topology, &options).expect("plan")
}

fn run(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["plan"];
    args.extend_from_slice(&JOB);
    args.extend_from_slice(extra);
    let out = concord(&args, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn json_is_the_planners_plan() {
    let want = expected();
    let out = run(&["--json"]);
    let got: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(got["config"], want.config_string(), "{out}");
    assert_eq!(got["noam"], want.noam);
    assert_eq!(got["predicted_s"], want.predicted_s.expect("predicted"));
    let stages = got["stages"].as_array().expect("stages");
    assert_eq!(stages.len(), want.stages.len());
    for (g, w) in stages.iter().zip(&want.stages) {
        assert_eq!(g["layers"][0], w.layers.start);
        assert_eq!(g["layers"][1], w.layers.end);
        assert_eq!(g["replicas"], w.replicas);
    }
    assert_eq!(stages[0]["names"][0], "conv1_1");
    assert_eq!(got["workers"], 4);
    assert_eq!(got["data_parallel"]["config"], "4");
    let pp = got["bytes_per_sample"].as_f64().expect("bytes");
    let dp = got["data_parallel"]["bytes_per_sample"]
        .as_f64()
        .expect("dp bytes");
    // The thesis's 1x4 answer, "3-1", with far less traffic than data parallelism.
    assert_eq!(got["config"], "3-1", "{out}");
    assert!(pp * 2.0 < dp, "{out}");
}

#[test]
fn the_table_names_the_stages_and_the_comparison() {
    let want = expected();
    let out = run(&[]);
    assert!(out.contains("conv1_1"), "{out}");
    assert!(
        out.contains(&format!("config {} ", want.config_string())),
        "{out}"
    );
    assert!(out.contains(&format!("NOAM {}", want.noam)), "{out}");
    assert!(
        out.contains("data parallel:") && out.contains("samples/s"),
        "{out}"
    );
    let hier = run(&["--search", "hierarchical"]);
    assert!(hier.contains("hierarchical search"), "{hier}");
}

#[test]
fn a_bad_config_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = concord(
        &["plan", "--set", "model={kind=\"profile\",name=\"vgg99\"}"],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`model.name`") && err.contains("vgg99"),
        "{err}"
    );
    let out = concord(&["plan", "--workers", "0"], dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`workers` = 0"), "{err}");
}
