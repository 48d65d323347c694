//! RNA's exact equivalences and invariants (spec §2.5, R8), on real training runs.

use concord::engine::cluster::DeviceProfile;
use concord::engine::config::RunConfig;
use concord::engine::context::RuntimeKind;
use concord::engine::run::{RunOptions, RunResult};
use concord::engine::stragglers::StragglerConfig;

/// Slow simulated cores (20 MFLOP/s): an iteration of the default MLP at batch 8 costs ~6 ms,
/// and U(0, 20 ms) delays make the workers finish far apart.
fn config(strategy: &str, options: &str, workers: u32, iterations: u64) -> RunConfig {
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
    cfg.stragglers =
        vec![
            toml::from_str::<StragglerConfig>("pattern = \"uniform-delay\"\nmax_s = 0.02").unwrap(),
        ];
    if !options.is_empty() {
        cfg.strategy
            .insert(strategy.into(), toml::from_str(options).unwrap());
    }
    cfg
}

fn run(cfg: &RunConfig) -> RunResult {
    let asm = concord::registry().compose(cfg).expect("composes");
    concord::engine::run(cfg, &asm, RunOptions::default()).expect("runs")
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

/// R8 (i): probing every worker and triggering when all are ready is allreduce BSP, bit for bit,
/// although the rounds start at different times than the allreduce's iterations.
#[test]
fn wait_for_all_rna_is_bit_identical_to_allreduce_bsp() {
    let rna = run(&config("rna", "wait_for_all = true", 4, 12));
    let ar = run(&config("allreduce", "", 4, 12));
    assert_eq!(bits(&rna), bits(&ar));
    assert_eq!(figure(&rna, "rna.contributors_share"), 1.0);
    assert_eq!(figure(&rna, "rna.stale_share"), 0.0);
    // Not vacuous: the parameters kept moving after the first update.
    let one = run(&config("allreduce", "", 4, 1));
    assert_ne!(bits(&ar), bits(&one));
}

/// Copies cost time, never math: with a slow copy rate each round's worker first fuses its
/// contribution into the ring's buffer (one buffer's copy), then each of the ring's 2(P − 1)
/// steps packs and unpacks a 1/P chunk on the way (another 2(P − 1)·2/P = 3 buffers at P = 4), so
/// every round takes at least four buffers' copies longer; the math still equals allreduce BSP
/// bit for bit.
#[test]
fn fusing_a_contribution_costs_a_copy_before_the_ring() {
    let plain = config("rna", "wait_for_all = true", 4, 12);
    let mut copying = plain.clone();
    copying
        .cluster
        .devices
        .get_mut("core")
        .expect("the test's device")
        .message_copy_gbps = Some(0.08); // 10 MB/s
    let (a, b) = (run(&plain), run(&copying));
    assert_eq!(bits(&a), bits(&b));
    let elems: u64 = a
        .params
        .as_ref()
        .unwrap()
        .iter()
        .map(|(_, v)| v.len() as u64)
        .sum();
    let fuse_s = ((elems + 1) * 4) as f64 / 1e7;
    let added = b.summary.run_time_s - a.summary.run_time_s;
    assert!(
        added >= 0.99 * 12.0 * 4.0 * fuse_s,
        "{added} s added, {fuse_s} s a buffer's copy"
    );
}

/// R8 (ii) and (iii): in flat RNA every replica holds the same bits after every round, while
/// rounds only take part of the workers (Σw < P) and later rounds use stale gradients.
#[test]
fn flat_rna_keeps_replicas_identical_with_partial_rounds() {
    let r = run(&config("rna", "", 6, 30));
    assert_eq!(figure(&r, "rna.checked_rounds"), 30.0);
    assert_eq!(figure(&r, "rna.replica_mismatch_rounds"), 0.0);
    let share = figure(&r, "rna.contributors_share");
    assert!(share > 0.0 && share < 1.0, "contributors share {share}");
    assert!(figure(&r, "rna.stale_share") > 0.0);
    assert_eq!(r.summary.iterations, 30);
    // Every round applies one update; the loss falls.
    let first = r.rows[0].loss;
    let last = r.rows.last().unwrap().loss;
    assert!(last < first, "loss {first} -> {last}");
}

/// R8 (v): with η = 0 every gradient computed on an older version is dropped, none is used
/// stale; the default η = 3 uses stale gradients and drops fewer.
#[test]
fn gradients_older_than_eta_are_dropped_in_a_run() {
    let strict = run(&config("rna", "eta = 0", 6, 30));
    let loose = run(&config("rna", "eta = 3", 6, 30));
    assert_eq!(figure(&strict, "rna.stale_share"), 0.0);
    assert!(figure(&strict, "rna.dropped") > 0.0);
    assert!(figure(&loose, "rna.dropped") < figure(&strict, "rna.dropped"));
    assert!(figure(&loose, "rna.stale_share") > 0.0);
}

/// R2's mechanism: with two probes the round triggers on the faster of two workers, sooner than
/// on one random worker, and fewer workers are ready at the trigger.
#[test]
fn two_probes_trigger_sooner_than_one() {
    let q2 = run(&config("rna", "q = 2", 8, 40));
    let q1 = run(&config("eager-sgd", "", 8, 40));
    assert!(
        figure(&q2, "rna.trigger_mean_s") < figure(&q1, "rna.trigger_mean_s"),
        "q=2 {} vs q=1 {}",
        figure(&q2, "rna.trigger_mean_s"),
        figure(&q1, "rna.trigger_mean_s")
    );
    assert!(q2.summary.time_per_iteration_s < q1.summary.time_per_iteration_s);
}

#[test]
fn runs_are_deterministic() {
    for (s, o) in [("rna", ""), ("eager-sgd", ""), ("ad-psgd", "")] {
        let a = run(&config(s, o, 4, 15));
        let b = run(&config(s, o, 4, 15));
        assert_eq!(bits(&a), bits(&b), "{s}");
        assert_eq!(a.summary.run_time_s, b.summary.run_time_s, "{s}");
    }
}

#[test]
fn ad_psgd_trains_without_a_barrier() {
    let r = run(&config("ad-psgd", "", 4, 30));
    let first = r.rows[0].loss;
    let last = r.rows.last().unwrap().loss;
    assert!(last < first, "loss {first} -> {last}");
    // Pairwise averaging sends whole models, nothing else: two per active worker step.
    assert!(r.summary.bytes_sent > 0);
}

/// AD-PSGD's averaging is atomic for any number of workers, odd ones included: only the active
/// (even) workers start one and only passive (odd) workers are asked, so an active worker's
/// parameters never change while its request is in flight (a request reaching an active worker
/// fails the run). Every active step sends the model once, and every request is answered once,
/// by a passive worker.
#[test]
fn ad_psgd_averages_only_across_the_active_passive_split() {
    for workers in [2u32, 3, 5] {
        let steps = 10;
        let cfg = config("ad-psgd", "", workers, steps);
        let asm = concord::registry().compose(&cfg).expect("composes");
        let r = concord::engine::run(&cfg, &asm, RunOptions::default())
            .unwrap_or_else(|e| panic!("{workers} workers: {e}"));
        let active = workers.div_ceil(2) as u64;
        let model_bytes: u64 = r
            .params
            .as_ref()
            .unwrap()
            .iter()
            .map(|(_, v)| 4 * v.len() as u64)
            .sum();
        let request = r.rows[0].bytes_sent / active;
        assert!(request >= model_bytes, "{workers} workers: {request} B");
        assert!(r.rows.iter().all(|row| row.bytes_sent == active * request));
        // Passive workers send the answers (plus one small message each at the end).
        let answered: u64 = (0..workers)
            .filter(|w| w % 2 == 1)
            .map(|w| r.summary.bytes_sent_by_role[&format!("worker-{w}")])
            .sum();
        let asked = active * steps * request;
        assert!(
            (asked..asked + 1024 * workers as u64).contains(&answered),
            "{workers} workers: {answered} B answered for {asked} B asked"
        );
    }
}

/// The default of two probes per round comes down to the workers there are: one worker runs
/// RNA (SGD on gradients that can be a round stale: its compute side never waits for a round)
/// without a setting it never made; an explicit `q` above the workers is still an error naming
/// it.
#[test]
fn the_default_probe_count_comes_down_to_one_worker() {
    let r = run(&config("rna", "", 1, 6));
    assert_eq!(r.rows.len(), 6);
    let e = concord::registry()
        .compose(&config("rna", "q = 2", 1, 6))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("strategy.rna.q") && e.contains("(1)"), "{e}");
}

#[test]
fn bad_options_are_start_up_errors_naming_the_key() {
    let registry = concord::registry();
    for (strategy, opts, key) in [
        ("rna", "q = 0", "strategy.rna.q"),
        ("rna", "q = 9", "strategy.rna.q"),
        ("rna", "eta = -1", "strategy.rna.eta"),
        ("rna", "bucket_mib = 0.0", "strategy.rna.bucket_mib"),
        ("rna", "probes = 2", "probes"),
        ("rna", "accumulate = \"median\"", "median"),
        ("eager-sgd", "q = 2", "q"),
        ("ad-psgd", "q = 2", "q"),
    ] {
        let cfg = config(strategy, opts, 8, 5);
        let e = registry
            .compose(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(key), "{strategy} {opts}: {e:?}");
    }
    let mut cfg = config("rna", "", 4, 5);
    cfg.strategies = vec!["rna".into(), "ssp".into()];
    let e = registry.compose(&cfg).err().unwrap().to_string();
    assert!(e.contains("`rna`") && e.contains("`ssp`"), "{e}");
}

/// In real time the decentralized strategies keep their guarantees: wait-for-all RNA still
/// trains allreduce's parameters bit for bit (whatever order the workers finish in), flat RNA's
/// replicas stay identical round after round, and AD-PSGD, whose pairings depend on timing,
/// trains.
#[test]
fn decentralized_strategies_keep_their_guarantees_in_wall_time() {
    let wall = |mut cfg: RunConfig| {
        cfg.runtime = RuntimeKind::Wall;
        run(&cfg)
    };
    let sim = run(&config("allreduce", "", 4, 8));
    let wait_for_all = wall(config("rna", "wait_for_all = true", 4, 8));
    assert_eq!(bits(&wait_for_all), bits(&sim));
    assert_eq!(bits(&wall(config("allreduce", "", 4, 8))), bits(&sim));

    let flat = wall(config("rna", "", 4, 12));
    assert_eq!(figure(&flat, "rna.checked_rounds"), 12.0);
    assert_eq!(figure(&flat, "rna.replica_mismatch_rounds"), 0.0);

    let ad = wall(config("ad-psgd", "", 4, 12));
    let (first, last) = (ad.rows[0].loss, ad.rows.last().unwrap().loss);
    assert!(last < first, "AD-PSGD loss {first} -> {last}");
}
