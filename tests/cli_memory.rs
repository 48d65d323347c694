//! `concord memory`: the JSON agrees with the library's study of the same iteration, the plot is
//! written, and what it cannot study is named.

mod common;

use common::concord;
use concord::engine::cluster::DeviceProfile;
use concord::engine::profiles;
use concord_memory::study::study;

/// ResNet-32 at batch 100 on the TITAN X profile.
const JOB: [&str; 6] = [
    "--set",
    "model={kind=\"profile\",name=\"resnet-32\"}",
    "--set",
    "batch=100",
    "--set",
    "cluster.default_device=\"titan-x\"",
];

fn run(extra: &[&str], dir: &std::path::Path) -> std::process::Output {
    let mut args = vec!["memory"];
    args.extend(JOB);
    args.extend(extra);
    concord(&args, dir)
}

#[test]
fn json_is_the_library_s_study_and_the_plot_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&["--json", "--plot", "memory.svg"], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let graph = profiles::builtin("resnet-32").expect("resnet-32").graph;
    let names: Vec<String> = [
        "no-offload",
        "dymem",
        "vdnn",
        "single-stream",
        "superneurons",
    ]
    .map(String::from)
    .to_vec();
    let want = study(&graph, 100, &DeviceProfile::builtins()["titan-x"], &names).expect("study");
    let rows = got.as_array().expect("rows");
    assert_eq!(rows.len(), want.len());
    for (g, w) in rows.iter().zip(&want) {
        let m = w.measured.as_ref().expect("resnet-32 fits a TITAN X");
        assert_eq!(g["policy"], w.policy);
        assert_eq!(g["measured"]["seconds"], m.seconds);
        assert_eq!(g["measured"]["high_water"], m.high_water);
        assert_eq!(g["measured"]["min_memory"], m.min_memory);
    }
    let svg = std::fs::read_to_string(dir.path().join("memory.svg")).expect("plot written");
    assert!(
        svg.contains("<svg") && svg.contains("dymem (gtbm)"),
        "{}",
        &svg[..200.min(svg.len())]
    );
}

#[test]
fn the_table_compares_the_chosen_policies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&["--policies", "dymem,vdnn"], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("dymem") && stdout.contains("vdnn"),
        "{stdout}"
    );
    assert!(!stdout.contains("superneurons"), "{stdout}");
}

#[test]
fn an_unknown_policy_and_a_model_without_a_graph_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&["--policies", "dymem,swapless"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("unknown memory policy `swapless`"),
        "{stderr}"
    );
    let out = concord(&["memory", "--set", "model={kind=\"mlp\"}"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("has no operator graph"), "{stderr}");
}
