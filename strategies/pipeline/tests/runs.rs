//! End-to-end pipeline runs on real math: the equivalences that pin each schedule's SGD
//! (model parallelism and GPipe are plain SGD; one replicated stage is BSP data parallelism;
//! PipeDream with stashing is SGD on the thesis's stale-but-consistent weights), the ablation
//! without stashing, determinism, memory bounds and bad input.

use candle_core::{Device, Tensor};
use concord_engine::config::RunConfig;
use concord_engine::ids::RoleId;
use concord_engine::model::Replica;
use concord_engine::submodel::math::{backward, forward, host_flat, loss_seed};
use concord_engine::submodel::{Held, Rows};
use concord_test_support::{max_diff, param_bits};

mod common;
use common::{compose_err, figure, mlp, reg, run, with};

/// One worker, batch `g`, `iterations` steps: plain SGD.
fn sgd(g: u64, iterations: u64) -> RunConfig {
    mlp(1, g, iterations)
}

fn params(r: &concord_engine::run::RunResult) -> &[(String, Vec<f32>)] {
    r.params.as_deref().expect("real model")
}

#[test]
fn model_parallelism_is_sgd_on_one_minibatch_at_a_time() {
    let r = run(&with(mlp(3, 8, 10), "pipedream-mp", "boundaries = [1, 2]"));
    let d = max_diff(params(&run(&sgd(8, 10))), params(&r));
    assert!(d < 1e-5, "max |Δ| = {d}");
    assert_eq!(r.summary.iterations, 10);
}

/// One minibatch in flight (`depth = 1`, the bench's hybrid parallelism without pipelining):
/// each forward pass sees every earlier minibatch's update, so a straight PipeDream pipeline is
/// plain SGD, as model parallelism is, stashing or not.
#[test]
fn pipedream_at_depth_one_is_sgd_on_one_minibatch_at_a_time() {
    let reference = run(&sgd(8, 10));
    for stash in [true, false] {
        let r = run(&with(
            mlp(3, 8, 10),
            "pipedream",
            &format!("boundaries = [1, 2]\ndepth = 1\nstash = {stash}"),
        ));
        let d = max_diff(params(&reference), params(&r));
        assert!(d < 1e-5, "stash = {stash}: max |Δ| = {d}");
        assert_eq!(figure(&r, "pipedream.depth"), 1.0);
    }
}

#[test]
fn gpipe_is_sgd_on_each_rounds_minibatches_together() {
    // Depth 2: ten minibatches of 8 are five steps on 16 samples.
    let r = run(&with(
        mlp(3, 8, 10),
        "gpipe",
        "boundaries = [1, 2]\ndepth = 2",
    ));
    let d = max_diff(params(&run(&sgd(16, 5))), params(&r));
    assert!(d < 1e-5, "max |Δ| = {d}");
}

/// PipeDream, and GPipe at depth 1 (one minibatch per replica in each round), on one stage
/// replicated over every worker.
#[test]
fn one_stage_on_every_worker_is_bsp_data_parallelism() {
    let base = mlp(4, 8, 6);
    let dp = run(&base);
    for kind in ["pipedream", "gpipe"] {
        let r = run(&with(base.clone(), kind, "replicas = [4]"));
        let d = max_diff(params(&dp), params(&r));
        assert!(d < 1e-5, "{kind}: max |Δ| = {d}");
        assert_eq!(r.summary.iterations, 6, "{kind}");
        assert_eq!(
            r.rows.iter().map(|x| x.samples).sum::<u64>(),
            dp.rows.iter().map(|x| x.samples).sum::<u64>(),
            "{kind}"
        );
    }
}

/// A GPipe round holds `depth` minibatches for each replica of the input stage, its flush one
/// update on all of them: a replicated pipeline is SGD on each round's minibatches together,
/// as a straight one is. (A round of `depth` minibatches in all left most replicas without
/// work in a round, and made one replicated stage at depth 1 take one minibatch per update.)
#[test]
fn replicated_gpipe_is_sgd_on_each_rounds_minibatches_together() {
    for (workers, opts, iterations, sgd_batch, steps) in [
        // One stage on two workers, two minibatches of 8 each a round: 4 × 8 samples a step.
        (2, "replicas = [2]\ndepth = 2", 10, 32, 5),
        // 2-1: the input replicas take one minibatch each, the output stage both: 2 × 8.
        (
            3,
            "boundaries = [1]\nreplicas = [2, 1]\ndepth = 1",
            10,
            16,
            5,
        ),
        // 2-2-1 at depth 2: four minibatches a round through every stage.
        (
            5,
            "boundaries = [1, 2]\nreplicas = [2, 2, 1]\ndepth = 2",
            8,
            32,
            2,
        ),
    ] {
        let r = run(&with(mlp(workers, 8, iterations), "gpipe", opts));
        let d = max_diff(params(&run(&sgd(sgd_batch, steps))), params(&r));
        assert!(d < 1e-5, "{opts}: max |Δ| = {d}");
        assert_eq!(r.summary.iterations, iterations, "{opts}");
    }
}

/// PipeDream's update computed directly (thesis §5.3.3): with stashing, minibatch `b` at stage
/// `s` of a straight pipeline of `S` stages runs forward and backward on the weights after
/// `max(0, b − (S − s) + 1)` updates; with vertical sync, every stage on the weights after
/// `max(0, b − S + 1)` (the input stage's when `b` entered). The full gradient at that weight
/// vector is exact, and each stage applies its part to its latest weights. A run cut by
/// checkpoints (`checkpoint_every`) drains its pipeline at each cut, so a minibatch after a cut
/// at minibatch `c` never runs on fewer than `c` updates.
fn stale_reference(
    cfg: &RunConfig,
    boundaries: &[usize],
    minibatches: u64,
    vertical_sync: bool,
) -> Vec<Vec<f32>> {
    let asm = reg().compose(cfg).expect("composes");
    let job = concord_engine::run::prepare(cfg, &asm).expect("job");
    let replica = Replica::cpu(&job.model).expect("replica").expect("real");
    let net = replica.model().expect("staged");
    let data = job.data.as_ref().expect("data");
    let g = cfg.batch;
    let mut cuts = vec![0];
    cuts.extend_from_slice(boundaries);
    cuts.push(net.len());
    let stages = cuts.len() - 1;
    let stage_of_param: Vec<usize> = (0..net.params().len())
        .map(|p| {
            (0..stages)
                .find(|&s| {
                    let a = net.stage_param_range(cuts[s]).start;
                    let b = net.stage_param_range(cuts[s + 1] - 1).end;
                    (a..b).contains(&p)
                })
                .expect("a stage owns every parameter")
        })
        .collect();
    let init = job.init.clone().expect("real");
    // history[s][k]: the whole parameter list as stage s sees it after k of its updates.
    let mut history: Vec<Vec<Vec<Vec<f32>>>> = vec![vec![init.clone()]; stages];
    let mut states: Vec<_> = init
        .iter()
        .map(|v| cfg.optimizer.init_state(v.len()))
        .collect();
    for b in 0..minibatches {
        let mixed: Vec<Vec<f32>> = (0..init.len())
            .map(|p| {
                let s = stage_of_param[p];
                // Stashing: stage s lags by its warm-up S − s; vertical sync: every stage runs on
                // the version the input stage had (a lag of S).
                let w = if vertical_sync { stages } else { stages - s } as u64;
                let cut = cfg.checkpoint_every.map_or(0, |c| b / c * c);
                let k = (b + 1).saturating_sub(w).max(cut) as usize;
                history[s][k][p].clone()
            })
            .collect();
        replica.set_params(&mixed).expect("load");
        let idx = job.stream.range(b as u128 * g as u128, g as usize);
        let (x, y) = data.train.gather(&idx);
        let out = replica.step(x, &y).expect("step");
        for (s, versions) in history.iter_mut().enumerate() {
            let mut next = versions.last().expect("a version").clone();
            for p in (0..init.len()).filter(|&p| stage_of_param[p] == s) {
                cfg.optimizer
                    .step(&mut next[p], &out.grads[p], &mut states[p]);
            }
            versions.push(next);
        }
    }
    (0..init.len())
        .map(|p| history[stage_of_param[p]].last().expect("a version")[p].clone())
        .collect()
}

fn flat(params: &[(String, Vec<f32>)]) -> Vec<Vec<f32>> {
    params.iter().map(|(_, v)| v.clone()).collect()
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

#[test]
fn stashing_trains_on_the_exact_gradient_at_the_stashed_weights() {
    let mut cfg = with(mlp(3, 8, 12), "pipedream", "boundaries = [1, 2]");
    cfg.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.2").expect("optimizer");
    let r = run(&cfg);
    let reference = stale_reference(&cfg, &[1, 2], 12, false);
    let d = max_abs_diff(&flat(params(&r)), &reference);
    assert!(
        d < 1e-5,
        "stashing vs the stale-weights reference: max |Δ| = {d}"
    );
    // The schedule really was stale: plain SGD lands elsewhere.
    let mut plain = sgd(8, 12);
    plain.optimizer = cfg.optimizer.clone();
    let d_sgd = max_diff(params(&run(&plain)), params(&r));
    assert!(d_sgd > 1e-4, "PipeDream equals plain SGD: {d_sgd}");
}

#[test]
fn without_stashing_the_gradients_are_not_the_stashed_ones_and_drift_more_with_depth_and_lr() {
    let drift = |workers: u32, boundaries: &str, lr: f64| {
        let mut cfg = mlp(workers, 8, 12);
        cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 32, 16]").expect("model");
        cfg.optimizer = toml::from_str(&format!("kind = \"sgd\"\nlr = {lr}")).expect("optimizer");
        let stash = run(&with(cfg.clone(), "pipedream", boundaries));
        let naive = run(&with(
            cfg,
            "pipedream",
            &format!("{boundaries}\nstash = false"),
        ));
        max_diff(params(&stash), params(&naive))
    };
    let shallow = drift(2, "boundaries = [2]", 0.1);
    let deep = drift(4, "boundaries = [1, 2, 3]", 0.1);
    let deep_fast = drift(4, "boundaries = [1, 2, 3]", 0.4);
    assert!(shallow > 0.0, "no stashing changed nothing");
    assert!(deep > shallow, "depth: {deep} vs {shallow}");
    assert!(deep_fast > deep, "learning rate: {deep_fast} vs {deep}");
}

#[test]
fn vertical_sync_trains_on_the_input_stages_version_at_every_stage() {
    let mut cfg = with(
        mlp(3, 8, 12),
        "pipedream",
        "boundaries = [1, 2]\nvertical_sync = true",
    );
    cfg.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.2").expect("optimizer");
    let r = run(&cfg);
    let reference = stale_reference(&cfg, &[1, 2], 12, true);
    let d = max_abs_diff(&flat(params(&r)), &reference);
    assert!(d < 1e-5, "vertical sync vs its reference: max |Δ| = {d}");
    let stash = stale_reference(&cfg, &[1, 2], 12, false);
    assert!(
        max_abs_diff(&stash, &reference) > 1e-4,
        "vertical sync changed nothing"
    );
}

#[test]
fn a_checkpoint_drains_the_pipeline_and_restarts_it_on_every_update_before_it() {
    for (options, vertical_sync) in [
        ("boundaries = [1, 2]", false),
        ("boundaries = [1, 2]\nvertical_sync = true", true),
    ] {
        let mut cfg = with(mlp(3, 8, 14), "pipedream", options);
        cfg.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.2").expect("optimizer");
        cfg.checkpoint_every = Some(5);
        let r = run(&cfg);
        let reference = stale_reference(&cfg, &[1, 2], 14, vertical_sync);
        let d = max_abs_diff(&flat(params(&r)), &reference);
        assert!(d < 1e-5, "{options}: cut run vs the drained reference: {d}");
        cfg.checkpoint_every = None;
        let uncut = stale_reference(&cfg, &[1, 2], 14, vertical_sync);
        assert!(
            max_abs_diff(&uncut, &reference) > 1e-4,
            "{options}: the cuts changed nothing"
        );
    }
}

/// A stage's parameter gradients stay where its backward pass left them: applied from there,
/// they give the bits of the same gradients read back and applied as host values, and none of
/// them crosses between host and device (only a replicated stage's do, for its ring to sum).
#[test]
fn a_stages_gradients_are_applied_where_its_backward_pass_left_them() {
    let mut cfg = mlp(2, 8, 1);
    cfg.optimizer = toml::from_str("kind = \"sgd\"\nlr = 0.05\nmomentum = 0.9").expect("sgd");
    let asm = reg().compose(&cfg).expect("composes");
    let job = concord_engine::run::prepare(&cfg, &asm).expect("job");
    let ranges = job.model.stage_param_ranges();
    let stages = 1..3;
    let params = ranges[1].start..ranges[2].end;
    let elems: u64 = job.layout.params()[params.clone()]
        .iter()
        .map(|p| p.elems() as u64)
        .sum();
    let data = job.data.as_ref().expect("data");
    let holder = || {
        let mut held = Held::new(&job, params.clone()).expect("held");
        let replica = job
            .part_replica(RoleId::Worker(1), stages.clone())
            .expect("replica")
            .expect("real");
        assert!(held.keep_on(&replica).expect("keep"));
        (held, replica)
    };
    let (mut on_device, device_replica) = holder();
    let (mut via_host, host_replica) = holder();
    let loaded = on_device.host_traffic().expect("resident");
    for step in 0..3u64 {
        let idx = job.stream.range(step as u128 * 8, 8);
        let (features, labels) = data.train.gather(&idx);
        // Stage 1's input: the samples' features scaled, shaped as its input.
        let x: Vec<f32> = features.iter().map(|f| 0.5 * f).collect();
        for (held, replica, read_back) in [
            (&mut on_device, &device_replica, false),
            (&mut via_host, &host_replica, true),
        ] {
            let net = replica.model();
            let rows = Rows::Real(Tensor::from_vec(x.clone(), (8, 32), &Device::Cpu).expect("x"));
            let (y, inputs) = forward(net, stages.clone(), &rows).expect("forward");
            let (_, seed) = loss_seed(net, &y, Some(&labels), 1.0).expect("loss");
            let (grads, _) = backward(net, stages.clone(), &inputs, &seed).expect("backward");
            let grads = grads.expect("real gradients");
            assert!(grads.iter().all(|g| g.device().same_device(&Device::Cpu)));
            if read_back {
                let host = held.unflatten(&host_flat(&grads).expect("read back"));
                held.apply(Some(host), step as f64).expect("apply");
            } else {
                held.apply(Some(grads), step as f64).expect("apply");
            }
        }
    }
    let (kept, read) = (
        on_device.host_traffic().expect("resident"),
        via_host.host_traffic().expect("resident"),
    );
    assert_eq!(
        kept.uploaded_bytes, loaded.uploaded_bytes,
        "no gradient went up"
    );
    assert_eq!(
        read.uploaded_bytes - loaded.uploaded_bytes,
        3 * 4 * elems,
        "the read-back gradients went up"
    );
    // What came down is the snapshots' values alike: no gradient.
    assert_eq!(kept.downloaded_bytes, read.downloaded_bytes);
    let (a, b) = (
        on_device.report(&job.layout).expect("report"),
        via_host.report(&job.layout).expect("report"),
    );
    assert!(!a.blocks.is_empty());
    assert_eq!(a.blocks, b.blocks, "the same values");
    assert_eq!(a.opt_state, b.opt_state, "the same optimizer state");
}

#[test]
fn stashed_versions_never_exceed_the_warm_up_depth() {
    let mut cfg = mlp(4, 8, 16);
    cfg.model = toml::from_str("kind = \"mlp\"\nhidden = [32, 32, 16]").expect("model");
    let r = run(&with(cfg, "pipedream", "boundaries = [1, 2, 3]"));
    for s in 0..4 {
        let held = figure(&r, &format!("pipedream.max_versions.stage-{s}"));
        let warmup = figure(&r, &format!("pipedream.warmup.stage-{s}"));
        assert_eq!(warmup, (4 - s) as f64);
        assert!(
            held <= warmup,
            "stage {s}: {held} versions, warm-up {warmup}"
        );
    }
    // The input stage does keep one version per minibatch in flight.
    assert_eq!(figure(&r, "pipedream.max_versions.stage-0"), 4.0);
}

#[test]
fn replicated_stages_route_round_robin_and_train() {
    // 2-1 and 2-1-1 (the routing is asserted by every backward pass finding its forward pass's
    // activations on the replica it lands on), and a replicated output stage.
    for (workers, opts, iterations) in [
        (3, "boundaries = [1]\nreplicas = [2, 1]", 8),
        (4, "boundaries = [1, 2]\nreplicas = [2, 1, 1]", 8),
        (3, "boundaries = [2]\nreplicas = [1, 2]", 4),
        (5, "boundaries = [1]\nreplicas = [3, 2]", 4),
    ] {
        let r = run(&with(mlp(workers, 8, iterations), "pipedream", opts));
        assert_eq!(r.summary.iterations, iterations, "{opts}");
        assert!(r.summary.final_loss.is_finite(), "{opts}");
    }
}

#[test]
fn the_planner_chooses_when_the_options_do_not() {
    // No boundaries: the planner's configuration, with its prediction; `straight`: one stage
    // per worker.
    let r = run(&with(mlp(3, 8, 4), "pipedream", ""));
    assert!(figure(&r, "pipedream.predicted_s") > 0.0);
    assert!(r.summary.final_loss.is_finite());
    let r = run(&with(mlp(3, 8, 4), "pipedream", "straight = true"));
    assert_eq!(figure(&r, "pipedream.stages"), 3.0);
    assert_eq!(figure(&r, "pipedream.workers_used"), 3.0);
}

#[test]
fn idle_workers_take_no_part() {
    let r = run(&with(
        mlp(4, 8, 6),
        "pipedream",
        "boundaries = [2]\nreplicas = [2, 1]",
    ));
    assert_eq!(figure(&r, "pipedream.workers_used"), 3.0);
    assert_eq!(r.summary.iterations, 6);
}

#[test]
fn same_seed_same_bits() {
    let cfg = with(
        mlp(4, 8, 6),
        "pipedream",
        "boundaries = [1]\nreplicas = [3, 1]",
    );
    assert_eq!(param_bits(&run(&cfg)), param_bits(&run(&cfg)));
}

#[test]
fn bad_configurations_are_refused_before_any_work() {
    let e = compose_err(&with(mlp(3, 8, 2), "pipedream", "boundaries = [1, 2, 3]"));
    assert!(
        e.contains("strategy.pipedream.boundaries") && e.contains("stages"),
        "{e}"
    );
    let e = compose_err(&with(
        mlp(4, 8, 2),
        "pipedream",
        "boundaries = [1, 2, 3, 4, 5]",
    ));
    assert!(
        e.contains("strategy.pipedream.boundaries` = [1, 2, 3, 4, 5]"),
        "{e}"
    );
    let e = compose_err(&with(
        mlp(3, 8, 2),
        "pipedream",
        "boundaries = [1]\nreplicas = [3, 1]",
    ));
    assert!(
        e.contains("strategy.pipedream.replicas") && e.contains("4 workers"),
        "{e}"
    );
    let e = compose_err(&with(mlp(3, 8, 2), "pipedream", "replicas = [1, 1]"));
    assert!(e.contains("strategy.pipedream.replicas"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "gpipe", "stash = false"));
    assert!(e.contains("strategy.gpipe.stash"), "{e}");
    let e = compose_err(&with(
        mlp(3, 8, 2),
        "pipedream",
        "stash = false\nvertical_sync = true",
    ));
    assert!(e.contains("vertical_sync"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "pipedream", "depth = 0"));
    assert!(e.contains("strategy.pipedream.depth"), "{e}");
    let e = compose_err(&with(
        mlp(3, 8, 2),
        "pipedream",
        "straight = true\nboundaries = [1]",
    ));
    assert!(e.contains("strategy.pipedream.straight"), "{e}");
    let e = compose_err(&with(mlp(3, 8, 2), "pipedream", "cost = \"tree\""));
    assert!(
        e.contains("strategy.pipedream.cost") && e.contains("ring"),
        "{e}"
    );
    let e = compose_err(&with(mlp(3, 8, 2), "pipedream", "search = \"greedy\""));
    assert!(e.contains("strategy.pipedream.search"), "{e}");
    // A pipeline with a parameter-server consistency strategy.
    let mut cfg = with(mlp(3, 8, 2), "pipedream", "boundaries = [1]");
    cfg.strategies.push("ssp".into());
    let e = compose_err(&cfg);
    assert!(e.contains("pipedream") && e.contains("ssp"), "{e}");
}

#[test]
fn a_plan_that_does_not_fit_memory_is_refused() {
    let mut cfg = with(mlp(3, 8, 2), "pipedream", "boundaries = [1, 2]");
    cfg = concord_test_support::on_device(cfg, "tiny", concord_test_support::slow_device(1e-6));
    let e = compose_err(&cfg);
    assert!(
        e.contains("strategy.pipedream.boundaries") && e.contains("needs") && e.contains("KiB"),
        "{e}"
    );
}

/// The job `cfg` prepares, and its run.
fn job_and_run(cfg: &RunConfig) -> (concord_engine::job::Job, concord_engine::run::RunResult) {
    let asm = reg().compose(cfg).expect("composes");
    let job = concord_engine::run::prepare(cfg, &asm).expect("job");
    (job, run(cfg))
}

/// Bytes of each model stage's weights (fp32).
fn stage_weight_bytes(job: &concord_engine::job::Job) -> Vec<u64> {
    job.model
        .stage_param_ranges()
        .into_iter()
        .map(|params| {
            job.layout.params()[params]
                .iter()
                .map(|p| 4 * p.elems() as u64)
                .sum()
        })
        .collect()
}

/// What a stage's worker holds at its peak is what the planner and the start-up check count for
/// it: its weights, their gradients and optimizer state, a copy per stashed version and the
/// latest's while a stashed one is loaded for a backward pass, and the kept activations of its
/// minibatches in flight.
#[test]
fn a_stages_measured_peak_is_the_memory_the_planner_counts() {
    let cfg = with(mlp(3, 8, 12), "pipedream", "boundaries = [1, 2]");
    let (job, r) = job_and_run(&cfg);
    let slots = cfg.optimizer.state_slots() as u64;
    for (s, weights) in stage_weight_bytes(&job).into_iter().enumerate() {
        // 1F1B's warm-up: as many minibatches in flight as stages from this one to the end.
        let in_flight = 3 - s as u64;
        let copies = if in_flight > 1 { in_flight } else { 0 };
        let want = weights * (2 + slots + copies) + job.stage_kept_bytes[s] * cfg.batch * in_flight;
        assert_eq!(
            r.summary.peak_memory[&format!("worker-{s}")],
            want,
            "stage {s}"
        );
    }
}

/// A GPipe stage keeps, of each minibatch of a flush, only its input (the previous stage's
/// output; the first stage's input is the data) and rebuilds one minibatch's activations at a
/// time in the backward pass: its peak is the weights, their gradients and optimizer state,
/// `depth` inputs and one minibatch's kept activations.
#[test]
fn a_gpipe_stages_measured_peak_keeps_only_its_inputs() {
    let depth = 3;
    // Straight, and 2-1-1: a round holds `depth` minibatches per input replica, so each input
    // replica keeps 3 and the later stages 6.
    for (workers, replicas) in [(3, [1u64, 1, 1]), (4, [2, 1, 1])] {
        let cfg = with(
            mlp(workers, 8, 12),
            "gpipe",
            &format!("boundaries = [1, 2]\nreplicas = {replicas:?}\ndepth = {depth}"),
        );
        let (job, r) = job_and_run(&cfg);
        let slots = cfg.optimizer.state_slots() as u64;
        let mut first_worker = 0;
        for (s, weights) in stage_weight_bytes(&job).into_iter().enumerate() {
            let input = if s == 0 {
                0
            } else {
                job.stage_output_bytes[s - 1]
            };
            let in_flight = (depth * replicas[0]).div_ceil(replicas[s]);
            let want = weights * (2 + slots)
                + input * cfg.batch * in_flight
                + job.stage_kept_bytes[s] * cfg.batch;
            for w in first_worker..first_worker + replicas[s] {
                assert_eq!(
                    r.summary.peak_memory[&format!("worker-{w}")],
                    want,
                    "{replicas:?}: stage {s}, worker {w}"
                );
            }
            first_worker += replicas[s];
        }
    }
}

/// The planner and the start-up check count a stage's memory with one function: over a sweep of
/// device memories, with Adam's two state copies of every weight, the planner's choice either
/// starts or the planner itself says no plan fits; the start-up check never refuses it.
#[test]
fn the_planners_choice_always_passes_the_start_up_memory_check() {
    let (mut started, mut refused) = (0, 0);
    for step in 0..30 {
        let gib = 2e-6 * 1.15f64.powi(step);
        let mut cfg = with(mlp(3, 8, 1), "pipedream", "");
        cfg.optimizer = toml::from_str("kind = \"adam\"\nlr = 0.01").expect("optimizer");
        cfg = concord_test_support::on_device(cfg, "small", concord_test_support::slow_device(gib));
        let asm = reg().compose(&cfg).expect("composes");
        match concord_engine::run(&cfg, &asm, Default::default()) {
            Ok(_) => started += 1,
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("no plan fits"), "{gib} GiB: {e}");
                refused += 1;
            }
        }
    }
    assert!(
        started > 0 && refused > 0,
        "{started} started, {refused} refused"
    );
}

/// `depth = "fit"` puts in flight the most minibatches every stage's memory holds: the run
/// starts at that depth, and one more is refused at start-up.
#[test]
fn depth_fit_is_the_most_minibatches_memory_holds() {
    // GPipe keeps only stage inputs (a few hundred bytes here): a smaller device binds it.
    for (strategy, gib) in [("gpipe", 4e-5), ("pipedream", 2e-4)] {
        let on = |depth: &str| {
            let cfg = with(
                mlp(3, 8, 400),
                strategy,
                &format!("boundaries = [1, 2]\ndepth = {depth}"),
            );
            concord_test_support::on_device(cfg, "small", concord_test_support::slow_device(gib))
        };
        let fit = figure(&run(&on("\"fit\"")), &format!("{strategy}.depth")) as u32;
        // Memory binds, not the run's length (a quarter of its 400 minibatches).
        assert!(fit > 3 && fit < 100, "{strategy}: depth {fit}");
        run(&on(&fit.to_string()));
        let e = compose_err(&on(&(fit + 1).to_string()));
        assert!(e.contains("needs"), "{strategy} at depth {}: {e}", fit + 1);
    }
    // Where memory would hold more, a run puts at most a quarter of its minibatches in flight.
    let roomy = with(
        mlp(3, 8, 40),
        "gpipe",
        "boundaries = [1, 2]\ndepth = \"fit\"",
    );
    assert_eq!(figure(&run(&roomy), "gpipe.depth"), 10.0);
    let e = compose_err(&with(mlp(3, 8, 2), "gpipe", "depth = \"deep\""));
    assert!(
        e.contains("strategy.gpipe.depth") && e.contains("fit"),
        "{e}"
    );
}
