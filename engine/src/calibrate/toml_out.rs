//! A fitted device profile as TOML, ready to paste under `[cluster.devices.NAME]`.

use crate::cluster::DeviceProfile;
use crate::layer_model::{LayerModel, LayerRates, Precision};

/// `base`'s figures with `model` as its per-layer model and `precision` as its mode, as a TOML
/// table headed `[cluster.devices.<name>]`.
pub fn profile_toml(
    name: &str,
    base: &DeviceProfile,
    model: &LayerModel,
    precision: Precision,
) -> String {
    let mut s = format!("[cluster.devices.{name}]\n");
    s += &format!("peak_tflops = {:?}\n", base.peak_tflops);
    s += &format!("memory_gib = {:?}\n", base.memory_gib);
    s += &format!("nic_gbps = {:?}\n", base.nic_gbps);
    s += &format!("latency_us = {:?}\n", base.latency_us);
    s += &format!("precision = \"{precision}\"\n");
    for mode in Precision::ALL {
        if let Some(r) = model.rates(mode) {
            s += &format!("\n[cluster.devices.{name}.layers.{mode}]\n");
            for (field, v) in LayerRates::NAMES.iter().zip(r.to_vec()) {
                s += &format!("{field} = {:?}\n", round_sig(v, 4));
            }
        }
    }
    s
}

/// `v` rounded to `digits` significant digits (what a profile needs, and readable).
pub(crate) fn round_sig(v: f64, digits: i32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(digits - 1 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}
