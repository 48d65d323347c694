//! The swapping memory policies in whole training runs: a graph network trained under any of
//! them ends with the same bits as under `resident` (their moves, applied to the real tensors,
//! change no math), their time and memory differ as the policies do, and what cannot work is
//! refused before any work.

use concord::engine::config::RunConfig;
use concord::engine::run::{RunOptions, RunResult};

/// A tiny ResNet (batch-norm, a projection shortcut) on blobs, 2 workers, 6 clocks, on a
/// TITAN X.
fn job(memory: &str, model: &str) -> RunConfig {
    let mut cfg = RunConfig {
        workers: 2,
        batch: 16,
        iterations: 6,
        eval_every: 6,
        memory: Some(memory.into()),
        ..RunConfig::default()
    };
    cfg.model = toml::from_str(model).expect("model");
    cfg.data = toml::from_str("kind = \"blobs\"\ndim = 192\ntrain = 256\ntest = 64").expect("data");
    cfg.cluster.default_device = "titan-x".into();
    cfg
}

const RESNET: &str =
    "kind = \"tiny-resnet\"\nimage = [3, 8, 8]\nblocks = [1, 1]\nchannels = [4, 8]";
const INCEPTION: &str = "kind = \"inception-stack\"\nimage = [3, 8, 8]\nblocks = 2\nwidth = 4";

fn run(cfg: &RunConfig) -> Result<RunResult, String> {
    let asm = concord::registry()
        .compose(cfg)
        .map_err(|e| e.to_string())?;
    concord::engine::run(cfg, &asm, RunOptions::default()).map_err(|e| e.to_string())
}

fn bits(r: &RunResult) -> Vec<Vec<u32>> {
    let params = r.params.as_ref().expect("a real model");
    params
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
fn every_policy_trains_to_the_same_bits_as_resident() {
    for model in [RESNET, INCEPTION] {
        let resident = run(&job("resident", model)).expect("resident");
        for policy in ["dymem", "vdnn", "single-stream", "superneurons"] {
            let r = run(&job(policy, model)).expect(policy);
            assert_eq!(bits(&r), bits(&resident), "{policy} on {model}");
            assert_eq!(
                r.summary.final_loss.to_bits(),
                resident.summary.final_loss.to_bits(),
                "{policy}"
            );
        }
    }
}

#[test]
fn copies_cost_time_and_a_barrier_per_layer_costs_more() {
    let time = |policy: &str| {
        let r = run(&job(policy, RESNET)).expect(policy);
        r.summary.run_time_s
    };
    let (resident, dymem, vdnn, single) = (
        time("resident"),
        time("dymem"),
        time("vdnn"),
        time("single-stream"),
    );
    assert!(resident < dymem, "{resident} vs {dymem}");
    assert!(dymem < vdnn, "{dymem} vs {vdnn}");
    assert!(vdnn < single, "{vdnn} vs {single}");
}

#[test]
fn a_device_smaller_than_one_layer_is_refused_before_any_work() {
    let mut cfg = job("dymem", "kind = \"profile\"\nname = \"vgg16\"");
    cfg.batch = 64;
    cfg.data = Default::default();
    cfg.cluster = toml::from_str(
        "default_device = \"small\"\n[devices.small]\npeak_tflops = 6.6\nmemory_gib = 0.5\nnic_gbps = 10.0\nlatency_us = 25.0",
    )
    .expect("cluster");
    let e = run(&cfg).expect_err("does not fit");
    assert!(
        e.contains("alone at batch 64") && e.contains("no swapping schedule"),
        "{e}"
    );
}

#[test]
fn bad_options_are_named() {
    let mut cfg = job("dymem", RESNET);
    cfg.strategy.insert(
        "dymem".into(),
        toml::from_str("beta_mib = -1.0").expect("options"),
    );
    let e = run(&cfg).expect_err("negative beta");
    assert!(e.contains("strategy.dymem.beta_mib"), "{e}");
    let mut cfg = job("dymem", RESNET);
    cfg.strategy.insert(
        "dymem".into(),
        toml::from_str("offload = \"conv\"").expect("options"),
    );
    let e = run(&cfg).expect_err("offload is vdnn's");
    assert!(e.contains("strategy.dymem.offload"), "{e}");
    let mut cfg = job("vdnn", RESNET);
    cfg.strategy.insert(
        "vdnn".into(),
        toml::from_str("beta_mib = 300.0").expect("options"),
    );
    let e = run(&cfg).expect_err("only dymem sizes its pool");
    assert!(e.contains("strategy.vdnn.beta_mib"), "{e}");
    let e = run(&job("dymemx", RESNET)).expect_err("unknown");
    assert!(e.contains("dymemx"), "{e}");
}

#[test]
fn dymem_sizes_its_pool_from_the_first_iteration_plus_beta_and_reports_its_figures() {
    let profile = |beta: Option<f64>| {
        let mut cfg = job("dymem", "kind = \"profile\"\nname = \"resnet-32\"");
        cfg.data = Default::default();
        cfg.batch = 100;
        if let Some(beta) = beta {
            cfg.strategy.insert(
                "dymem".into(),
                toml::from_str(&format!("beta_mib = {beta}")).expect("options"),
            );
        }
        run(&cfg).expect("runs")
    };
    let plain = profile(None);
    let reserved = profile(Some(64.0));
    let fig = |r: &RunResult, name: &str| r.summary.figures[&format!("memory.{name}")];
    // Without β the pool is the first iteration's high-water mark, and every later iteration
    // fits it exactly (a static graph repeats its placements).
    assert_eq!(fig(&plain, "pool_bytes"), fig(&plain, "high_water_bytes"));
    assert_eq!(fig(&plain, "pool_failures"), 0.0);
    assert_eq!(
        fig(&reserved, "pool_bytes"),
        fig(&plain, "pool_bytes") + 64.0 * 1024.0 * 1024.0
    );
    let peak = |r: &RunResult| r.summary.peak_memory["worker-0"];
    assert_eq!(peak(&reserved) - peak(&plain), 64 * 1024 * 1024);
    // The same iterations: β is memory, not time.
    assert_eq!(plain.summary.run_time_s, reserved.summary.run_time_s);
    assert!(fig(&plain, "overlap_share") > 0.0 && fig(&plain, "overlap_share") <= 1.0);
}
