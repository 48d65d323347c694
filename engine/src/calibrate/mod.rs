//! Calibrating a device's per-layer cost model ([`crate::layer_model`]) from measured step
//! times: reading a measurement file, fitting each precision mode's rates, and reporting how
//! well the fit explains every point (and, leaving one model out at a time, how it generalises).
//!
//! A measurement file is a JSON list of entries
//! `{"model": "vgg16", "mode": "fp32", "batch": 32, "ms_per_step": 54.2}`: `model` a built-in
//! profile name (`concord profiles`), `mode` one of `fp32`, `tf32`, `bf16`, `batch` the samples
//! per step, `ms_per_step` the measured time of one training step (forward, backward, update).

pub mod fit;
pub mod host;
pub(crate) mod toml_out;

use crate::cost::LayerCost;
use crate::layer_model::{LayerModel, Precision};
use fit::{Limits, Sample};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use toml_out::profile_toml;

/// Why a measurement file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// The file cannot be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not JSON, or not a list.
    #[error("{path}: not a JSON list of measurements: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file holds no measurement.
    #[error("{path}: no measurements")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// One entry is wrong.
    #[error("{path}: entry {index}: {reason}")]
    Entry {
        /// The file.
        path: PathBuf,
        /// The entry's index in the list (from 0).
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One measured training step.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The model: a built-in profile's name as written in a measurement file, or the name a
    /// host measurement gave a real model ([`Measurement::of_sheet`]).
    pub model: String,
    /// The precision mode.
    pub mode: Precision,
    /// Samples per step.
    pub batch: u32,
    /// Measured milliseconds per step.
    pub ms_per_step: f64,
    /// The model's per-layer cost facts.
    pub layers: Arc<Vec<LayerCost>>,
}

impl Measurement {
    /// A measured step of a model known by its cost sheet `layers` rather than by a built-in
    /// profile's name: a real (trainable) model measured on this machine, named `model` in
    /// tables.
    pub fn of_sheet(
        model: impl Into<String>,
        mode: Precision,
        batch: u32,
        ms_per_step: f64,
        layers: Arc<Vec<LayerCost>>,
    ) -> Measurement {
        Measurement {
            model: model.into(),
            mode,
            batch,
            ms_per_step,
            layers,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    model: String,
    mode: String,
    batch: u32,
    ms_per_step: f64,
}

/// Reads the measurements in `path` (format in the module docs).
pub fn load(path: &Path) -> Result<Vec<Measurement>, CalibrateError> {
    let text = std::fs::read_to_string(path).map_err(|source| CalibrateError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// Parses measurements from `text`, naming `path` in errors.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Measurement>, CalibrateError> {
    let format = |reason: String| CalibrateError::Format {
        path: path.to_owned(),
        reason,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format(e.to_string()))?;
    let serde_json::Value::Array(items) = value else {
        return Err(format("the top level is not a list".into()));
    };
    if items.is_empty() {
        return Err(CalibrateError::Empty {
            path: path.to_owned(),
        });
    }
    let mut sheets: BTreeMap<String, Arc<Vec<LayerCost>>> = BTreeMap::new();
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let bad = |reason: String| CalibrateError::Entry {
            path: path.to_owned(),
            index,
            reason,
        };
        let e: Entry = serde_json::from_value(item).map_err(|e| bad(e.to_string()))?;
        let mode: Precision = e.mode.parse().map_err(bad)?;
        if e.batch == 0 {
            return Err(bad("batch must be at least 1".into()));
        }
        if !(e.ms_per_step.is_finite() && e.ms_per_step > 0.0) {
            return Err(bad(format!(
                "ms_per_step = {} must be a positive number",
                e.ms_per_step
            )));
        }
        let layers = match sheets.get(&e.model) {
            Some(s) => s.clone(),
            None => {
                let profile = crate::profiles::builtin(&e.model).ok_or_else(|| {
                    bad(format!(
                        "unknown model \"{}\"; known: {}",
                        e.model,
                        crate::profiles::builtin_names().join(", ")
                    ))
                })?;
                let s = Arc::new(profile.layers.iter().map(|l| l.cost).collect::<Vec<_>>());
                sheets.insert(e.model.clone(), s.clone());
                s
            }
        };
        out.push(Measurement {
            model: e.model,
            mode,
            batch: e.batch,
            ms_per_step: e.ms_per_step,
            layers,
        });
    }
    Ok(out)
}

/// Spec-sheet limits of a device per precision mode, which keep the fit physical; `None` for a
/// device without known figures (the fit is then bounded only loosely).
pub fn limits_of(device: &str, mode: Precision) -> Limits {
    // (fp32, TF32 and bf16 dense peaks in TFLOP/s, memory TB/s) of the SXM parts.
    let spec = match device {
        "h200" => Some(([67.0, 494.7, 989.4], 4.8)),
        "h100" => Some(([67.0, 494.7, 989.4], 3.35)),
        "a100" => Some(([19.5, 156.0, 312.0], 1.555)),
        "v100" => Some(([15.7, 15.7, 125.0], 0.9)),
        _ => None,
    };
    match spec {
        Some((peaks, memory_tbps)) => Limits::gpu(peaks[mode as usize], memory_tbps),
        None => Limits::gpu(5000.0, 50.0),
    }
}

/// Fits a rate set for every mode present in `points`, within `device`'s limits.
pub fn calibrate(points: &[Measurement], device: &str) -> LayerModel {
    calibrate_within(points, |mode| limits_of(device, mode))
}

/// Fits a rate set for every mode present in `points`, within the limits `limits` gives each
/// mode (e.g. [`Limits::cpu`] for this machine's processor).
pub fn calibrate_within(
    points: &[Measurement],
    limits: impl Fn(Precision) -> Limits,
) -> LayerModel {
    let mut model = LayerModel::default();
    for mode in Precision::ALL {
        let samples = samples(points.iter().filter(|p| p.mode == mode));
        if !samples.is_empty() {
            model.set(mode, fit::fit(&samples, &limits(mode)));
        }
    }
    model
}

fn samples<'a>(points: impl Iterator<Item = &'a Measurement>) -> Vec<Sample<'a>> {
    points
        .map(|p| Sample {
            layers: &p.layers,
            batch: f64::from(p.batch),
            seconds: p.ms_per_step / 1e3,
        })
        .collect()
}

/// Predicted milliseconds per step of `point` by `model` (`None` if its mode was not fitted).
pub fn predict_ms(model: &LayerModel, point: &Measurement) -> Option<f64> {
    model
        .rates(point.mode)
        .map(|r| 1e3 * r.step_seconds(&point.layers, f64::from(point.batch)))
}

/// Signed error of `predicted` against `measured`, in percent.
pub fn error_pct(predicted: f64, measured: f64) -> f64 {
    100.0 * (predicted / measured - 1.0)
}

/// The per-point table: model, mode, batch, measured, predicted, error.
pub fn table(points: &[Measurement], model: &LayerModel) -> String {
    let w = points
        .iter()
        .map(|p| p.model.chars().count())
        .max()
        .unwrap_or(0)
        .max(14);
    let mut s = format!(
        "{:<w$} {:<5} {:>6} {:>12} {:>13} {:>8}\n",
        "model", "mode", "batch", "measured_ms", "predicted_ms", "error"
    );
    for p in points {
        let pred = predict_ms(model, p).unwrap_or(f64::NAN);
        s += &format!(
            "{:<w$} {:<5} {:>6} {:>12.3} {:>13.3} {:>+7.1}%\n",
            p.model,
            p.mode,
            p.batch,
            p.ms_per_step,
            pred,
            error_pct(pred, p.ms_per_step)
        );
    }
    s
}

/// Leave-one-model-out: for each model of each mode (with at least two models), the fit
/// without it and the worst error on its points. Rows: (model, mode, worst signed error %).
pub fn leave_one_out(points: &[Measurement], device: &str) -> Vec<(String, Precision, f64)> {
    leave_one_out_within(points, |mode| limits_of(device, mode))
}

/// [`leave_one_out`] with the limits `limits` gives each mode.
pub fn leave_one_out_within(
    points: &[Measurement],
    limits: impl Fn(Precision) -> Limits,
) -> Vec<(String, Precision, f64)> {
    let mut out = Vec::new();
    for mode in Precision::ALL {
        let of_mode: Vec<&Measurement> = points.iter().filter(|p| p.mode == mode).collect();
        let models: std::collections::BTreeSet<&str> =
            of_mode.iter().map(|p| p.model.as_str()).collect();
        if models.len() < 2 {
            continue;
        }
        for left in models {
            let train = samples(of_mode.iter().copied().filter(|p| p.model != left));
            let rates = fit::fit(&train, &limits(mode));
            let worst = of_mode
                .iter()
                .filter(|p| p.model == left)
                .map(|p| {
                    let pred = rates.step_seconds(&p.layers, f64::from(p.batch)) * 1e3;
                    error_pct(pred, p.ms_per_step)
                })
                .fold(0.0, |w: f64, e| if e.abs() > w.abs() { e } else { w });
            out.push((left.to_owned(), mode, worst));
        }
    }
    out
}
