//! How numbers and labels are written in the report: units, `mean (min–max)`, file-name slugs,
//! Markdown table cells and inline TOML.

use super::stats::Stat;
use crate::bench::suite::metrics::FIGURE_PREFIX;

/// A file-name-safe form of a label.
pub fn slug(label: &str) -> String {
    let mut s = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').to_string()
}

/// Seconds as milliseconds, 4 decimals.
pub fn ms(x: f64) -> String {
    format!("{:.4}", x * 1e3)
}

/// A fraction as a percentage, 1 decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A plain number, 4 decimals.
pub fn plain(x: f64) -> String {
    format!("{x:.4}")
}

/// Bytes as megabytes (10⁶), 2 decimals.
pub fn mb(x: f64) -> String {
    format!("{:.2}", x / 1e6)
}

/// Bytes as KiB, 1 decimal.
pub fn kib(x: f64) -> String {
    format!("{:.1}", x / 1024.0)
}

/// `mean (min–max)`, or `mean` for a single seed, or `–`.
pub fn show(s: Option<Stat>, f: fn(f64) -> String) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.n == 1 || s.min == s.max => f(s.mean),
        Some(s) => format!("{} ({}–{})", f(s.mean), f(s.min), f(s.max)),
    }
}

/// A metric's value with its unit, for claim lines.
pub fn metric_value(metric: &str, v: f64) -> String {
    match metric {
        m if m.starts_with(FIGURE_PREFIX) => plain(v),
        "bytes_sent" => format!("{} MB", mb(v)),
        "bytes_per_sample" => format!("{} KiB", kib(v)),
        "throughput_samples_per_s" => format!("{} samples/s", plain(v)),
        "peak_worker_memory_bytes" => format!("{} KiB", kib(v)),
        "wait_share" => pct(v),
        m if m.ends_with("_s") => format!("{} ms", ms(v)),
        _ => plain(v),
    }
}

/// Text fit for a Markdown table cell (no `|`, no line breaks).
pub fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A table as one line of inline TOML (`a = 1, b.c = 2`).
pub fn inline(t: &toml::Table) -> String {
    let mut parts = Vec::new();
    flatten("", t, &mut parts);
    parts.join(", ")
}

/// Appends `key = value` for every leaf of `t` to `out`, keys dotted under `prefix`.
fn flatten(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => flatten(&key, inner, out),
            other => out.push(format!("{key} = {other}")),
        }
    }
}
