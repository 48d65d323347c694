//! Every shipped config loads, validates, composes and runs.

mod common;

use std::path::PathBuf;

fn shipped_configs() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [
        "configs",
        "configs/stragglers",
        "configs/psld",
        "configs/flexrr",
    ] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_shipped_config_runs() {
    let files = shipped_configs();
    assert!(
        files.len() >= 14,
        "default + one per straggler pattern, found {files:?}"
    );
    for file in files {
        let cfg = concord::config::load(Some(&file), &["iterations=3".into()])
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let r = common::run(&cfg);
        assert_eq!(r.summary.iterations, 3, "{}", file.display());
    }
}

#[test]
fn the_default_config_is_what_the_readme_describes() {
    let cfg = concord::config::load(Some("configs/default.toml".as_ref()), &[]).unwrap();
    assert_eq!((cfg.workers, cfg.servers), (8, 2));
    assert_eq!(cfg.strategies, vec!["bsp".to_string()]);
    assert_eq!(cfg.stragglers.len(), 1);
}

#[test]
fn the_default_run_reaches_ninety_percent_test_accuracy() {
    let cfg = concord::config::load(Some("configs/default.toml".as_ref()), &[]).unwrap();
    let r = common::run(&cfg);
    let acc = r.summary.final_test_accuracy.unwrap();
    assert!(acc >= 0.90, "default run reached {acc}");
    // Accuracy is evaluated every eval_every iterations along the way.
    let evaluated = r
        .rows
        .iter()
        .filter(|row| row.test_accuracy.is_some())
        .count() as u64;
    assert_eq!(evaluated, cfg.iterations / cfg.eval_every);
}
