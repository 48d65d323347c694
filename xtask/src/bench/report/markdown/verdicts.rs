//! The claims and trends tables of `REPORT.md`, and how a claim and its measurement are written
//! (also under each scenario).

use crate::bench::report::claims::{check_claim, ClaimCheck};
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

/// A claim's measurement in words and its verdict mark (`✓`, `✗`, or `–` without data).
pub fn describe_check(c: &Claim, check: Option<&ClaimCheck>) -> (String, String) {
    match check {
        None => ("no data".into(), "–".into()),
        Some(k) => {
            let reference = match &c.baseline {
                Some(b) => format!("{b} {}", metric_value(&c.metric, k.reference)),
                None => metric_value(&c.metric, k.reference),
            };
            (
                format!(
                    "{} {} vs {reference}: {} {}",
                    c.strategy,
                    metric_value(&c.metric, k.value),
                    pct(k.relative),
                    direction(c)
                ),
                if k.holds { "✓" } else { "✗" }.into(),
            )
        }
    }
}

/// Every claim of the suite with its verdict (nothing without claims).
pub fn claims_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let claims: Vec<(&Scenario, &Claim)> = input
        .scenarios
        .iter()
        .flat_map(|s| s.spec.all_claims().into_iter().map(move |(_, c)| (s, c)))
        .collect();
    if !claims.is_empty() {
        let checks: Vec<Option<ClaimCheck>> = claims
            .iter()
            .map(|(s, c)| check_claim(rows, &s.label, c))
            .collect();
        let held = checks.iter().flatten().filter(|k| k.holds).count();
        let measured = checks.iter().flatten().count();
        let _ = writeln!(md, "## Claims\n");
        let _ = writeln!(
            md,
            "{held} of {} claims hold ({measured} measured{}).\n",
            claims.len(),
            if measured < claims.len() {
                format!(", {} without data", claims.len() - measured)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            md,
            "| scenario | claim | source | claimed | measured | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for ((s, c), check) in claims.iter().zip(&checks) {
            let (measured, verdict) = describe_check(c, check.as_ref());
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                cell_text(&s.label),
                cell_text(&c.text),
                cell_text(&c.source),
                cell_text(&describe_claim(c)),
                cell_text(&measured),
                verdict
            );
        }
        md.push('\n');
    }
}

/// Every trend claim of the suite's sweeps with its verdict (nothing without trends).
pub fn trends_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row]) {
    let trends: Vec<(&str, Vec<&Scenario>, &Trend)> = sweep_groups(input.scenarios)
        .into_iter()
        .flat_map(|(g, members)| {
            let spec = &members[0].spec;
            spec.trends
                .iter()
                .map(move |t| (g, members.clone(), t))
                .collect::<Vec<_>>()
        })
        .collect();
    if !trends.is_empty() {
        let checks: Vec<Option<TrendCheck>> = trends
            .iter()
            .map(|(_, members, t)| check_trend(rows, members, t))
            .collect();
        let held = checks.iter().flatten().filter(|k| k.holds).count();
        let _ = writeln!(md, "## Trends across sweeps\n");
        let _ = writeln!(md, "{held} of {} trend claims hold.\n", trends.len());
        let _ = writeln!(
            md,
            "| sweep | claim | source | claimed | measured | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for ((g, _, t), check) in trends.iter().zip(&checks) {
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
            let (measured, verdict) = match check {
                Some(k) => (k.measured.clone(), if k.holds { "✓" } else { "✗" }),
                None => ("no data".to_string(), "–"),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                cell_text(g),
                cell_text(&t.text),
                cell_text(&t.source),
                cell_text(&claimed),
                cell_text(&measured),
                verdict
            );
        }
        md.push('\n');
    }
}
