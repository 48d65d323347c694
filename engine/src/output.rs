//! The run folder: resolved config, per-iteration metrics, summary, per-role timelines, and a
//! checkpoint of the parameters with their optimizer state.

use crate::checkpoint::{self, Resumable};
use crate::error::{EngineError, Result};
use crate::metrics;
use crate::run::RunResult;
use std::path::Path;

/// Writes everything a finished run leaves behind into `dir`: `config.toml` (resolved),
/// `metrics.jsonl`, `evaluations.jsonl` (with `eval_every_s`), `summary.json`, a Chrome trace
/// under `trace/` per timeline kept in memory ([`RunResult::traces`]; timelines the run streamed
/// to `RunOptions::trace_dir` are already on disk and are not rewritten), and
/// `checkpoint.safetensors` (the model, for real models; the state to resume from, when the run's
/// strategies can resume).
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
    let model = result.params.is_some().then_some(&result.model);
    let resume = result.resume.as_ref().map(|point| Resumable {
        point,
        config: &resolved,
        strategies: &result.summary.strategies,
    });
    checkpoint::write(&dir.join(checkpoint::FILE_NAME), model, resume)
}
