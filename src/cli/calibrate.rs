//! `concord calibrate`: fits a device's per-layer cost model to a measurement file and prints
//! it as a device profile, with the per-point and leave-one-model-out errors.

use clap::Args;
use concord_engine::calibrate;
use concord_engine::cluster::DeviceProfile;
use concord_engine::layer_model::Precision;
use std::path::PathBuf;

/// Arguments of `calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Measurement file: a JSON list of `{"model", "mode", "batch", "ms_per_step"}` entries
    /// (model: a built-in profile name; mode: fp32, tf32 or bf16).
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// Name of the fitted device. A built-in name (h200, h100, a100, v100) bounds the fit by
    /// its spec-sheet peaks and memory bandwidth and lends the profile its memory and NIC
    /// figures; any other name is fitted loosely bounded, with the h200's figures to edit.
    #[arg(long, default_value = "h200")]
    pub device: String,
    /// The `precision` the printed profile selects (default: fp32 if measured, else the first
    /// measured mode).
    #[arg(long)]
    pub precision: Option<Precision>,
    /// Also write the profile TOML to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Runs `calibrate`.
pub fn run(args: &CalibrateArgs) -> anyhow::Result<()> {
    let points = calibrate::load(&args.from)?;
    let model = calibrate::calibrate(&points, &args.device);
    let modes = model.modes();
    let precision = match args.precision {
        Some(p) if !modes.contains(&p) => anyhow::bail!(
            "--precision {p}: {} has no {p} measurements",
            args.from.display()
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
    println!("{toml}");
    println!("# {} points from {}:", points.len(), args.from.display());
    for line in calibrate::table(&points, &model).lines() {
        println!("# {line}");
    }
    println!("# leave one model out (worst error on the model left out):");
    for (m, mode, worst) in calibrate::leave_one_out(&points, &args.device) {
        println!("#   {mode} without {m}: {worst:+.1}%");
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &toml)
            .map_err(|e| anyhow::anyhow!("--out {}: cannot write: {e}", out.display()))?;
    }
    Ok(())
}
