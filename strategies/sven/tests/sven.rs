//! Sven ranks on a real DLRM: numeric equivalences (ranks vs one rank with the whole batch;
//! every sharding the same model), the staleness the pipeline allows, determinism, and the
//! configuration errors.

use concord_engine::config::RunConfig;
use concord_engine::data::DataConfig;
use concord_engine::model::ModelConfig;
use concord_engine::optim::OptimizerConfig;
use concord_engine::run::RunResult;
use concord_test_support::{compose_err, figure, max_diff, param_bits, registry, run_with};

fn reg() -> concord_engine::registry::Registry {
    registry(&[concord_sven::register])
}

/// A small DeepFM on small click-through data: `workers` ranks of `batch` samples.
fn config(workers: u32, batch: u64, iterations: u64, options: &str) -> RunConfig {
    let mut cfg = RunConfig {
        workers,
        servers: 1,
        batch,
        iterations,
        eval_every: iterations,
        strategies: vec!["sven".into()],
        model: ModelConfig::Dlrm {
            interaction: Default::default(),
            dim: 4,
            bottom: vec![8],
            top: vec![8],
            cross_layers: 2,
        },
        data: toml::from_str("kind = \"ctr\"\nfields = 4\nrows = 300\ntrain = 4000\ntest = 1000")
            .unwrap(),
        optimizer: OptimizerConfig::Sgd {
            lr: 0.05,
            momentum: 0.0,
            weight_decay: 0.0,
        },
        ..RunConfig::default()
    };
    cfg.cluster.dedicated_servers = true;
    if !options.is_empty() {
        cfg.strategy
            .insert("sven".into(), toml::from_str(options).unwrap());
    }
    cfg
}

fn run(cfg: &RunConfig) -> RunResult {
    run_with(&reg(), cfg)
}

#[test]
fn sequential_ranks_equal_one_rank_with_the_whole_batch() {
    let opts = "pipeline = \"sequential\"";
    let four = run(&config(4, 16, 12, opts));
    let one = run(&config(1, 64, 12, opts));
    let (a, b) = (four.params.unwrap(), one.params.unwrap());
    // The ring sums the dense gradients in another order than one rank's batch mean, so the
    // values agree to rounding, not bit for bit.
    let d = max_diff(&a, &b);
    assert!(d < 1e-5, "max |Δ| = {d}");
    assert!(a.iter().any(|(n, _)| n.starts_with("emb.")));
}

#[test]
fn every_sharding_trains_the_same_model_bit_for_bit() {
    let bits = |sharding: &str| {
        param_bits(&run(&config(
            3,
            8,
            6,
            &format!("pipeline = \"sequential\"\nsharding = \"{sharding}\""),
        )))
    };
    let column = bits("column");
    assert_eq!(column, bits("row"));
    assert_eq!(column, bits("table"));
}

#[test]
fn the_four_stage_pipeline_reads_two_updates_stale_and_sequential_none() {
    let four = run(&config(4, 16, 20, "pipeline = \"four-stage\""));
    assert_eq!(figure(&four, "sven.max_staleness"), 2.0);
    let seq = run(&config(4, 16, 20, "pipeline = \"input-offload\""));
    assert_eq!(figure(&seq, "sven.max_staleness"), 0.0);
    // Staleness changes the math, not only the time.
    assert_ne!(param_bits(&four), param_bits(&seq));
    // The pipeline's iteration is never longer than the sequential sum of its stages (Eq. 6.1).
    assert!(figure(&four, "sven.iter_s") <= figure(&four, "sven.eq61_s") * (1.0 + 1e-9));
    assert!(four.summary.final_test_auc.is_some());
}

#[test]
fn the_same_seed_gives_the_same_bits() {
    let cfg = config(4, 16, 10, "alltoall = \"async\"");
    assert_eq!(param_bits(&run(&cfg)), param_bits(&run(&cfg)));
    let blocking = config(4, 16, 10, "alltoall = \"blocking\"");
    // The alltoall changes when splits travel, not what they carry.
    assert_eq!(param_bits(&run(&cfg)), param_bits(&run(&blocking)));
}

#[test]
fn hot_rows_serve_far_more_lookups_than_their_share() {
    let hot = run(&config(
        2,
        32,
        12,
        "pipeline = \"sequential\"\nalpha = 0.1\nwarmup_iters = 4",
    ));
    let random = run(&config(
        2,
        32,
        12,
        "pipeline = \"sequential\"\nalpha = 0.1\nplacement = \"random\"",
    ));
    let (h, r) = (
        figure(&hot, "sven.device_hit_rate"),
        figure(&random, "sven.device_hit_rate"),
    );
    // Zipf ids: the top 10 % of rows serve most lookups; a random 10 % serve far fewer (about
    // α on average over draws, with a large spread on tables this small).
    assert!(h > 3.0 * 0.1, "hot hit rate {h}");
    assert!(h > 1.5 * r, "hot {h} vs random {r}");
}

#[test]
fn bad_configurations_are_named_errors() {
    let reg = reg();
    let e = compose_err(&reg, &config(2, 8, 2, "alpha = 1.5"));
    assert!(e.contains("strategy.sven.alpha"), "{e}");
    // Each rank's shard of a table is larger than both tiers.
    let e = compose_err(
        &reg,
        &config(2, 8, 2, "device_mib = 0.000001\nhost_mib = 0.000001"),
    );
    assert!(e.contains("larger") || e.contains("tier"), "{e}");
    // Input offload needs the input service's own machines.
    let mut cfg = config(2, 8, 2, "pipeline = \"four-stage\"");
    cfg.cluster.dedicated_servers = false;
    let e = compose_err(&reg, &cfg);
    assert!(e.contains("`cluster.dedicated_servers` = false"), "{e}");
    // ... and at least one of them: the key at fault is the one named.
    let mut cfg = config(2, 8, 2, "pipeline = \"input-offload\"");
    cfg.servers = 0;
    let e = compose_err(&reg, &cfg);
    assert!(e.contains("`servers` = 0"), "{e}");
    // Column-wise sharding over more ranks than a row's columns.
    let e = compose_err(&reg, &config(9, 8, 2, "sharding = \"column\""));
    assert!(e.contains("sharding"), "{e}");
    // A non-DLRM model.
    let mut cfg = config(2, 8, 2, "");
    cfg.model = ModelConfig::default();
    cfg.data = DataConfig::default();
    let e = compose_err(&reg, &cfg);
    assert!(e.contains("dlrm"), "{e}");
}

#[test]
fn a_bounded_device_tier_keeps_hot_rows_by_importance_or_recency_better_than_at_random() {
    let hit = |placement: &str| {
        figure(
            &run(&config(
                2,
                64,
                30,
                &format!("pipeline = \"sequential\"\nalpha = 0.05\nplacement = \"{placement}\""),
            )),
            "sven.device_hit_rate",
        )
    };
    let (importance, lru, random) = (hit("importance"), hit("lru"), hit("evict-random"));
    assert!(
        importance > random,
        "importance {importance} vs random {random}"
    );
    assert!(lru > random, "lru {lru} vs random {random}");
    // A bounded tier of 5 % of the rows still serves far more than 5 % of the lookups.
    assert!(importance > 0.15, "{importance}");
    let e = compose_err(
        &reg(),
        &config(2, 8, 2, "placement = \"importance\"\nimportance_beta = 0.0"),
    );
    assert!(e.contains("importance_beta"), "{e}");
}
