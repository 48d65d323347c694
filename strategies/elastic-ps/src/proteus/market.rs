//! The spot market: instance types, one spot price step function per type, and the market file
//! that names them.
//!
//! A market file is TOML:
//!
//! ```toml
//! trace = "synthetic-4w.csv"     # the price trace, relative to this file's folder
//! [[types]]
//! name = "c4.xlarge"
//! vcpus = 4                      # ν: work per hour of one instance is proportional to it
//! on_demand = 0.209              # $/h
//! # [generator] ...              # optional: how a synthetic trace was made (recorded, not read)
//! ```
//!
//! The trace is a CSV file with the header `time_s,type,price`: seconds from the start of the
//! trace, a type named in the market file, the spot price in $/h from that time on (a step
//! function). Times must increase strictly per type; every type needs at least one point.
//! Before a type's first point its first price holds, after its last point its last price.

use super::error::MarketError;
use super::generate::GeneratorParams;
use super::trace;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One instance type of the market.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceType {
    /// The type's name, e.g. `c4.2xlarge`.
    pub name: String,
    /// Virtual CPUs: BidBrain's ν, the work an instance produces per unit time (thesis fn. 6).
    pub vcpus: u32,
    /// On-demand price, $/h (never evicted; also the standard bid).
    pub on_demand: f64,
}

/// A spot price step function: `prices[i]` holds from `times[i]` until `times[i + 1]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTrace {
    times: Vec<f64>,
    prices: Vec<f64>,
}

impl PriceTrace {
    /// A trace from its points (time s, price $/h). Times must be finite and strictly
    /// increasing, prices finite and ≥ 0, and there must be at least one point: the loader
    /// checks these with line numbers; here a violation is refused with the index at fault.
    pub fn new(points: Vec<(f64, f64)>) -> Result<PriceTrace, MarketError> {
        let bad = |i: usize, reason: String| MarketError::Setting {
            field: format!("points[{i}]"),
            reason,
        };
        if points.is_empty() {
            return Err(bad(0, "a price trace needs at least one point".into()));
        }
        for (i, &(t, p)) in points.iter().enumerate() {
            if !t.is_finite() {
                return Err(bad(i, format!("time {t} is not finite")));
            }
            if !(p.is_finite() && p >= 0.0) {
                return Err(bad(i, format!("price {p} is not a finite price ≥ 0")));
            }
            if i > 0 && t <= points[i - 1].0 {
                return Err(bad(
                    i,
                    format!("time {t} does not follow {}", points[i - 1].0),
                ));
            }
        }
        let (times, prices) = points.into_iter().unzip();
        Ok(PriceTrace { times, prices })
    }

    /// The spot price at time `t` (s).
    pub fn price_at(&self, t: f64) -> f64 {
        let i = self.times.partition_point(|&x| x <= t);
        self.prices[i.saturating_sub(1)]
    }

    /// The first time after `t` (strictly) at which the price changes, if any.
    pub fn next_change_after(&self, t: f64) -> Option<f64> {
        let i = self.times.partition_point(|&x| x <= t);
        self.times.get(i).copied()
    }

    /// The first time in `[t0, t1)` at which the price is above `bid` (an eviction of an
    /// instance bid at `bid`), if any.
    pub fn first_above(&self, bid: f64, t0: f64, t1: f64) -> Option<f64> {
        if self.price_at(t0) > bid {
            return Some(t0);
        }
        let start = self.times.partition_point(|&x| x <= t0);
        self.times[start..]
            .iter()
            .zip(&self.prices[start..])
            .take_while(|(&t, _)| t < t1)
            .find(|(_, &p)| p > bid)
            .map(|(&t, _)| t)
    }

    /// The trace's points, (time s, price $/h).
    pub fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.times.iter().copied().zip(self.prices.iter().copied())
    }

    /// Time of the first point, s.
    pub fn start(&self) -> f64 {
        self.times[0]
    }

    /// Time of the last point, s.
    pub fn end(&self) -> f64 {
        self.times[self.times.len() - 1]
    }
}

/// The market file as written.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarketFile {
    /// The price trace (CSV), relative to the market file's folder.
    pub trace: String,
    /// The instance types.
    pub types: Vec<InstanceType>,
    /// How the trace was generated, if it is synthetic (recorded for reproduction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorParams>,
}

/// A loaded market: the types and one price trace per type (same order).
#[derive(Clone, Debug)]
pub struct Market {
    /// The instance types.
    pub types: Vec<InstanceType>,
    /// `traces[i]` is the spot price of `types[i]`.
    pub traces: Vec<PriceTrace>,
}

impl Market {
    /// A market from its parts; every type needs its trace, names must be unique and prices
    /// and vCPUs sensible.
    pub fn new(types: Vec<InstanceType>, traces: Vec<PriceTrace>) -> Result<Market, MarketError> {
        check_types(&types).map_err(|(field, reason)| MarketError::Setting { field, reason })?;
        if traces.len() != types.len() {
            return Err(MarketError::Setting {
                field: "traces".into(),
                reason: format!("{} traces for {} types", traces.len(), types.len()),
            });
        }
        Ok(Market { types, traces })
    }

    /// Loads a market file and the trace it names.
    pub fn load(path: &Path) -> Result<Market, MarketError> {
        let text = std::fs::read_to_string(path).map_err(|source| MarketError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |field: &str, reason: String| MarketError::Market {
            path: path.to_path_buf(),
            field: field.to_string(),
            reason,
        };
        let file: MarketFile = toml::from_str(&text).map_err(|e| bad("(file)", e.to_string()))?;
        check_types(&file.types).map_err(|(f, r)| bad(&f, r))?;
        let trace_path = trace_path(path, &file.trace);
        let traces = trace::read_csv(&trace_path, &file.types)?;
        Ok(Market {
            types: file.types,
            traces,
        })
    }

    /// The index of the type named `name`.
    pub fn type_index(&self, name: &str) -> Option<usize> {
        self.types.iter().position(|t| t.name == name)
    }

    /// The latest first point and earliest last point over all types: the span every trace
    /// covers, s.
    pub fn span(&self) -> (f64, f64) {
        let start = self
            .traces
            .iter()
            .map(PriceTrace::start)
            .fold(f64::MIN, f64::max);
        let end = self
            .traces
            .iter()
            .map(PriceTrace::end)
            .fold(f64::MAX, f64::min);
        (start, end)
    }
}

/// Where a market file's trace is: `trace` relative to the market file's folder.
pub fn trace_path(market_file: &Path, trace: &str) -> PathBuf {
    market_file
        .parent()
        .map_or_else(|| PathBuf::from(trace), |d| d.join(trace))
}

/// Checks the types: at least one, unique names, vCPUs ≥ 1, finite positive on-demand prices;
/// the field at fault and why.
fn check_types(types: &[InstanceType]) -> Result<(), (String, String)> {
    if types.is_empty() {
        return Err(("types".into(), "a market needs at least one type".into()));
    }
    for (i, t) in types.iter().enumerate() {
        if t.name.trim().is_empty() || types[..i].iter().any(|o| o.name == t.name) {
            return Err((
                format!("types[{i}].name"),
                format!("{:?} is empty or used twice", t.name),
            ));
        }
        if t.vcpus == 0 {
            return Err((format!("types[{i}].vcpus"), "must be at least 1".into()));
        }
        if !(t.on_demand.is_finite() && t.on_demand > 0.0) {
            return Err((
                format!("types[{i}].on_demand"),
                format!("{} is not a finite price > 0", t.on_demand),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> PriceTrace {
        PriceTrace::new(vec![(0.0, 0.05), (600.0, 0.30), (900.0, 0.04)]).unwrap()
    }

    #[test]
    fn step_function_holds_each_price_until_the_next_point() {
        let t = trace();
        assert_eq!(t.price_at(-5.0), 0.05);
        assert_eq!(t.price_at(599.9), 0.05);
        assert_eq!(t.price_at(600.0), 0.30);
        assert_eq!(t.price_at(5000.0), 0.04);
        assert_eq!(t.next_change_after(0.0), Some(600.0));
        assert_eq!(t.next_change_after(600.0), Some(900.0));
        assert_eq!(t.next_change_after(900.0), None);
    }

    #[test]
    fn first_above_finds_the_eviction_inside_the_window_only() {
        let t = trace();
        assert_eq!(t.first_above(0.1, 0.0, 3600.0), Some(600.0));
        assert_eq!(t.first_above(0.1, 0.0, 600.0), None);
        assert_eq!(t.first_above(0.1, 700.0, 800.0), Some(700.0));
        assert_eq!(t.first_above(0.5, 0.0, 3600.0), None);
    }

    #[test]
    fn bad_points_are_refused() {
        assert!(PriceTrace::new(vec![]).is_err());
        assert!(PriceTrace::new(vec![(0.0, -1.0)]).is_err());
        assert!(PriceTrace::new(vec![(0.0, f64::NAN)]).is_err());
        assert!(PriceTrace::new(vec![(0.0, 1.0), (0.0, 2.0)]).is_err());
    }
}
