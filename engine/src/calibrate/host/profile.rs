//! The device profile of this machine: the fitted per-layer model for training steps, the
//! measured update rate for what `sim` charges by FLOPs (servers' aggregation and updates,
//! an allreduce worker's update), loopback TCP as the NIC, how fast a role copies a message's
//! tensors, and the machine's memory.

use super::Loopback;
use crate::calibrate::toml_out::round_sig;
use crate::cluster::{Backend, DeviceProfile, Duplex, WakeCurve};
use crate::layer_model::{LayerModel, LayerRates, Precision};

/// What `calibrate --host` found, ready to become a device profile.
#[derive(Clone, Debug, PartialEq)]
pub struct HostProfile {
    /// The device's name in `[cluster.devices.<name>]`.
    pub name: String,
    /// Compute threads per process the figures hold for.
    pub threads: usize,
    /// Processes of the job on this machine (`calibrate --host --processes`): as many of their
    /// workers as it has processors stepped at once while the steps were timed.
    pub processes: u32,
    /// This machine's processors. Where the job runs more processes here than that, the
    /// profile's config puts their machines on one host that `sim` makes them share.
    pub processors: u32,
    /// The fitted fp32 rates of training steps ([`super::fit`]: a kind of layer no measured
    /// model has takes the nearest measured kind's rate, so an MLP-only fit rates convolutions
    /// as matrix products, as a CPU runs them).
    pub rates: LayerRates,
    /// A server's measured rate on a clock, GFLOP/s of `sim`'s count.
    pub update_gflops: f64,
    /// Loopback TCP.
    pub loopback: Loopback,
    /// How fast a role packs and unpacks a message's tensors, Gbit/s.
    pub message_copy_gbps: f64,
    /// A role's fixed cost of handling one message to or from another process, microseconds
    /// (`loopback.latency_us` is then what is left of a lone message's time).
    pub message_us: f64,
    /// What a message adds when its receiver has waited for it, by how long
    /// ([`crate::cluster::DeviceProfile::wake`]).
    pub wake: Option<WakeCurve>,
    /// The machine's memory, GiB.
    pub memory_gib: f64,
}

impl HostProfile {
    /// The device profile. Its FLOP-model fields: `peak_tflops` is the saturated
    /// matrix-product rate (an upper figure for this machine), and `efficiency` makes
    /// `peak_tflops × efficiency` the measured update rate, which is what `sim` charges
    /// batch-independent work by; `half_saturation_batch` is the fitted half-rate batch.
    pub fn device(&self) -> DeviceProfile {
        let rates = self.rates;
        let update_tflops = self.update_gflops / 1e3;
        let peak = rates.matmul_tflops.max(update_tflops);
        let mut layers = LayerModel::default();
        layers.set(Precision::Fp32, rates);
        let loopback_share = self.loopback_share();
        DeviceProfile {
            peak_tflops: peak,
            efficiency: (update_tflops / peak).clamp(f64::MIN_POSITIVE, 1.0),
            half_saturation_batch: rates.half_batch,
            matmul_half_saturation_batch: None,
            memory_gib: self.memory_gib,
            nic_gbps: self.loopback.gbps,
            // Where the processes' transfers copy on the processors they share, those make an
            // exchange slower; the NIC itself then takes both ways at once.
            nic_duplex: match loopback_share {
                Some(_) => Duplex::Full,
                None => self.loopback.duplex(),
            },
            latency_us: self.loopback.latency_us,
            bus_gbps: None,
            host_link_gbps: None,
            message_copy_gbps: Some(self.message_copy_gbps),
            message_us: Some(self.message_us),
            loopback_share,
            wake: self.wake.clone(),
            precision: Some(Precision::Fp32),
            layers: Some(layers),
            backend: Backend::Cpu,
        }
    }

    /// The profile as a commented TOML table headed `[cluster.devices.<name>]`, its figures
    /// rounded to 4 significant digits.
    pub fn toml(&self) -> String {
        let d = self.device();
        let update_tflops = self.update_gflops / 1e3;
        // Rounded so that the product of the two printed figures is the measured rate.
        let peak = round_sig(d.peak_tflops, 4);
        let efficiency = round_sig((update_tflops / peak).min(1.0), 4);
        let name = &self.name;
        let mut s = format!(
            "# This machine, measured by `concord calibrate --host` with {} compute thread{} per process{}.\n",
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            match self.workers_at_once() {
                1 => String::new(),
                n => format!(", steps timed as {n} processes' workers take them at once"),
            }
        );
        s += &format!("[cluster.devices.{name}]\n");
        s += "backend = \"cpu\"\n";
        s += &format!(
            "peak_tflops = {:?}  # saturated matrix-product rate of a training step\n",
            peak
        );
        s += &format!(
            "efficiency = {:?}  # peak x efficiency = {:.3} GFLOP/s: servers' aggregation and updates\n",
            efficiency, self.update_gflops
        );
        s += &format!(
            "half_saturation_batch = {:?}\n",
            round_sig(d.half_saturation_batch, 4)
        );
        s += &format!("memory_gib = {:?}\n", round_sig(d.memory_gib, 4));
        s += &format!(
            "nic_gbps = {:?}  # role to role through the process runtime's loopback TCP (a {} MiB stream on a bare socket: {:?})\n",
            round_sig(d.nic_gbps, 4),
            self.loopback.stream_bytes >> 20,
            round_sig(self.loopback.socket_gbps, 4)
        );
        if let Some(each_way) = self.loopback.exchange_gbps {
            s += &format!(
                "nic_duplex = \"{}\"  # two roles sending each other a message at once: {:?} Gbit/s each way\n",
                d.nic_duplex.as_str(),
                round_sig(each_way, 4)
            );
        }
        if let Some(share) = d.loopback_share {
            s += &format!(
                "loopback_share = {:?}  # of a processor, each end of a transfer between the job's processes: their copies make an exchange {:.2} times as long as a lone transfer on {} processors\n",
                round_sig(share, 4),
                self.loopback.exchange_slowdown().unwrap_or(1.0),
                self.processors
            );
        }
        s += &format!(
            "latency_us = {:?}  # role to role through the process runtime's loopback TCP: half the median round trip, less the handling at both ends\n",
            round_sig(d.latency_us, 4)
        );
        s += &format!(
            "message_copy_gbps = {:?}  # a role packing a message's tensors and unpacking them, the data just written\n",
            round_sig(self.message_copy_gbps, 4)
        );
        s += &format!(
            "message_us = {:?}  # a role handling one message to or from another process, at each end (a stream of small messages)\n",
            round_sig(self.message_us, 4)
        );
        if let Some(wake) = &self.wake {
            let list = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{:?}", round_sig(*x, 4)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            s += &format!(
                "wake = {{ idle_us = [{}], extra_us = [{}] }}  # what a message adds when its receiver has waited that long for it\n",
                list(&wake.idle_us),
                list(&wake.extra_us)
            );
        }
        s += "precision = \"fp32\"\n";
        s += &format!("\n[cluster.devices.{name}.layers.fp32]\n");
        s += "# a kind of layer no measured model has is rated as the nearest measured kind\n";
        for (field, v) in LayerRates::NAMES.iter().zip(self.rates.to_vec()) {
            s += &format!("{field} = {:?}\n", round_sig(v, 4));
        }
        if self.processes > 1 {
            s += &format!(
                "\n# the job's {} processes on this machine (its machines 0 to {}) share its {} processors\n",
                self.processes,
                self.processes - 1,
                self.processors
            );
            s += &format!("[cluster.hosts.{name}]\n");
            s += &format!("processors = {}\n", self.processors);
            let machines: Vec<String> = (0..self.processes).map(|m| m.to_string()).collect();
            s += &format!("machines = [{}]\n", machines.join(", "));
        }
        s
    }

    /// The share of a processor each end of a transfer between the job's processes keeps busy
    /// ([`Loopback::share`]): only where the profile puts them on one host that `sim` makes them
    /// share (several processes), and an exchange was measured.
    pub fn loopback_share(&self) -> Option<f64> {
        self.loopback.share(self.processes, self.processors)
    }

    /// How many of the job's workers on this machine stepped at once while the steps were timed
    /// (see [`workers_at_once`]).
    pub fn workers_at_once(&self) -> u32 {
        workers_at_once(self.processes, self.processors)
    }
}

/// How many of a job's workers on a machine step at once: one per process, as many as it has
/// processors (more take turns, which `sim` charges through the host they share).
pub fn workers_at_once(processes: u32, processors: u32) -> u32 {
    processes.min(processors).max(1)
}
