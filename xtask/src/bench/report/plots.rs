//! The report's SVG plots: per-scenario loss and accuracy curves, suite-wide bar charts of time
//! per iteration and efficiency, and per-sweep lines; drawn with [`crate::bench::plot`].

use super::format::slug;
use super::input::ReportInput;
use super::row::Row;
use super::stats::stat;
use crate::bench::plot::{self, Bars, Labels, Line, Reference};
use crate::bench::suite::expand::sweep_groups;
use std::path::Path;

/// One plotted point: virtual time, value.
type Xy = (f64, f64);

/// The plot files written, by what they show.
#[derive(Debug, Default)]
pub struct Plots {
    /// Per scenario label: loss plot file, accuracy plot file.
    pub curves: Vec<(String, String, Option<String>)>,
    /// Suite-wide bar charts.
    pub overview: Vec<String>,
    /// Per sweep group: plot files.
    pub sweeps: Vec<(String, Vec<String>)>,
}

/// Draws every plot of the report into `dir`; returns the files written.
pub fn write_plots(dir: &Path, input: &ReportInput<'_>, rows: &[Row]) -> anyhow::Result<Plots> {
    let suite = input.suite;
    let mut plots = Plots::default();
    let labels: Vec<&str> = suite.strategies.iter().map(|s| s.label.as_str()).collect();
    let first_seed = suite.seeds[0];
    for (si, sc) in input.scenarios.iter().enumerate() {
        let curve = |strategy: usize| {
            input
                .cells
                .iter()
                .zip(input.results)
                .find(|(c, _)| c.scenario == si && c.strategy == strategy && c.seed == first_seed)
                .and_then(|(_, r)| r.as_ref())
        };
        let mut loss = Vec::new();
        let mut acc = Vec::new();
        // Scenarios with time-indexed evaluations plot the model's test loss and accuracy at
        // fixed times; others the per-iteration training loss and evaluations.
        let timed = suite
            .scenario_strategies(&sc.spec)
            .into_iter()
            .any(|ti| curve(ti).is_some_and(|r| !r.evals.is_empty()));
        for ti in suite.scenario_strategies(&sc.spec) {
            let label = labels[ti];
            let Some(r) = curve(ti) else { continue };
            // (time, loss, accuracy): the test set's at fixed times, else the training curve's.
            let series: Vec<(f64, Option<f64>, Option<f64>)> = if timed {
                r.evals
                    .iter()
                    .map(|p| (p.time_s, p.test_loss, p.test_accuracy))
                    .collect()
            } else {
                r.curve
                    .iter()
                    .map(|p| (p.time_s, p.loss, p.test_accuracy))
                    .collect()
            };
            let points: Vec<Xy> = series
                .iter()
                .filter_map(|&(t, l, _)| l.map(|l| (t, l)))
                .collect();
            let a: Vec<Xy> = series
                .iter()
                .filter_map(|&(t, _, a)| a.map(|a| (t, a)))
                .collect();
            loss.push(Line {
                label: label.to_string(),
                points,
                color: Some(ti),
            });
            if !a.is_empty() {
                acc.push(Line {
                    label: label.to_string(),
                    points: a,
                    color: Some(ti),
                });
            }
        }
        if loss.iter().all(|l| l.points.is_empty()) {
            continue;
        }
        let slug = slug(&sc.label);
        let loss_file = format!("loss-{slug}.svg");
        let (what, target) = if timed {
            let target = sc.spec.target.and_then(|t| t.test_loss).map(|l| Reference {
                y: l,
                label: format!("target {l}"),
            });
            ("Test loss", target)
        } else {
            ("Training loss", None)
        };
        plot::lines(
            &dir.join(&loss_file),
            &Labels {
                title: format!("{what} vs virtual time: {} (seed {first_seed})", sc.label),
                x: "virtual time (s)".into(),
                y: what.to_lowercase(),
            },
            &loss,
            false,
            target.as_ref(),
            plotters::prelude::SeriesLabelPosition::UpperRight,
            false,
        )?;
        let acc_file = if acc.is_empty() {
            None
        } else {
            let f = format!("accuracy-{slug}.svg");
            let target = sc.spec.target.and_then(|t| t.accuracy).map(|a| Reference {
                y: a,
                label: format!("target {a}"),
            });
            plot::lines(
                &dir.join(&f),
                &Labels {
                    title: format!(
                        "Test accuracy vs virtual time: {} (seed {first_seed})",
                        sc.label
                    ),
                    x: "virtual time (s)".into(),
                    y: "test accuracy".into(),
                },
                &acc,
                true,
                target.as_ref(),
                plotters::prelude::SeriesLabelPosition::LowerRight,
                false,
            )?;
            Some(f)
        };
        plots.curves.push((sc.label.clone(), loss_file, acc_file));
    }

    let groups: Vec<String> = input.scenarios.iter().map(|s| s.label.clone()).collect();
    let bars = |metric: &str| -> Vec<Bars> {
        labels
            .iter()
            .map(|l| Bars {
                label: l.to_string(),
                values: groups
                    .iter()
                    .map(|g| stat(rows, g, l, metric).map(|s| s.triple()))
                    .collect(),
            })
            .collect()
    };
    if !groups.is_empty() && !rows.is_empty() {
        let mut t = bars("time_per_iteration_s");
        for b in &mut t {
            for (m, lo, hi) in b.values.iter_mut().flatten() {
                *m *= 1e3;
                *lo *= 1e3;
                *hi *= 1e3;
            }
        }
        plot::grouped_bars(
            &dir.join("time-per-iteration.svg"),
            &Labels {
                title: format!("Time per iteration by strategy: suite {}", suite.name),
                x: "scenario".into(),
                y: "virtual time per iteration (ms)".into(),
            },
            &groups,
            &t,
            None,
        )?;
        plot::grouped_bars(
            &dir.join("efficiency.svg"),
            &Labels {
                title: format!("Efficiency vs ideal by strategy: suite {}", suite.name),
                x: "scenario".into(),
                y: "efficiency (ideal time / achieved time)".into(),
            },
            &groups,
            &bars("efficiency"),
            Some(&Reference {
                y: 1.0,
                label: "ideal".into(),
            }),
        )?;
        plots.overview = vec!["time-per-iteration.svg".into(), "efficiency.svg".into()];
    }

    for (group, members) in sweep_groups(input.scenarios) {
        let key = members[0].swept.as_ref().map_or("", |(k, _)| k.as_str());
        let xs: Vec<Option<f64>> = members
            .iter()
            .map(|s| s.swept.as_ref().and_then(|(_, v)| numeric(v)))
            .collect();
        let numeric_x = xs.iter().all(Option::is_some);
        let x_of = |i: usize| {
            if numeric_x {
                xs[i].unwrap_or(i as f64)
            } else {
                i as f64
            }
        };
        let mut files = Vec::new();
        for (metric, name, scale, unit) in [
            (
                "time_per_iteration_s",
                "time per iteration",
                1e3,
                "virtual ms per iteration",
            ),
            (
                "efficiency",
                "efficiency",
                1.0,
                "efficiency (ideal / achieved)",
            ),
        ] {
            let lines: Vec<Line> = suite
                .scenario_strategies(&members[0].spec)
                .into_iter()
                .map(|ti| Line {
                    label: labels[ti].to_string(),
                    points: members
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| {
                            stat(rows, &s.label, labels[ti], metric)
                                .map(|st| (x_of(i), st.mean * scale))
                        })
                        .collect(),
                    color: Some(ti),
                })
                .filter(|l| !l.points.is_empty())
                .collect();
            if lines.is_empty() {
                continue;
            }
            let f = format!("sweep-{}-{}.svg", slug(group), slug(name));
            plot::lines(
                &dir.join(&f),
                &Labels {
                    title: format!("{name} vs {key}: {group} (mean over seeds)"),
                    x: if numeric_x {
                        key.to_string()
                    } else {
                        format!("{key} (value index)")
                    },
                    y: unit.into(),
                },
                &lines,
                true,
                None,
                plotters::prelude::SeriesLabelPosition::UpperRight,
                true,
            )?;
            files.push(f);
        }
        plots.sweeps.push((group.to_string(), files));
    }
    Ok(plots)
}

/// A swept value as a number, where it is one.
fn numeric(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    }
}
