//! Running cells: the cache hash, and that a real cell gives the same row twice.

use super::common::{parse, MINIMAL};
use crate::bench::report::row::rows;
use crate::bench::runner::cache::{cache_key, fnv1a};
use crate::bench::runner::run_cell;

#[test]
fn fnv1a_is_the_reference_hash() {
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn two_runs_of_the_same_cell_give_the_same_row() {
    let s = parse(MINIMAL).expect("suite");
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let cell = &cells[1]; // ssp under Slow Worker
    let a = run_cell(&cell.config).expect("first run");
    let b = run_cell(&cell.config).expect("second run");
    assert_eq!(a, b, "metrics and curves differ between two runs");
    let rows_a = rows(&s, &scenarios, &cells[1..2], &[Some(a)]);
    let rows_b = rows(&s, &scenarios, &cells[1..2], &[Some(b)]);
    assert_eq!(rows_a, rows_b);
    assert_eq!(rows_a.len(), 1);
    assert_eq!(rows_a[0].iterations, 12);
    assert!(rows_a[0].time_per_iteration_s > 0.0);
    // Same config and version, same cache key; another seed, another key.
    let key = cache_key("v", &cell.config);
    assert_eq!(key, cache_key("v", &cell.config.clone()));
    let mut other = cell.config.clone();
    other.seed += 1;
    assert_ne!(key, cache_key("v", &other));
    assert_ne!(key, cache_key("w", &cell.config));
}

#[test]
fn a_scenario_with_a_calm_twin_gives_the_per_iteration_delay() {
    // "some" is "all" with a slow worker; "all" is its calm twin.
    let text = super::common::SUBSETS.replace(
        "label = \"some\"\nstrategies = [\"asp\", \"bsp\"]\nconfig = { workers = 2, servers = 1, iterations = 12 }",
        "label = \"some\"\nstrategies = [\"asp\", \"bsp\"]\ncalm = \"all\"\nconfig = { workers = 2, servers = 1, iterations = 12, stragglers = [{ pattern = \"slow-worker\", delay = 1.0 }] }",
    );
    let s = parse(&text).expect("suite");
    let scenarios = s.scenarios_expanded();
    let cells = s.cells(&scenarios).expect("cells");
    let results: Vec<_> = cells.iter().map(|c| run_cell(&c.config).ok()).collect();
    let rows = rows(&s, &scenarios, &cells, &results);
    for r in rows.iter().filter(|r| r.scenario == "some") {
        let calm = rows
            .iter()
            .find(|c| c.scenario == "all" && c.strategy == r.strategy && c.seed == r.seed)
            .expect("calm row");
        let steady = |r: &crate::bench::report::row::Row| {
            r.steady_time_per_iteration_s
                .unwrap_or(r.time_per_iteration_s)
        };
        let d = r.per_iteration_delay_s.expect("a delay");
        assert!((d - (steady(r) - steady(calm))).abs() < 1e-12, "{r:?}");
        assert!(d > 0.0, "a slow worker adds delay: {r:?}");
    }
    assert!(rows
        .iter()
        .filter(|r| r.scenario == "all")
        .all(|r| r.per_iteration_delay_s.is_none()));
    // The twin must be another, unswept scenario of the suite that runs every strategy.
    for (calm, why) in [("nowhere", "not another"), ("some", "not another")] {
        let bad = text.replace("calm = \"all\"", &format!("calm = \"{calm}\""));
        let msg = parse(&bad).expect_err("bad twin").to_string();
        assert!(
            msg.contains("scenarios[1].calm") && msg.contains(why),
            "{msg}"
        );
    }
}

#[test]
fn the_code_fingerprint_moves_with_code_and_configs_but_not_with_prose_or_records() {
    use crate::bench::runner::cache::code_fingerprint;
    use std::process::Command;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "git {args:?}");
    };
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("folder");
        std::fs::write(path, text).expect("write");
    };
    let commit = |message: &str| {
        git(&["add", "."]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            message,
        ]);
    };
    assert_eq!(code_fingerprint(root), None, "outside git: no cache");
    git(&["init", "-q"]);
    write("src/lib.rs", "fn a() {}");
    write("README.md", "prose");
    write("bench/paper.toml", "seeds = [1]");
    write("bench/results/paper/results.csv", "a,b");
    write(".gitignore", "/out\n");
    commit("one");
    let first = code_fingerprint(root).expect("a fingerprint");
    write("README.md", "other prose");
    write("bench/results/paper/results.csv", "a,c");
    write("out/cache.json", "{}");
    commit("two");
    assert_eq!(code_fingerprint(root).as_ref(), Some(&first));
    // An edit to code or to a suite, committed or not, and a new file are other code.
    write("bench/paper.toml", "seeds = [2]");
    let suite = code_fingerprint(root).expect("a fingerprint");
    assert_ne!(suite, first);
    write("bench/paper.toml", "seeds = [1]");
    assert_eq!(code_fingerprint(root).as_ref(), Some(&first));
    write("src/new.rs", "fn b() {}");
    assert_ne!(code_fingerprint(root).as_ref(), Some(&first));
    std::fs::remove_file(root.join("src/new.rs")).expect("remove");
    write("src/lib.rs", "fn a() { }");
    assert_ne!(code_fingerprint(root).as_ref(), Some(&first));
}
