//! The run folder: resolved config, per-iteration metrics, summary, per-role timelines, and a
//! checkpoint of the parameters with their optimizer state.

use crate::checkpoint::{self, Resumable};
use crate::error::{EngineError, Result};
use crate::metrics;
use crate::run::RunResult;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

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
    let summary = result.summary.to_json();
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

/// The run folder's door for what a run writes there while it goes (streamed timelines, the
/// checkpoints cut between stretches): open until [`FolderGate::shut`], refusing every write
/// after. Whoever cleans up an interrupted run's folder shuts it first, so no role starts a file
/// there while the folder is cleaned, or after. Clones share one door.
#[derive(Clone, Debug, Default)]
pub struct FolderGate {
    shut: Arc<RwLock<bool>>,
}

impl FolderGate {
    /// Shuts the door once every write begun through it is done; from then on
    /// [`FolderGate::write`] refuses.
    pub fn shut(&self) {
        *self.shut.write().unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// Whether the door is shut.
    pub fn is_shut(&self) -> bool {
        *self.shut.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `write`, which creates, renames or replaces `path` in the folder, unless the door is
    /// shut (an I/O error naming `path`); the door cannot shut while it runs.
    pub fn write<T>(&self, path: &Path, write: impl FnOnce() -> Result<T>) -> Result<T> {
        let shut = self.shut.read().unwrap_or_else(PoisonError::into_inner);
        if *shut {
            return Err(EngineError::Io {
                path: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "the run was interrupted and its folder is being cleaned up",
                ),
            });
        }
        write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shut_gate_refuses_writes_and_clones_share_it() {
        let gate = FolderGate::default();
        let clone = gate.clone();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        gate.write(&path, || metrics::write_atomic(&path, b"1"))
            .unwrap();
        clone.shut();
        assert!(gate.is_shut());
        let err = gate
            .write(&path, || metrics::write_atomic(&path, b"2"))
            .unwrap_err();
        assert!(err.to_string().contains("interrupted"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"1");
    }

    #[test]
    fn shutting_waits_for_a_write_under_way() {
        let gate = FolderGate::default();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let writer = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.write(Path::new("slow"), || {
                    started_tx.send(()).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    Ok(std::time::Instant::now())
                })
                .unwrap()
            })
        };
        started_rx.recv().unwrap();
        gate.shut();
        let shut_at = std::time::Instant::now();
        let written_at = writer.join().unwrap();
        assert!(
            written_at <= shut_at,
            "the gate shut while a write was under way"
        );
    }
}
