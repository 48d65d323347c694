//! Restarts by torchrun's elastic agent (`torchrun --max-restarts N`): it starts the worker group
//! again with the same command after a failure, and expects the script to load its latest
//! checkpoint. Rank 0 of a restarted group (`TORCHELASTIC_RESTART_COUNT` ≥ 1) therefore continues
//! from the checkpoint the job's run folder (`--out`) holds, as `--resume` would, when that
//! checkpoint is of the same job. The other ranks need only the job's configuration: rank 0 sends
//! them their roles' state, so the run folder need be on rank 0's machine alone.

use concord_engine::checkpoint::{self, Checkpoint};
use concord_engine::config::RunConfig;
use concord_engine::context::RuntimeKind;
use std::path::{Path, PathBuf};

/// The variable torchrun's elastic agent sets to the number of times it restarted the group.
pub(super) const RESTART_COUNT: &str = "TORCHELASTIC_RESTART_COUNT";

/// The run folder and checkpoint a restarted group's rank 0 continues from: `out`, when this
/// process is rank 0 of a `--runtime process` job that torchrun restarted, and `out` holds a
/// checkpoint of the job `config` describes (a folder of another job, or without a checkpoint,
/// is left to the usual checks).
pub(super) fn restarted_job(
    out: Option<&Path>,
    config: &RunConfig,
) -> anyhow::Result<Option<(PathBuf, Checkpoint)>> {
    let restarts = std::env::var(RESTART_COUNT)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let Some(out) = out else {
        return Ok(None);
    };
    if restarts == 0 || config.runtime != RuntimeKind::Process {
        return Ok(None);
    }
    let is_rank_0 = concord_engine::process::World::from_env().is_ok_and(|w| w.rank == 0);
    let file = out.join(checkpoint::FILE_NAME);
    if !is_rank_0 || !file.is_file() {
        return Ok(None);
    }
    let cp = match checkpoint::read(&file) {
        Ok(cp) => cp,
        Err(e) => {
            tracing::warn!("{}: not continued from: {e}", file.display());
            return Ok(None);
        }
    };
    match crate::config::job_change(&cp.config, config)? {
        None => Ok(Some((out.to_path_buf(), cp))),
        Some(change) => {
            tracing::warn!(
                "{} holds a checkpoint of another job ({change}): not continued from",
                out.display()
            );
            Ok(None)
        }
    }
}
