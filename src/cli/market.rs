//! `concord market`: the Proteus spot-market cost study (Harlap thesis ch. 4) — one job of a
//! fixed amount of work under each bidding/elasticity scheme, from many random start points over
//! a spot price trace — and `--generate`, which writes a synthetic market (TOML + CSV trace).

use anyhow::Context;
use clap::Args;
use concord_elastic_ps::proteus::generate::default_types;
use concord_elastic_ps::proteus::{
    AppParams, GeneratorParams, Market, MarketFile, Scheme, SchemeSummary, Study, StudyParams,
    SCHEMES,
};
use std::path::{Path, PathBuf};

/// Arguments of `market`.
#[derive(Debug, Args)]
pub struct MarketArgs {
    /// The market file to study (TOML naming its CSV price trace).
    #[arg(
        long,
        required_unless_present = "generate",
        conflicts_with = "generate"
    )]
    pub market: Option<PathBuf>,
    /// Write a synthetic market here instead (TOML; its trace goes beside it as `<stem>.csv`).
    #[arg(long, value_name = "MARKET_TOML")]
    pub generate: Option<PathBuf>,
    /// Length of a generated trace, days.
    #[arg(long, default_value_t = 28.0)]
    pub days: f64,
    /// Seed: of the start points (study) or of the price stream (generate).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Job length on the reference footprint, hours.
    #[arg(long, default_value_t = 2.0)]
    pub hours: f64,
    /// Random start points per scheme.
    #[arg(long, default_value_t = 200)]
    pub starts: usize,
    /// Schemes to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub schemes: Vec<String>,
    /// Reference footprint: the instance type.
    #[arg(long, default_value = "c4.2xlarge")]
    pub reference_type: String,
    /// Reference footprint: instances.
    #[arg(long, default_value_t = 64)]
    pub reference_count: u32,
    /// On-demand instances AgileML schemes always hold.
    #[arg(long, default_value_t = StudyParams::default().reliable_count)]
    pub reliable: u32,
    /// φ: how efficiently the application scales (0–1].
    #[arg(long, default_value_t = AppParams::default().phi)]
    pub phi: f64,
    /// σ: minutes without progress after adding or removing resources.
    #[arg(long, default_value_t = AppParams::default().sigma_min)]
    pub sigma: f64,
    /// λ: minutes without progress after an eviction.
    #[arg(long, default_value_t = AppParams::default().lambda_min)]
    pub lambda: f64,
    /// Minutes to write a checkpoint (standard-checkpoint).
    #[arg(long, default_value_t = StudyParams::default().checkpoint_write_min)]
    pub checkpoint_write_min: f64,
    /// Also write the summaries as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs `concord market`.
pub fn run(args: &MarketArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.generate {
        return generate(args, path);
    }
    let Some(path) = &args.market else {
        anyhow::bail!("give --market <file> to study, or --generate <file>");
    };
    let schemes: Vec<Scheme> = if args.schemes.is_empty() {
        SCHEMES.to_vec()
    } else {
        args.schemes
            .iter()
            .map(|s| {
                s.parse::<Scheme>()
                    .map_err(|e| anyhow::anyhow!("--schemes: {e}"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let market = Market::load(path)?;
    let params = StudyParams {
        hours: args.hours,
        reference_type: args.reference_type.clone(),
        reference_count: args.reference_count,
        reliable_count: args.reliable,
        app: AppParams {
            phi: args.phi,
            sigma_min: args.sigma,
            lambda_min: args.lambda,
        },
        checkpoint_write_min: args.checkpoint_write_min,
        starts: args.starts,
        seed: args.seed,
        ..StudyParams::default()
    };
    let study = Study::new(market, params)?;
    let rows = schemes
        .iter()
        .map(|&s| study.summarize(s))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(json) = &args.json {
        let text = serde_json::to_string_pretty(&rows)?;
        concord_engine::metrics::write_atomic(json, text.as_bytes())
            .with_context(|| format!("writing {}", json.display()))?;
    }
    outln!(
        "{} h jobs on {} × {} from {} start points ({}); MTTF of an on-demand bid {:.1} h, checkpoint every {:.0} min\n",
        args.hours,
        args.reference_count,
        args.reference_type,
        args.starts,
        path.display(),
        study.mttf_h,
        study.checkpoint_interval_s() / 60.0
    )?;
    out!("{}", table(&rows))?;
    Ok(())
}

/// The summaries as a table.
fn table(rows: &[SchemeSummary]) -> String {
    let mut out = format!(
        "{:<20} {:>9} {:>10} {:>11} {:>9} {:>9} {:>10} {:>10}\n",
        "scheme",
        "cost rel",
        "runtime h",
        "on-demand h",
        "spot h",
        "free h",
        "evictions",
        "free share"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<20} {:>9.3} {:>10.2} {:>11.1} {:>9.1} {:>9.1} {:>10.2} {:>9.1}%\n",
            r.scheme.name(),
            r.cost_relative,
            r.runtime_h,
            r.on_demand_h,
            r.spot_h,
            r.free_h,
            r.evictions,
            r.free_share * 100.0
        ));
    }
    out.push_str(
        "\ncost rel: mean cost over all on-demand's; hours are instance-hours per job (free: spot\n\
         hours refunded because the market evicted them before the hour ended).\n",
    );
    out
}

/// Writes a synthetic market: `path` (TOML) and its trace beside it, both or neither.
fn generate(args: &MarketArgs, path: &Path) -> anyhow::Result<()> {
    let params = GeneratorParams {
        seed: args.seed,
        days: args.days,
        ..GeneratorParams::default()
    };
    let types = default_types();
    let traces = params.generate(&types)?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .with_context(|| format!("--generate {}: needs a file name", path.display()))?;
    let csv_name = format!("{stem}.csv");
    let csv_path = concord_elastic_ps::proteus::market::trace_path(path, &csv_name);
    let file = MarketFile {
        trace: csv_name,
        types: types.clone(),
        generator: Some(params),
    };
    let header = format!(
        "# Synthetic spot market: `concord market --generate {} --days {} --seed {}` writes this\n\
         # file and its trace ({}); [generator] records every parameter.\n",
        path.display(),
        args.days,
        args.seed,
        file.trace
    );
    let toml_text = format!("{header}{}", toml::to_string(&file)?);
    let csv_text = concord_elastic_ps::proteus::trace::to_csv(&types, &traces);
    write_pair(&csv_path, &csv_text, path, &toml_text)?;
    let points: usize = traces.iter().map(|t| t.points().count()).sum();
    outln!(
        "wrote {} and {} ({} types, {} price changes over {} days)",
        path.display(),
        csv_path.display(),
        types.len(),
        points,
        args.days
    )?;
    Ok(())
}

/// Writes two files so that either both are written or neither is changed: both go to
/// temporary names first, then are renamed.
fn write_pair(a: &Path, a_text: &str, b: &Path, b_text: &str) -> anyhow::Result<()> {
    let tmp = |p: &Path| {
        let mut name = p.as_os_str().to_owned();
        name.push(".tmp");
        PathBuf::from(name)
    };
    let (ta, tb) = (tmp(a), tmp(b));
    let written = (|| -> anyhow::Result<()> {
        if let Some(dir) = a.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&ta, a_text).with_context(|| format!("writing {}", ta.display()))?;
        std::fs::write(&tb, b_text).with_context(|| format!("writing {}", tb.display()))?;
        std::fs::rename(&ta, a).with_context(|| format!("writing {}", a.display()))?;
        std::fs::rename(&tb, b).with_context(|| format!("writing {}", b.display()))?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&ta);
        let _ = std::fs::remove_file(&tb);
    }
    written
}
