//! Verdicts on claims (against a baseline or a constant) and on trends across a sweep.

use super::common::row;
use crate::bench::report::claims::check_claim;
use crate::bench::report::row::Row;
use crate::bench::report::trends::check_trend;
use crate::bench::suite::expand::Scenario;
use crate::bench::suite::schema::{Claim, Suite};

#[test]
fn a_claim_is_checked_on_direction_and_size() {
    let rows = vec![
        row("bsp", 1, 1.0),
        row("bsp", 2, 1.0),
        row("ssp", 1, 0.5),
        row("ssp", 2, 0.7),
    ];
    let claim = |by_at_least: f64, by_at_most: Option<f64>, expect: &str| {
        let text = format!(
            "text = \"c\"\nmetric = \"time_per_iteration_s\"\nstrategy = \"ssp\"\nbaseline = \"bsp\"\nexpect = \"{expect}\"\nby_at_least = {by_at_least}\n{}",
            by_at_most.map_or(String::new(), |m| format!("by_at_most = {m}"))
        );
        toml::from_str::<Claim>(&text).expect("claim")
    };
    let check = check_claim(&rows, "s", &claim(0.35, None, "less")).expect("data");
    assert!(
        (check.relative - 0.4).abs() < 1e-12 && check.holds,
        "{check:?}"
    );
    assert!(
        !check_claim(&rows, "s", &claim(0.5, None, "less"))
            .expect("data")
            .holds
    );
    assert!(
        !check_claim(&rows, "s", &claim(0.1, Some(0.3), "less"))
            .expect("data")
            .holds
    );
    assert!(
        check_claim(&rows, "s", &claim(0.35, Some(0.53), "less"))
            .expect("data")
            .holds
    );
    assert!(
        !check_claim(&rows, "s", &claim(0.0, None, "greater"))
            .expect("data")
            .holds
    );
    assert!(check_claim(&rows, "other", &claim(0.0, None, "less")).is_none());
}

#[test]
fn a_claim_against_a_constant_holds_or_fails() {
    let mut rows = vec![row("lb", 1, 1.0), row("lb", 2, 1.0)];
    rows[0].wait_share = 0.03;
    rows[1].wait_share = 0.05; // mean 0.04
    rows[0].figures = "lb.rmse=0.2".into();
    rows[1].figures = "lb.rmse=0.1;other=7".into(); // mean 0.15
    let claim = |body: &str| {
        toml::from_str::<Claim>(&format!("text = \"c\"\nstrategy = \"lb\"\n{body}")).expect("claim")
    };
    // (0.05 − 0.04)/0.05 = 20 % less.
    let k = check_claim(
        &rows,
        "s",
        &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05"),
    )
    .expect("data");
    assert!((k.relative - 0.2).abs() < 1e-12 && k.holds, "{k:?}");
    assert_eq!(k.reference, 0.05);
    assert!(
        check_claim(
            &rows,
            "s",
            &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05\nby_at_least = 0.1\nby_at_most = 0.3"),
        )
        .expect("data")
        .holds
    );
    // Too little, and the wrong way.
    assert!(
        !check_claim(
            &rows,
            "s",
            &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05\nby_at_least = 0.25"),
        )
        .expect("data")
        .holds
    );
    let k = check_claim(
        &rows,
        "s",
        &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.03"),
    )
    .expect("data");
    assert!(!k.holds && k.relative < 0.0, "{k:?}");
    // `greater`: (value − than)/|than|; on a strategy figure.
    let k = check_claim(
        &rows,
        "s",
        &claim("metric = \"figure:lb.rmse\"\nexpect = \"greater\"\nthan = 0.1\nby_at_least = 0.5"),
    )
    .expect("data");
    assert!((k.relative - 0.5).abs() < 1e-12 && k.holds, "{k:?}");
    assert!(
        !check_claim(
            &rows,
            "s",
            &claim("metric = \"figure:lb.rmse\"\nexpect = \"greater\"\nthan = 0.2"),
        )
        .expect("data")
        .holds
    );
    // A figure no run reports: no data.
    assert!(check_claim(
        &rows,
        "s",
        &claim("metric = \"figure:nope\"\nexpect = \"less\"\nthan = 1")
    )
    .is_none());
}

/// Trend claims: a least-squares line's slope and R², and flatness up to a swept value.
#[test]
fn trend_claims_fit_lines_and_check_flatness() {
    let text = r#"
        seeds = [1]
        [[strategies]]
        label = "bsp"
        strategies = ["bsp"]
        [[scenarios]]
        label = "sweep"
        sweep = { key = "batch", values = [1, 2, 3, 4] }
        trends = [
          { text = "linear", metric = "time_per_iteration_s", strategy = "bsp", shape = { kind = "linear", min_r2 = 0.95 } },
          { text = "flat", metric = "time_per_iteration_s", strategy = "bsp", shape = { kind = "flat", up_to = 2.0, within = 0.1 } },
        ]
    "#;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.toml");
    std::fs::write(&path, text).expect("write");
    let suite = Suite::load(&path).expect("suite");
    let scenarios = suite.scenarios_expanded();
    let group: Vec<&Scenario> = scenarios.iter().collect();
    let rows_with = |ys: [f64; 4]| -> Vec<Row> {
        scenarios
            .iter()
            .zip(ys)
            .map(|(sc, y)| Row {
                scenario: sc.label.clone(),
                ..row("bsp", 1, y)
            })
            .collect()
    };
    let linear = &suite.scenarios[0].trends[0];
    let flat = &suite.scenarios[0].trends[1];
    // y = 1 + x exactly: linear holds; 2 → 3 is a 50 % change, not flat.
    let rows = rows_with([2.0, 3.0, 4.0, 5.0]);
    assert!(check_trend(&rows, &group, linear).expect("data").holds);
    assert!(!check_trend(&rows, &group, flat).expect("data").holds);
    // Flat up to 2, then a jump: flat holds, the line does not fit.
    let rows = rows_with([2.0, 2.1, 2.0, 9.0]);
    assert!(check_trend(&rows, &group, flat).expect("data").holds);
    assert!(!check_trend(&rows, &group, linear).expect("data").holds);
    // Falling is not rising.
    let rows = rows_with([5.0, 4.0, 3.0, 2.0]);
    assert!(!check_trend(&rows, &group, linear).expect("data").holds);
}
