//! RNA-H (hierarchical mode, thesis §5.2): group formation from profiled speeds on a real run,
//! the one-group limit, determinism, option errors.

use concord_engine::cluster::DeviceProfile;
use concord_engine::config::RunConfig;
use concord_engine::run::{RunOptions, RunResult};
use concord_engine::stragglers::StragglerConfig;

/// Slow simulated cores (20 MFLOP/s, ~6 ms per step of the default MLP at batch 8) with the
/// given straggler patterns (TOML tables).
fn config(
    strategy: &str,
    options: &str,
    workers: u32,
    iterations: u64,
    delays: &[&str],
) -> RunConfig {
    let mut cfg = RunConfig {
        workers,
        servers: 1,
        batch: 8,
        iterations,
        eval_every: iterations,
        strategies: vec![strategy.into()],
        ..RunConfig::default()
    };
    cfg.cluster
        .devices
        .insert("core".into(), DeviceProfile::new(0.00004, 1.0, 10.0, 50.0));
    cfg.cluster.default_device = "core".into();
    cfg.stragglers = delays
        .iter()
        .map(|d| toml::from_str::<StragglerConfig>(d).unwrap())
        .collect();
    if !options.is_empty() {
        cfg.strategy
            .insert(strategy.into(), toml::from_str(options).unwrap());
    }
    cfg
}

const UNIFORM: &str = "pattern = \"uniform-delay\"\nmax_s = 0.02";
/// Two speed classes: workers 0–2 U(0, 20 ms), workers 3–5 U(30, 50 ms) per step.
const FAST: &str = "pattern = \"uniform-delay\"\nworkers = [0, 1, 2]\nmax_s = 0.02";
const SLOW: &str = "pattern = \"uniform-delay\"\nworkers = [3, 4, 5]\nmin_s = 0.03\nmax_s = 0.05";

fn run(cfg: &RunConfig) -> RunResult {
    let asm = concord_test_support::registry(&[concord_rna::register])
        .compose(cfg)
        .expect("composes");
    concord_engine::run(cfg, &asm, RunOptions::default()).expect("runs")
}

fn bits(r: &RunResult) -> Vec<Vec<u32>> {
    r.params
        .as_ref()
        .unwrap()
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

fn figure(r: &RunResult, name: &str) -> f64 {
    r.summary.figures[name]
}

/// With one group holding every worker, the averaging server returns the group's own model bit
/// for bit, so RNA-H is flat RNA: in the wait-for-all limit (where the result does not depend on
/// timing) the parameters equal flat RNA's and hence allreduce BSP's, although every round now
/// also pays a push/pull and a broadcast.
#[test]
fn one_group_reduces_to_flat_rna() {
    let opts = "wait_for_all = true\nhierarchy = true\ngroups = [[0, 1, 2, 3]]";
    let h = run(&config("rna", opts, 4, 12, &[UNIFORM]));
    let flat = run(&config("rna", "wait_for_all = true", 4, 12, &[UNIFORM]));
    assert_eq!(bits(&h), bits(&flat));
    assert_eq!(figure(&h, "rna.groups"), 1.0);
    assert_eq!(figure(&h, "rna.replica_mismatch_rounds"), 0.0);
    // The averaging is real traffic: the hierarchical run moved more bytes and took longer.
    assert!(h.summary.bytes_sent > flat.summary.bytes_sent);
    assert!(h.summary.run_time_s > flat.summary.run_time_s);
    // With random probing the rounds depend on timing, and the averaging's push/pull delays
    // every round: the same algorithm, but other probes answer first, so other bits.
    let opts = "hierarchy = true\ngroups = [[0, 1, 2, 3]]";
    let h = run(&config("rna", opts, 4, 12, &[UNIFORM]));
    let flat = run(&config("rna", "", 4, 12, &[UNIFORM]));
    assert_eq!(figure(&h, "rna.replica_mismatch_rounds"), 0.0);
    assert_ne!(bits(&h), bits(&flat));
}

/// `merge = "delta"` with one group: the server adds the group's change to the global model it
/// last answered with, so in the wait-for-all limit RNA-H is flat RNA up to the rounding of
/// `x + (p − x)`; the learning-rate rule uses every worker, here the group.
#[test]
fn one_group_merging_deltas_is_flat_rna_up_to_rounding() {
    let opts = "wait_for_all = true\nhierarchy = true\nmerge = \"delta\"\ngroups = [[0, 1, 2, 3]]";
    let h = run(&config("rna", opts, 4, 12, &[UNIFORM]));
    let flat = run(&config("rna", "wait_for_all = true", 4, 12, &[UNIFORM]));
    let (a, b) = (h.params.as_ref().unwrap(), flat.params.as_ref().unwrap());
    let diff = a
        .iter()
        .zip(b)
        .flat_map(|((_, x), (_, y))| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "delta vs flat: {diff}");
    assert_eq!(figure(&h, "rna.replica_mismatch_rounds"), 0.0);
}

/// Two explicit groups merging deltas: each group keeps its replicas identical, the run trains
/// and is deterministic, and it differs from merging by average.
#[test]
fn two_groups_merging_deltas_train_deterministically() {
    let opts = "hierarchy = true\nmerge = \"delta\"\ngroups = [[0, 1, 2], [3, 4, 5]]";
    let a = run(&config("rna", opts, 6, 60, &[FAST, SLOW]));
    let b = run(&config("rna", opts, 6, 60, &[FAST, SLOW]));
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(figure(&a, "rna.groups"), 2.0);
    assert_eq!(figure(&a, "rna.replica_mismatch_rounds"), 0.0);
    let mean = |a: &RunResult, i: usize, j: usize| {
        a.rows[i..j].iter().map(|x| x.loss).sum::<f64>() / (j - i) as f64
    };
    assert!(mean(&a, 50, 60) < mean(&a, 0, 10), "trains");
    let avg = run(&config(
        "rna",
        "hierarchy = true\ngroups = [[0, 1, 2], [3, 4, 5]]",
        6,
        60,
        &[FAST, SLOW],
    ));
    assert_ne!(bits(&a), bits(&avg));
}

/// Two speed classes: profiling during the flat warm-up forms {0, 1, 2} and {3, 4, 5} (fast
/// first); until then the run is flat RNA round for round; each group keeps its replicas
/// identical after every round and averaging, and training makes progress.
#[test]
fn groups_form_from_profiled_speeds_and_train() {
    let opts = "hierarchy = true\nprofile_steps = 10";
    let r = run(&config("rna", opts, 6, 90, &[FAST, SLOW]));
    assert_eq!(figure(&r, "rna.groups"), 2.0);
    assert_eq!(figure(&r, "rna.first_group_size"), 3.0);
    assert_eq!(figure(&r, "rna.replica_mismatch_rounds"), 0.0);
    // Warm-up: the slowest worker's 10 steps take ≈ 10 × 46 ms, so tens of flat rounds.
    let warm = figure(&r, "rna.warmup_rounds") as usize;
    assert!((10..60).contains(&warm), "{warm} warm-up rounds");
    let flat = run(&config("rna", "", 6, 90, &[FAST, SLOW]));
    let losses = |r: &RunResult, a: usize, b: usize| -> Vec<u64> {
        r.rows[a..b].iter().map(|x| x.loss.to_bits()).collect()
    };
    assert_eq!(losses(&r, 0, warm), losses(&flat, 0, warm));
    assert_ne!(losses(&r, warm, 90), losses(&flat, warm, 90));
    let mean =
        |a: usize, b: usize| r.rows[a..b].iter().map(|x| x.loss).sum::<f64>() / (b - a) as f64;
    assert!(
        mean(80, 90) < mean(0, 10),
        "loss {} -> {}",
        mean(0, 10),
        mean(80, 90)
    );
    // A ratio above ζ / v of this cluster (at most 2) keeps it in one group.
    let one = run(&config(
        "rna",
        "hierarchy = true\nprofile_steps = 10\nsplit_ratio = 2.0",
        6,
        90,
        &[FAST, SLOW],
    ));
    assert_eq!(figure(&one, "rna.groups"), 1.0);
}

/// The run evaluates the fastest group's model: group 0's first member, which need not be
/// worker 0; flat RNA evaluates worker 0's (every replica is the same).
#[test]
fn the_fast_groups_model_is_evaluated() {
    // Workers 0–2 slow, 3–5 fast: profiling puts {3, 4, 5} first.
    let slow_first = [
        "pattern = \"uniform-delay\"\nworkers = [0, 1, 2]\nmin_s = 0.03\nmax_s = 0.05",
        "pattern = \"uniform-delay\"\nworkers = [3, 4, 5]\nmax_s = 0.02",
    ];
    let opts = "hierarchy = true\nprofile_steps = 10";
    let r = run(&config("rna", opts, 6, 60, &slow_first));
    assert_eq!(figure(&r, "rna.groups"), 2.0);
    assert_eq!(figure(&r, "rna.evaluated_worker"), 3.0);
    // Given groups: the first listed group's first member.
    let given = "hierarchy = true\ngroups = [[4, 5], [0, 1, 2, 3]]";
    let r = run(&config("rna", given, 6, 20, &[UNIFORM]));
    assert_eq!(figure(&r, "rna.evaluated_worker"), 4.0);
    let flat = run(&config("rna", "", 6, 20, &slow_first));
    assert_eq!(figure(&flat, "rna.evaluated_worker"), 0.0);
}

/// Same seed, same bits and the same virtual times; another seed, other bits.
#[test]
fn hierarchical_runs_are_deterministic() {
    let opts = "hierarchy = true\nprofile_steps = 5";
    let a = run(&config("rna", opts, 6, 15, &[FAST, SLOW]));
    let b = run(&config("rna", opts, 6, 15, &[FAST, SLOW]));
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(a.summary.run_time_s, b.summary.run_time_s);
    let mut other = config("rna", opts, 6, 15, &[FAST, SLOW]);
    other.seed += 1;
    assert_ne!(bits(&a), bits(&run(&other)));
}

#[test]
fn bad_hierarchy_options_are_start_up_errors_naming_the_key() {
    let registry = concord_test_support::registry(&[concord_rna::register]);
    for (opts, key) in [
        (
            "hierarchy = true\nsplit_ratio = 0.0",
            "strategy.rna.split_ratio",
        ),
        (
            "hierarchy = true\nsplit_ratio = nan",
            "strategy.rna.split_ratio",
        ),
        (
            "hierarchy = true\nprofile_steps = 0",
            "strategy.rna.profile_steps",
        ),
        (
            "hierarchy = true\nsync_period = 0",
            "strategy.rna.sync_period",
        ),
        ("groups = [[0, 1], [2, 3]]", "strategy.rna.groups"),
        (
            "hierarchy = true\ngroups = [[0, 1], [2]]",
            "strategy.rna.groups",
        ),
        (
            "hierarchy = true\ngroups = [[0, 1], [1, 2, 3]]",
            "strategy.rna.groups",
        ),
        (
            "hierarchy = true\ngroups = [[0, 1, 2, 4], [3]]",
            "strategy.rna.groups",
        ),
        (
            "hierarchy = true\ngroups = [[0, 1, 2, 3], []]",
            "strategy.rna.groups",
        ),
        (
            "hierarchy = true\nwait_for_all = true",
            "strategy.rna.wait_for_all",
        ),
        ("hierarchy = 1", "hierarchy"),
        ("merge = \"delta\"", "strategy.rna.merge"),
        ("hierarchy = true\nmerge = \"median\"", "merge"),
    ] {
        let cfg = config("rna", opts, 4, 5, &[UNIFORM]);
        let e = registry
            .compose(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(key), "{opts}: {e:?}");
    }
}
