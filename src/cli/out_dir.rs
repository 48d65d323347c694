//! The run folder, checked before any work: a run that cannot write its results, or would mix
//! them with an earlier run's files, stops at start-up instead of after hours of training.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why `--out` cannot hold the run.
#[derive(Debug, Error)]
pub enum OutDirError {
    /// The path exists and is not a folder.
    #[error("--out {}: is a file, not a folder", path.display())]
    NotAFolder {
        /// The path.
        path: PathBuf,
    },
    /// The folder holds files already (an earlier run's, probably).
    #[error(
        "--out {}: the folder already holds {entries} entries (an earlier run?); pass --overwrite to clear it first, or choose another folder",
        path.display()
    )]
    NotEmpty {
        /// The folder.
        path: PathBuf,
        /// How many entries it holds.
        entries: usize,
    },
    /// The folder cannot be created, cleared or written to.
    #[error("--out {}: cannot {action}: {source}", path.display())]
    Io {
        /// The folder (or the entry in it that failed).
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A run folder ready for the run: it exists, is writable, and is empty.
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    /// The outermost folder this run created (`runs/` for a first default run), if any.
    created: Option<PathBuf>,
}

impl OutDir {
    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// After a failed run: removes the folders this run created (the run folder, and `runs/`
    /// if it made that too) while they are empty, so a run that never started leaves nothing
    /// behind.
    pub fn discard_if_unused(&self) {
        let Some(outermost) = &self.created else {
            return;
        };
        for dir in self.path.ancestors() {
            if std::fs::remove_dir(dir).is_err() || dir == outermost.as_path() {
                break;
            }
        }
    }
}

impl OutDir {
    /// After a failed run that may have written into the folder (timelines streamed while it
    /// ran): removes everything in it, then the folders the run created, so a failed run leaves
    /// nothing half-written. The folder was empty when the run began ([`prepare_out_dir`]).
    pub fn discard(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.path) {
            for entry in entries.flatten() {
                let _ = clear(&entry.path());
            }
        }
        self.discard_if_unused();
    }
}

/// After a failed run, where the folder at `path` holds a checkpoint the run cut before it failed
/// (`checkpoint_every`, or the one a resumed run started from): removes the timelines the failed
/// stretch left half-written and keeps the rest, so `--resume` continues from the checkpoint.
/// Whether there was one (without, nothing is touched).
pub fn keep_for_resume(path: &Path) -> bool {
    if !path.join(concord_engine::checkpoint::FILE_NAME).is_file() {
        return false;
    }
    drop_half_written(path);
    true
}

/// Removes the timelines a stretch of the run in folder `path` left half-written (`trace/*.tmp`):
/// after it failed, or before a run resumes there (a process killed outright cleans up nothing).
pub fn drop_half_written(path: &Path) {
    if let Ok(entries) = std::fs::read_dir(path.join("trace")) {
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn io<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(std::io::Error) -> OutDirError + 'a {
    move |source| OutDirError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

/// Checks `path` as a run folder and makes it ready: a file is an error; a folder that holds
/// anything is an error unless `overwrite`, which removes everything in it; a missing folder is
/// created; a probe file is written and removed to prove the folder is writable.
pub fn prepare_out_dir(path: &Path, overwrite: bool) -> Result<OutDir, OutDirError> {
    let mut created = None;
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => {
            return Err(OutDirError::NotAFolder {
                path: path.to_path_buf(),
            })
        }
        Ok(_) => {
            let entries: Vec<_> = std::fs::read_dir(path)
                .map_err(io(path, "read the folder"))?
                .collect::<Result<_, _>>()
                .map_err(io(path, "read the folder"))?;
            if !entries.is_empty() && !overwrite {
                return Err(OutDirError::NotEmpty {
                    path: path.to_path_buf(),
                    entries: entries.len(),
                });
            }
            for entry in entries {
                clear(&entry.path())?;
            }
        }
        Err(_) => {
            let outermost = path
                .ancestors()
                .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
                .last()
                .map(Path::to_path_buf);
            std::fs::create_dir_all(path).map_err(io(path, "create the folder"))?;
            created = outermost;
        }
    }
    let out = OutDir {
        path: path.to_path_buf(),
        created,
    };
    let probe = path.join(".concord-write-probe");
    let written = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    if let Err(source) = written {
        out.discard_if_unused();
        return Err(OutDirError::Io {
            path: path.to_path_buf(),
            action: "write to the folder",
            source,
        });
    }
    Ok(out)
}

/// Removes one entry of a folder being overwritten (a folder with everything in it).
fn clear(entry: &Path) -> Result<(), OutDirError> {
    let is_dir = std::fs::symlink_metadata(entry).is_ok_and(|m| m.is_dir());
    let removed = if is_dir {
        std::fs::remove_dir_all(entry)
    } else {
        std::fs::remove_file(entry)
    };
    removed.map_err(io(entry, "remove an earlier run's entry"))
}

/// The default run folder, `runs/run-<unix seconds>`; if that exists (two runs in one second),
/// `runs/run-<unix seconds>-2`, `-3`, ...: a default run never reuses a folder.
pub fn default_out_dir(runs: &Path) -> PathBuf {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    fresh_name(runs, &format!("run-{stamp}"))
}

/// `runs/<base>`, or the first of `runs/<base>-2`, `-3`, ... that does not exist.
fn fresh_name(runs: &Path, base: &str) -> PathBuf {
    let first = runs.join(base);
    if !first.exists() {
        return first;
    }
    (2u64..)
        .map(|n| runs.join(format!("{base}-{n}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_not_a_run_folder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let err = prepare_out_dir(&file, true).unwrap_err();
        assert!(matches!(err, OutDirError::NotAFolder { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }

    #[test]
    fn a_folder_under_a_file_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let err = prepare_out_dir(&file.join("run"), false).unwrap_err();
        assert!(
            matches!(
                err,
                OutDirError::Io {
                    action: "create the folder",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_full_folder_needs_overwrite_which_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir_all(run.join("trace")).unwrap();
        std::fs::write(run.join("trace/worker-15.json"), "{}").unwrap();
        std::fs::write(run.join("evaluations.jsonl"), "").unwrap();
        let err = prepare_out_dir(&run, false).unwrap_err();
        assert!(
            matches!(err, OutDirError::NotEmpty { entries: 2, .. }),
            "{err}"
        );
        assert!(run.join("evaluations.jsonl").exists());
        let out = prepare_out_dir(&run, true).unwrap();
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
        // An empty folder is fine without --overwrite, and is kept after a failed run.
        let out = prepare_out_dir(&run, false).unwrap();
        out.discard_if_unused();
        assert!(run.is_dir());
    }

    #[test]
    fn a_created_folder_left_empty_is_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("a/b");
        let out = prepare_out_dir(&run, false).unwrap();
        assert!(run.is_dir());
        out.discard_if_unused();
        assert!(!dir.path().join("a").exists());
        assert!(dir.path().is_dir());
        // A folder that holds the run's files is kept.
        let out = prepare_out_dir(&run, false).unwrap();
        std::fs::write(run.join("metrics.jsonl"), "").unwrap();
        out.discard_if_unused();
        assert!(run.join("metrics.jsonl").exists());
    }

    #[test]
    fn the_default_folder_never_reuses_one() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(fresh_name(dir.path(), "run-7"), dir.path().join("run-7"));
        std::fs::create_dir(dir.path().join("run-7")).unwrap();
        assert_eq!(fresh_name(dir.path(), "run-7"), dir.path().join("run-7-2"));
        std::fs::write(dir.path().join("run-7-2"), "").unwrap();
        assert_eq!(fresh_name(dir.path(), "run-7"), dir.path().join("run-7-3"));
    }
}
