//! The run folder: resolved config, per-iteration metrics, summary, per-role timelines, and a
//! checkpoint of the parameters with their optimizer state.

use crate::config::RunConfig;
use crate::contract::ModelState;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::metrics::{self, TraceEvent};
use crate::ps::ParamLayout;
use crate::run::RunResult;
use safetensors::tensor::{Dtype, TensorView};
use std::path::Path;

/// Writes everything a finished run leaves behind into `dir`.
pub fn write_run_folder(
    dir: &Path,
    config: &RunConfig,
    result: &RunResult,
    traces: &[(RoleId, Vec<TraceEvent>)],
    layout: &ParamLayout,
    servers: &[ModelState],
) -> Result<()> {
    let resolved = toml::to_string_pretty(config)
        .map_err(|e| EngineError::config("(resolved config)", "", e.to_string()))?;
    metrics::write_atomic(&dir.join("config.toml"), resolved.as_bytes())?;
    metrics::write_jsonl(&dir.join("metrics.jsonl"), &result.rows)?;
    if !result.evaluations.is_empty() {
        metrics::write_jsonl(&dir.join("evaluations.jsonl"), &result.evaluations)?;
    }
    let summary = serde_json::to_string_pretty(&result.summary).unwrap_or_default();
    metrics::write_atomic(&dir.join("summary.json"), summary.as_bytes())?;
    for (role, events) in traces {
        metrics::write_chrome_trace(
            &dir.join("trace").join(format!("{}.json", role.label())),
            &role.label(),
            events,
        )?;
    }
    if result.params.is_some() {
        write_checkpoint(&dir.join("checkpoint.safetensors"), layout, servers)?;
    }
    Ok(())
}

/// Saves parameters (`<name>`) and optimizer state (`<name>.opt<k>`, `<name>.step`) as safetensors.
pub fn write_checkpoint(path: &Path, layout: &ParamLayout, servers: &[ModelState]) -> Result<()> {
    let mut values = layout.zeros();
    let blocks: Vec<_> = servers
        .iter()
        .flat_map(|r| r.blocks.iter().cloned())
        .collect();
    layout.write_into(&blocks, &mut values);
    let slots = servers
        .iter()
        .flat_map(|r| r.opt_state.values())
        .map(|s| s.slots.len())
        .max()
        .unwrap_or(0);
    let mut opt = vec![layout.zeros(); slots];
    let mut steps = vec![0f32; layout.params().len()];
    for r in servers {
        for (&block, state) in &r.opt_state {
            let b = &layout.blocks()[block as usize];
            steps[b.param] = state.step as f32;
            for (k, slot) in state.slots.iter().enumerate() {
                opt[k][b.param][b.offset..b.offset + b.len].copy_from_slice(slot);
            }
        }
    }
    let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, p) in layout.params().iter().enumerate() {
        named.push((p.name.clone(), p.shape.clone(), to_bytes(&values[i])));
        for (k, slot) in opt.iter().enumerate() {
            named.push((
                format!("{}.opt{k}", p.name),
                p.shape.clone(),
                to_bytes(&slot[i]),
            ));
        }
        if slots > 0 {
            named.push((format!("{}.step", p.name), vec![1], to_bytes(&[steps[i]])));
        }
    }
    let views: Vec<(String, TensorView<'_>)> = named
        .iter()
        .map(|(n, shape, bytes)| {
            TensorView::new(Dtype::F32, shape.clone(), bytes)
                .map(|v| (n.clone(), v))
                .map_err(|e| EngineError::config("(checkpoint)", n, e.to_string()))
        })
        .collect::<Result<_>>()?;
    let data = safetensors::tensor::serialize(views, &None)
        .map_err(|e| EngineError::config("(checkpoint)", path.display(), e.to_string()))?;
    metrics::write_atomic(path, &data)
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
