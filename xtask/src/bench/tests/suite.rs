//! Suite files: every file parses, unknown keys and bad values are errors naming the key,
//! sweeps expand, dotted keys are set, scenarios run subsets of strategies and carry claims.

use super::common::{parse, MINIMAL, SUBSETS};
use crate::bench::report::csv_file::expected_cells;
use crate::bench::suite::load::{bench_dir, suite_files, workspace_root};
use crate::bench::suite::schema::Suite;
use crate::bench::suite::toml_tables::set_path;

#[test]
fn every_suite_file_parses_and_resolves() {
    let files = suite_files(&bench_dir()).expect("bench/ is readable");
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    for wanted in ["smoke", "stragglers", "scaling", "paper"] {
        assert!(
            names.iter().any(|n| n == wanted),
            "bench/{wanted}.toml is missing: {names:?}"
        );
    }
    for file in files {
        let s = Suite::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let scenarios = s.scenarios_expanded();
        let cells = s.cells(&scenarios).unwrap_or_else(|e| panic!("{e}"));
        let per_scenario: usize = scenarios
            .iter()
            .map(|sc| s.scenario_strategies(&sc.spec).len())
            .sum();
        assert_eq!(
            cells.len(),
            per_scenario * s.seeds.len(),
            "{}",
            file.display()
        );
        for c in &cells {
            assert_eq!(c.config.runtime, concord_engine::context::RuntimeKind::Sim);
        }
    }
}

#[test]
fn the_stragglers_suite_covers_every_pattern_file_at_8_and_32_workers() {
    let s = Suite::load_named("stragglers").expect("stragglers suite");
    let dir = workspace_root().join("configs/stragglers");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("configs/stragglers")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .filter_map(|p| {
            p.file_name()
                .map(|n| format!("configs/stragglers/{}", n.to_string_lossy()))
        })
        .collect();
    files.sort();
    for f in &files {
        assert!(
            s.scenarios
                .iter()
                .any(|sc| sc.file.as_deref() == Some(f.as_str())
                    && sc.config.get("stragglers").is_none()),
            "no scenario runs {f}"
        );
    }
    let labels: Vec<&str> = s.strategies.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, ["bsp", "ssp", "asp"]);
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let workers: std::collections::BTreeSet<u32> = cells.iter().map(|c| c.config.workers).collect();
    assert_eq!(workers.into_iter().collect::<Vec<_>>(), [8, 32]);
}

#[test]
fn an_unknown_key_is_an_error_naming_it_and_the_file() {
    let e = parse(&format!("sedes = [2]\n{MINIMAL}")).expect_err("unknown top-level key");
    let msg = e.to_string();
    assert!(
        msg.contains("sedes") && msg.contains("bench/test.toml"),
        "{msg}"
    );

    let text = MINIMAL.replace(
        "label = \"tiny\"",
        "label = \"tiny\"\ntarget = { acuracy = 0.5 }",
    );
    let msg = parse(&text).expect_err("unknown target key").to_string();
    assert!(
        msg.contains("acuracy") && msg.contains("scenarios[0].target"),
        "{msg}"
    );

    // A config key is checked when the cells are resolved, against the engine's schema.
    let text = MINIMAL.replace("workers = 2,", "wrokers = 2,");
    let s = parse(&text).expect("suite schema is fine");
    let msg = s
        .cells(&s.scenarios_expanded())
        .expect_err("unknown config key")
        .to_string();
    assert!(
        msg.contains("wrokers") && msg.contains("bench/test.toml"),
        "{msg}"
    );

    // An unknown strategy fails before anything runs, naming the key.
    let text = MINIMAL.replace("strategies = [\"ssp\"]", "strategies = [\"sps\"]");
    let s = parse(&text).expect("suite schema is fine");
    let msg = s
        .cells(&s.scenarios_expanded())
        .expect_err("unknown strategy")
        .to_string();
    assert!(
        msg.contains("strategies[1].strategies") && msg.contains("sps"),
        "{msg}"
    );
}

#[test]
fn bad_claims_targets_and_labels_are_rejected() {
    let with =
        |extra: &str| MINIMAL.replace("label = \"tiny\"", &format!("label = \"tiny\"\n{extra}"));
    let claim = |body: &str| {
        with(&format!("claim = {{ text = \"t\", strategy = \"ssp\", baseline = \"bsp\", expect = \"less\", {body} }}"))
    };
    let msg = parse(&claim("metric = \"speed\""))
        .expect_err("bad metric")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claim.metric") && msg.contains("time_per_iteration_s"),
        "{msg}"
    );
    let msg = parse(&claim("metric = \"efficiency\", by_at_least = -1.5"))
        .expect_err("negative")
        .to_string();
    assert!(msg.contains("by_at_least"), "{msg}");
    let bad_baseline = with("claim = { text = \"t\", metric = \"efficiency\", strategy = \"ssp\", baseline = \"asp\", expect = \"greater\" }");
    let msg = parse(&bad_baseline)
        .expect_err("unknown baseline")
        .to_string();
    assert!(
        msg.contains("claim.baseline") && msg.contains("asp"),
        "{msg}"
    );
    let msg = parse(&with("target = { accuracy = 0.5, loss = 0.1 }"))
        .expect_err("two targets")
        .to_string();
    assert!(msg.contains("scenarios[0].target"), "{msg}");
    let msg = parse(&with("target = { test_loss = 0.5 }"))
        .and_then(|s| s.cells(&s.scenarios_expanded()))
        .expect_err("no timed evaluations")
        .to_string();
    assert!(
        msg.contains("target.test_loss") && msg.contains("eval_every_s"),
        "{msg}"
    );
    let twice = format!("{MINIMAL}\n[[strategies]]\nlabel = \"bsp\"\nstrategies = [\"bsp\"]\n");
    let msg = parse(&twice).expect_err("duplicate label").to_string();
    assert!(msg.contains("strategies[2].label"), "{msg}");
}

#[test]
fn a_sweep_makes_one_scenario_per_value() {
    let text = MINIMAL.replace(
        "label = \"tiny\"",
        "label = \"tiny\"\nsweep = { key = \"stragglers.0.delay\", values = [0.5, 2.0, 4.0] }",
    );
    let s = parse(&text).expect("suite");
    let scenarios = s.scenarios_expanded();
    let labels: Vec<&str> = scenarios.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        ["tiny delay=0.5", "tiny delay=2.0", "tiny delay=4.0"]
    );
    assert!(scenarios.iter().all(|s| s.group == "tiny"));
    let cells = s.cells(&scenarios).expect("cells");
    assert_eq!(cells.len(), 3 * 2);
    let delays: Vec<String> = cells
        .iter()
        .map(|c| format!("{:?}", c.config.stragglers[0]))
        .collect();
    assert!(
        delays[0].contains("delay: 0.5") && delays[5].contains("delay: 4.0"),
        "{delays:?}"
    );
    // Strategy options reach the run config.
    assert_eq!(cells[1].config.strategies, ["ssp"]);
    assert_eq!(
        cells[1]
            .config
            .strategy
            .get("ssp")
            .and_then(|t| t.get("slack"))
            .and_then(|v| v.as_integer()),
        Some(2)
    );

    // A suite-level sweep applies to scenarios without their own.
    let text = format!("{MINIMAL}\n[sweep]\nkey = \"workers\"\nvalues = [2, 4]\n");
    let s = parse(&text).expect("suite");
    let cells = s.cells(&s.scenarios_expanded()).expect("cells");
    let workers: Vec<u32> = cells.iter().map(|c| c.config.workers).collect();
    assert_eq!(workers, [2, 2, 4, 4]);
}

#[test]
fn set_path_walks_tables_and_array_indices() {
    let mut t: toml::Table =
        toml::from_str("[[stragglers]]\npattern = \"jitter\"\nsigma = 0.1").expect("toml");
    set_path(&mut t, "stragglers.0.sigma", toml::Value::Float(0.3)).expect("set");
    set_path(
        &mut t,
        "cluster.devices.core.nic_gbps",
        toml::Value::Float(1.0),
    )
    .expect("set");
    set_path(&mut t, "workers", toml::Value::Integer(16)).expect("set");
    assert_eq!(t["stragglers"][0]["sigma"].as_float(), Some(0.3));
    assert_eq!(
        t["cluster"]["devices"]["core"]["nic_gbps"].as_float(),
        Some(1.0)
    );
    assert_eq!(t["workers"].as_integer(), Some(16));
    let e = set_path(&mut t, "stragglers.3.sigma", toml::Value::Float(0.3)).expect_err("index");
    assert!(e.contains("no index 3"), "{e}");
    let e = set_path(&mut t, "workers.x", toml::Value::Float(0.3)).expect_err("not a table");
    assert!(e.contains("`workers`"), "{e}");
}

#[test]
fn a_scenario_runs_only_its_strategies() {
    let s = parse(SUBSETS).expect("suite");
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let expected = expected_cells(&s, &scenarios, &cells);
    let ids: Vec<(String, String, u64)> = expected.into_iter().collect();
    let some: Vec<(&str, u64)> = ids
        .iter()
        .filter(|(sc, _, _)| sc == "some")
        .map(|(_, st, seed)| (st.as_str(), *seed))
        .collect();
    // Suite order (bsp before asp is not implied: expected_cells is sorted by label).
    assert_eq!(some, [("asp", 1), ("asp", 2), ("bsp", 1), ("bsp", 2)]);
    assert_eq!(ids.iter().filter(|(sc, _, _)| sc == "all").count(), 6);
    assert_eq!(cells.len(), 6 + 4);
    // Cells of a subset scenario keep the suite's strategy order and indices.
    let some_cells: Vec<usize> = cells
        .iter()
        .filter(|c| scenarios[c.scenario].label == "some")
        .map(|c| c.strategy)
        .collect();
    assert_eq!(some_cells, [0, 0, 2, 2]);

    // An unknown label is an error naming the file and the key.
    let msg = parse(&SUBSETS.replace("[\"asp\", \"bsp\"]", "[\"asp\", \"flexrr\"]"))
        .expect_err("unknown label")
        .to_string();
    assert!(
        msg.contains("bench/test.toml")
            && msg.contains("scenarios[1].strategies")
            && msg.contains("flexrr"),
        "{msg}"
    );
    let msg = parse(&SUBSETS.replace("[\"asp\", \"bsp\"]", "[]"))
        .expect_err("empty subset")
        .to_string();
    assert!(msg.contains("scenarios[1].strategies"), "{msg}");
    let msg = parse(&SUBSETS.replace("[\"asp\", \"bsp\"]", "[\"asp\", \"asp\"]"))
        .expect_err("listed twice")
        .to_string();
    assert!(msg.contains("scenarios[1].strategies[1]"), "{msg}");

    // A claim about a strategy the scenario does not run is an error.
    let claim = "claims = [{ text = \"t\", metric = \"efficiency\", strategy = \"ssp\", baseline = \"bsp\", expect = \"greater\" }]";
    let text = SUBSETS.replace(
        "strategies = [\"asp\", \"bsp\"]",
        &format!("strategies = [\"asp\", \"bsp\"]\n{claim}"),
    );
    let msg = parse(&text).expect_err("ssp not run").to_string();
    assert!(
        msg.contains("scenarios[1].claims[0].strategy") && msg.contains("ssp"),
        "{msg}"
    );
}

#[test]
fn a_scenario_takes_several_claims_and_a_single_one() {
    let with =
        |extra: &str| MINIMAL.replace("label = \"tiny\"", &format!("label = \"tiny\"\n{extra}"));
    let text = with(
        "claim = { text = \"a\", metric = \"time_per_iteration_s\", strategy = \"ssp\", baseline = \"bsp\", expect = \"less\" }\n\
         claims = [\n\
           { text = \"b\", metric = \"wait_share\", strategy = \"ssp\", expect = \"less\", than = 0.05 },\n\
           { text = \"c\", metric = \"figure:ssp.max_staleness\", strategy = \"ssp\", expect = \"less\", than = 3, by_at_least = 0.1, by_at_most = 0.9 },\n\
         ]",
    );
    let s = parse(&text).expect("suite");
    let claims = s.scenarios[0].all_claims();
    let keys: Vec<&str> = claims.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["claim", "claims[0]", "claims[1]"]);
    assert_eq!(claims[1].1.than, Some(0.05));
    assert_eq!(claims[2].1.than, Some(3.0));
    assert_eq!(claims[0].1.baseline.as_deref(), Some("bsp"));

    // The `[[scenarios.claims]]` form.
    let tables = format!(
        "{MINIMAL}\n[[scenarios.claims]]\ntext = \"d\"\nmetric = \"efficiency\"\nstrategy = \"ssp\"\nbaseline = \"bsp\"\nexpect = \"greater\"\n\n[[scenarios.claims]]\ntext = \"e\"\nmetric = \"efficiency\"\nstrategy = \"bsp\"\nexpect = \"greater\"\nthan = 0.5\n"
    );
    let s = parse(&tables).expect("suite");
    assert_eq!(s.scenarios[0].all_claims().len(), 2);

    // Each claim is validated, and errors name it.
    let claims = |body: &str| {
        with(&format!(
            "claims = [\n{{ text = \"ok\", metric = \"efficiency\", strategy = \"ssp\", baseline = \"bsp\", expect = \"greater\" }},\n{{ text = \"bad\", strategy = \"ssp\", expect = \"less\", {body} }},\n]"
        ))
    };
    let msg = parse(&claims("metric = \"speed\", than = 1.0"))
        .expect_err("bad metric")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claims[1].metric") && msg.contains("figure:"),
        "{msg}"
    );
    let msg = parse(&claims("metric = \"figure:\", than = 1.0"))
        .expect_err("empty figure name")
        .to_string();
    assert!(msg.contains("scenarios[0].claims[1].metric"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\""))
        .expect_err("neither baseline nor than")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claims[1]") && msg.contains("exactly one of"),
        "{msg}"
    );
    let msg = parse(&claims(
        "metric = \"efficiency\", baseline = \"bsp\", than = 1.0",
    ))
    .expect_err("both")
    .to_string();
    assert!(msg.contains("exactly one of"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\", than = \"x\""))
        .expect_err("than not a number")
        .to_string();
    assert!(msg.contains("than"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\", than = nan"))
        .expect_err("than not finite")
        .to_string();
    assert!(msg.contains("scenarios[0].claims[1].than"), "{msg}");
    let msg = parse(&claims("metric = \"efficiency\", baseline = \"asp\""))
        .expect_err("unknown baseline")
        .to_string();
    assert!(
        msg.contains("scenarios[0].claims[1].baseline") && msg.contains("asp"),
        "{msg}"
    );
    let msg = parse(&claims(
        "metric = \"efficiency\", than = 1.0, by_at_least = 0.5, by_at_most = 0.2",
    ))
    .expect_err("range")
    .to_string();
    assert!(msg.contains("scenarios[0].claims[1].by_at_most"), "{msg}");
}

#[test]
fn a_scenario_baseline_must_be_one_of_its_strategies() {
    let with = |b: &str| {
        SUBSETS.replace(
            "label = \"some\"",
            &format!("label = \"some\"\nbaseline = \"{b}\""),
        )
    };
    parse(&with("asp")).expect("asp runs in `some`");
    let msg = parse(&with("ssp")).expect_err("ssp does not").to_string();
    assert!(
        msg.contains("scenarios[1].baseline") && msg.contains("\"ssp\""),
        "{msg}"
    );
}

#[test]
fn a_strategy_that_switches_the_model_kind_drops_the_scenario_models_keys() {
    use crate::bench::suite::toml_tables::merge_layer;
    let mut base: toml::Table = "[model]\nkind = \"mlp\"\nhidden = [128]\n".parse().unwrap();
    let switch: toml::Table = "[model]\nkind = \"profile\"\nname = \"vgg16\"\n"
        .parse()
        .unwrap();
    merge_layer(&mut base, switch);
    let model = base["model"].as_table().unwrap();
    assert_eq!(model.get("hidden"), None);
    assert_eq!(model["name"].as_str(), Some("vgg16"));
    // The same kind again merges into the section.
    let same: toml::Table = "[model]\nkind = \"profile\"\n".parse().unwrap();
    merge_layer(&mut base, same);
    assert_eq!(base["model"]["name"].as_str(), Some("vgg16"));
}

/// A market scenario: scheme strategies only, one cell per scheme and seed, runnable.
const MARKET: &str = r#"
seeds = [1]
[[strategies]]
label = "bsp"
strategies = ["bsp"]
[[strategies]]
label = "proteus"
scheme = "proteus"
[[strategies]]
label = "on-demand"
scheme = "on-demand"
[[scenarios]]
label = "train"
[[scenarios]]
label = "cost"
market = { file = "configs/market/synthetic-4w.toml", hours = 2.0, starts = 3 }
claim = { text = "cheaper", metric = "cost_relative", strategy = "proteus", baseline = "on-demand", expect = "less" }
"#;

#[test]
fn a_market_scenario_runs_its_schemes_and_training_scenarios_do_not() {
    let s = parse(MARKET).unwrap();
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).unwrap();
    let of = |label: &str| -> Vec<String> {
        cells
            .iter()
            .filter(|c| scenarios[c.scenario].label == label)
            .map(|c| s.strategies[c.strategy].label.clone())
            .collect()
    };
    assert_eq!(of("train"), ["bsp"]);
    assert_eq!(of("cost"), ["proteus", "on-demand"]);
    let od = cells
        .iter()
        .find(|c| c.market.as_ref().is_some_and(|m| m.scheme == "on-demand"))
        .unwrap();
    let r = crate::bench::runner::run_any(od).unwrap();
    assert!((r.metrics.figures["market.cost_relative"] - 1.0).abs() < 1e-9);
    assert!((r.metrics.run_time_s - 7200.0).abs() < 1e-6);
}

#[test]
fn market_schemes_and_scenarios_are_checked() {
    let cases = [
        // An unknown scheme.
        (
            MARKET.replace(r#"scheme = "proteus""#, r#"scheme = "nope""#),
            "strategies[1].scheme",
        ),
        // A scheme in a training scenario.
        (
            MARKET.replace(
                "label = \"train\"",
                "label = \"train\"\nstrategies = [\"proteus\"]",
            ),
            "scenarios[0].strategies",
        ),
        // A training strategy in a market scenario.
        (
            MARKET.replace(
                "label = \"cost\"",
                "label = \"cost\"\nstrategies = [\"bsp\"]",
            ),
            "scenarios[1].strategies",
        ),
        // A training setting in a market scenario.
        (
            MARKET.replace(
                "label = \"cost\"",
                "label = \"cost\"\nconfig = { workers = 2 }",
            ),
            "scenarios[1].market",
        ),
        // No jobs.
        (
            MARKET.replace("starts = 3", "starts = 0"),
            "scenarios[1].market",
        ),
    ];
    for (text, key) in cases {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
    }
}
