//! `concord memory`: one training iteration of the configured model on the first worker's device
//! under each swapping policy, side by side — time and the copying that hid behind compute, the
//! memory reached, the least memory it trains in, fragmentation — and, with `--plot`, the device
//! memory after every layer as an SVG chart.

use super::ConfigArgs;
use anyhow::Context;
use clap::Args;
use concord_engine::cluster::Cluster;
use concord_engine::ids::RoleId;
use concord_engine::model::ModelConfig;
use concord_memory::study::{self, Measured, PolicyStudy, POLICIES};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Arguments of `memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// Configuration layers (the model, batch and first worker's device are what it uses).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Policies to compare, comma-separated (default: all of them).
    #[arg(long, value_delimiter = ',', default_values_t = POLICIES.iter().map(|s| s.to_string()))]
    pub policies: Vec<String>,
    /// Write the device memory after every layer of each policy's iteration to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `concord memory`.
pub fn run(args: &MemoryArgs) -> anyhow::Result<()> {
    let sourced = args.config.load(&[])?;
    let cfg = &sourced.config;
    let (model, _) = super::plan::model_of(cfg).map_err(|e| sourced.attribute(e))?;
    let graph = model.op_graph().with_context(|| {
        format!(
            "model `{}` has no operator graph (layer-granular memory policies run the convolutional profiles and graph networks; DLRM profiles, staged MLP/CNN models and MF have none): use a profile such as `resnet-50` or a graph network (`tiny-resnet`, `inception-stack`)",
            match &cfg.model {
                ModelConfig::Profile { name } => name.clone(),
                other => other.kind().to_string(),
            }
        )
    })?;
    let cluster = Cluster::resolve(&cfg.cluster, cfg.workers, cfg.servers)
        .map_err(|e| sourced.attribute(e))?;
    let device = cluster.device_of(RoleId::Worker(0));
    let label = cluster.device_label(RoleId::Worker(0));
    let rows = study::study(&graph, cfg.batch, device, &args.policies)?;
    if let Some(path) = &args.plot {
        plot(path, &rows).with_context(|| format!("writing the plot {}", path.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        let name = match &cfg.model {
            ModelConfig::Profile { name } => name.clone(),
            other => other.kind().to_string(),
        };
        outln!(
            "One iteration of {name} at batch {} on {label} ({:.1} GiB, host link {:.1} GB/s), {} operators\n",
            cfg.batch,
            device.memory_gib,
            device.host_link_bytes_per_s() / 1e9,
            graph.len()
        )?;
        out!("{}", table(&rows))?;
    }
    Ok(())
}

/// The comparison as a table.
fn table(rows: &[PolicyStudy]) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let mut out = format!(
        "{:<14} {:<9} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>11} {:>6}\n",
        "policy",
        "allocator",
        "iter ms",
        "compute",
        "overlap",
        "exposed",
        "offload MB",
        "peak MB",
        "min MB",
        "U_f"
    );
    for row in rows {
        let Some(r) = &row.measured else {
            out.push_str(&format!(
                "{:<14} {:<9} does not fit the device: {}\n",
                row.policy,
                row.allocator,
                row.does_not_fit.as_deref().unwrap_or("out of memory")
            ));
            continue;
        };
        out.push_str(&format!(
            "{:<14} {:<9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11.0} {:>11.0} {:>11.0} {:>6.3}\n",
            row.policy,
            row.allocator,
            r.seconds * 1e3,
            r.compute_s * 1e3,
            r.overlapped_s * 1e3,
            r.exposed_copy_s * 1e3,
            mb(r.offloaded_bytes),
            mb(r.high_water),
            mb(r.min_memory),
            r.mean_fragmentation,
        ));
    }
    out.push_str(
        "\noverlap: copying beside computation; exposed: copying that was not. peak: the memory reached\n\
         with the whole device free; min: the least memory the iteration completes in (stalling for\n\
         room); U_f: mean fragmentation in a pool sized to the iteration.\n",
    );
    out
}

/// Device memory in use after every layer, one line per policy.
fn plot(path: &Path, rows: &[PolicyStudy]) -> anyhow::Result<()> {
    let measured: Vec<(&PolicyStudy, &Measured)> = rows
        .iter()
        .filter_map(|r| r.measured.as_ref().map(|m| (r, m)))
        .collect();
    let steps = measured
        .iter()
        .map(|(_, m)| m.series.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let top = measured
        .iter()
        .flat_map(|(_, m)| m.series.iter().map(|p| p.footprint))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        / 1e6;
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Device memory after every layer (forward, then backward)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0..steps, 0.0..top * 1.05)?;
    chart
        .configure_mesh()
        .x_desc("layer step")
        .y_desc("MB in use")
        .draw()?;
    for (i, (r, m)) in measured.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                m.series
                    .iter()
                    .enumerate()
                    .map(|(s, p)| (s, p.used as f64 / 1e6)),
                color.stroke_width(2),
            ))?
            .label(format!("{} ({})", r.policy, r.allocator))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
