//! `concord calibrate`: fits a device's per-layer cost model to a measurement file
//! (`--from`), or measures this machine and fits it (`--host`, see [`host`]), and prints it as
//! a device profile, with the per-point and leave-one-model-out errors.

mod host;

use clap::{ArgGroup, Args};
use concord_engine::calibrate;
use concord_engine::cluster::DeviceProfile;
use concord_engine::layer_model::Precision;
use std::path::PathBuf;

/// Arguments of `calibrate`: exactly one of `--from` and `--host`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["from", "host"])))]
pub struct CalibrateArgs {
    /// Measurement file: a JSON list of `{"model", "mode", "batch", "ms_per_step"}` entries
    /// (model: a built-in profile name; mode: fp32, tf32 or bf16), or per-layer profiles as
    /// PipeDream's profiler writes them, listed as `{"pipedream_profiles": [{"model", "mode",
    /// "batch", "graph"}]}` (graph: a path relative to the file), every layer a measurement.
    #[arg(long, value_name = "FILE", conflicts_with = "host")]
    pub from: Option<PathBuf>,
    /// Measure this machine instead: training steps of real models on one compute thread
    /// (`RAYON_NUM_THREADS`, else 1), each after its parameters arrive as a worker's do, a
    /// parameter server's update (the caches emptied first), a role's copies of a message's
    /// tensors (the data just written), loopback TCP
    /// and the process runtime's transport over it (latency, bandwidth, a role's handling of
    /// one message, what a message adds when its receiver has waited long for it); fit a CPU
    /// device profile to them.
    #[arg(long)]
    pub host: bool,
    /// With `--from`: name of the fitted device. A built-in name (h200, h100, a100, v100)
    /// bounds the fit by its spec-sheet peaks and memory bandwidth and lends the profile its
    /// memory and NIC figures; any other name is fitted loosely bounded, with the h200's
    /// figures to edit.
    #[arg(long, default_value = "h200", conflicts_with = "host")]
    pub device: String,
    /// With `--from`: the `precision` the printed profile selects (default: fp32 if measured,
    /// else the first measured mode).
    #[arg(long, conflicts_with = "host")]
    pub precision: Option<Precision>,
    /// With `--host`: name of the device profile written, `[cluster.devices.NAME]`.
    #[arg(long, default_value = "host", conflicts_with = "from")]
    pub name: String,
    /// With `--host`: a config whose model is measured (repeatable; default:
    /// configs/default.toml when it exists, else the built-in default model). Two reference
    /// MLPs, 32-64-10 and 784-1024-1024-10, are measured too, each unless a config's model has
    /// its shape: one model's steps alone cannot tell a step's fixed costs from its arithmetic.
    #[arg(long = "config", value_name = "FILE", conflicts_with = "from")]
    pub configs: Vec<PathBuf>,
    /// With `--host`: fewer batch sizes (8, 32, 128), repeats and a 32 MiB stream instead of
    /// 256 MiB: a few seconds instead of a minute.
    #[arg(long, conflicts_with = "from")]
    pub quick: bool,
    /// With `--host`: the processes of the job on this machine (`concord launch --nproc N`).
    /// Their workers step at the same time and share the machine's memory bandwidth and caches,
    /// so a step is timed while other threads step the same model beside it, one per processor
    /// at most; above 1, the profile ends with the host its N machines share
    /// (`[cluster.hosts]`), on whose processors `sim` makes their work take turns. Default 1:
    /// this machine runs one process of the job (torchrun, srun or mpirun across machines).
    #[arg(
        long,
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=1024),
        conflicts_with = "from"
    )]
    pub processes: u32,
    /// Also write the profile TOML to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Runs `calibrate`.
pub fn run(args: &CalibrateArgs) -> anyhow::Result<()> {
    match &args.from {
        Some(from) => run_from(args, from),
        None => host::run(args),
    }
}

/// `calibrate --from FILE`.
fn run_from(args: &CalibrateArgs, from: &std::path::Path) -> anyhow::Result<()> {
    let points = calibrate::load(from)?;
    let model = calibrate::calibrate(&points, &args.device);
    let modes = model.modes();
    let precision = match args.precision {
        Some(p) if !modes.contains(&p) => anyhow::bail!(
            "--precision {p}: {} has no {p} measurements",
            from.display()
        ),
        Some(p) => p,
        None => *modes.first().unwrap_or(&Precision::Fp32),
    };
    let builtins = DeviceProfile::builtins();
    let base = builtins
        .get(&args.device)
        .or_else(|| builtins.get("h200"))
        .ok_or_else(|| anyhow::anyhow!("no h200 built-in profile"))?;
    let toml = calibrate::profile_toml(&args.device, base, &model, precision);
    outln!("{toml}")?;
    outln!("# {} points from {}:", points.len(), from.display())?;
    for line in calibrate::table(&points, &model).lines() {
        outln!("# {line}")?;
    }
    outln!("# leave one model out (worst error on the model left out):")?;
    for (m, mode, worst) in calibrate::leave_one_out(&points, &args.device) {
        outln!("#   {mode} without {m}: {worst:+.1}%")?;
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &toml)
            .map_err(|e| anyhow::anyhow!("--out {}: cannot write: {e}", out.display()))?;
    }
    Ok(())
}
