//! Verdicts on claims (against a baseline or a constant) and on trends across a sweep: seed by
//! seed, beyond the metric's resolution, every seed needed.

use super::common::row;
use crate::bench::report::claims::{check_claim, ClaimCheck, Missing};
use crate::bench::report::row::Row;
use crate::bench::report::trends::check_trend;
use crate::bench::suite::expand::Scenario;
use crate::bench::suite::schema::{Claim, Suite};

/// A claim about strategy `ssp` from its TOML body (metric, reference, direction, size).
fn claim(body: &str) -> Claim {
    toml::from_str::<Claim>(&format!("text = \"c\"\nstrategy = \"ssp\"\n{body}")).expect("claim")
}

/// "ssp's time per iteration is less than bsp's", with a size.
fn less_than_bsp(size: &str) -> Claim {
    claim(&format!(
        "metric = \"time_per_iteration_s\"\nbaseline = \"bsp\"\nexpect = \"less\"\n{size}"
    ))
}

/// The claim checked on seeds 1 and 2 in scenario `s`.
fn check(rows: &[Row], c: &Claim) -> ClaimCheck {
    check_claim(rows, "s", c, &[1, 2])
}

/// bsp at 1.0 s per iteration in both seeds; ssp at 0.5 (seed 1) and 0.7 (seed 2): 50 % and
/// 30 % less, 40 % on the means.
fn two_seeds() -> Vec<Row> {
    vec![
        row("bsp", 1, 1.0),
        row("bsp", 2, 1.0),
        row("ssp", 1, 0.5),
        row("ssp", 2, 0.7),
    ]
}

#[test]
fn a_claim_is_checked_seed_by_seed_on_direction_and_size() {
    let rows = two_seeds();
    let k = check(&rows, &less_than_bsp("by_at_least = 0.25"));
    assert!(k.holds && k.held() == 2, "{k:?}");
    let mean = k.mean.as_ref().expect("means");
    assert!((mean.relative - 0.4).abs() < 1e-12, "{k:?}");
    let per_seed: Vec<f64> = k
        .seeds
        .iter()
        .map(|s| s.measured.as_ref().expect("measured").relative)
        .collect();
    assert!((per_seed[0] - 0.5).abs() < 1e-12 && (per_seed[1] - 0.3).abs() < 1e-12);
    // A range: seed 1's 50 % is above 30 %.
    assert!(!check(&rows, &less_than_bsp("by_at_least = 0.1\nby_at_most = 0.3")).holds);
    assert!(
        check(
            &rows,
            &less_than_bsp("by_at_least = 0.25\nby_at_most = 0.53")
        )
        .holds
    );
    // The wrong way.
    let greater =
        claim("metric = \"time_per_iteration_s\"\nbaseline = \"bsp\"\nexpect = \"greater\"");
    assert!(!check(&rows, &greater).holds);
}

#[test]
fn one_seed_below_the_threshold_fails_the_claim_even_when_the_mean_passes() {
    // 35 %: the means (40 %) would pass, seed 2 (30 %) does not.
    let k = check(&two_seeds(), &less_than_bsp("by_at_least = 0.35"));
    assert!(k.mean.as_ref().expect("means").holds, "{k:?}");
    assert!(!k.holds && k.held() == 1, "{k:?}");
    assert!(!k.seeds[1].holds() && k.seeds[0].holds());
}

#[test]
fn a_tie_fails_a_direction_claim() {
    let mut rows = two_seeds();
    rows[3].time_per_iteration_s = 1.0; // seed 2: ssp = bsp
    let k = check(&rows, &less_than_bsp("by_at_least = 0.0"));
    assert!(!k.holds && k.held() == 1, "{k:?}");
    // … even a tie that float rounding breaks by one part in 10¹², or a deterministic near-tie
    // inside the 0.1 % band; a difference past the band counts.
    rows[3].time_per_iteration_s = 1.0 - 1e-12;
    assert!(!check(&rows, &less_than_bsp("")).holds);
    rows[3].time_per_iteration_s = 1.0 - 0.5e-3;
    let near = check(&rows, &less_than_bsp(""));
    assert!(!near.holds && !near.seeds[1].holds(), "{near:?}");
    rows[3].time_per_iteration_s = 1.0 - 2e-3;
    assert!(check(&rows, &less_than_bsp("")).holds);
    // A size threshold is met exactly at its value: 100 against 103 iterations is "at most 3 %
    // more".
    let mut iters = two_seeds();
    for (r, i) in iters.iter_mut().zip([100, 100, 103, 101]) {
        r.iterations_to_target = Some(i);
        r.iterations_to_target_resolution = Some(0);
    }
    let at_most_3 = claim(
        "metric = \"iterations_to_target\"\nbaseline = \"bsp\"\nexpect = \"less\"\nby_at_least = -0.03",
    );
    assert!(check(&iters, &at_most_3).holds);
    iters[2].iterations_to_target = Some(104);
    assert!(!check(&iters, &at_most_3).holds);
    // A tolerance ("about equal": at most 5 % the other way) accepts the tie.
    assert!(check(&rows, &less_than_bsp("by_at_least = -0.05")).holds);
}

#[test]
fn a_difference_within_the_targets_check_interval_is_a_tie() {
    // Time to target read at checks 0.1 s apart: 4.30 s against 4.35 s is not a difference;
    // 4.20 against 4.35 is.
    let mut rows = two_seeds();
    for (r, t) in rows.iter_mut().zip([4.35, 4.35, 4.30, 4.20]) {
        r.time_to_target_s = Some(t);
        r.time_to_target_resolution_s = Some(0.1);
    }
    let c = claim("metric = \"time_to_target_s\"\nbaseline = \"bsp\"\nexpect = \"less\"");
    let k = check(&rows, &c);
    assert!(
        !k.seeds[0].holds() && k.seeds[1].holds() && !k.holds,
        "{k:?}"
    );
    rows[2].time_to_target_s = Some(4.2);
    assert!(check(&rows, &c).holds);
}

#[test]
fn a_seed_without_a_value_fails_the_claim() {
    // ssp never reaches the target in seed 2: the claim fails, however good seed 1 is.
    let mut rows = two_seeds();
    for (r, t) in rows
        .iter_mut()
        .zip([Some(10.0), Some(10.0), Some(1.0), None])
    {
        r.time_to_target_s = t;
    }
    let c = claim("metric = \"time_to_target_s\"\nbaseline = \"bsp\"\nexpect = \"less\"");
    let k = check(&rows, &c);
    assert!(!k.holds, "{k:?}");
    assert_eq!(k.seeds[1].measured, Err(Missing::NoValue("ssp".into())));
    // A seed that was not run at all fails too.
    let mut rows = two_seeds();
    rows.pop();
    let k = check(&rows, &less_than_bsp(""));
    assert_eq!(k.seeds[1].measured, Err(Missing::NoRun("ssp".into())));
    assert!(!k.holds && k.held() == 1);
    // No row in the scenario: nothing measured, not a pass.
    let k = check_claim(&two_seeds(), "other", &less_than_bsp(""), &[1, 2]);
    assert!(!k.holds && k.mean.is_none() && k.measured() == 0);
}

#[test]
fn an_undefined_figure_fails_the_claim() {
    // A strategy figure present in one seed only (e.g. a suspension that needs a reassignment
    // that happened in seed 1 alone).
    let mut rows = two_seeds();
    rows[2].figures = "ps.suspension=0.01".into();
    rows[3].figures = "other=7".into();
    let c = claim("metric = \"figure:ps.suspension\"\nexpect = \"less\"\nthan = 0.1");
    let k = check(&rows, &c);
    assert!(k.seeds[0].holds(), "{k:?}");
    assert_eq!(k.seeds[1].measured, Err(Missing::NoValue("ssp".into())));
    assert!(!k.holds);
}

#[test]
fn a_claim_against_a_constant_holds_or_fails() {
    let mut rows = two_seeds();
    rows[2].wait_share = 0.03;
    rows[3].wait_share = 0.04; // 40 % and 20 % below 0.05
    rows[2].figures = "lb.rmse=0.2".into();
    rows[3].figures = "lb.rmse=0.16;other=7".into(); // 100 % and 60 % above 0.1
    let k = check(
        &rows,
        &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05"),
    );
    assert!(k.holds, "{k:?}");
    assert_eq!(k.mean.as_ref().map(|m| m.reference), Some(0.05));
    assert!(
        check(
            &rows,
            &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05\nby_at_least = 0.1\nby_at_most = 0.45"),
        )
        .holds
    );
    // Too little in seed 2, and the wrong way.
    assert!(
        !check(
            &rows,
            &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.05\nby_at_least = 0.25"),
        )
        .holds
    );
    let k = check(
        &rows,
        &claim("metric = \"wait_share\"\nexpect = \"less\"\nthan = 0.03"),
    );
    assert!(!k.holds && k.held() == 0, "{k:?}");
    // `greater`: (value − than)/|than|; on a strategy figure.
    let k = check(
        &rows,
        &claim("metric = \"figure:lb.rmse\"\nexpect = \"greater\"\nthan = 0.1\nby_at_least = 0.5"),
    );
    assert!(k.holds, "{k:?}");
    assert!(
        !check(
            &rows,
            &claim("metric = \"figure:lb.rmse\"\nexpect = \"greater\"\nthan = 0.16")
        )
        .holds
    );
    // A figure no run reports fails every seed.
    let k = check(
        &rows,
        &claim("metric = \"figure:nope\"\nexpect = \"less\"\nthan = 1"),
    );
    assert!(!k.holds && k.measured() == 0);
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
    let holds = |rows: &[Row], t| check_trend(rows, &group, t, &[1]).holds;
    // y = 1 + x exactly: linear holds; 2 → 3 is a 50 % change, not flat.
    let rows = rows_with([2.0, 3.0, 4.0, 5.0]);
    assert!(holds(&rows, linear));
    assert!(!holds(&rows, flat));
    // Flat up to 2, then a jump: flat holds, the line does not fit.
    let rows = rows_with([2.0, 2.1, 2.0, 9.0]);
    assert!(holds(&rows, flat));
    assert!(!holds(&rows, linear));
    // Falling is not rising.
    let rows = rows_with([5.0, 4.0, 3.0, 2.0]);
    assert!(!holds(&rows, linear));
    // Checked per seed: a second seed that falls fails the trend although the means still
    // rise; a seed with no rows is "not measured" and fails it too.
    let mut rows = rows_with([2.0, 3.0, 4.0, 5.0]);
    rows.extend(
        rows_with([3.0, 2.9, 2.8, 2.7])
            .into_iter()
            .map(|r| Row { seed: 2, ..r }),
    );
    let k = check_trend(&rows, &group, linear, &[1, 2]);
    assert!(
        k.mean.as_ref().is_some_and(|m| m.holds) && !k.holds && k.held() == 1,
        "{k:?}"
    );
    let k = check_trend(&rows_with([2.0, 3.0, 4.0, 5.0]), &group, linear, &[1, 3]);
    assert!(!k.holds && k.seeds[1].1.is_none(), "{k:?}");
}
