//! The cluster model: devices from named profiles, machines, where each role runs, and what
//! compute and transfers cost on them.

use crate::cost::LayerCost;
use crate::error::{EngineError, Result};
use crate::ids::{MachineId, RoleId};
use crate::layer_model::{LayerModel, LayerRates, Precision};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod derived;
mod hosts;
mod wake;
pub use hosts::{Host, HostConfig, ProcessorClocks};
pub use wake::WakeCurve;

/// Host-device link bandwidth of a device profile that does not set one, bytes/s (PCIe 3.0 x16).
const HOST_LINK_BYTES_PER_S: f64 = 12e9;
/// Fixed cost of one host-device copy, seconds (an asynchronous copy's launch and completion).
const HOST_LINK_LATENCY_S: f64 = 10e-6;

/// A device's performance and memory figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Peak fp32 throughput, in TFLOP/s.
    pub peak_tflops: f64,
    /// Fraction of peak a saturated training step reaches (kernels, memory bound layers).
    #[serde(default = "default_efficiency")]
    pub efficiency: f64,
    /// Batch size at which half the saturated throughput is reached: small batches do not fill
    /// the device. Compute time is then linear in the batch with an offset (`t ∝ b + b½`).
    #[serde(default)]
    pub half_saturation_batch: f64,
    /// The half-saturation batch of fully-connected layers where it differs from
    /// `half_saturation_batch`: a matrix product over features has far less parallel work per
    /// sample than a convolution, so it needs a much larger batch to fill the device (Fela's
    /// profiling on a K40c: convolutions saturate near batch 16, a 4096 × 4096 layer near 2048).
    /// Used by the FLOP model when it charges a step from the model's per-layer facts; unset,
    /// every layer saturates alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul_half_saturation_batch: Option<f64>,
    /// Device memory, in GiB.
    pub memory_gib: f64,
    /// The machine's NIC bandwidth, in Gbit/s (per direction, or for both together when
    /// `nic_duplex` is `half`).
    pub nic_gbps: f64,
    /// Whether the machine sends and receives at `nic_gbps` at once (`full`, the default, as an
    /// Ethernet NIC does) or its sends and receives share it (`half`): processes on one host,
    /// whose loopback traffic the same cores copy in either direction, so two processes sending
    /// each other a message at once each get about half the rate of a lone stream. Measured by
    /// `concord calibrate --host`.
    #[serde(default, skip_serializing_if = "Duplex::is_full")]
    pub nic_duplex: Duplex,
    /// One-way network latency, in microseconds.
    pub latency_us: f64,
    /// Bandwidth of the link between this machine's devices, in Gbit/s per direction: what one
    /// device sends another (PCIe 3.0 x16 ≈ 126 Gbit/s for its 15.75 GB/s; NVLink 2.0 on 8-GPU
    /// V100 servers 300 Gbit/s, see the built-ins). A message between two roles of such a
    /// machine occupies the sender's port out and the receiver's port in (one per role) for
    /// `bytes / bandwidth`, as NICs do between machines. Unset, roles of one machine exchange
    /// messages for free (the behaviour of configs written before the field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_gbps: Option<f64>,
    /// Bandwidth of the link between the device and its host's memory, in Gbit/s per direction:
    /// what a memory policy moves feature maps over when it offloads them. Unset, 96 Gbit/s
    /// (12 GB/s, what PCIe 3.0 x16 sustains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_gbps: Option<f64>,
    /// How fast a role copies a message's tensors between its math and the message, in Gbit/s:
    /// the sender packs the payload before any of it leaves, the receiver unpacks what it copies
    /// once it has arrived (all but a push's gradients, which a server sums as it aggregates
    /// them), each role one message after another (on a GPU the device-to-host and
    /// host-to-device copies, on a CPU memory copies of data just written). Measured by
    /// `concord calibrate --host`. Unset, packing is free (the behaviour of configs written
    /// before the field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_copy_gbps: Option<f64>,
    /// A role's fixed cost of handling one message to or from another machine, in microseconds,
    /// at each end: framing it, the system calls, waking the role it is for (the LogP model's
    /// per-message overhead). Charged in the same queues as the copies, so a role's messages
    /// wait for each other; `latency_us` is then what is left of a lone message's time between
    /// the two ends. Measured by `concord calibrate --host`. Unset, none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_us: Option<f64>,
    /// The share of a processor each end of a transfer keeps busy while it lasts, where the
    /// sender's and the receiver's machines run on one shared host (`[cluster.hosts]`): their
    /// messages cross loopback, whose bytes the host's processors copy, so a transfer waits for
    /// a processor where the host's other work (a step, another transfer) holds them. The
    /// sender's end is charged at the sender's share, the receiver's at the receiver's. Measured
    /// by `concord calibrate --host --processes N` from how much slower two processes sending
    /// each other a message at once are than one alone. Unset, a transfer takes no processor
    /// time (a NIC copies by DMA; the behaviour of configs written before the field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loopback_share: Option<f64>,
    /// How much longer a message from another machine takes to reach a role of this one that has
    /// waited long for it (its processor asleep, or halted by a hypervisor), by how long it
    /// waited: a role's wait is counted from the last message it received. Measured by
    /// `concord calibrate --host`. Unset, a message takes `latency_us` however long its receiver
    /// waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<WakeCurve>,
    /// Numeric mode of training steps (`fp32`, `tf32`, `bf16`), selecting the `layers` rates it
    /// charges by; default `fp32`. Only meaningful with a `layers` model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// Per-layer cost model fitted to measurements (`concord calibrate`), per precision mode.
    /// Without one, a training step is charged by the FLOP model (`peak_tflops × efficiency`,
    /// `half_saturation_batch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<LayerModel>,
    /// Where the tensor math of workers on such a machine runs: the CPU (default), or GPU
    /// `slot` of the machine with candle CUDA tensors (builds with the `cuda` feature). Time still
    /// comes from the cost model in `sim`; `wall` measures it.
    #[serde(default, skip_serializing_if = "Backend::is_cpu")]
    pub backend: Backend,
}

/// Whether a machine's NIC carries its sends and receives at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Duplex {
    /// Each direction at the NIC's full bandwidth, independently.
    #[default]
    Full,
    /// Both directions share the NIC's bandwidth: one transfer at a time, in or out.
    Half,
}

impl Duplex {
    /// Whether this is full duplex (the default, left out of a written config).
    pub fn is_full(&self) -> bool {
        *self == Duplex::Full
    }

    /// The word a config writes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Duplex::Full => "full",
            Duplex::Half => "half",
        }
    }
}

/// Where a device's tensor math runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// candle CPU tensors.
    #[default]
    Cpu,
    /// candle CUDA tensors on the machine's GPUs, one per worker slot.
    Cuda,
}

impl Backend {
    /// Whether this is the CPU backend (the default, left out of a written config).
    pub fn is_cpu(&self) -> bool {
        *self == Backend::Cpu
    }
}

fn default_efficiency() -> f64 {
    0.5
}

impl DeviceProfile {
    /// A device of these figures and nothing else modeled: its steps charged by the FLOP model at
    /// half its peak with no half-saturation batch, a full-duplex NIC, and no link between its
    /// devices, message costs, wake-ups or fitted layer model. What a device written in code
    /// starts from, the other fields set by struct update:
    /// `DeviceProfile { bus_gbps: Some(126.0), ..DeviceProfile::new(4.29, 12.0, 10.0, 25.0) }`.
    pub fn new(peak_tflops: f64, memory_gib: f64, nic_gbps: f64, latency_us: f64) -> DeviceProfile {
        DeviceProfile {
            peak_tflops,
            efficiency: default_efficiency(),
            half_saturation_batch: 0.0,
            matmul_half_saturation_batch: None,
            memory_gib,
            nic_gbps,
            nic_duplex: Duplex::Full,
            latency_us,
            bus_gbps: None,
            host_link_gbps: None,
            message_copy_gbps: None,
            message_us: None,
            loopback_share: None,
            wake: None,
            backend: Backend::Cpu,
            precision: None,
            layers: None,
        }
    }

    /// Built-in profiles from public figures (fp32 peak, memory, typical NIC of such nodes, and
    /// for GPUs the link between the devices of one server).
    pub fn builtins() -> BTreeMap<String, DeviceProfile> {
        let mk = |peak, half, mem, nic, lat| DeviceProfile {
            half_saturation_batch: half,
            ..DeviceProfile::new(peak, mem, nic, lat)
        };
        let h200 = crate::layer_model::fitted_h200();
        let v100_layers = crate::layer_model::fitted_v100();
        // H100 SXM is the same GH100 chip as H200 (132 SMs, same clocks), with 80 GB of HBM3 at
        // 3.35 TB/s instead of 141 GB of HBM3e at 4.8 TB/s: the H200's fitted compute and
        // overheads, its memory bandwidth scaled by the ratio of the two.
        let h100_layers = h200.with_memory_scaled(3.35 / 4.8);
        let bus = |gbps, p: DeviceProfile| DeviceProfile {
            bus_gbps: Some(gbps),
            ..p
        };
        BTreeMap::from([
            // A laptop/server CPU socket: ~0.2 TFLOP/s fp32 with AVX2, 16 GiB, 10 GbE.
            ("cpu".to_string(), mk(0.2, 4.0, 16.0, 10.0, 50.0)),
            // Tesla K40c: 4.29 TFLOP/s fp32, 12 GB; the Fela testbed's 10 Gbps links; GPUs of a
            // server talk over PCIe 3.0 x16, 15.75 GB/s = 126 Gbit/s per direction.
            (
                "k40c".to_string(),
                bus(126.0, mk(4.29, 16.0, 12.0, 10.0, 25.0)),
            ),
            // GeForce GTX TITAN X (Maxwell): 6.6 TFLOP/s fp32, 12 GB at 336 GB/s, on PCIe 3.0
            // x16 behind a switch at 16 GB/s = 128 Gbit/s (the Dymem testbed). A per-layer
            // model from the datasheet (not fitted: no measurements of this card here) so that
            // memory-bound layers (batch-norm, activations, pooling) cost time: cuDNN-era
            // convolutions at 60 % of peak, matrix products at 70 %, 75 % of the memory bandwidth.
            (
                "titan-x".to_string(),
                DeviceProfile {
                    host_link_gbps: Some(128.0),
                    layers: Some(crate::layer_model::datasheet_titan_x()),
                    ..bus(126.0, mk(6.6, 16.0, 12.0, 10.0, 25.0))
                },
            ),
            // Tesla V100 (SXM2): 15.7 TFLOP/s fp32, 16 GB; 25 Gbps between servers; NVLink 2.0,
            // 25 GB/s per link and direction, six links per GPU: in the hybrid cube-mesh of
            // 8-GPU servers (DGX-1, AWS p3.16xlarge) a GPU reaches each of its four peers over
            // one or two links, 1.5 on average: 37.5 GB/s = 300 Gbit/s. (The datasheet's
            // "300 GB/s" is all six links, both directions.)
            // Per-layer model fitted to PipeDream's V100 profiles (bench/calibration).
            (
                "v100".to_string(),
                DeviceProfile {
                    layers: Some(v100_layers.clone()),
                    ..bus(300.0, mk(15.7, 32.0, 16.0, 25.0, 10.0))
                },
            ),
            // The V100 servers of PipeDream's Cluster-A (Azure NC24 v3): four GPUs per server
            // on PCIe 3.0 x16, 15.75 GB/s = 126 Gbit/s, and 10 Gbps between servers; the same
            // per-layer model as `v100`.
            (
                "v100-pcie".to_string(),
                DeviceProfile {
                    layers: Some(v100_layers),
                    ..bus(126.0, mk(15.7, 32.0, 16.0, 10.0, 10.0))
                },
            ),
            // A100 (SXM4 40 GB): 19.5 TFLOP/s fp32; 100 Gbps NICs; NVLink 3.0 through NVSwitch,
            // 600 GB/s both directions: 300 GB/s = 2400 Gbit/s per direction to any peer.
            (
                "a100".to_string(),
                bus(2400.0, mk(19.5, 48.0, 40.0, 100.0, 5.0)),
            ),
            // H100 (SXM5): 67 TFLOP/s fp32, 80 GB; 400 Gbps NICs; NVLink 4 through NVSwitch,
            // 900 GB/s both directions: 450 GB/s = 3600 Gbit/s per direction; per-layer model
            // from the H200 fit (above).
            (
                "h100".to_string(),
                DeviceProfile {
                    layers: Some(h100_layers),
                    ..bus(3600.0, mk(67.0, 64.0, 80.0, 400.0, 5.0))
                },
            ),
            // H200 (SXM): 67 TFLOP/s fp32, 141 GB (131.3 GiB); 400 Gbps NICs; NVLink 4 as the
            // H100's, 3600 Gbit/s per direction; per-layer model fitted to PyTorch step times
            // (bench/calibration).
            (
                "h200".to_string(),
                DeviceProfile {
                    layers: Some(h200),
                    ..bus(3600.0, mk(67.0, 64.0, 131.3, 400.0, 5.0))
                },
            ),
        ])
    }

    /// Sustained FLOP/s at batch size `batch`.
    pub fn flops_at(&self, batch: f64) -> f64 {
        let peak = self.peak_tflops * 1e12 * self.efficiency;
        if self.half_saturation_batch <= 0.0 {
            peak
        } else {
            peak * batch / (batch + self.half_saturation_batch)
        }
    }

    /// Seconds to run `flops_per_sample × batch` FLOPs.
    pub fn compute_seconds(&self, flops_per_sample: f64, batch: f64) -> f64 {
        if batch <= 0.0 || flops_per_sample <= 0.0 {
            return 0.0;
        }
        flops_per_sample * batch / self.flops_at(batch)
    }

    /// The fitted rates a training step is charged by: the `layers` model's rates for the
    /// device's precision, `None` for a device on the FLOP model.
    pub fn layer_rates(&self) -> Option<&LayerRates> {
        self.layers
            .as_ref()?
            .rates(self.precision.unwrap_or(Precision::Fp32))
    }

    /// Seconds of one training step of `batch` samples of a model with per-layer facts
    /// `layers` and `flops_per_sample` training FLOPs per sample: the per-layer model when the
    /// device has one and the model has facts, else exactly [`DeviceProfile::compute_seconds`].
    pub fn step_seconds(&self, layers: &[LayerCost], flops_per_sample: f64, batch: f64) -> f64 {
        match self.layer_rates() {
            Some(rates) if !layers.is_empty() && batch > 0.0 => rates.step_seconds(layers, batch),
            _ => self.compute_seconds(flops_per_sample, batch) + self.matmul_lag(layers, batch),
        }
    }

    /// The extra seconds fully-connected layers cost on the FLOP model when they saturate later
    /// than the rest ([`DeviceProfile::matmul_half_saturation_batch`]): their training FLOPs
    /// charged at their own half-saturation batch instead of the device's.
    fn matmul_lag(&self, layers: &[LayerCost], batch: f64) -> f64 {
        let Some(h_mm) = self.matmul_half_saturation_batch else {
            return 0.0;
        };
        if batch <= 0.0 {
            return 0.0;
        }
        let matmul: f64 = layers.iter().map(|l| 3.0 * l.matmul_flops).sum();
        let rate = self.peak_tflops * 1e12 * self.efficiency;
        matmul * (h_mm - self.half_saturation_batch) / rate
    }

    /// Seconds to run a batch-independent amount of work (e.g. an optimizer update).
    pub fn work_seconds(&self, flops: f64) -> f64 {
        flops / (self.peak_tflops * 1e12 * self.efficiency)
    }

    /// NIC bandwidth in bytes per second.
    pub fn nic_bytes_per_s(&self) -> f64 {
        self.nic_gbps * 1e9 / 8.0
    }

    /// Bandwidth of the link between this machine's devices in bytes per second; `None` when the
    /// profile has no `bus_gbps` (same-machine messages are then free).
    pub fn bus_bytes_per_s(&self) -> Option<f64> {
        self.bus_gbps.map(|g| g * 1e9 / 8.0)
    }

    /// How fast a role packs or unpacks a message's tensors, bytes per second; `None` when the
    /// profile has no `message_copy_gbps` (packing is then free).
    pub fn message_copy_bytes_per_s(&self) -> Option<f64> {
        self.message_copy_gbps.map(|g| g * 1e9 / 8.0)
    }

    /// Whether roles of such a machine spend time on their messages
    /// ([`DeviceProfile::message_handling_seconds`] is not always 0).
    pub fn handles_messages(&self) -> bool {
        self.message_copy_gbps.is_some() || self.message_us.is_some()
    }

    /// Seconds a role of such a machine spends on its end of a message carrying `payload` bytes
    /// of tensors: the fixed handling ([`DeviceProfile::message_us`]) when the message goes to
    /// or comes from another machine, and the copy of its tensors
    /// ([`DeviceProfile::message_copy_gbps`]). 0 without either.
    pub fn message_handling_seconds(&self, payload: u64, between_machines: bool) -> f64 {
        let fixed = match self.message_us {
            Some(us) if between_machines => us * 1e-6,
            _ => 0.0,
        };
        fixed + self.tensor_copy_seconds(payload)
    }

    /// Seconds a role of such a machine takes to copy `bytes` of tensors in memory at
    /// [`DeviceProfile::message_copy_gbps`]: a message's payload, or gradients fused into one
    /// buffer for a collective. 0 without a copy rate.
    pub fn tensor_copy_seconds(&self, bytes: u64) -> f64 {
        self.message_copy_bytes_per_s()
            .map_or(0.0, |rate| bytes as f64 / rate)
    }

    /// Memory budget in bytes.
    pub fn memory_bytes(&self) -> u64 {
        (self.memory_gib * (1u64 << 30) as f64) as u64
    }

    /// Host-device link bandwidth memory policies move tensors over, bytes/s
    /// ([`DeviceProfile::host_link_gbps`], PCIe 3.0 x16 when unset).
    pub fn host_link_bytes_per_s(&self) -> f64 {
        self.host_link_gbps
            .map_or(HOST_LINK_BYTES_PER_S, |g| g * 1e9 / 8.0)
    }

    /// The host link as the two-lane memory executor sees it (bandwidth and per-copy latency).
    pub fn host_link(&self) -> crate::memory::lanes::HostLink {
        crate::memory::lanes::HostLink {
            bytes_per_s: self.host_link_bytes_per_s(),
            latency_s: HOST_LINK_LATENCY_S,
        }
    }

    /// Seconds of one operator's forward and backward pass on `batch` samples: its share of a
    /// training step as [`DeviceProfile::step_seconds`] charges it (a third forward, two thirds
    /// backward), so the operators of a model add up to its step as far as the step's cost
    /// model is additive.
    pub fn op_seconds(&self, op: &crate::graph::OpNode, batch: u64) -> (f64, f64) {
        use crate::context::StepPart;
        let flops = 3.0 * op.cost.forward_flops();
        let step = self.step_seconds(std::slice::from_ref(&op.cost), flops, batch as f64);
        (step * StepPart::FORWARD, step * StepPart::BACKWARD)
    }

    fn validate(&self, key: &str) -> Result<()> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(EngineError::config(
                    format!("{key}.{name}"),
                    v,
                    "must be a positive number",
                ))
            }
        };
        positive("peak_tflops", self.peak_tflops)?;
        positive("memory_gib", self.memory_gib)?;
        positive("nic_gbps", self.nic_gbps)?;
        if let Some(link) = self.host_link_gbps {
            positive("host_link_gbps", link)?;
        }
        if let Some(bus) = self.bus_gbps {
            positive("bus_gbps", bus)?;
        }
        if let Some(copy) = self.message_copy_gbps {
            positive("message_copy_gbps", copy)?;
        }
        if let Some(us) = self.message_us {
            if !(us.is_finite() && us >= 0.0) {
                return Err(EngineError::config(
                    format!("{key}.message_us"),
                    us,
                    "must be a number of microseconds, 0 or more",
                ));
            }
        }
        if let Some(share) = self.loopback_share {
            if !(share > 0.0 && share <= 1.0) {
                return Err(EngineError::config(
                    format!("{key}.loopback_share"),
                    share,
                    "must be a share of one processor: above 0 and at most 1",
                ));
            }
        }
        if let Some(wake) = &self.wake {
            wake.validate(&format!("{key}.wake"))?;
        }
        if !(self.efficiency > 0.0 && self.efficiency <= 1.0) {
            return Err(EngineError::config(
                format!("{key}.efficiency"),
                self.efficiency,
                "must be in (0, 1]",
            ));
        }
        if let Some(h) = self.matmul_half_saturation_batch {
            if !(h.is_finite() && h >= 0.0) {
                return Err(EngineError::config(
                    format!("{key}.matmul_half_saturation_batch"),
                    h,
                    "must be >= 0",
                ));
            }
        }
        if !(self.latency_us >= 0.0 && self.half_saturation_batch >= 0.0) {
            return Err(EngineError::config(
                key,
                format!(
                    "latency_us = {}, half_saturation_batch = {}",
                    self.latency_us, self.half_saturation_batch
                ),
                "must be >= 0",
            ));
        }
        if let Some(layers) = &self.layers {
            layers.validate(&format!("{key}.layers"))?;
        }
        match (&self.layers, self.precision) {
            (None, Some(p)) => Err(EngineError::config(
                format!("{key}.precision"),
                format!("\"{p}\""),
                "needs a `layers` model fitted for it (see `concord calibrate`)",
            )),
            (Some(layers), p) if self.layer_rates().is_none() => Err(EngineError::config(
                format!("{key}.precision"),
                format!("\"{}\"", p.unwrap_or(Precision::Fp32)),
                format!(
                    "the `layers` model has no rates for it; fitted: {}",
                    layers
                        .modes()
                        .iter()
                        .map(|m| m.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// A group of identical machines in the cluster config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineGroup {
    /// Device profile name (built-in or defined under `[cluster.devices]`).
    pub device: String,
    /// How many such machines.
    #[serde(default = "one")]
    pub count: u32,
    /// Worker slots per machine (one worker per device or core).
    #[serde(default = "one")]
    pub slots: u32,
    /// Free-form labels of these machines (e.g. `tier = "transient"`, an allocation id, a
    /// price): what membership traces select machines by and what strategies that care about
    /// machine kinds (tiers of reliability) read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}

/// Cluster section of the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Device profile used when `machines` is empty: one machine per worker.
    pub default_device: String,
    /// Machine groups, filled with workers in order. Empty: one `default_device` machine per worker.
    #[serde(default)]
    pub machines: Vec<MachineGroup>,
    /// User-defined device profiles (add to or override the built-ins). An entry is a whole
    /// profile, or `base = "<name>"` with only the fields that differ from profile `<name>` (a
    /// built-in or another entry; an entry named after a built-in may extend it). Held whole:
    /// the bases are applied as the config is read.
    #[serde(default, deserialize_with = "derived::deserialize_devices")]
    pub devices: BTreeMap<String, DeviceProfile>,
    /// Give every parameter server a machine of its own (of `server_device`) instead of sharing
    /// the workers' machines: the papers' setups with a separate PS tier.
    #[serde(default)]
    pub dedicated_servers: bool,
    /// Device profile of dedicated server machines (default: `default_device`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_device: Option<String>,
    /// The machine of each server, by index, where a strategy needs servers in particular places
    /// (e.g. one per machine of a tier): as many entries as servers (standby ones included).
    /// Unset: servers are dealt round-robin over the workers' machines (or get machines of their
    /// own with `dedicated_servers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_machines: Option<Vec<MachineId>>,
    /// Computers that several of the cluster's machines run on (the processes of one job on one
    /// host), by name: their roles' work shares the host's processors in `sim`. Empty: every
    /// machine has its processors to itself.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, HostConfig>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            default_device: "cpu".to_string(),
            machines: Vec::new(),
            devices: BTreeMap::new(),
            dedicated_servers: false,
            server_device: None,
            server_machines: None,
            hosts: BTreeMap::new(),
        }
    }
}

/// One machine of the resolved cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Machine {
    /// Machine index.
    pub id: MachineId,
    /// Profile name.
    pub device_name: String,
    /// Resolved profile.
    pub device: DeviceProfile,
    /// Its labels from the config ([`MachineGroup::labels`]).
    pub labels: BTreeMap<String, String>,
    /// Its worker slots (0 for a dedicated server machine): on a CUDA machine, the GPUs it has.
    pub slots: u32,
}

impl Machine {
    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// The resolved cluster: machines and where every role runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    /// All machines.
    pub machines: Vec<Machine>,
    /// Machine of each worker.
    pub worker_machine: Vec<MachineId>,
    /// Slot of each worker on its machine (`0..slots`): its GPU ordinal on a CUDA machine.
    pub worker_slot: Vec<u32>,
    /// Machine of each server (servers are sharded over the workers' machines, round-robin).
    pub server_machine: Vec<MachineId>,
    /// The GPU of this host that slot 0 runs on: 0 in one process, where every machine is this
    /// host; in the process runtime, past the GPUs of the job's other processes on this host
    /// ([`Cluster::with_first_gpu`]).
    #[serde(skip)]
    pub first_gpu: u32,
    /// The hosts whose processors several machines share (`cluster.hosts`).
    pub hosts: Vec<Host>,
    /// Per machine, its index in `hosts` (`None`: its processors are its own).
    pub host_of: Vec<Option<usize>>,
}

impl Cluster {
    /// Resolves the config for `workers` workers and `servers` servers.
    pub fn resolve(cfg: &ClusterConfig, workers: u32, servers: u32) -> Result<Cluster> {
        let mut profiles = DeviceProfile::builtins();
        for (name, p) in &cfg.devices {
            p.validate(&format!("cluster.devices.{name}"))?;
            profiles.insert(name.clone(), p.clone());
        }
        let lookup = |key: String, name: &str| {
            profiles.get(name).cloned().ok_or_else(|| {
                EngineError::config(
                    key,
                    format!("\"{name}\""),
                    format!(
                        "unknown device profile; known: {}",
                        profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })
        };
        let mut machines = Vec::new();
        if cfg.machines.is_empty() {
            let device = lookup("cluster.default_device".into(), &cfg.default_device)?;
            for id in 0..workers.max(1) {
                machines.push(Machine {
                    id,
                    device_name: cfg.default_device.clone(),
                    device: device.clone(),
                    labels: BTreeMap::new(),
                    slots: 1,
                });
            }
        } else {
            for (g, group) in cfg.machines.iter().enumerate() {
                let device = lookup(format!("cluster.machines[{g}].device"), &group.device)?;
                if group.count == 0 || group.slots == 0 {
                    return Err(EngineError::config(
                        format!("cluster.machines[{g}]"),
                        format!("count = {}, slots = {}", group.count, group.slots),
                        "count and slots must be at least 1",
                    ));
                }
                for _ in 0..group.count {
                    let id = machines.len() as MachineId;
                    machines.push(Machine {
                        id,
                        device_name: group.device.clone(),
                        device: device.clone(),
                        labels: group.labels.clone(),
                        slots: group.slots,
                    });
                }
            }
        }
        // Only workers' machines so far: dedicated server machines are added below.
        let total: u32 = machines.iter().map(|m| m.slots).sum();
        if total < workers {
            return Err(EngineError::config(
                "cluster.machines",
                format!("{total} worker slots"),
                format!("the cluster must have at least `workers` = {workers} slots"),
            ));
        }
        let mut worker_machine = Vec::with_capacity(workers as usize);
        let mut worker_slot = Vec::with_capacity(workers as usize);
        for (m, machine) in machines.iter().enumerate() {
            for slot in 0..machine.slots {
                if worker_machine.len() < workers as usize {
                    worker_machine.push(m as MachineId);
                    worker_slot.push(slot);
                }
            }
        }
        let server_machine = if cfg.dedicated_servers {
            let name = cfg.server_device.as_deref().unwrap_or(&cfg.default_device);
            let key = if cfg.server_device.is_some() {
                "cluster.server_device"
            } else {
                "cluster.default_device"
            };
            let device = lookup(key.into(), name)?;
            (0..servers)
                .map(|_| {
                    let id = machines.len() as MachineId;
                    machines.push(Machine {
                        id,
                        device_name: name.to_string(),
                        device: device.clone(),
                        labels: BTreeMap::new(),
                        slots: 0,
                    });
                    id
                })
                .collect()
        } else {
            let used = worker_machine.last().map_or(1, |&m| m + 1);
            (0..servers).map(|s| s % used).collect()
        };
        let server_machine = match &cfg.server_machines {
            None => server_machine,
            Some(list) => explicit_servers(list, servers, machines.len() as MachineId)?,
        };
        let (hosts, host_of) = hosts::resolve_hosts(&cfg.hosts, machines.len() as MachineId)?;
        Ok(Cluster {
            machines,
            worker_machine,
            worker_slot,
            server_machine,
            first_gpu: 0,
            hosts,
            host_of,
        })
    }

    /// The machine a role runs on (the coordinator shares machine 0).
    pub fn machine_of(&self, role: RoleId) -> MachineId {
        match role {
            RoleId::Coordinator => 0,
            RoleId::Server(s) => self.server_machine[s as usize],
            RoleId::Worker(w) => self.worker_machine[w as usize],
        }
    }

    /// The device profile a role computes on.
    pub fn device_of(&self, role: RoleId) -> &DeviceProfile {
        &self.machines[self.machine_of(role) as usize].device
    }

    /// The GPU of its host a role's tensor math runs on: for a worker on a CUDA machine, its slot
    /// there, counted from [`Cluster::first_gpu`]; `None` for the CPU (servers and the
    /// coordinator apply updates on the host).
    pub fn gpu_of(&self, role: RoleId) -> Option<u32> {
        match role {
            RoleId::Worker(w) if self.device_of(role).backend == Backend::Cuda => {
                Some(self.first_gpu + self.worker_slot[w as usize])
            }
            _ => None,
        }
    }

    /// This cluster as one process of a multi-process job sees it: its host's GPUs from `first`
    /// on are its slots'.
    pub fn with_first_gpu(mut self, first: u32) -> Cluster {
        self.first_gpu = first;
        self
    }

    /// The host whose processors a role's work shares with other machines' roles, if any.
    pub fn host_of_role(&self, role: RoleId) -> Option<&Host> {
        let machine = self.machine_of(role) as usize;
        let host = (*self.host_of.get(machine)?)?;
        self.hosts.get(host)
    }

    /// Human-readable device label of a role, e.g. `machine 3 (v100)`.
    pub fn device_label(&self, role: RoleId) -> String {
        let m = self.machine_of(role);
        format!("machine {m} ({})", self.machines[m as usize].device_name)
    }
}

/// Checks an explicit server placement (`cluster.server_machines`): one machine per server, each
/// one of the cluster's.
fn explicit_servers(
    list: &[MachineId],
    servers: u32,
    machines: MachineId,
) -> Result<Vec<MachineId>> {
    if list.len() != servers as usize {
        return Err(EngineError::config(
            "cluster.server_machines",
            format!("{} entries", list.len()),
            format!("needs one machine per server: the job starts {servers} servers"),
        ));
    }
    if let Some((i, &m)) = list.iter().enumerate().find(|(_, &m)| m >= machines) {
        return Err(EngineError::config(
            format!("cluster.server_machines[{i}]"),
            m,
            format!("unknown machine: the cluster has machines 0..{machines}"),
        ));
    }
    Ok(list.to_vec())
}

/// For tests: `machines` machines of one worker slot each, 8 Gbit/s (1 GB/s) NICs, 10 µs
/// latency, 1 TFLOP/s; one server.
#[cfg(test)]
pub(crate) fn test_cluster(machines: u32) -> std::sync::Arc<Cluster> {
    test_cluster_with(machines, 1, None)
}

/// For tests: like [`test_cluster`], with `slots` workers per machine (every slot filled) and
/// the machines' bus at `bus_gbps`.
#[cfg(test)]
pub(crate) fn test_cluster_with(
    machines: u32,
    slots: u32,
    bus_gbps: Option<f64>,
) -> std::sync::Arc<Cluster> {
    let mut cfg = ClusterConfig::default();
    cfg.devices.insert(
        "nic".into(),
        DeviceProfile {
            efficiency: 1.0,
            bus_gbps,
            ..DeviceProfile::new(1.0, 1.0, 8.0, 10.0)
        },
    );
    cfg.machines = vec![MachineGroup {
        device: "nic".into(),
        count: machines,
        slots,
        labels: Default::default(),
    }];
    let workers = machines * slots;
    std::sync::Arc::new(Cluster::resolve(&cfg, workers, 1).expect("a valid test cluster"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_fill_slots_in_order_and_servers_round_robin() {
        let cfg = ClusterConfig {
            machines: vec![
                MachineGroup {
                    device: "k40c".into(),
                    count: 2,
                    slots: 2,
                    labels: Default::default(),
                },
                MachineGroup {
                    device: "v100".into(),
                    count: 1,
                    slots: 4,
                    labels: Default::default(),
                },
            ],
            ..Default::default()
        };
        let c = Cluster::resolve(&cfg, 6, 3).unwrap();
        assert_eq!(c.worker_machine, vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(c.worker_slot, vec![0, 1, 0, 1, 0, 1]);
        assert_eq!(c.server_machine, vec![0, 1, 2]);
        assert_eq!(c.machines[2].device_name, "v100");
    }

    #[test]
    fn dedicated_servers_get_machines_of_their_own() {
        let cfg = ClusterConfig {
            dedicated_servers: true,
            server_device: Some("v100".into()),
            ..Default::default()
        };
        let c = Cluster::resolve(&cfg, 3, 2).unwrap();
        assert_eq!(c.worker_machine, vec![0, 1, 2]);
        assert_eq!(c.server_machine, vec![3, 4]);
        assert_eq!(c.machines[4].device_name, "v100");
        assert_eq!(c.machines[0].device_name, "cpu");
    }

    #[test]
    fn too_few_slots_and_unknown_devices_are_errors() {
        let cfg = ClusterConfig {
            machines: vec![MachineGroup {
                device: "cpu".into(),
                count: 1,
                slots: 2,
                labels: Default::default(),
            }],
            ..Default::default()
        };
        let e = Cluster::resolve(&cfg, 3, 1).unwrap_err().to_string();
        assert!(e.contains("cluster.machines") && e.contains("3"), "{e}");
        let cfg = ClusterConfig {
            default_device: "tpu9".into(),
            ..Default::default()
        };
        let e = Cluster::resolve(&cfg, 3, 1).unwrap_err().to_string();
        assert!(
            e.contains("cluster.default_device") && e.contains("tpu9"),
            "{e}"
        );
    }

    /// The smallest device profile TOML with the lines `extra` added: what the tests of one
    /// optional key parse.
    fn device_with(extra: &str) -> std::result::Result<DeviceProfile, toml::de::Error> {
        toml::from_str(&format!(
            "peak_tflops = 1.0\nmemory_gib = 1.0\nnic_gbps = 10.0\nlatency_us = 5.0\n{extra}"
        ))
    }

    #[test]
    fn a_device_made_in_code_equals_one_written_with_the_same_four_figures() {
        let written = device_with("").unwrap();
        assert_eq!(DeviceProfile::new(1.0, 1.0, 10.0, 5.0), written);
        let other = DeviceProfile::new(2.0, 1.0, 10.0, 5.0);
        assert_ne!(other, written, "the figures are its own");
    }

    /// Resolves [`with_bus`]`(None)` for 2 workers and 1 server after `edit` changes its device.
    fn resolve_with_bus_device(edit: impl FnOnce(&mut DeviceProfile)) -> Result<Cluster> {
        let mut cfg = with_bus(None);
        if let Some(d) = cfg.devices.get_mut("bus") {
            edit(d);
        }
        Cluster::resolve(&cfg, 2, 1)
    }

    /// A cluster config with one machine of two slots of the `bus` device, whose `bus_gbps` is
    /// `bus`.
    fn with_bus(bus: Option<f64>) -> ClusterConfig {
        let mut device = DeviceProfile::builtins()["cpu"].clone();
        device.bus_gbps = bus;
        ClusterConfig {
            machines: vec![MachineGroup {
                device: "bus".into(),
                count: 1,
                slots: 2,
                labels: Default::default(),
            }],
            devices: BTreeMap::from([("bus".to_string(), device)]),
            ..Default::default()
        }
    }

    #[test]
    fn a_bus_that_is_not_a_positive_number_is_a_named_error() {
        for bad in [0.0, -8.0, f64::NAN, f64::INFINITY] {
            let e = Cluster::resolve(&with_bus(Some(bad)), 2, 1)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("cluster.devices.bus.bus_gbps") && e.contains("positive"),
                "{bad}: {e}"
            );
        }
        let c = Cluster::resolve(&with_bus(Some(8.0)), 2, 1).expect("a valid bus");
        assert_eq!(c.device_of(RoleId::Worker(1)).bus_bytes_per_s(), Some(1e9));
        let c = Cluster::resolve(&with_bus(None), 2, 1).expect("no bus");
        assert_eq!(c.device_of(RoleId::Worker(1)).bus_bytes_per_s(), None);
    }

    #[test]
    fn bus_gbps_reads_from_toml_and_is_left_out_of_a_written_profile_without_one() {
        let plain = device_with("").expect("parses");
        assert_eq!(plain.bus_gbps, None);
        assert!(!toml::to_string(&plain).unwrap().contains("bus_gbps"));
        let bus = device_with("bus_gbps = 300.0\n").expect("parses");
        assert_eq!(bus.bus_gbps, Some(300.0));
        assert_eq!(bus.bus_bytes_per_s(), Some(37.5e9));
        let typo = device_with("bus_gbit = 300.0\n");
        assert!(typo.unwrap_err().to_string().contains("bus_gbit"));
    }

    #[test]
    fn nic_duplex_reads_from_toml_defaults_to_full_and_names_a_bad_word() {
        let plain = device_with("").expect("parses");
        assert_eq!(plain.nic_duplex, Duplex::Full);
        assert!(!toml::to_string(&plain).unwrap().contains("nic_duplex"));
        let half = device_with("nic_duplex = \"half\"\n").expect("parses");
        assert_eq!(half.nic_duplex, Duplex::Half);
        assert!(toml::to_string(&half)
            .unwrap()
            .contains("nic_duplex = \"half\""));
        let bad = device_with("nic_duplex = \"simplex\"\n")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("simplex") && bad.contains("half"), "{bad}");
    }

    #[test]
    fn loopback_share_reads_from_toml_and_must_be_a_share_of_one_processor() {
        let plain = device_with("").expect("parses");
        assert_eq!(plain.loopback_share, None);
        assert!(!toml::to_string(&plain).unwrap().contains("loopback_share"));
        let shared = device_with("loopback_share = 0.6\n").expect("parses");
        assert_eq!(shared.loopback_share, Some(0.6));
        for bad in [0.0, -0.5, 1.5, f64::NAN] {
            let e = resolve_with_bus_device(|d| d.loopback_share = Some(bad))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("cluster.devices.bus.loopback_share") && e.contains("at most 1"),
                "{bad}: {e}"
            );
        }
        assert!(resolve_with_bus_device(|d| d.loopback_share = Some(1.0)).is_ok());
    }

    #[test]
    fn message_handling_keys_read_from_toml_and_must_be_numbers_in_range() {
        let plain = device_with("").expect("parses");
        assert_eq!(plain.message_copy_bytes_per_s(), None);
        assert!(!toml::to_string(&plain).unwrap().contains("message_copy"));
        let copy = device_with("message_copy_gbps = 40.0\n").expect("parses");
        assert_eq!(copy.message_copy_bytes_per_s(), Some(5e9));
        assert_eq!(copy.message_handling_seconds(5_000_000, false), 1e-3);
        let mut both = copy.clone();
        both.message_us = Some(20.0);
        assert!((both.message_handling_seconds(5_000_000, true) - 1.02e-3).abs() < 1e-15);
        assert_eq!(both.message_handling_seconds(5_000_000, false), 1e-3);
        assert_eq!(plain.message_handling_seconds(5_000_000, true), 0.0);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = resolve_with_bus_device(|d| d.message_us = Some(bad))
                .unwrap_err()
                .to_string();
            assert!(e.contains("cluster.devices.bus.message_us"), "{bad}: {e}");
        }
        for bad in [0.0, -1.0, f64::NAN] {
            let e = resolve_with_bus_device(|d| d.message_copy_gbps = Some(bad))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("cluster.devices.bus.message_copy_gbps") && e.contains("positive"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn compute_time_is_linear_in_batch_with_saturation_offset() {
        let d = DeviceProfile::builtins()["v100"].clone();
        let t = |b| d.compute_seconds(1e9, b);
        let slope = t(64.0) - t(32.0);
        assert!((t(96.0) - t(64.0) - slope).abs() < 1e-12);
        // Small batches pay the offset: per-sample time is higher.
        assert!(t(1.0) > t(128.0) / 128.0 * 10.0);
    }
}
