//! One section of `REPORT.md` per scenario: its setup, a table of every strategy's figures with
//! the best marked and speed-ups against the baseline, its claims, and its curve plots.

use super::verdicts::{describe_check, describe_claim};
use crate::bench::report::claims::check_claim;
use crate::bench::report::format::{inline, kib, mb, ms, pct, plain, show};
use crate::bench::report::input::ReportInput;
use crate::bench::report::plots::Plots;
use crate::bench::report::row::Row;
use crate::bench::report::stats::{cell_rows, stat};
use crate::bench::suite::expand::Scenario;
use crate::bench::suite::schema::{StrategySpec, Suite, Target};
use crate::bench::suite::toml_tables::show_value;
use std::fmt::Write as _;

/// The strategy marked best in a scenario: lowest mean time to target where the scenario has a
/// target (among strategies that reached it with every seed), else lowest mean time per
/// iteration.
fn best(rows: &[Row], suite: &Suite, scenario: &Scenario) -> Option<String> {
    let seeds = suite.seeds.len();
    let pick = |metric: &str, need_all: bool| {
        suite
            .scenario_strategies(&scenario.spec)
            .into_iter()
            .map(|t| &suite.strategies[t])
            .filter_map(|s| {
                let st = stat(rows, &scenario.label, &s.label, metric)?;
                (!need_all || st.n == seeds).then_some((st.mean, s.label.clone()))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, l)| l)
    };
    if scenario.spec.target.is_some() {
        if let Some(b) = pick("time_to_target_s", true) {
            return Some(b);
        }
    }
    pick("time_per_iteration_s", false)
}

/// A scenario's target in words, whichever kind it is.
pub fn describe_target(t: &Target) -> String {
    let mut parts = Vec::new();
    if let Some(a) = t.accuracy {
        parts.push(format!("target test accuracy ≥ {a}"));
    }
    if let Some(l) = t.loss {
        parts.push(format!("target training loss ≤ {l}"));
    }
    if let Some(l) = t.test_loss {
        parts.push(format!("target test loss ≤ {l} (time-indexed evaluations)"));
    }
    if let Some(c) = t.converged {
        let after = if c.after > 0 {
            format!(", checked from iteration {}", c.after)
        } else {
            String::new()
        };
        parts.push(format!(
            "target convergence: objective changes < {} over {} iterations{after}",
            pct(c.change),
            c.over
        ));
    }
    parts.join(", ")
}

/// The "Scenarios" heading and every scenario's section, in suite order.
pub fn scenarios_section(md: &mut String, input: &ReportInput<'_>, rows: &[Row], plots: &Plots) {
    let suite = input.suite;
    let _ = writeln!(md, "## Scenarios\n");
    for sc in input.scenarios {
        let _ = writeln!(md, "### {}\n", sc.label);
        if !sc.spec.description.is_empty() {
            let _ = writeln!(md, "{}\n", sc.spec.description.trim());
        }
        let mut setup = Vec::new();
        if let Some(f) = &sc.spec.file {
            setup.push(format!("from `{f}`"));
        }
        if !sc.spec.config.is_empty() {
            setup.push(format!("overrides `{}`", inline(&sc.spec.config)));
        }
        if let Some((k, v)) = &sc.swept {
            setup.push(format!("swept `{k} = {}`", show_value(v)));
        }
        if let Some(t) = &sc.spec.target {
            setup.push(describe_target(t));
        }
        if let Some(m) = &sc.spec.market {
            setup.push(format!(
                "market study of `{}`: {} h jobs from {} random start points (`concord market`)",
                m.file, m.hours, m.starts
            ));
        }
        if let Some(cfg) = input
            .cells
            .iter()
            .find(|c| input.scenarios[c.scenario].label == sc.label && c.market.is_none())
            .map(|c| &c.config)
        {
            setup.push(format!(
                "{} workers, {} servers, {} iterations, batch {}",
                cfg.workers, cfg.servers, cfg.iterations, cfg.batch
            ));
        }
        if !setup.is_empty() {
            let _ = writeln!(md, "Setup: {}.\n", setup.join("; "));
        }
        if sc.spec.market.is_some() {
            market_table(md, rows, suite, sc);
        } else {
            let best = best(rows, suite, sc);
            let has_target = sc.spec.target.is_some();
            let shown: Vec<&StrategySpec> = suite
                .scenario_strategies(&sc.spec)
                .into_iter()
                .map(|t| &suite.strategies[t])
                .collect();
            // Speed-ups only where the scenario runs its baseline.
            let baseline = sc.spec.speedup_baseline(suite);
            let has_base = shown.iter().any(|s| s.label == baseline);
            let base_tpi = stat(rows, &sc.label, baseline, "time_per_iteration_s");
            let base_ttt = stat(rows, &sc.label, baseline, "time_to_target_s");
            let _ = write!(md, "| strategy | time/iter (ms) |");
            if has_base {
                let _ = write!(md, " speed-up vs {baseline} |");
            }
            if has_target {
                let _ = write!(md, " time to target (s) |");
                if has_base {
                    let _ = write!(md, " speed-up to target vs {baseline} |");
                }
            }
            let _ = writeln!(
            md,
            " efficiency | wait share | final loss | final accuracy | MB moved | peak worker mem (KiB) |"
        );
            let cols =
                8 + usize::from(has_base) + usize::from(has_target) * (1 + usize::from(has_base));
            let _ = writeln!(md, "|{}", "---|".repeat(cols));
            for s in shown {
                let st = |m: &str| stat(rows, &sc.label, &s.label, m);
                let tpi = st("time_per_iteration_s");
                let mark = if best.as_deref() == Some(s.label.as_str()) {
                    format!("**{}** ★", s.label)
                } else {
                    s.label.clone()
                };
                let _ = write!(md, "| {mark} | {} |", show(tpi, ms));
                if has_base {
                    let speedup = match (base_tpi, tpi) {
                        (Some(b), Some(t)) if t.mean > 0.0 => format!("{:.2}×", b.mean / t.mean),
                        _ => "–".into(),
                    };
                    let _ = write!(md, " {speedup} |");
                }
                if has_target {
                    let ttt = st("time_to_target_s");
                    let n = cell_rows(rows, &sc.label, &s.label).len();
                    let reached = ttt.map_or(0, |t| t.n);
                    let shown = if reached < n {
                        format!("{} [{reached}/{n} seeds reached]", show(ttt, plain))
                    } else {
                        show(ttt, plain)
                    };
                    let _ = write!(md, " {shown} |");
                    if has_base {
                        let sp = match (base_ttt, ttt) {
                            (Some(b), Some(t)) if t.mean > 0.0 => {
                                format!("{:.2}×", b.mean / t.mean)
                            }
                            _ => "–".into(),
                        };
                        let _ = write!(md, " {sp} |");
                    }
                }
                let _ = writeln!(
                    md,
                    " {} | {} | {} | {} | {} | {} |",
                    show(st("efficiency"), plain),
                    show(st("wait_share"), pct),
                    show(st("final_loss"), plain),
                    show(st("final_accuracy"), plain),
                    show(st("bytes_sent"), mb),
                    show(st("peak_worker_memory_bytes"), kib),
                );
            }
            md.push('\n');
        }
        for (_, c) in sc.spec.all_claims() {
            let check = check_claim(rows, &sc.label, c, &suite.seeds);
            let (measured, seeds, verdict) = describe_check(c, &check);
            let source = if c.source.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.source)
            };
            let kind = if c.property {
                "Model property"
            } else {
                "Claim"
            };
            let _ = writeln!(
                md,
                "**{kind}{source}:** {} — checked as {}. **Measured:** {measured}; seeds holding \
                 {seeds} {verdict}\n",
                c.text,
                describe_claim(c)
            );
        }
        if let Some((_, loss, acc)) = plots.curves.iter().find(|(l, _, _)| *l == sc.label) {
            let _ = writeln!(md, "![loss](plots/{loss})");
            if let Some(a) = acc {
                let _ = writeln!(md, "![accuracy](plots/{a})");
            }
            md.push('\n');
        }
    }
}

/// A market scenario's table: each scheme's means over seeds of the cost study's figures.
fn market_table(md: &mut String, rows: &[Row], suite: &Suite, sc: &Scenario) {
    let _ = writeln!(
        md,
        "| scheme | cost (× on-demand) | runtime (h) | on-demand h | spot h | free h | evictions | free share |"
    );
    let _ = writeln!(md, "|{}", "---|".repeat(8));
    for t in suite.scenario_strategies(&sc.spec) {
        let label = &suite.strategies[t].label;
        let st = |m: &str| stat(rows, &sc.label, label, m);
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {} | {} | {} | {} | {} |",
            show(st("cost_relative"), plain),
            show(st("runtime_h"), plain),
            show(st("figure:market.on_demand_h"), plain),
            show(st("figure:market.spot_h"), plain),
            show(st("figure:market.free_h"), plain),
            show(st("evictions"), plain),
            show(st("free_share"), pct),
        );
    }
    md.push('\n');
}
