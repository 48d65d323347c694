//! The per-layer cost model of a calibrated device: what a training step costs given the
//! model's per-layer facts ([`LayerCost`]) rather than its FLOP count alone.
//!
//! A GPU training step in an eager framework is a stream of kernels. The host dispatches them
//! one by one while the device runs them, so a step takes the longer of the two:
//!
//! ```text
//! step(b) = max(gpu(b), cpu)
//! gpu(b)  = Σ_layers 3·(b + h)·(F_3x3/R_3x3 + F_conv/R_conv + F_1x1/R_1x1 + F_fc/R_fc)
//!         + (3·A·b + 5·P) / BW + K·t_kernel
//! cpu     = Σ_layers K·t_dispatch + t_step
//! ```
//!
//! with, per layer, `F_*` the forward FLOPs per sample of each arithmetic kind (backward costs
//! twice the forward, hence 3; a 3 × 3 convolution of stride 1 is its own kind, since libraries
//! run it with Winograd's algorithm, fewer multiplies than its nominal count, while strided,
//! larger and non-square kernels run as direct or implicit-GEMM convolutions), `A` the
//! activation bytes per sample its forward operations read and write (the backward moves about
//! twice as much, hence 3), `P` its parameter bytes (read in the forward and backward passes,
//! gradient written, update read and written: 5 passes) and `K` its kernels. The rates `R_*`,
//! the batch `h` at which small batches reach half the arithmetic rate (a kernel on few samples
//! does not fill the device), the effective memory
//! bandwidth `BW`, the device time per kernel, the host time per kernel and the host time per
//! step `t_step` (what the framework does once a step besides dispatching: with autocast or
//! tensor cores, a fixed cost that lifts the floor of every model alike) are fitted to
//! measurements per precision mode (see [`crate::calibrate`]).

use crate::cost::LayerCost;
use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Training FLOPs per forward FLOP (forward + backward).
const TRAIN_FLOPS: f64 = 3.0;
/// Activation traffic of a training step per forward byte.
const TRAIN_ACTIVATION_PASSES: f64 = 3.0;
/// Parameter-sized passes of a training step (forward read, backward read, gradient write,
/// update read of weights and gradients folded with the write).
const TRAIN_PARAM_PASSES: f64 = 5.0;

/// The numeric mode a device runs a training step in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// fp32 arithmetic on the CUDA cores (TF32 off).
    Fp32,
    /// fp32 storage, TF32 tensor-core arithmetic.
    Tf32,
    /// bf16 mixed precision (autocast).
    Bf16,
}

impl Precision {
    /// Every mode, in a fixed order.
    pub const ALL: [Precision; 3] = [Precision::Fp32, Precision::Tf32, Precision::Bf16];

    /// The config spelling (`fp32`, `tf32`, `bf16`).
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "fp32" => Ok(Precision::Fp32),
            "tf32" => Ok(Precision::Tf32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!(
                "unknown precision \"{s}\"; known: fp32, tf32, bf16"
            )),
        }
    }
}

/// The fitted rates of one precision mode; see the module docs for the formula.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "RatesFields")]
pub struct LayerRates {
    /// Saturated rate of spatial convolutions other than 3 × 3 of stride 1 (larger or
    /// non-square kernels, strides), TFLOP/s.
    pub conv_tflops: f64,
    /// Saturated rate of 3 × 3 stride-1 convolutions, TFLOP/s of nominal (direct-convolution)
    /// work; Winograd's algorithm can put it above the device's peak. A profile that leaves it
    /// out rates them at `conv_tflops` (one rate for every spatial convolution).
    pub conv3x3_tflops: f64,
    /// Saturated rate of 1 × 1 convolutions, TFLOP/s.
    pub pointwise_tflops: f64,
    /// Saturated rate of fully-connected layers (matrix products), TFLOP/s.
    pub matmul_tflops: f64,
    /// Batch at which arithmetic reaches half its saturated rate.
    pub half_batch: f64,
    /// Effective memory bandwidth of memory-bound work, TB/s.
    pub memory_tbps: f64,
    /// Device time every kernel costs besides its work, µs.
    pub kernel_us: f64,
    /// Host time to dispatch one kernel, µs: the floor of a step of small kernels.
    pub dispatch_us: f64,
    /// Host time every step costs besides its kernels' dispatch, µs (the framework's own work
    /// per step); part of the floor. Profiles written before it existed mean 0.
    pub step_us: f64,
}

/// [`LayerRates`] as a profile writes it: the keys profiles written before them lack are
/// optional here.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RatesFields {
    conv_tflops: f64,
    #[serde(default)]
    conv3x3_tflops: Option<f64>,
    pointwise_tflops: f64,
    matmul_tflops: f64,
    half_batch: f64,
    memory_tbps: f64,
    kernel_us: f64,
    dispatch_us: f64,
    #[serde(default)]
    step_us: f64,
}

impl From<RatesFields> for LayerRates {
    fn from(f: RatesFields) -> LayerRates {
        LayerRates {
            conv_tflops: f.conv_tflops,
            conv3x3_tflops: f.conv3x3_tflops.unwrap_or(f.conv_tflops),
            pointwise_tflops: f.pointwise_tflops,
            matmul_tflops: f.matmul_tflops,
            half_batch: f.half_batch,
            memory_tbps: f.memory_tbps,
            kernel_us: f.kernel_us,
            dispatch_us: f.dispatch_us,
            step_us: f.step_us,
        }
    }
}

impl LayerRates {
    /// The rates as a parameter vector, in [`LayerRates::NAMES`] order (what the fit varies).
    pub fn to_vec(&self) -> [f64; 9] {
        [
            self.conv_tflops,
            self.conv3x3_tflops,
            self.pointwise_tflops,
            self.matmul_tflops,
            self.half_batch,
            self.memory_tbps,
            self.kernel_us,
            self.dispatch_us,
            self.step_us,
        ]
    }

    /// Rates from a parameter vector in [`LayerRates::NAMES`] order.
    pub fn from_vec(v: [f64; 9]) -> LayerRates {
        LayerRates {
            conv_tflops: v[0],
            conv3x3_tflops: v[1],
            pointwise_tflops: v[2],
            matmul_tflops: v[3],
            half_batch: v[4],
            memory_tbps: v[5],
            kernel_us: v[6],
            dispatch_us: v[7],
            step_us: v[8],
        }
    }

    /// Field names, in parameter-vector order.
    pub const NAMES: [&'static str; 9] = [
        "conv_tflops",
        "conv3x3_tflops",
        "pointwise_tflops",
        "matmul_tflops",
        "half_batch",
        "memory_tbps",
        "kernel_us",
        "dispatch_us",
        "step_us",
    ];

    /// Fields that may be zero: the half batch and the per-kernel and per-step times (a rate
    /// or a bandwidth must be positive).
    const MAY_BE_ZERO: [&'static str; 4] = ["half_batch", "kernel_us", "dispatch_us", "step_us"];

    /// Seconds of one training step of `batch` samples through `layers`.
    pub fn step_seconds(&self, layers: &[LayerCost], batch: f64) -> f64 {
        let (device, host) = self.step_parts(layers, batch);
        device.max(host)
    }

    /// Seconds of `layers` alone within a step of `batch` samples (a layer measured by itself):
    /// the longer of their device time and their kernels' dispatch, without the step's fixed
    /// host cost.
    pub fn layer_seconds(&self, layers: &[LayerCost], batch: f64) -> f64 {
        let (device, host) = self.step_parts(layers, batch);
        device.max(host - self.step_us * 1e-6)
    }

    /// The two sides of a step: (device seconds, host dispatch seconds); the step takes the
    /// longer.
    pub fn step_parts(&self, layers: &[LayerCost], batch: f64) -> (f64, f64) {
        let (mut gpu, mut kernels) = (0.0, 0.0);
        let fill = batch + self.half_batch;
        for l in layers {
            gpu += TRAIN_FLOPS
                * fill
                * (l.conv3x3_flops / (self.conv3x3_tflops * 1e12)
                    + l.conv_flops / (self.conv_tflops * 1e12)
                    + l.pointwise_flops / (self.pointwise_tflops * 1e12)
                    + l.matmul_flops / (self.matmul_tflops * 1e12));
            gpu += (TRAIN_ACTIVATION_PASSES * l.activation_bytes * batch
                + TRAIN_PARAM_PASSES * l.param_bytes)
                / (self.memory_tbps * 1e12);
            kernels += l.kernels;
        }
        gpu += kernels * self.kernel_us * 1e-6;
        (gpu, (kernels * self.dispatch_us + self.step_us) * 1e-6)
    }

    /// Checks every rate is a positive (`half_batch`, `kernel_us`, `dispatch_us`, `step_us`:
    /// non-negative) finite number; errors name `key.<field>`.
    pub fn validate(&self, key: &str) -> Result<()> {
        for (name, v) in Self::NAMES.iter().zip(self.to_vec()) {
            let may_be_zero = Self::MAY_BE_ZERO.contains(name);
            let ok = v.is_finite() && (v > 0.0 || (may_be_zero && v == 0.0));
            if !ok {
                let want = if may_be_zero {
                    "must be a number >= 0"
                } else {
                    "must be a positive number"
                };
                return Err(EngineError::config(format!("{key}.{name}"), v, want));
            }
        }
        Ok(())
    }
}

/// A device's fitted rates per precision mode (a mode may be missing if it was not measured).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerModel {
    /// fp32 rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<LayerRates>,
    /// TF32 rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<LayerRates>,
    /// bf16 rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16: Option<LayerRates>,
}

impl LayerModel {
    /// The rates of `mode`, if fitted.
    pub fn rates(&self, mode: Precision) -> Option<&LayerRates> {
        match mode {
            Precision::Fp32 => self.fp32.as_ref(),
            Precision::Tf32 => self.tf32.as_ref(),
            Precision::Bf16 => self.bf16.as_ref(),
        }
    }

    /// Sets the rates of `mode`.
    pub fn set(&mut self, mode: Precision, rates: LayerRates) {
        match mode {
            Precision::Fp32 => self.fp32 = Some(rates),
            Precision::Tf32 => self.tf32 = Some(rates),
            Precision::Bf16 => self.bf16 = Some(rates),
        }
    }

    /// The modes that have rates.
    pub fn modes(&self) -> Vec<Precision> {
        Precision::ALL
            .into_iter()
            .filter(|&m| self.rates(m).is_some())
            .collect()
    }

    /// The same model with every mode's memory bandwidth scaled by `factor` (a device of the
    /// same chip with other memory).
    pub fn with_memory_scaled(&self, factor: f64) -> LayerModel {
        let scale = |r: &Option<LayerRates>| {
            r.map(|mut r| {
                r.memory_tbps *= factor;
                r
            })
        };
        LayerModel {
            fp32: scale(&self.fp32),
            tf32: scale(&self.tf32),
            bf16: scale(&self.bf16),
        }
    }

    /// Checks every mode's rates; errors name `key.<mode>.<field>`.
    pub fn validate(&self, key: &str) -> Result<()> {
        for mode in Precision::ALL {
            if let Some(r) = self.rates(mode) {
                r.validate(&format!("{key}.{mode}"))?;
            }
        }
        Ok(())
    }
}

/// The built-in H200 model: rates fitted by `concord calibrate` to the PyTorch step times in
/// `bench/calibration/h200-torch-sweep.json` (VGG-16, ResNet-50, AlexNet, Inception-V3;
/// batches 8–256; fp32, TF32, bf16). Refit with
/// `concord calibrate --from bench/calibration/h200-torch-sweep.json`.
pub fn fitted_h200() -> LayerModel {
    let r = |v: [f64; 9]| Some(LayerRates::from_vec(v));
    LayerModel {
        fp32: r(H200_FP32),
        tf32: r(H200_TF32),
        bf16: r(H200_BF16),
    }
}

/// The built-in V100 model: fp32 rates fitted by `concord calibrate` to the per-layer profiles
/// PipeDream's profiler recorded on V100s for its planner (VGG-16, ResNet-50 and -101,
/// Inception-V3, torchvision's AlexNet; `bench/calibration/v100-pipedream-layers.json`), so that
/// the thesis's scenarios charge layers as its planner saw them. The half batch fits to zero
/// (every profile is at minibatch 64 or more) and the per-kernel cost is high (each module was
/// timed by itself). fp32 only. Refit with
/// `concord calibrate --from bench/calibration/v100-pipedream-layers.json --device v100`.
pub fn fitted_v100() -> LayerModel {
    LayerModel {
        fp32: Some(LayerRates::from_vec(V100_FP32)),
        tf32: None,
        bf16: None,
    }
}

/// The per-layer model of a GeForce GTX TITAN X (Maxwell) from its datasheet: 6.6 TFLOP/s fp32
/// peak of which convolutions reach 60 % and matrix products 70 %, 336 GB/s of memory of which
/// memory-bound kernels reach 75 %, saturation near batch 16, 4 µs per kernel. fp32 only.
pub fn datasheet_titan_x() -> LayerModel {
    LayerModel {
        fp32: Some(LayerRates::from_vec([
            3.96, 3.96, 3.96, 4.62, 16.0, 0.252, 4.0, 3.0, 0.0,
        ])),
        tf32: None,
        bf16: None,
    }
}

/// Fitted V100 fp32 rates, [`LayerRates::NAMES`] order.
const V100_FP32: [f64; 9] = [13.63, 24.97, 13.22, 13.22, 0.001, 0.5569, 151.3, 220.5, 0.0];
/// Fitted H200 fp32 rates, [`LayerRates::NAMES`] order.
const H200_FP32: [f64; 9] = [49.0, 94.14, 67.0, 67.0, 8.455, 1.928, 16.18, 50.06, 402.1];
/// Fitted H200 TF32 rates, [`LayerRates::NAMES`] order.
const H200_TF32: [f64; 9] = [
    89.26, 187.2, 494.7, 494.7, 0.7007, 3.649, 16.43, 41.57, 1489.0,
];
/// Fitted H200 bf16 rates, [`LayerRates::NAMES`] order.
const H200_BF16: [f64; 9] = [
    98.48, 491.3, 989.4, 989.4, 12.1, 3.329, 6.301, 51.18, 1725.0,
];
