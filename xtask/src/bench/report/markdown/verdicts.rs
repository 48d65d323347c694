//! The claims, trends and model-properties tables of `REPORT.md`, the tally of what holds, and
//! how a claim and its measurement are written (also under each scenario).

use crate::bench::report::claims::{check_claim, ClaimCheck, Measured, RULES};
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

/// How many seeds hold (`k/n`), then every failing seed and why.
fn seeds_text(held: usize, total: usize, failing: &[String]) -> String {
    if failing.is_empty() {
        format!("{held}/{total}")
    } else {
        format!("{held}/{total} (✗ {})", failing.join("; "))
    }
}

/// A verdict mark.
fn mark(holds: bool) -> &'static str {
    if holds {
        "✓"
    } else {
        "✗"
    }
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
    let seeds = seeds_text(check.held(), check.seeds.len(), &failing);
    (measured, seeds, mark(check.holds).into())
}

/// A claim of the suite with its scenario and its verdict.
type CheckedClaim<'a> = (&'a Scenario, &'a Claim, ClaimCheck);

/// The suite's paper claims (`property` false) or model properties (true), each checked.
fn checked_claims<'a>(
    input: &'a ReportInput<'_>,
    rows: &[Row],
    property: bool,
) -> Vec<CheckedClaim<'a>> {
    input
        .scenarios
        .iter()
        .flat_map(|s| s.spec.all_claims().into_iter().map(move |(_, c)| (s, c)))
        .filter(|(_, c)| c.property == property)
        .map(|(s, c)| (s, c, check_claim(rows, &s.label, c, &input.suite.seeds)))
        .collect()
}

/// A table of claims with their verdicts.
fn claims_table(md: &mut String, claims: &[CheckedClaim<'_>]) {
    let _ = writeln!(
        md,
        "| scenario | claim | source | claimed | measured | seeds holding | verdict |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (s, c, check) in claims {
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

impl Tally {
    /// Counts checked paper claims and trends.
    fn of(claims: &[CheckedClaim<'_>], trends: &[CheckedTrend<'_>]) -> Tally {
        Tally {
            claims: claims.len(),
            held: claims.iter().filter(|(_, _, k)| k.holds).count(),
            held_on_mean: claims
                .iter()
                .filter(|(_, _, k)| k.mean.as_ref().is_some_and(|m| m.holds))
                .count(),
            trends: trends.len(),
            trends_held: trends.iter().filter(|(_, _, k)| k.holds).count(),
        }
    }
}

/// Counts the suite's paper claims and trends that hold.
pub fn tally(input: &ReportInput<'_>, rows: &[Row]) -> Tally {
    Tally::of(
        &checked_claims(input, rows, false),
        &checked_trends(input, rows, false),
    )
}

/// Every paper claim of the suite with its verdict (nothing without claims).
pub fn claims_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let claims = checked_claims(input, rows, false);
    if claims.is_empty() {
        return;
    }
    let t = Tally::of(&claims, &[]);
    let lacking = claims
        .iter()
        .filter(|(_, _, k)| k.measured() < k.seeds.len())
        .count();
    let _ = writeln!(md, "## Claims\n");
    let _ = writeln!(
        md,
        "**{} of {} paper claims hold in every seed.** On the means over seeds alone {} \
         would; {lacking} lack a value in some seed.\n",
        t.held, t.claims, t.held_on_mean
    );
    let _ = writeln!(md, "{RULES}\n");
    claims_table(md, &claims);
}

/// The model properties: statements true by construction of the simulator or a strategy,
/// checked like claims but not counted among reproduced results (nothing without any).
pub fn properties_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let claims = checked_claims(input, rows, true);
    let trends = checked_trends(input, rows, true);
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
        claims_table(md, &claims);
    }
    if !trends.is_empty() {
        trends_table(md, &trends);
    }
}

/// A trend of the suite with its sweep group and its verdict.
type CheckedTrend<'a> = (&'a str, &'a Trend, TrendCheck);

/// The trends of the suite's sweeps, paper trends (`property` false) or model properties
/// (true), each checked over its sweep group.
fn checked_trends<'a>(
    input: &'a ReportInput<'_>,
    rows: &[Row],
    property: bool,
) -> Vec<CheckedTrend<'a>> {
    let mut out = Vec::new();
    for (g, members) in sweep_groups(input.scenarios) {
        for t in members[0]
            .spec
            .trends
            .iter()
            .filter(|t| t.property == property)
        {
            out.push((g, t, check_trend(rows, &members, t, &input.suite.seeds)));
        }
    }
    out
}

/// A table of trends with their verdicts.
fn trends_table(md: &mut String, trends: &[CheckedTrend<'_>]) {
    let _ = writeln!(
        md,
        "| sweep | claim | source | claimed | measured | seeds holding | verdict |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (g, t, check) in trends {
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
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            cell_text(g),
            cell_text(&t.text),
            cell_text(&t.source),
            cell_text(&claimed),
            cell_text(&measured),
            cell_text(&seeds_text(check.held(), check.seeds.len(), &failing)),
            mark(check.holds)
        );
    }
    md.push('\n');
}

/// Every paper trend of the suite's sweeps with its verdict (nothing without trends).
pub fn trends_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let trends = checked_trends(input, rows, false);
    if trends.is_empty() {
        return;
    }
    let measured = trends.iter().filter(|(_, _, k)| k.mean.is_some()).count();
    let t = Tally::of(&[], &trends);
    let _ = writeln!(md, "## Trends across sweeps\n");
    if measured == 0 {
        let _ = writeln!(
            md,
            "{} trend claims, not measured (no sweep has data).\n",
            t.trends
        );
    } else {
        let _ = writeln!(
            md,
            "**{} of {} trend claims hold in every seed** ({measured} measured).\n",
            t.trends_held, t.trends
        );
    }
    trends_table(md, &trends);
}
