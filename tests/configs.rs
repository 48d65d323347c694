//! Every shipped config loads, validates, composes and runs; a layer that switches a section's
//! `kind` starts that section from the new kind's defaults.

mod common;

use std::path::{Path, PathBuf};

/// Every run config under `configs/`, in every folder but `market/` (spot price traces for
/// `concord market`, not run configs) and `gpu/` (they need a build with the `cuda` feature).
fn shipped_configs() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("market") && !path.ends_with("gpu") {
                    walk(&path, files);
                }
            } else if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(Path::new("configs"), &mut files);
    files.sort();
    files
}

/// The `--set` arguments written in `file`'s comments (the variants and baselines it documents),
/// each as the shell passes it on: `--set 'a=["b"]'` gives `a=["b"]`.
fn documented_sets(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut sets = Vec::new();
    for comment in text
        .lines()
        .filter_map(|l| l.split_once('#').map(|(_, c)| c))
    {
        let mut rest = comment;
        while let Some(at) = rest.find("--set ") {
            rest = rest[at + "--set ".len()..].trim_start();
            let (arg, tail) = match rest.strip_prefix('\'') {
                Some(quoted) => quoted.split_once('\'').unwrap_or((quoted, "")),
                // An unquoted argument may end the comment's sentence.
                None => {
                    let (arg, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                    (arg.trim_end_matches(['.', ',', ';']), tail)
                }
            };
            sets.push(arg.replace('\'', ""));
            rest = tail;
        }
    }
    sets
}

#[test]
fn every_shipped_config_runs() {
    let files = shipped_configs();
    assert!(
        files.len() >= 30,
        "default + one per straggler pattern + the strategies', found {files:?}"
    );
    for file in files {
        let cfg = concord::config::load(Some(&file), &["iterations=3".into()])
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let r = common::run(&cfg);
        assert_eq!(r.summary.iterations, 3, "{}", file.display());
    }
}

#[test]
fn every_variant_a_shipped_config_documents_composes() {
    let mut tried = 0;
    for file in shipped_configs() {
        for set in documented_sets(&file) {
            let sourced = concord::config::load_sourced(Some(&file), std::slice::from_ref(&set))
                .unwrap_or_else(|e| panic!("{} --set {set}: {e}", file.display()));
            concord::registry()
                .compose(&sourced.config)
                .unwrap_or_else(|e| panic!("{} --set {set}: {e}", file.display()));
            tried += 1;
        }
    }
    // pipedream.toml's three baselines, sven.toml's, rna.toml's, dymem.toml's, agileml's stages.
    assert!(tried >= 7, "found {tried} documented variants");
}

#[test]
fn a_file_may_keep_options_of_a_strategy_it_does_not_compose() {
    let file = Path::new("configs/pipedream.toml");
    let sets = ["strategies=[\"gpipe\"]".to_string()];
    let sourced = concord::config::load_sourced(Some(file), &sets).unwrap();
    let asm = concord::registry().compose(&sourced.config).unwrap();
    assert_eq!(asm.unused_options(), ["pipedream".to_string()]);
    let layer = sourced.layer_of("strategy.pipedream");
    assert!(
        layer.starts_with("the file ") && layer.ends_with("configs/pipedream.toml"),
        "{layer}"
    );
    // Options under a name no strategy has are a typo, refused naming the key.
    let sets = ["strategy.pipedreem.stash=true".to_string()];
    let sourced = concord::config::load_sourced(Some(file), &sets).unwrap();
    let e = concord::registry()
        .compose(&sourced.config)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("strategy.pipedreem") && e.contains("no strategy has that name"),
        "{e}"
    );
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

/// The default config file with `sets`, as the resolved TOML's `section` table.
fn section_of(file: &Path, sets: &[&str], section: &str) -> toml::Table {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let cfg = concord::config::load(Some(file), &sets)
        .unwrap_or_else(|e| panic!("{}, {sets:?}: {e}", file.display()));
    let resolved: toml::Table = concord::config::to_toml(&cfg).parse().unwrap();
    match &resolved[section] {
        toml::Value::Table(t) => t.clone(),
        other => panic!("{section} = {other}"),
    }
}

/// A temporary config file holding `text`.
fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn table(text: &str) -> toml::Table {
    text.parse().unwrap()
}

const DEFAULT: &str = "configs/default.toml";

#[test]
fn an_inline_table_switches_the_model_kind_over_the_default_file() {
    let model = section_of(
        DEFAULT.as_ref(),
        &["model={kind=\"profile\",name=\"vgg16\"}"],
        "model",
    );
    assert_eq!(model, table("kind = \"profile\"\nname = \"vgg16\""));
}

#[test]
fn dotted_keys_switch_the_model_kind_in_any_order() {
    let vgg16 = table("kind = \"profile\"\nname = \"vgg16\"");
    for sets in [
        ["model.kind=\"profile\"", "model.name=\"vgg16\""],
        ["model.name=\"vgg16\"", "model.kind=\"profile\""],
        // As a shell passes `--set model.kind="profile"`: the quotes are gone.
        ["model.kind=profile", "model.name=vgg16"],
    ] {
        assert_eq!(
            section_of(DEFAULT.as_ref(), &sets, "model"),
            vgg16,
            "{sets:?}"
        );
    }
}

#[test]
fn a_file_that_switches_the_kind_starts_from_that_kinds_defaults() {
    let (_dir, file) = config_file("[model]\nkind = \"cnn\"\nchannels = [4, 8]\n");
    let model = section_of(&file, &[], "model");
    assert_eq!(model, table("kind = \"cnn\"\nchannels = [4, 8]"));
    // A switch over the file's switch drops the file's keys in turn.
    let model = section_of(&file, &["model.kind=\"vgg-like\""], "model");
    assert_eq!(
        model["channels"],
        toml::Value::Array(vec![8.into(), 16.into()])
    );
    assert_eq!(model["kind"].as_str(), Some("vgg-like"));
}

#[test]
fn setting_the_same_kind_again_keeps_the_keys_below() {
    let (_dir, file) = config_file("[model]\nkind = \"mlp\"\nhidden = [128]\n");
    for set in ["model.kind=\"mlp\"", "model={kind=\"mlp\"}"] {
        let model = section_of(&file, &[set], "model");
        assert_eq!(model, table("kind = \"mlp\"\nhidden = [128]"), "{set}");
    }
}

#[test]
fn the_optimizer_switches_from_sgd_to_adam() {
    let opt = section_of(
        DEFAULT.as_ref(),
        &["optimizer.kind=\"adam\"", "optimizer.lr=0.001"],
        "optimizer",
    );
    assert_eq!(opt["kind"].as_str(), Some("adam"));
    assert_eq!(opt["lr"].as_float(), Some(0.001));
    assert_eq!(opt["beta1"].as_float(), Some(0.9), "adam's default");
    assert!(
        opt.get("momentum").is_none(),
        "sgd's momentum dropped: {opt:?}"
    );
    // Back to sgd over a file's adam: sgd's built-in defaults, none of adam's keys.
    let (_dir, file) = config_file("[optimizer]\nkind = \"adam\"\nlr = 0.01\nbeta2 = 0.99\n");
    let opt = section_of(&file, &["optimizer.kind=\"sgd\""], "optimizer");
    assert_eq!(
        opt,
        table("kind = \"sgd\"\nlr = 0.1\nmomentum = 0.9\nweight_decay = 0.0")
    );
}

#[test]
fn the_data_switch_from_teacher_to_blobs_drops_the_teachers_keys() {
    let (_dir, file) = config_file("[data]\nkind = \"teacher\"\ndim = 16\nmargin = 0.1\n");
    let data = section_of(&file, &["data.kind=\"blobs\"", "data.classes=4"], "data");
    assert_eq!(data["kind"].as_str(), Some("blobs"));
    assert_eq!(data["classes"].as_integer(), Some(4));
    assert!(
        data.get("margin").is_none() && data.get("hidden").is_none(),
        "{data:?}"
    );
    assert_ne!(
        data["dim"].as_integer(),
        Some(16),
        "the file's teacher dim is dropped"
    );
}

#[test]
fn an_unknown_key_for_the_new_kind_is_still_named_with_its_layer() {
    let sets: Vec<String> = [
        "model.kind=\"profile\"",
        "model.name=\"vgg16\"",
        "model.hidden=[3]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let e = concord::config::load(Some(DEFAULT.as_ref()), &sets)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hidden") && e.contains("--set"), "{e}");
    let (_dir, file) = config_file("[model]\nkind = \"profile\"\nname = \"vgg16\"\nhiden = [3]\n");
    let e = concord::config::load(Some(&file), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("hiden") && e.contains("c.toml"), "{e}");
}

/// A value of the wrong type inside a kinded section names its field, not only the section
/// (serde reads such a table whole and loses the field's name); two bad fields leave the
/// section named.
#[test]
fn a_wrong_type_inside_a_kinded_section_names_its_field() {
    let load = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        concord::config::load(Some(DEFAULT.as_ref()), &sets)
            .unwrap_err()
            .to_string()
    };
    for (set, key) in [
        ("model={kind=\"vgg-like\",dense=[16]}", "`model.dense`"),
        ("model.hidden=[\"a\"]", "`model.hidden`"),
        ("data={kind=\"blobs\",dim=\"x\"}", "`data.dim`"),
        ("optimizer={kind=\"adam\",lr=\"fast\"}", "`optimizer.lr`"),
    ] {
        let e = load(&[set]);
        assert!(e.contains(key) && e.contains("--set"), "{set}: {e}");
    }
    let e = load(&["model={kind=\"cnn\",image=[1,2],channels=\"a\"}"]);
    assert!(e.contains("key `model`:"), "{e}");
}

/// Strategies that cut a model into a chain of stages refuse a graph network or matrix
/// factorization before any work, naming the configured kind (not the engine's name for it).
#[test]
fn stage_cutting_strategies_name_the_model_kind_they_refuse() {
    for strategy in [
        "pipedream",
        "gpipe",
        "pipedream-mp",
        "fela",
        "fela-hp",
        "fela-mp",
    ] {
        for (model, data) in [
            (
                "kind = \"tiny-resnet\"\nimage = [3, 8, 8]",
                "kind = \"blobs\"\ndim = 192\nclasses = 3",
            ),
            ("kind = \"mf\"", "kind = \"ratings\""),
        ] {
            let mut cfg = common::small(2, 4, 2);
            cfg.strategies = vec![strategy.into()];
            cfg.model = toml::from_str(model).expect("model");
            cfg.data = toml::from_str(data).expect("data");
            let kind = cfg.model.kind();
            let err = concord::registry()
                .compose(&cfg)
                .and_then(|asm| concord::engine::run(&cfg, &asm, Default::default()))
                .expect_err("refused");
            let msg = err.to_string();
            assert!(
                msg.contains("model.kind") && msg.contains(&format!("\"{kind}\"")),
                "{strategy} on {kind}: {msg}"
            );
        }
    }
}
