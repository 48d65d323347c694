//! SVG plots with plotters (SVG backend only: text is written as `<text>` elements and sized by
//! plotters' built-in estimate, so no font files or system libraries are needed).
//!
//! Two shapes cover every plot of the report: lines (curves against virtual time, metrics
//! against a swept value) and grouped bars (a metric per scenario and strategy, mean with a
//! min–max whisker over seeds). Every plot has a title, labelled axes and a legend.

use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use std::path::Path;

/// One line of a line chart: its legend label and its points.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend entry.
    pub label: String,
    /// (x, y) points, in order of x.
    pub points: Vec<(f64, f64)>,
    /// Palette index, so that a strategy keeps its colour in plots that show only some
    /// strategies (`None`: the line's position in the chart).
    pub color: Option<usize>,
}

/// One series of a grouped bar chart: its legend label and one bar per group (`None` = no data).
#[derive(Clone, Debug)]
pub struct Bars {
    /// Legend entry.
    pub label: String,
    /// Per group: (mean, min, max).
    pub values: Vec<Option<(f64, f64, f64)>>,
}

/// A horizontal reference line with its legend entry (e.g. "ideal" at efficiency 1).
#[derive(Clone, Debug)]
pub struct Reference {
    /// Its y value.
    pub y: f64,
    /// Legend entry.
    pub label: String,
}

/// Axis titles and the chart title.
#[derive(Clone, Debug)]
pub struct Labels {
    /// The chart's title.
    pub title: String,
    /// The x axis description.
    pub x: String,
    /// The y axis description.
    pub y: String,
}

type PlotResult = anyhow::Result<()>;

fn err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("plot {}: {e}", path.display())
}

fn color(i: usize) -> RGBColor {
    // A fixed, distinguishable palette (Tableau 10), so a strategy keeps its colour across plots.
    const C: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = C[i % C.len()];
    RGBColor(r, g, b)
}

/// A y range that holds `values` with a margin (and 0 when `from_zero`).
fn y_range(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-12 * hi.abs().max(1e-300) {
        hi = lo + lo.abs().max(1e-9);
    }
    let pad = (hi - lo) * 0.05;
    (
        if from_zero && lo >= 0.0 {
            0.0
        } else {
            lo - pad
        },
        hi + pad,
    )
}

/// A line chart: one coloured line per series (with point markers when `markers`), an optional
/// reference line, the legend where asked (with head room above the lines when at the top).
/// `y_from_zero` starts the y axis at 0, as a chart of times or other amounts should, so that
/// differences are seen at their true size.
pub fn lines(
    path: &Path,
    labels: &Labels,
    series: &[Line],
    markers: bool,
    reference: Option<&Reference>,
    legend: SeriesLabelPosition,
    y_from_zero: bool,
) -> PlotResult {
    let e = err(path);
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x0, x1) = {
        let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        if lo.is_finite() && hi > lo {
            (lo, hi)
        } else if lo.is_finite() {
            (lo - 0.5, lo + 0.5)
        } else {
            (0.0, 1.0)
        }
    };
    let ys = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(reference.map(|r| r.y));
    let (y0, y1) = y_range(ys, y_from_zero);
    // Head room for the legend when it sits at the top.
    let y1 = match legend {
        SeriesLabelPosition::UpperLeft
        | SeriesLabelPosition::UpperMiddle
        | SeriesLabelPosition::UpperRight => y1 + (y1 - y0) * 0.04 * (series.len() + 1) as f64,
        _ => y1,
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&labels.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc(&labels.x)
        .y_desc(&labels.y)
        .x_label_formatter(&|v| format!("{}", Sig(*v)))
        .y_label_formatter(&|v| format!("{}", Sig(*v)))
        .draw()
        .map_err(&e)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(s.color.unwrap_or(i));
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
            .map_err(&e)?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        if markers {
            chart
                .draw_series(s.points.iter().map(|p| Circle::new(*p, 4, c.filled())))
                .map_err(&e)?;
        }
    }
    if let Some(r) = reference {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x0, r.y), (x1, r.y)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(&e)?
            .label(&r.label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(())
}

/// A grouped bar chart, horizontal so that long scenario labels stay readable: one group per
/// entry of `groups` (top to bottom), one bar per series in each group (mean, with a min–max
/// whisker), an optional vertical reference line. The value axis is horizontal: `labels.x`
/// names the category (group) axis and `labels.y` the value axis, as for a vertical chart.
pub fn grouped_bars(
    path: &Path,
    labels: &Labels,
    groups: &[String],
    series: &[Bars],
    reference: Option<&Reference>,
) -> PlotResult {
    let e = err(path);
    let n = groups.len().max(1);
    let k = series.len().max(1);
    let values = series
        .iter()
        .flat_map(|s| s.values.iter().flatten().flat_map(|v| [v.0, v.1, v.2]))
        .chain(reference.map(|r| r.y));
    let (_, hi) = y_range(values, true);
    // Head room on the right for the legend.
    let x1 = hi * (1.0 + 0.12 * k.min(6) as f64);
    let longest = groups.iter().map(|g| g.chars().count()).max().unwrap_or(1);
    let label_area = (longest as u32 * 7 + 20).clamp(60, 420);
    let height = (140 + n as u32 * (k as u32 * 14 + 14)).max(360);
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    // Integer y coordinates (a group is 1000 units tall, group g centred on (n − 1 − g) × 1000
    // so that the first group is on top), so that the group centres can be the axis's key
    // points with plotters' default integer formatting.
    const UNIT: i32 = 1000;
    let n_i = n as i32;
    let y_at = |v: f64| (v * f64::from(UNIT)).round() as i32;
    let centre = |g: usize| f64::from(n_i - 1 - g as i32);
    let centers: Vec<i32> = (0..n_i).map(|g| g * UNIT).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(&labels.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(label_area)
        .build_cartesian_2d(
            0f64..x1,
            (-UNIT / 2..n_i * UNIT - UNIT / 2).with_key_points(centers),
        )
        .map_err(&e)?;
    let group_label = |v: &i32| {
        let pos = *v / UNIT;
        let g = n_i - 1 - pos;
        if *v % UNIT == 0 && (0..groups.len() as i32).contains(&g) {
            groups[g as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&group_label)
        .x_label_formatter(&|v| format!("{}", Sig(*v)))
        .x_desc(&labels.y)
        .y_desc(&labels.x)
        .draw()
        .map_err(&e)?;
    let h = 0.8 / k as f64;
    for (si, s) in series.iter().enumerate() {
        let c = color(si);
        // Series top to bottom within a group, in legend order.
        let top = move |g: usize| centre(g) + 0.4 - si as f64 * h;
        let bars = s.values.iter().enumerate().filter_map(|(g, v)| {
            v.map(|(mean, _, _)| {
                Rectangle::new(
                    [(0.0, y_at(top(g))), (mean, y_at(top(g) - h * 0.9))],
                    c.filled(),
                )
            })
        });
        chart
            .draw_series(bars)
            .map_err(&e)?
            .label(&s.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        let whiskers = s.values.iter().enumerate().filter_map(|(g, v)| {
            v.filter(|(_, lo, hi)| hi > lo).map(|(_, lo, hi)| {
                let y = y_at(top(g) - h * 0.45);
                PathElement::new(vec![(lo, y), (hi, y)], BLACK.stroke_width(1))
            })
        });
        chart.draw_series(whiskers).map_err(&e)?;
    }
    if let Some(r) = reference {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(r.y, -UNIT / 2), (r.y, n_i * UNIT - UNIT / 2)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(&e)?
            .label(&r.label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(())
}

/// A number with 4 significant digits, without trailing zeros (tick labels).
struct Sig(f64);

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        if v == 0.0 || !v.is_finite() {
            return write!(f, "{}", if v.is_finite() { 0.0 } else { v });
        }
        let mag = v.abs().log10().floor() as i32;
        if !(-3..6).contains(&mag) {
            return write!(f, "{v:.3e}");
        }
        let decimals = (3 - mag).max(0) as usize;
        let s = format!("{v:.decimals$}");
        let s = if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        };
        write!(f, "{s}")
    }
}
