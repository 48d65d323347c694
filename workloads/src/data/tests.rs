//! Tests of the shared types and the TOML config.

use super::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct Root {
    data: DataConfig,
}

fn parse(toml_text: &str) -> Result<DataConfig, toml::de::Error> {
    toml::from_str::<Root>(toml_text).map(|r| r.data)
}

#[test]
fn toml_parses_each_variant() {
    assert_eq!(
        parse("[data]\nkind = \"teacher\"\n").unwrap(),
        DataConfig::default()
    );
    assert_eq!(
        parse("[data]\nkind = \"teacher\"\ndim = 8\nclasses = 3\nhidden = 16\ntrain = 100\ntest = 10\nmargin = 0.25\n")
            .unwrap(),
        DataConfig::Teacher {
            dim: 8,
            classes: 3,
            hidden: 16,
            train: 100,
            test: 10,
            margin: 0.25
        }
    );
    assert_eq!(
        parse("[data]\nkind = \"blobs\"\nclasses = 4\nspread = 0.5\nseparation = 2.0\n").unwrap(),
        DataConfig::Blobs {
            dim: DEFAULT_DIM,
            classes: 4,
            train: DEFAULT_TRAIN,
            test: DEFAULT_TEST,
            spread: 0.5,
            separation: 2.0
        }
    );
    assert_eq!(
        parse(
            "[data]\nkind = \"idx\"\ntrain_images = \"a\"\ntrain_labels = \"b\"\ntest_images = \"c\"\ntest_labels = \"d\"\n"
        )
        .unwrap(),
        DataConfig::Idx {
            train_images: "a".into(),
            train_labels: "b".into(),
            test_images: "c".into(),
            test_labels: "d".into(),
            classes: None,
        }
    );
}

#[test]
fn toml_round_trips() {
    for cfg in [
        DataConfig::default(),
        DataConfig::Blobs {
            dim: 2,
            classes: 3,
            train: 4,
            test: 5,
            spread: 0.5,
            separation: 1.5,
        },
        DataConfig::Idx {
            train_images: "x/ti".into(),
            train_labels: "x/tl".into(),
            test_images: "x/ei".into(),
            test_labels: "x/el".into(),
            classes: None,
        },
    ] {
        #[derive(Serialize)]
        struct Out<'a> {
            data: &'a DataConfig,
        }
        let text = toml::to_string(&Out { data: &cfg }).unwrap();
        assert_eq!(parse(&text).unwrap(), cfg, "{text}");
    }
}

#[test]
fn toml_rejects_unknown_fields_and_kinds() {
    for (text, needle) in [
        ("[data]\nkind = \"teacher\"\nmargn = 0.1\n", "margn"),
        ("[data]\nkind = \"blobs\"\nhidden = 3\n", "hidden"),
        (
            "[data]\nkind = \"idx\"\ntrain_images = \"a\"\ntrain_labels = \"b\"\ntest_images = \"c\"\ntest_labels = \"d\"\nextra = 1\n",
            "extra",
        ),
        ("[data]\nkind = \"mnist\"\n", "mnist"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
    // IDX paths have no defaults.
    let err = parse("[data]\nkind = \"idx\"\ntrain_images = \"a\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("train_labels"), "{err}");
    // The tag is required.
    assert!(parse("[data]\ndim = 3\n").is_err());
}

fn field_of(cfg: DataConfig) -> String {
    match cfg.validate() {
        Err(e @ DataError::InvalidConfig { .. }) => {
            let DataError::InvalidConfig { field, .. } = &e else {
                unreachable!()
            };
            let msg = e.to_string();
            assert!(msg.contains(&format!("`{field}`")), "{msg}");
            // load() validates first.
            assert_eq!(cfg.load(0).unwrap_err().to_string(), msg);
            field.to_string()
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn validate_names_the_field() {
    let t = |f: &dyn Fn(&mut DataConfig)| {
        let mut c = DataConfig::default();
        f(&mut c);
        field_of(c)
    };
    macro_rules! teacher_field {
        ($name:ident = $v:expr) => {
            t(&|c: &mut DataConfig| {
                if let DataConfig::Teacher { $name, .. } = c {
                    *$name = $v;
                }
            })
        };
    }
    assert_eq!(teacher_field!(dim = 0), "dim");
    assert_eq!(teacher_field!(classes = 1), "classes");
    assert_eq!(teacher_field!(hidden = 0), "hidden");
    assert_eq!(teacher_field!(train = 0), "train");
    assert_eq!(teacher_field!(test = 0), "test");
    assert_eq!(teacher_field!(margin = -0.5), "margin");
    assert_eq!(teacher_field!(margin = f32::NAN), "margin");
    assert_eq!(teacher_field!(train = usize::MAX / 2), "train");

    let blobs = |f: &dyn Fn(&mut DataConfig)| {
        let mut c = DataConfig::Blobs {
            dim: 4,
            classes: 3,
            train: 10,
            test: 10,
            spread: 1.0,
            separation: 1.0,
        };
        f(&mut c);
        field_of(c)
    };
    macro_rules! blobs_field {
        ($name:ident = $v:expr) => {
            blobs(&|c: &mut DataConfig| {
                if let DataConfig::Blobs { $name, .. } = c {
                    *$name = $v;
                }
            })
        };
    }
    assert_eq!(blobs_field!(dim = 0), "dim");
    assert_eq!(blobs_field!(classes = 0), "classes");
    assert_eq!(blobs_field!(test = 0), "test");
    assert_eq!(blobs_field!(spread = f32::INFINITY), "spread");
    assert_eq!(blobs_field!(separation = 0.0), "separation");

    let idx = DataConfig::Idx {
        train_images: "a".into(),
        train_labels: "b".into(),
        test_images: "".into(),
        test_labels: "d".into(),
        classes: None,
    };
    assert_eq!(field_of(idx), "test_images");

    assert!(DataConfig::default().validate().is_ok());
}

#[test]
fn dataset_accessors_and_gather() {
    let d = Dataset {
        features: (0..12).map(|v| v as f32).collect(),
        sample_shape: vec![1, 2, 2],
        labels: vec![0, 2, 1],
        classes: 3,
        ctr: None,
    };
    assert_eq!(d.len(), 3);
    assert!(!d.is_empty());
    assert_eq!(d.sample_len(), 4);
    assert_eq!(d.features_of(1), &[4.0, 5.0, 6.0, 7.0]);
    let (f, l) = d.gather(&[2, 0, 2]);
    assert_eq!(
        f,
        vec![8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0]
    );
    assert_eq!(l, vec![1, 0, 1]);
    assert_eq!(d.gather(&[]), (vec![], vec![]));
    assert_eq!(d.class_counts(), vec![1, 1, 1]);
}

#[test]
#[should_panic(expected = "out of range")]
fn features_of_out_of_range_panics() {
    let d = Dataset {
        features: vec![1.0],
        sample_shape: vec![1],
        labels: vec![0],
        classes: 2,
        ctr: None,
    };
    d.features_of(1);
}

#[test]
fn sample_stream_gathers_a_batch_end_to_end() {
    let split = DataConfig::Blobs {
        dim: 3,
        classes: 2,
        train: 50,
        test: 5,
        spread: 1.0,
        separation: 1.0,
    }
    .load(1)
    .unwrap();
    let stream = SampleStream::new(split.train.len(), 1);
    let (f, l) = split.train.gather(&stream.indices(3, 16, 4, 8));
    assert_eq!(f.len(), 8 * 3);
    assert_eq!(l.len(), 8);
}
