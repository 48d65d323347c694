//! Checks of a parsed suite beyond its schema: labels unique and known, claims, trends, targets
//! and sweeps well formed. Each error names the key at fault; configs themselves are checked
//! when cells are built ([`super::expand`]).

use super::metrics::{known_metric, METRICS};
use super::schema::{Claim, ScenarioSpec, Shape, Suite, Sweep, Trend};
use crate::bench::error::BenchError;
use std::collections::BTreeSet;

/// Checks a freshly deserialized suite; `bad` builds the error for a key and a reason (it names
/// the file).
pub fn check(suite: &Suite, bad: &dyn Fn(&str, String) -> BenchError) -> Result<(), BenchError> {
    if suite.seeds.is_empty() {
        return Err(bad("seeds", "needs at least one seed".into()));
    }
    if suite.strategies.is_empty() {
        return Err(bad("strategies", "needs at least one strategy".into()));
    }
    let mut labels = BTreeSet::new();
    for (i, s) in suite.strategies.iter().enumerate() {
        if s.label.trim().is_empty() || !labels.insert(s.label.clone()) {
            return Err(bad(
                &format!("strategies[{i}].label"),
                format!("{:?} is empty or used twice", s.label),
            ));
        }
        match &s.scheme {
            None if s.strategies.is_empty() => {
                return Err(bad(
                    &format!("strategies[{i}].strategies"),
                    "names no strategy (or set `scheme` for a market scheme)".into(),
                ));
            }
            Some(_)
                if !s.strategies.is_empty() || !s.options.is_empty() || !s.config.is_empty() =>
            {
                return Err(bad(
                    &format!("strategies[{i}].scheme"),
                    "a market scheme takes no `strategies`, `options` or `config`".into(),
                ));
            }
            Some(name) => {
                name.parse::<concord_elastic_ps::proteus::Scheme>()
                    .map_err(|e| bad(&format!("strategies[{i}].scheme"), e))?;
            }
            None => {}
        }
    }
    let mut labels = BTreeSet::new();
    for (i, s) in suite.scenarios.iter().enumerate() {
        if s.label.trim().is_empty() || !labels.insert(s.label.clone()) {
            return Err(bad(
                &format!("scenarios[{i}].label"),
                format!("{:?} is empty or used twice", s.label),
            ));
        }
        if let Some(t) = &s.target {
            let ok = match (t.accuracy, t.loss, t.test_loss, t.converged) {
                (Some(a), None, None, None) => a.is_finite(),
                (None, Some(l), None, None) | (None, None, Some(l), None) => l.is_finite(),
                (None, None, None, Some(c)) => {
                    c.change.is_finite() && c.change > 0.0 && c.over >= 1
                }
                _ => false,
            };
            if !ok {
                return Err(bad(
                        &format!("scenarios[{i}].target"),
                        "set exactly one of `accuracy`, `loss` or `test_loss` (a finite number) or `converged` (`change` > 0, `over` ≥ 1)".into(),
                    ));
            }
        }
        if let Some(subset) = &s.strategies {
            let key = format!("scenarios[{i}].strategies");
            if subset.is_empty() {
                return Err(bad(&key, "names no strategy (leave it out for all)".into()));
            }
            let mut seen = BTreeSet::new();
            for (k, label) in subset.iter().enumerate() {
                if !suite.strategies.iter().any(|t| &t.label == label) {
                    let known: Vec<&str> =
                        suite.strategies.iter().map(|t| t.label.as_str()).collect();
                    return Err(bad(
                        &format!("{key}[{k}]"),
                        format!(
                            "{label:?} is not a strategy label of this suite; one of {}",
                            known.join(", ")
                        ),
                    ));
                }
                if !seen.insert(label) {
                    return Err(bad(
                        &format!("{key}[{k}]"),
                        format!("{label:?} is listed twice"),
                    ));
                }
            }
        }
        if let Some(m) = &s.market {
            check_market(suite, s, &format!("scenarios[{i}]"), bad)?;
            if !(m.hours.is_finite() && m.hours > 0.0) || m.starts == 0 {
                return Err(bad(
                    &format!("scenarios[{i}].market"),
                    "needs `hours` > 0 and `starts` ≥ 1".into(),
                ));
            }
        } else if let Some(k) = suite
            .scenario_strategies(s)
            .into_iter()
            .find(|&t| suite.strategies[t].scheme.is_some())
        {
            return Err(bad(
                &format!("scenarios[{i}].strategies"),
                format!(
                    "{:?} is a market scheme: it runs only in a scenario with `market`",
                    suite.strategies[k].label
                ),
            ));
        }
        if let Some(calm) = &s.calm {
            let other = suite.scenarios.iter().find(|o| &o.label == calm);
            match other {
                Some(o) if o.sweep.is_none() && o.label != s.label => {
                    let runs = |sc| suite.scenario_strategies(sc);
                    if !runs(s).iter().all(|t| runs(o).contains(t)) {
                        return Err(bad(
                            &format!("scenarios[{i}].calm"),
                            format!("{calm:?} does not run every strategy this scenario runs"),
                        ));
                    }
                }
                _ => {
                    return Err(bad(
                        &format!("scenarios[{i}].calm"),
                        format!("{calm:?} is not another, unswept scenario of this suite"),
                    ))
                }
            }
        }
        let in_scenario: Vec<&str> = suite
            .scenario_strategies(s)
            .into_iter()
            .map(|t| suite.strategies[t].label.as_str())
            .collect();
        if let Some(b) = &s.baseline {
            if !in_scenario.contains(&b.as_str()) {
                return Err(bad(
                    &format!("scenarios[{i}].baseline"),
                    format!(
                        "{b:?} is not a strategy this scenario runs; one of {}",
                        in_scenario.join(", ")
                    ),
                ));
            }
        }
        for (name, c) in s.all_claims() {
            check_claim(c, &format!("scenarios[{i}].{name}"), &in_scenario, bad)?;
        }
        if let Some(sw) = &s.sweep {
            check_sweep(sw, &format!("scenarios[{i}].sweep"), bad)?;
        }
        for (j, t) in s.trends.iter().enumerate() {
            check_trend(
                t,
                &format!("scenarios[{i}].trends[{j}]"),
                s,
                &in_scenario,
                bad,
            )?;
        }
    }
    if let Some(sw) = &suite.sweep {
        check_sweep(sw, "sweep", bad)?;
    }
    Ok(())
}

/// Checks one trend claim: a swept scenario, a known metric, a strategy of the scenario, a
/// sensible shape.
fn check_trend(
    t: &Trend,
    key: &str,
    s: &ScenarioSpec,
    strategies: &[&str],
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    if s.sweep.is_none() {
        return Err(bad(key, "a trend needs the scenario's `sweep`".into()));
    }
    if !known_metric(&t.metric) {
        return Err(bad(
            &format!("{key}.metric"),
            format!("unknown metric {:?} (as for claims)", t.metric),
        ));
    }
    if !strategies.contains(&t.strategy.as_str()) {
        return Err(bad(
            &format!("{key}.strategy"),
            format!(
                "{:?} is not a strategy of this scenario; one of {}",
                t.strategy,
                strategies.join(", ")
            ),
        ));
    }
    let ok = match t.shape {
        Shape::Linear { min_r2 } => (0.0..=1.0).contains(&min_r2),
        Shape::Flat { up_to, within } => up_to.is_finite() && within.is_finite() && within >= 0.0,
    };
    if !ok {
        return Err(bad(
            &format!("{key}.shape"),
            "linear needs 0 ≤ min_r2 ≤ 1; flat needs a finite up_to and within ≥ 0".into(),
        ));
    }
    Ok(())
}

/// Checks one claim; `key` is where it is (`scenarios[0].claims[1]`), `strategies` the labels
/// of the scenario's strategies.
fn check_claim(
    c: &Claim,
    key: &str,
    strategies: &[&str],
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    if !known_metric(&c.metric) {
        let allowed: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
        return Err(bad(
            &format!("{key}.metric"),
            format!(
                "unknown metric {:?}; one of {}, or figure:<name> (a strategy figure of the run \
                 summary, e.g. figure:lb-bsp.rmse_relative)",
                c.metric,
                allowed.join(", ")
            ),
        ));
    }
    let mut sides = vec![("strategy", &c.strategy)];
    sides.extend(c.baseline.as_ref().map(|b| ("baseline", b)));
    for (field, label) in sides {
        if !strategies.contains(&label.as_str()) {
            return Err(bad(
                &format!("{key}.{field}"),
                format!(
                    "{label:?} is not a strategy of this scenario; one of {}",
                    strategies.join(", ")
                ),
            ));
        }
    }
    match (&c.baseline, c.than) {
        (Some(_), None) => {}
        (None, Some(t)) if t.is_finite() => {}
        (None, Some(_)) => {
            return Err(bad(
                &format!("{key}.than"),
                "must be a finite number".into(),
            ));
        }
        _ => {
            return Err(bad(
                key,
                "set exactly one of `baseline` (a strategy label) or `than` (a number)".into(),
            ));
        }
    }
    if !(c.by_at_least.is_finite() && c.by_at_least >= -1.0) {
        return Err(bad(
            &format!("{key}.by_at_least"),
            "must be a relative difference ≥ -1 (0.35 = at least 35 % in the claimed direction; -0.1 = at most 10 % the other way)".into(),
        ));
    }
    if c.by_at_most
        .is_some_and(|m| !(m.is_finite() && m >= c.by_at_least))
    {
        return Err(bad(
            &format!("{key}.by_at_most"),
            "must be at least by_at_least".into(),
        ));
    }
    Ok(())
}

/// Checks a market scenario: it runs market schemes only, and has none of a training run's
/// settings.
fn check_market(
    suite: &Suite,
    s: &ScenarioSpec,
    key: &str,
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    let runs = suite.scenario_strategies(s);
    if runs.is_empty() {
        return Err(bad(
            &format!("{key}.strategies"),
            "a market scenario needs strategies with `scheme`".into(),
        ));
    }
    if let Some(&t) = runs.iter().find(|&&t| suite.strategies[t].scheme.is_none()) {
        return Err(bad(
            &format!("{key}.strategies"),
            format!(
                "{:?} is a training strategy: a market scenario runs only strategies with `scheme`",
                suite.strategies[t].label
            ),
        ));
    }
    let training = s.file.is_some()
        || !s.config.is_empty()
        || s.target.is_some()
        || s.phases.is_some()
        || s.calm.is_some()
        || s.sweep.is_some()
        || suite.sweep.is_some();
    if training {
        return Err(bad(
            &format!("{key}.market"),
            "a market scenario takes no `file`, `config`, `target`, `phases`, `calm` or `sweep`"
                .into(),
        ));
    }
    Ok(())
}

fn check_sweep(
    sweep: &Sweep,
    key: &str,
    bad: &dyn Fn(&str, String) -> BenchError,
) -> Result<(), BenchError> {
    if sweep.key.trim().is_empty() {
        return Err(bad(&format!("{key}.key"), "is empty".into()));
    }
    if sweep.values.is_empty() {
        return Err(bad(
            &format!("{key}.values"),
            "needs at least one value".into(),
        ));
    }
    Ok(())
}
