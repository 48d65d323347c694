//! Click-through data: determinism, the calibrated click rate, the Zipf head, the CSV loader's
//! errors and the config's range checks.

use super::*;
use crate::data::DataConfig;
use std::io::Write;

fn ctr_cfg(toml_text: &str) -> DataConfig {
    toml::from_str(&format!("kind = \"ctr\"\n{toml_text}")).unwrap()
}

/// Same seed, same bytes; another seed, other data; the layout and schema as documented.
#[test]
fn ctr_is_deterministic_by_seed() {
    let c = ctr_cfg("fields = 3\nrows = [50, 7, 300]\ndense = 2\ntrain = 500\ntest = 100");
    let a = c.load(5).unwrap();
    assert_eq!(a, c.load(5).unwrap());
    assert_ne!(a, c.load(6).unwrap());
    assert_eq!((a.train.len(), a.test.len()), (500, 100));
    assert_eq!(a.train.sample_shape, vec![5]);
    assert_eq!(a.train.classes, 2);
    let schema = a.train.ctr.clone().unwrap();
    assert_eq!(schema.rows, vec![50, 7, 300]);
    let (dense, ids) = split_ctr(&schema, &a.train.features);
    assert_eq!((dense.len(), ids.len()), (1000, 1500));
    for s in a.train.features.chunks_exact(5) {
        for (k, &rows) in schema.rows.iter().enumerate() {
            let id = s[2 + k];
            assert!(id >= 0.0 && id.fract() == 0.0 && (id as usize) < rows);
        }
    }
}

/// The bias calibration hits the target click rate on 20k samples, for rare and common clicks.
#[test]
fn positive_rate_is_calibrated() {
    for rate in [0.1, 0.25] {
        let c = ctr_cfg(&format!("positive_rate = {rate}\ntrain = 20000\ntest = 10"));
        let d = c.load(1).unwrap().train;
        let observed = d.labels.iter().filter(|&&l| l == 1).count() as f64 / d.len() as f64;
        assert!(
            (observed - rate).abs() < 0.02,
            "target {rate}, observed {observed}"
        );
    }
}

/// The hottest id of a field takes about 1/H(rows, s) of the draws, and it is not simply id 0.
#[test]
fn zipf_head_share_matches_the_law() {
    let (rows, s) = (1000usize, 1.1f64);
    let mut z = ZipfIds::new(&[rows, rows], s, 3).unwrap();
    let h: f64 = (1..=rows).map(|r| (r as f64).powf(-s)).sum();
    let n = 100_000;
    let mut counts = vec![0usize; rows];
    for _ in 0..n {
        counts[z.draw(1) as usize] += 1;
    }
    let hottest = z.hottest(1, 1)[0] as usize;
    let top = counts.iter().enumerate().max_by_key(|(_, &c)| c).unwrap().0;
    assert_eq!(top, hottest);
    let share = counts[hottest] as f64 / n as f64;
    assert!(
        (share - 1.0 / h).abs() < 0.01,
        "share {share}, law {}",
        1.0 / h
    );
    // Permuted: the two fields have different hot ids, and the head is not 0..m.
    assert_ne!(z.hottest(0, 10), z.hottest(1, 10));
    assert_ne!(z.hottest(1, 3), &[0, 1, 2]);
    // fill_batch is row-major [samples, K] over the same stream.
    let mut out = vec![7];
    z.fill_batch(4, &mut out);
    assert_eq!(out.len(), 8);
    assert!(ZipfIds::new(&[10], 0.0, 0)
        .unwrap_err()
        .to_string()
        .contains("`zipf`"));
    assert!(ZipfIds::new(&[0], 1.0, 0)
        .unwrap_err()
        .to_string()
        .contains("`rows`"));
}

/// Out-of-range values are rejected, naming the key.
/// A sampler moved to where another stood continues that one's draws exactly.
#[test]
fn a_zipf_sampler_continues_from_its_draw_position() {
    let mut a = ZipfIds::new(&[50, 7, 300], 1.1, 3).unwrap();
    let mut skipped = Vec::new();
    a.fill_batch(13, &mut skipped);
    let position = a.draw_position();
    let (mut next_a, mut next_b) = (Vec::new(), Vec::new());
    a.fill_batch(20, &mut next_a);
    let mut b = ZipfIds::new(&[50, 7, 300], 1.1, 3).unwrap();
    b.set_draw_position(position);
    b.fill_batch(20, &mut next_b);
    assert_eq!(next_a, next_b);
    assert_ne!(next_a[..skipped.len()], skipped[..]);
}

#[test]
fn ctr_config_errors_name_their_key() {
    for (text, key) in [
        ("fields = 0", "fields"),
        ("rows = 0", "rows"),
        ("rows = 16777217", "rows"),
        ("fields = 2\nrows = [5, 6, 7]", "rows"),
        ("dense = 0", "dense"),
        ("zipf = 0.0", "zipf"),
        ("zipf = -1.0", "zipf"),
        ("positive_rate = 0.0", "positive_rate"),
        ("positive_rate = 1.0", "positive_rate"),
        ("train = 0", "train"),
        ("test = 0", "test"),
    ] {
        let e = ctr_cfg(text).validate().unwrap_err().to_string();
        assert!(e.contains(&format!("`{key}`")), "{text}: {e}");
    }
    assert!(ctr_cfg("").validate().is_ok());
    let file = |text: &str| -> DataConfig {
        toml::from_str(&format!("kind = \"ctr-file\"\npath = \"x.csv\"\n{text}")).unwrap()
    };
    for (text, key) in [
        ("rows = []", "rows"),
        ("rows = [0]", "rows"),
        ("rows = [4]\ndense = 0", "dense"),
        ("rows = [4]\ntest_fraction = 1.0", "test_fraction"),
    ] {
        let e = file(text).validate().unwrap_err().to_string();
        assert!(e.contains(&format!("`{key}`")), "{text}: {e}");
    }
}

fn write_csv(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn load_csv(text: &str) -> Result<Split, String> {
    let f = write_csv(text);
    let path = f.path().display().to_string();
    let cfg = DataConfig::CtrFile {
        path: f.path().to_path_buf(),
        rows: vec![3, 10],
        dense: 2,
        test_fraction: 0.25,
    };
    cfg.load(0).map_err(|e| {
        let e = e.to_string();
        assert!(e.starts_with(&path), "no file name in {e}");
        e
    })
}

/// A good file (with a header) loads; every bad line is named by file, line and column.
#[test]
fn ctr_file_loads_and_names_bad_lines() {
    let good = "label,d0,d1,c0,c1\n1,0.5,-1,2,9\n0,1,2,0,0\n0,3,4,1,5\n1,0,0,2,3\n";
    let s = load_csv(good).unwrap();
    assert_eq!((s.train.len(), s.test.len()), (3, 1));
    assert_eq!(s.train.ctr.as_ref().unwrap().rows, vec![3, 10]);
    let mut all: Vec<Vec<f32>> = s
        .train
        .features
        .chunks(4)
        .chain(s.test.features.chunks(4))
        .map(<[f32]>::to_vec)
        .collect();
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(all[0], vec![0.0, 0.0, 2.0, 3.0]);

    let no_header = "1,0.5,-1,2,9\n0,1,2,0,0\n";
    assert!(load_csv(no_header).is_ok());

    let cases = [
        ("1,0.5,-1,2,9\n0,1,2,3,0\n", ":2:", "id_0", "out of range"),
        ("1,0.5,-1,2,9\n0,1,2,0,-4\n", ":2:", "id_1", "negative"),
        ("1,0.5,-1,2,9\n0,1,2,0,1.5\n", ":2:", "id_1", "integer"),
        (
            "h,a,b,c,d\n1,0.5,-1,2,9\n2,1,2,0,0\n",
            ":3:",
            "label",
            "0 or 1",
        ),
        (
            "1,0.5,-1,2,9\n0,1,2,0\n",
            ":2:",
            "columns",
            "4 columns, expected 5",
        ),
        ("1,0.5,x,2,9\n0,1,2,0,0\n", ":1:", "dense_1", "finite"),
        ("label,a,b,c,d\n", ":0:", "file", "0 data lines"),
    ];
    for (text, line, field, what) in cases {
        let e = load_csv(text).unwrap_err();
        assert!(
            e.contains(line) && e.contains(field) && e.contains(what),
            "{text:?}: {e}"
        );
    }
}
