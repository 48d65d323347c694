//! Calibrating a device's per-layer cost model ([`crate::layer_model`]) from measured step
//! times: reading a measurement file, fitting each precision mode's rates, and reporting how
//! well the fit explains every point (and, leaving one model out at a time, how it generalises).
//!
//! A measurement file is a JSON list of entries
//! `{"model": "vgg16", "mode": "fp32", "batch": 32, "ms_per_step": 54.2}`: `model` a built-in
//! profile name (`concord profiles`), `mode` one of `fp32`, `tf32`, `bf16`, `batch` the samples
//! per step, `ms_per_step` the measured time of one training step (forward, backward, update).
//!
//! It may instead be a JSON object listing per-layer profiles, each layer a measurement of its
//! own: `{"pipedream_profiles": [{"model": "vgg16", "mode": "fp32", "batch": 128,
//! "graph": "vgg16.graph.txt"}]}`, `graph` a profile as PipeDream's profiler writes it
//! ([`pipedream`]), relative to the file. Layers measured one by one identify the rates of each
//! kind of layer where whole steps only constrain their sum.

pub mod fit;
pub mod host;
pub mod pipedream;
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
    /// The file is not JSON, or neither a list of measurements nor a list of profiles.
    #[error("{path}: not a JSON list of measurements or of per-layer profiles: {reason}")]
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

/// One measured training step, or one layer of one.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The layer measured, by its name in the profile; `None` for a whole step.
    pub layer: Option<String>,
    /// The model: a built-in profile's name as written in a measurement file, or the name a
    /// host measurement gave a real model ([`Measurement::of_sheet`]).
    pub model: String,
    /// The precision mode.
    pub mode: Precision,
    /// Samples per step.
    pub batch: u32,
    /// Measured milliseconds per step (of the layer alone, for a layer).
    pub ms_per_step: f64,
    /// The model's per-layer cost facts (the layer's alone, for a layer).
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
            layer: None,
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
    let items = match value {
        serde_json::Value::Array(items) => items,
        serde_json::Value::Object(mut o) => match o.remove("pipedream_profiles") {
            Some(serde_json::Value::Array(items)) if o.is_empty() => return profiles(items, path),
            _ => {
                return Err(format(
                    "an object must hold exactly one key, \"pipedream_profiles\", a list".into(),
                ))
            }
        },
        _ => return Err(format("the top level is not a list".into())),
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
            layer: None,
            model: e.model,
            mode,
            batch: e.batch,
            ms_per_step: e.ms_per_step,
            layers,
        });
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    model: String,
    mode: String,
    batch: u32,
    graph: PathBuf,
}

/// Reads the per-layer profiles `items` lists, paths relative to `path`'s folder: one
/// measurement per layer.
fn profiles(
    items: Vec<serde_json::Value>,
    path: &Path,
) -> Result<Vec<Measurement>, CalibrateError> {
    let mut out = Vec::new();
    let dir = path.parent().unwrap_or(Path::new("."));
    for (index, item) in items.into_iter().enumerate() {
        let bad = |reason: String| CalibrateError::Entry {
            path: path.to_owned(),
            index,
            reason,
        };
        let e: ProfileEntry = serde_json::from_value(item).map_err(|e| bad(e.to_string()))?;
        let mode: Precision = e.mode.parse().map_err(bad)?;
        let graph = dir.join(&e.graph);
        let text = std::fs::read_to_string(&graph)
            .map_err(|err| bad(format!("{}: cannot read: {err}", graph.display())))?;
        let read = pipedream::parse_graph(&text, e.batch)
            .map_err(|err| bad(format!("{}: {err}", graph.display())))?;
        if read.layers.is_empty() {
            return Err(bad(format!("{}: no timed layers", graph.display())));
        }
        for (kind, n) in &read.unknown_kinds {
            tracing::warn!(
                "{}: {n} {kind} module(s) left out: no cost facts for that kind",
                graph.display()
            );
        }
        for l in read.layers {
            out.push(Measurement {
                layer: Some(l.name),
                model: e.model.clone(),
                mode,
                batch: e.batch,
                ms_per_step: l.seconds * 1e3,
                layers: Arc::new(vec![l.cost]),
            });
        }
    }
    if out.is_empty() {
        return Err(CalibrateError::Empty {
            path: path.to_owned(),
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
    points.map(|p| p.sample()).collect()
}

impl Measurement {
    /// The measurement as the fit sees it.
    pub fn sample(&self) -> Sample<'_> {
        Sample {
            layers: &self.layers,
            batch: f64::from(self.batch),
            seconds: self.ms_per_step / 1e3,
            whole_step: self.layer.is_none(),
        }
    }
}

/// Predicted milliseconds of `point` by `model` (`None` if its mode was not fitted).
pub fn predict_ms(model: &LayerModel, point: &Measurement) -> Option<f64> {
    model
        .rates(point.mode)
        .map(|r| 1e3 * point.sample().predicted(r))
}

/// Points as tables report them: a whole step alone, a profile's layers together as the step
/// they make up (summed), keyed by (model, mode, batch).
fn steps<'a>(points: impl IntoIterator<Item = &'a Measurement>) -> Vec<Vec<&'a Measurement>> {
    let mut out: Vec<Vec<&'a Measurement>> = Vec::new();
    for p in points {
        let same = |q: &&Measurement| {
            q.layer.is_some() && q.model == p.model && q.mode == p.mode && q.batch == p.batch
        };
        match out
            .iter_mut()
            .find(|g| p.layer.is_some() && g.first().is_some_and(same))
        {
            Some(g) => g.push(p),
            None => out.push(vec![p]),
        }
    }
    out
}

/// A step's measured milliseconds and those `predict_ms` gives its points, each summed.
fn step_ms(step: &[&Measurement], predict_ms: impl Fn(&Measurement) -> f64) -> (f64, f64) {
    let measured = step.iter().map(|p| p.ms_per_step).sum();
    let predicted = step.iter().map(|p| predict_ms(p)).sum();
    (measured, predicted)
}

/// Signed error of `predicted` against `measured`, in percent.
pub fn error_pct(predicted: f64, measured: f64) -> f64 {
    100.0 * (predicted / measured - 1.0)
}

/// The per-point table: model, mode, batch, measured, predicted, error; a profile's layers
/// are one row, the step they sum to.
pub fn table(points: &[Measurement], model: &LayerModel) -> String {
    let steps = steps(points);
    let labels: Vec<String> = steps.iter().map(|g| label(g)).collect();
    let w = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(14);
    let mut s = format!(
        "{:<w$} {:<5} {:>6} {:>12} {:>13} {:>8}\n",
        "model", "mode", "batch", "measured_ms", "predicted_ms", "error"
    );
    for (g, label) in steps.iter().zip(&labels) {
        let (measured, pred) = step_ms(g, |p| predict_ms(model, p).unwrap_or(f64::NAN));
        s += &format!(
            "{:<w$} {:<5} {:>6} {:>12.3} {:>13.3} {:>+7.1}%\n",
            label,
            g[0].mode,
            g[0].batch,
            measured,
            pred,
            error_pct(pred, measured)
        );
    }
    s
}

/// A table row's name: the model, with its layer count when its layers were measured.
fn label(step: &[&Measurement]) -> String {
    match step {
        [p] if p.layer.is_none() => p.model.clone(),
        _ => format!("{} ({} layers)", step[0].model, step.len()),
    }
}

/// Leave-one-model-out: for each model of each mode (with at least two models), the fit
/// without it and the worst error on its steps (a profile's layers summed into its step).
/// Rows: (model, mode, worst signed error %).
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
            let worst = steps(of_mode.iter().copied().filter(|p| p.model == left))
                .iter()
                .map(|g| {
                    let (measured, pred) = step_ms(g, |p| p.sample().predicted(&rates) * 1e3);
                    error_pct(pred, measured)
                })
                .fold(0.0, |w: f64, e| if e.abs() > w.abs() { e } else { w });
            out.push((left.to_owned(), mode, worst));
        }
    }
    out
}
