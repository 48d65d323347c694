//! The claims, trends and model-properties tables of `REPORT.md`, the tally of what holds, and
//! how a claim and its measurement are written (also under each scenario).

use crate::bench::report::claims::{check_claim, ClaimCheck, Measured};
use crate::bench::report::format::{cell_text, metric_value, pct};
use crate::bench::report::input::ReportInput;
use crate::bench::report::row::Row;
use crate::bench::report::trends::{check_trend, TrendCheck};
use crate::bench::suite::expand::{sweep_groups, Scenario};
use crate::bench::suite::schema::{Claim, Direction, Shape, Trend};
use std::fmt::Write as _;

/// What a claim is compared with, as shown: the baseline's label, or the constant.
fn reference_name(c: &Claim) -> String {
    match (&c.baseline, c.than) {
        (Some(b), _) => b.clone(),
        (None, Some(t)) => metric_value(&c.metric, t),
        (None, None) => "?".into(),
    }
}

/// The claimed direction in words.
fn direction(c: &Claim) -> &'static str {
    match c.expect {
        Direction::Less => "less",
        Direction::Greater => "greater",
    }
}

/// A claim as checked: metric, strategy, direction, reference and size.
pub fn describe_claim(c: &Claim) -> String {
    let dir = direction(c);
    let size = match c.by_at_most {
        Some(m) => format!("by {}–{}", pct(c.by_at_least), pct(m)),
        None if c.by_at_least > 0.0 => format!("by ≥ {}", pct(c.by_at_least)),
        None if c.by_at_least < 0.0 => {
            format!("(or at most {} the other way)", pct(-c.by_at_least))
        }
        None => String::new(),
    };
    format!(
        "`{}`: {} {dir} than {} {size}",
        c.metric,
        c.strategy,
        reference_name(c)
    )
    .trim_end()
    .to_string()
}

/// A measurement in words: `strategy value vs reference: relative direction`.
fn describe_measured(c: &Claim, m: &Measured) -> String {
    let reference = match &c.baseline {
        Some(b) => format!("{b} {}", metric_value(&c.metric, m.reference)),
        None => metric_value(&c.metric, m.reference),
    };
    // A time cut is also shown as the speed-up the papers quote (reference / value).
    let factor = if c.metric.ends_with("_s") && c.expect == Direction::Less && m.value > 0.0 {
        format!(" ({:.2}×)", m.reference / m.value)
    } else {
        String::new()
    };
    format!(
        "{} {} vs {reference}: {} {}{factor}",
        c.strategy,
        metric_value(&c.metric, m.value),
        pct(m.relative),
        direction(c)
    )
}

/// A claim's measurement in words (on the means over seeds), its seeds (`k/n`, then every
/// failing seed and why) and its verdict mark (`✓` only when every seed holds).
pub fn describe_check(c: &Claim, check: &ClaimCheck) -> (String, String, String) {
    let measured = match &check.mean {
        Some(m) => format!("{} (mean)", describe_measured(c, m)),
        None => "no data".into(),
    };
    let failing: Vec<String> = check
        .seeds
        .iter()
        .filter(|s| !s.holds())
        .map(|s| match &s.measured {
            Ok(m) => format!("seed {}: {} {}", s.seed, pct(m.relative), direction(c)),
            Err(missing) => format!("seed {}: {missing}", s.seed),
        })
        .collect();
    let mut seeds = format!("{}/{}", check.held(), check.seeds.len());
    if !failing.is_empty() {
        seeds.push_str(&format!(" (✗ {})", failing.join("; ")));
    }
    let verdict = if check.holds { "✓" } else { "✗" };
    (measured, seeds, verdict.into())
}

/// The claims of the suite with each one's scenario, split into paper claims and model
/// properties.
fn suite_claims<'a>(input: &'a ReportInput<'_>, property: bool) -> Vec<(&'a Scenario, &'a Claim)> {
    input
        .scenarios
        .iter()
        .flat_map(|s| s.spec.all_claims().into_iter().map(move |(_, c)| (s, c)))
        .filter(|(_, c)| c.property == property)
        .collect()
}

/// A table of claims with their verdicts.
fn claims_table(md: &mut String, claims: &[(&Scenario, &Claim)], checks: &[ClaimCheck]) {
    let _ = writeln!(
        md,
        "| scenario | claim | source | claimed | measured | seeds holding | verdict |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for ((s, c), check) in claims.iter().zip(checks) {
        let (measured, seeds, verdict) = describe_check(c, check);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            cell_text(&s.label),
            cell_text(&c.text),
            cell_text(&c.source),
            cell_text(&describe_claim(c)),
            cell_text(&measured),
            cell_text(&seeds),
            verdict
        );
    }
    md.push('\n');
}

/// How many paper claims and trends hold, on every seed and on the means alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Paper claims (not model properties).
    pub claims: usize,
    /// Paper claims that hold in every seed.
    pub held: usize,
    /// Paper claims that would hold on the means over seeds alone (the looser reading).
    pub held_on_mean: usize,
    /// Trend claims (not model properties).
    pub trends: usize,
    /// Trend claims that hold in every seed.
    pub trends_held: usize,
}

/// Counts the suite's paper claims and trends that hold.
pub fn tally(input: &ReportInput<'_>, rows: &[Row]) -> Tally {
    let seeds = &input.suite.seeds;
    let claims = suite_claims(input, false);
    let checks: Vec<ClaimCheck> = claims
        .iter()
        .map(|(s, c)| check_claim(rows, &s.label, c, seeds))
        .collect();
    let trends = suite_trends(input, false);
    let trend_checks: Vec<TrendCheck> = trends
        .iter()
        .map(|(_, members, t)| check_trend(rows, members, t, seeds))
        .collect();
    Tally {
        claims: claims.len(),
        held: checks.iter().filter(|k| k.holds).count(),
        held_on_mean: checks
            .iter()
            .filter(|k| k.mean.as_ref().is_some_and(|m| m.holds))
            .count(),
        trends: trends.len(),
        trends_held: trend_checks.iter().filter(|k| k.holds).count(),
    }
}

/// Every paper claim of the suite with its verdict (nothing without claims).
pub fn claims_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let claims = suite_claims(input, false);
    if claims.is_empty() {
        return;
    }
    let checks: Vec<ClaimCheck> = claims
        .iter()
        .map(|(s, c)| check_claim(rows, &s.label, c, &input.suite.seeds))
        .collect();
    let held = checks.iter().filter(|k| k.holds).count();
    let on_mean = checks
        .iter()
        .filter(|k| k.mean.as_ref().is_some_and(|m| m.holds))
        .count();
    let lacking = checks
        .iter()
        .filter(|k| k.measured() < k.seeds.len())
        .count();
    let _ = writeln!(md, "## Claims\n");
    let _ = writeln!(
        md,
        "**{held} of {} paper claims hold in every seed.** On the means over seeds alone {on_mean} \
         would; {lacking} lack a value in some seed.\n",
        claims.len()
    );
    let _ = writeln!(md, "{}\n", super::super::claims::RULES);
    claims_table(md, &claims, &checks);
}

/// The model properties: statements true by construction of the simulator or a strategy,
/// checked like claims but not counted among reproduced results (nothing without any).
pub fn properties_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let claims = suite_claims(input, true);
    let trends = suite_trends(input, true);
    if claims.is_empty() && trends.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Model properties\n");
    let _ = writeln!(
        md,
        "These hold by construction of the simulator or the strategy (a cost charged as a \
         constant, an equality the code enforces, a slowdown the injector imposes). They are \
         checked as a guard against regressions and are not counted among the reproduced claims \
         above.\n"
    );
    if !claims.is_empty() {
        let checks: Vec<ClaimCheck> = claims
            .iter()
            .map(|(s, c)| check_claim(rows, &s.label, c, &input.suite.seeds))
            .collect();
        claims_table(md, &claims, &checks);
    }
    if !trends.is_empty() {
        trends_table(md, input, rows, &trends);
    }
}

/// The trends of the suite's sweeps with their sweep group and its scenarios: paper trends or
/// model properties.
type SuiteTrend<'a> = (&'a str, Vec<&'a Scenario>, &'a Trend);

fn suite_trends<'a>(input: &'a ReportInput<'_>, property: bool) -> Vec<SuiteTrend<'a>> {
    sweep_groups(input.scenarios)
        .into_iter()
        .flat_map(|(g, members)| {
            let spec = &members[0].spec;
            spec.trends
                .iter()
                .filter(|t| t.property == property)
                .map(move |t| (g, members.clone(), t))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A table of trends with their verdicts.
fn trends_table(md: &mut String, input: &ReportInput<'_>, rows: &[Row], trends: &[SuiteTrend<'_>]) {
    let _ = writeln!(
        md,
        "| sweep | claim | source | claimed | measured | seeds holding | verdict |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (g, members, t) in trends {
        let check = check_trend(rows, members, t, &input.suite.seeds);
        let claimed = match t.shape {
            Shape::Linear { min_r2 } => {
                format!(
                    "`{}` of {} rises linearly (R² ≥ {min_r2})",
                    t.metric, t.strategy
                )
            }
            Shape::Flat { up_to, within } => format!(
                "`{}` of {} within {} up to {up_to}",
                t.metric,
                t.strategy,
                pct(within)
            ),
        };
        let measured = check.mean.as_ref().map_or("not measured".to_string(), |k| {
            format!("{} (means)", k.measured)
        });
        let failing: Vec<String> = check
            .seeds
            .iter()
            .filter_map(|(seed, c)| match c {
                Some(c) if c.holds => None,
                Some(c) => Some(format!("seed {seed}: {}", c.measured)),
                None => Some(format!("seed {seed}: not measured")),
            })
            .collect();
        let mut seeds = format!("{}/{}", check.held(), check.seeds.len());
        if !failing.is_empty() {
            seeds.push_str(&format!(" (✗ {})", failing.join("; ")));
        }
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            cell_text(g),
            cell_text(&t.text),
            cell_text(&t.source),
            cell_text(&claimed),
            cell_text(&measured),
            cell_text(&seeds),
            if check.holds { "✓" } else { "✗" }
        );
    }
    md.push('\n');
}

/// Every paper trend of the suite's sweeps with its verdict (nothing without trends).
pub fn trends_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let trends = suite_trends(input, false);
    if trends.is_empty() {
        return;
    }
    let measured = trends
        .iter()
        .filter(|(_, members, t)| {
            check_trend(rows, members, t, &input.suite.seeds)
                .mean
                .is_some()
        })
        .count();
    let held = trends
        .iter()
        .filter(|(_, members, t)| check_trend(rows, members, t, &input.suite.seeds).holds)
        .count();
    let _ = writeln!(md, "## Trends across sweeps\n");
    if measured == 0 {
        let _ = writeln!(
            md,
            "{} trend claims, not measured (no sweep has data).\n",
            trends.len()
        );
    } else {
        let _ = writeln!(
            md,
            "**{held} of {} trend claims hold in every seed** ({measured} measured).\n",
            trends.len()
        );
    }
    trends_table(md, input, rows, &trends);
}
