//! The run folder: resolved config, per-iteration metrics, summary, per-role timelines, and a
//! checkpoint of the parameters with their optimizer state.

use crate::error::{EngineError, Result};
use crate::metrics;
use crate::run::{FinalModel, RunResult};
use safetensors::tensor::{Dtype, TensorView};
use std::path::Path;

/// Writes everything a finished run leaves behind into `dir`: `config.toml` (resolved),
/// `metrics.jsonl`, `evaluations.jsonl` (with `eval_every_s`), `summary.json`, a Chrome trace
/// under `trace/` per timeline kept in memory ([`RunResult::traces`]; timelines the run streamed
/// to `RunOptions::trace_dir` are already on disk and are not rewritten), and
/// `checkpoint.safetensors` (real models).
pub fn write_run_folder(dir: &Path, result: &RunResult) -> Result<()> {
    let resolved = toml::to_string_pretty(&result.config)
        .map_err(|e| EngineError::config("(resolved config)", "", e.to_string()))?;
    metrics::write_atomic(&dir.join("config.toml"), resolved.as_bytes())?;
    metrics::write_jsonl(&dir.join("metrics.jsonl"), &result.rows)?;
    if !result.evaluations.is_empty() {
        metrics::write_jsonl(&dir.join("evaluations.jsonl"), &result.evaluations)?;
    }
    let summary = serde_json::to_string_pretty(&result.summary).unwrap_or_default();
    metrics::write_atomic(&dir.join("summary.json"), summary.as_bytes())?;
    for (role, events) in &result.traces {
        metrics::write_chrome_trace(
            &dir.join("trace").join(format!("{}.json", role.label())),
            &role.label(),
            events,
        )?;
    }
    if result.params.is_some() {
        write_checkpoint(&dir.join("checkpoint.safetensors"), &result.model)?;
    }
    Ok(())
}

/// Saves the parameters (`<name>`) and optimizer state (`<name>.opt<k>`, `<name>.step`) of
/// `model` as safetensors. A parameter's step is the largest of its blocks' steps (they agree
/// when every block received every update).
pub fn write_checkpoint(path: &Path, model: &FinalModel) -> Result<()> {
    let layout = &model.layout;
    let mut values = layout.zeros();
    layout.write_into(&model.blocks, &mut values);
    let slots = model
        .opt_state
        .values()
        .map(|s| s.slots.len())
        .max()
        .unwrap_or(0);
    let mut opt = vec![layout.zeros(); slots];
    let mut steps = vec![0f32; layout.params().len()];
    for (&block, state) in &model.opt_state {
        let Some(b) = layout.blocks().get(block as usize) else {
            continue;
        };
        steps[b.param] = steps[b.param].max(state.step as f32);
        for (k, slot) in state.slots.iter().enumerate() {
            opt[k][b.param][b.offset..b.offset + b.len].copy_from_slice(slot);
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
