//! `concord calibrate --host`: measures this machine and prints (and with `--out` writes) its
//! device profile. Every line but the profile is a TOML comment, so the whole output is a
//! profile too.

use super::CalibrateArgs;
use crate::config;
use concord_engine::calibrate::host::{self, HostModel, HostProfile, Repeats};
use concord_engine::calibrate::{self, fit::Limits};
use concord_engine::cluster::{Cluster, ClusterConfig, WakeCurve};
use concord_engine::process::probe;
use concord_engine::RunConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The MLPs measured beside the configs' models, small to large: inputs, hidden layers, classes.
/// Two sizes, because one model's steps leave free how its time splits between a fixed cost per
/// operation (most of a small model's step) and arithmetic and memory traffic (most of a large
/// one's): fitted on one size alone, a profile charged the other under a twentieth to 60 times
/// what it took.
const REFERENCE_MLPS: [(usize, &[usize], usize); 2] = [(32, &[64], 10), (784, &[1024, 1024], 10)];
/// Ping-pongs of the latency measurement (full, quick).
const ROUND_TRIPS: (usize, usize) = (2000, 200);
/// Small messages per burst when timing a role's handling of one.
const MESSAGE_BURST: usize = 32;
/// Bytes of the bandwidth stream (full, quick).
const STREAM_BYTES: (u64, u64) = (256 << 20, 32 << 20);

/// Runs `calibrate --host`.
pub fn run(args: &CalibrateArgs) -> anyhow::Result<()> {
    // Before any tensor math: candle sizes its thread pools on first use.
    let threads = host::compute_threads();
    check_name(&args.name)?;
    outln!(
        "# compute threads: {} per process ({})",
        threads.threads,
        if threads.from_env {
            "RAYON_NUM_THREADS"
        } else {
            "RAYON_NUM_THREADS unset: 1, as the process runtime runs one compute thread per process"
        }
    )?;
    let models = models(&args.configs)?;
    let cpu_before = host::CpuTime::now();
    let repeats = if args.quick {
        Repeats::quick()
    } else {
        Repeats::full()
    };
    let batches = host::batches(args.quick);
    let mut points = Vec::new();
    let mut updates = Vec::new();
    // A server's clock is timed on data no longer cached: between two, the whole machine's work
    // runs. A step is timed after its parameters arrive, as a worker takes it (`measure_steps`).
    let mut sweep = host::CacheSweep::for_this_machine();
    // The workers of the job's other processes on this machine step at the same time, as many
    // as it has processors: more than that take turns, which `sim` charges through the host the
    // profile names.
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let beside = host::workers_at_once(args.processes, processors) as usize - 1;
    outln!(
        "# training steps (forward and backward at parameters in place; median{}, each after the parameters arrive and are loaded{}):",
        match host::step_passes(args.quick) {
            1 => String::new(),
            n => format!(" of {n} turns over every model and batch"),
        },
        match beside {
            0 => String::new(),
            n => format!(
                "; {n} other thread{} stepping beside, as the workers of {} processes on this machine{}",
                if n == 1 { "" } else { "s" },
                n + 1,
                if args.processes > processors {
                    format!(" (the job's other {} take turns with them on its {processors} processors)", args.processes - processors)
                } else {
                    String::new()
                }
            ),
        }
    )?;
    outln!(
        "#   {:<28} {:>6} {:>12} {:>9} {:>6}",
        "model",
        "batch",
        "ms_per_step",
        "GFLOP/s",
        "runs"
    )?;
    let steps = host::measure_steps(
        &models,
        &batches,
        &repeats,
        host::step_passes(args.quick),
        beside,
    )?;
    for (model, steps) in models.iter().zip(&steps) {
        for p in steps {
            outln!(
                "#   {:<28} {:>6} {:>12.4} {:>9.2} {:>6}",
                p.model,
                p.batch,
                p.seconds * 1e3,
                p.gflops(),
                p.runs
            )?;
        }
        points.extend(host::measurements(model, steps));
        updates.push(host::measure_update(model, &repeats, &mut sweep));
    }
    outln!(
        "# a server's clock (aggregate every worker's push, apply the mean; median, caches emptied first):"
    )?;
    for u in &updates {
        outln!(
            "#   {:<28} {} elements, {} pushes: {:.3} ms ({:.3} GFLOP/s); aggregate {:.3} GFLOP/s, apply {:.3} GFLOP/s",
            u.model,
            u.elems,
            u.pushes,
            u.clock_seconds() * 1e3,
            u.clock_gflops(),
            u.aggregate_gflops(),
            u.apply_gflops()
        )?;
    }
    // The largest model's update and copies: small ones run from cache and take microseconds.
    let largest = (0..models.len())
        .max_by_key(|&i| models[i].param_elems())
        .ok_or_else(|| anyhow::anyhow!("no model was measured"))?;
    let update = &updates[largest];
    let copy = host::measure_message_copy(&models[largest], &repeats);
    outln!(
        "# a role's copies of a message of {}'s parameters ({:.1} MiB; median, the data just written, as in a job): pack {:.3} ms, unpack {:.3} ms; the profile's message_copy_gbps {:.2}",
        copy.model,
        copy.bytes as f64 / (1 << 20) as f64,
        copy.pack_seconds * 1e3,
        copy.unpack_seconds * 1e3,
        copy.gbps()
    )?;
    let (stream, trips) = if args.quick {
        (STREAM_BYTES.1, ROUND_TRIPS.1)
    } else {
        (STREAM_BYTES.0, ROUND_TRIPS.0)
    };
    let mut loopback = host::loopback(stream, trips)?;
    outln!(
        "# loopback TCP: {:.2} Gbit/s over a {} MiB stream; latency {:.1} us (half the median of {} round trips of {} bytes)",
        loopback.gbps,
        loopback.stream_bytes >> 20,
        loopback.latency_us,
        loopback.round_trips,
        host::PING_BYTES
    )?;
    // What a role sees: the process runtime's transport (frames, its tasks, the socket).
    let role_us = probe::role_latency(trips)? * 1e6;
    outln!(
        "# role to role through the process runtime's transport: {role_us:.1} us (half the median of {trips} round trips); the profile's latency_us"
    )?;
    // A role's own handling of each message: a burst of small ones queues behind it. The lone
    // message's time is that handling at both ends and what is left between them.
    let burst_trips = (trips / 4).max(20);
    let handling_us = (probe::role_message_overhead(MESSAGE_BURST, burst_trips, role_us * 1e-6)?
        * 1e6)
        .min(role_us / 2.0);
    loopback.latency_us = role_us - 2.0 * handling_us;
    outln!(
        "# a role handling one message: {handling_us:.1} us at each end ({burst_trips} bursts of {MESSAGE_BURST} small messages, the time each adds); the profile's message_us, and latency_us {:.1} us what is left of a lone message's",
        loopback.latency_us
    )?;
    let wake = wake_curve(role_us, if args.quick { 0.25 } else { 2.0 }, trips)?;
    // The bytes a role moves cost more than the socket's: the frame is encoded, written, read and
    // decoded by the runtime's tasks. Timed with messages of the largest model's size.
    let bytes = (update.elems as u64 * 4).max(1 << 20);
    let role_gbps = probe::role_bandwidth(bytes, trips.min(40), role_us * 1e-6)? / 1e9;
    outln!(
        "# role to role through the process runtime's transport: {role_gbps:.2} Gbit/s with messages of {:.1} MiB (the time they add to a round trip); the profile's nic_gbps",
        bytes as f64 / (1 << 20) as f64
    )?;
    loopback.gbps = role_gbps;
    // Collectives and pushes to servers on both machines send both ways at once: on one host the
    // same cores copy either direction, which a lone stream does not show.
    let each_way = probe::role_exchange_bandwidth(bytes, trips.min(40), role_us * 1e-6)? / 1e9;
    loopback.exchange_gbps = Some(each_way);
    let charged = match loopback.share(args.processes, processors) {
        // The job's processes share this machine: their copies on its processors slow an exchange.
        Some(share) => format!(
            "the profile's loopback_share is {share:.3} of a processor at each end of a transfer between the job's processes, which `sim` books on the {processors} processors they share (nic_duplex full)"
        ),
        _ => format!(
            "the profile's nic_duplex is {}",
            match loopback.duplex() {
                concord_engine::cluster::Duplex::Full => "full (each direction at nic_gbps)",
                concord_engine::cluster::Duplex::Half => "half (both directions share nic_gbps)",
            }
        ),
    };
    outln!("# two roles sending each other such a message at once: {each_way:.2} Gbit/s each way; {charged}")?;
    let memory_gib = match host::machine_memory_gib() {
        Some(m) => m,
        None => {
            outln!("# memory: not found in /proc/meminfo; 16 GiB written, edit memory_gib")?;
            16.0
        }
    };
    let rates = host::fit(&points).ok_or_else(|| anyhow::anyhow!("no step was measured"))?;
    let profile = HostProfile {
        name: args.name.clone(),
        threads: threads.threads,
        processes: args.processes,
        processors,
        rates,
        update_gflops: update.clock_gflops(),
        loopback,
        message_copy_gbps: copy.gbps(),
        message_us: handling_us,
        wake: Some(wake),
        memory_gib,
    };
    check_profile(&profile)?;
    let toml = profile.toml() + &stolen_note(cpu_before);
    outln!("{toml}")?;
    let mut model = concord_engine::layer_model::LayerModel::default();
    model.set(concord_engine::layer_model::Precision::Fp32, profile.rates);
    outln!("# {} points, fitted:", points.len())?;
    for line in calibrate::table(&points, &model).lines() {
        outln!("# {line}")?;
    }
    let loo = calibrate::leave_one_out_within(&points, |_| Limits::cpu());
    if !loo.is_empty() {
        outln!("# leave one model out (worst error on the model left out):")?;
        for (m, mode, worst) in loo {
            outln!("#   {mode} without {m}: {worst:+.1}%")?;
        }
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &toml)
            .map_err(|e| anyhow::anyhow!("--out {}: cannot write: {e}", out.display()))?;
    }
    Ok(())
}

/// How long the receiving role of the wake-up curve waits before each message, microseconds: from
/// 10 µs, the wait of a message between roles that step at once (a ring's, a clock's pushes),
/// through a tenth of a millisecond, about where a hypervisor stops polling an idle processor, to
/// 20 ms, a large model's step.
const WAKE_IDLE_US: [f64; 10] = [
    10.0, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 20000.0,
];

/// What a small message between two processes adds when its receiver has waited each of
/// [`WAKE_IDLE_US`] for it (the profile's `wake`): the mean of its round trips less the mean of
/// round trips to a receiver that did not wait, timed alike (the same statistic on both sides: a
/// mean exceeds a median by the slow messages every message meets, which is no wake-up). At each,
/// as many round trips as `seconds` of waits allow, at least 20 and at most `trips`; `role_us`
/// is a lone message's one-way time.
fn wake_curve(role_us: f64, seconds: f64, trips: usize) -> anyhow::Result<WakeCurve> {
    outln!("# a message to a role that waited for it (the mean of the round trips less that of a role that did not wait; the slowest 1 % left out):")?;
    let trips = trips.max(20);
    let awake_us = probe::role_latency_parked(trips, Duration::ZERO, role_us * 1e-6)? * 1e6;
    outln!("#   after    0 ms: {awake_us:7.1} us ({trips} round trips)")?;
    let mut extra_us = Vec::with_capacity(WAKE_IDLE_US.len());
    for idle_us in WAKE_IDLE_US {
        let idle = Duration::from_secs_f64(idle_us * 1e-6);
        let n = ((seconds / idle.as_secs_f64()) as usize).clamp(20, trips);
        let parked_us = probe::role_latency_parked(n, idle, role_us * 1e-6)? * 1e6;
        let extra = (parked_us - awake_us).max(0.0);
        outln!(
            "#   after {:>8.3} ms: {parked_us:7.1} us, {extra:6.1} us more ({n} round trips)",
            idle_us * 1e-3
        )?;
        extra_us.push(extra);
    }
    outln!("# the profile's wake")?;
    Ok(WakeCurve {
        idle_us: WAKE_IDLE_US.to_vec(),
        extra_us,
    })
}

/// Above this share of the processors' time taken by a hypervisor, the figures are flagged.
const STOLEN_WARNING: f64 = 0.05;

/// A comment for the profile saying how much of the machine's processor time a hypervisor took
/// while it was measured (`/proc/stat`'s steal since `before`), with a warning above
/// [`STOLEN_WARNING`]: a step or a message then took that much longer than the machine's own
/// speed, and a later job on a quieter machine runs faster than the profile says (or slower,
/// when more is taken then). Empty where the system does not say.
fn stolen_note(before: Option<host::CpuTime>) -> String {
    let Some(share) = before.and_then(|b| b.stolen_share_until_now()) else {
        return String::new();
    };
    let mut note = format!(
        "# measured while a hypervisor took {:.1} % of this machine's processor time (steal)\n",
        share * 100.0
    );
    if share > STOLEN_WARNING {
        note += &format!(
            "# warning: above {:.0} %, the figures describe this machine with that much of it taken; \
             measure again when `steal` in `top` is low\n",
            STOLEN_WARNING * 100.0
        );
    }
    note
}

/// The models measured: each `--config`'s (else the default config's), then each of
/// [`REFERENCE_MLPS`] that is not one of them already, trained as the first of them is.
fn models(configs: &[PathBuf]) -> anyhow::Result<Vec<HostModel>> {
    let default = Path::new("configs/default.toml");
    let mut out = Vec::new();
    if configs.is_empty() {
        if default.exists() {
            out.push(config_model(default)?);
        } else {
            out.push(HostModel::from_config(
                "default model",
                &RunConfig::default(),
            )?);
        }
    }
    for path in configs {
        out.push(config_model(path)?);
    }
    for (inputs, hidden, classes) in REFERENCE_MLPS {
        let name = format!(
            "mlp-{inputs}-{}-{classes}",
            hidden
                .iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>()
                .join("-")
        );
        let first = &out[0];
        let mlp = HostModel::mlp(
            &name,
            inputs,
            hidden,
            classes,
            first.optimizer.clone(),
            first.workers,
        )?;
        // The same layers cost the same whatever data they see: measured once.
        let layers = mlp.layers();
        if out.iter().all(|m| m.layers() != layers) {
            out.push(mlp);
        }
    }
    Ok(out)
}

/// The model of the config in `path` (its layers: defaults, the file, the environment).
fn config_model(path: &Path) -> anyhow::Result<HostModel> {
    let cfg = config::load(Some(path), &[])?;
    Ok(HostModel::from_config(&path.display().to_string(), &cfg)?)
}

/// A device name must be a TOML bare key: it is written as `[cluster.devices.NAME]`.
fn check_name(name: &str) -> anyhow::Result<()> {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    anyhow::ensure!(
        bare,
        "--name {name:?}: a device name must be letters, digits, '-' or '_'"
    );
    Ok(())
}

/// The profile must be one a config accepts (every figure finite and in range).
fn check_profile(profile: &HostProfile) -> anyhow::Result<()> {
    let cfg = ClusterConfig {
        default_device: profile.name.clone(),
        devices: BTreeMap::from([(profile.name.clone(), profile.device())]),
        ..ClusterConfig::default()
    };
    Cluster::resolve(&cfg, 1, 1)
        .map_err(|e| anyhow::anyhow!("the measured profile is not usable: {e}"))?;
    Ok(())
}
