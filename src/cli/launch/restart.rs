//! `concord launch --max-restarts N`: what the process group runs again after one of its processes
//! fails, as torchrun restarts its worker group. A training job continues from the last checkpoint
//! its run folder holds (`--resume`); one that failed before cutting any starts again from the
//! beginning; a run that ended (its summary written: a divergence stop) is not restarted.

use crate::cli::out_dir::{default_out_dir, keep_for_resume};
use crate::cli::TrainArgs;
use clap::Parser;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A `train` command line, parsed as `concord train` parses it.
#[derive(Debug, Parser)]
#[command(name = "train")]
struct TrainLine {
    #[command(flatten)]
    args: TrainArgs,
}

/// How a restarted group continues the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Continue {
    /// From the last checkpoint in the run folder.
    Resume,
    /// From the beginning, the run folder holding nothing to continue from.
    FromScratch,
}

/// The commands of a training job that may be restarted, and its run folder.
#[derive(Debug)]
pub(super) struct Restartable {
    /// The first attempt's command: the user's, with the run folder named (`--out`) when the user
    /// left it to the default, so that every attempt writes to the same one.
    first: Vec<OsString>,
    /// Where the job writes its run folder.
    out: PathBuf,
    /// Whether a start from scratch may clear the run folder: it was absent or empty when the
    /// launch began, or the user asked for `--overwrite`. A folder that held an earlier run is
    /// never cleared by a restart.
    may_clear: bool,
    /// What a resumed attempt keeps of the user's command.
    runtime: Option<String>,
    sets: Vec<String>,
    quiet: bool,
}

impl Restartable {
    /// The restartable form of `command` (a `concord` command line without the program name);
    /// an error when it is not a `train` command, or not a valid one.
    pub(super) fn new(command: &[OsString]) -> anyhow::Result<Restartable> {
        if command.first().is_none_or(|c| c != "train") {
            anyhow::bail!(
                "--max-restarts: only `train` continues a job after a failure (from its last \
                 checkpoint); `{}` is not restarted",
                command
                    .first()
                    .map_or_else(String::new, |c| c.to_string_lossy().into_owned())
            );
        }
        let line = TrainLine::try_parse_from(command)
            .map_err(|e| anyhow::anyhow!("--max-restarts: the command to restart: {e}"))?;
        let args = line.args;
        let mut first = command.to_vec();
        let out = match (&args.out, &args.resume) {
            (Some(out), _) => out.clone(),
            (None, Some(resumed)) => resumed.clone(),
            (None, None) => {
                let out = default_out_dir(Path::new("runs"));
                first.splice(1..1, [OsString::from("--out"), out.clone().into()]);
                out
            }
        };
        Ok(Restartable {
            first,
            may_clear: args.overwrite || is_empty_or_absent(&out),
            out,
            runtime: args.runtime,
            sets: args.config.sets,
            quiet: args.quiet,
        })
    }

    /// The first attempt's command.
    pub(super) fn first(&self) -> &[OsString] {
        &self.first
    }

    /// The run folder every attempt writes.
    pub(super) fn out(&self) -> &Path {
        &self.out
    }

    /// The command that continues the job after an attempt failed, and how it continues; an
    /// error naming why the job cannot be continued.
    pub(super) fn next(&self) -> anyhow::Result<(Vec<OsString>, Continue)> {
        let out = &self.out;
        if out.join("summary.json").is_file() {
            anyhow::bail!(
                "the run in {} ended (its summary is written, as for a divergence stop); a run \
                 that ended is not restarted",
                out.display()
            );
        }
        if keep_for_resume(out) {
            let mut command: Vec<OsString> = vec!["train".into(), "--resume".into()];
            command.push(out.clone().into());
            if let Some(runtime) = &self.runtime {
                command.extend(["--runtime".into(), runtime.into()]);
            }
            for set in &self.sets {
                command.extend(["--set".into(), set.into()]);
            }
            if self.quiet {
                command.push("--quiet".into());
            }
            return Ok((command, Continue::Resume));
        }
        let mut command = self.first.clone();
        if !is_empty_or_absent(out) {
            if !self.may_clear {
                anyhow::bail!(
                    "{} holds files but no checkpoint, and held files before the launch; a \
                     restart does not clear it",
                    out.display()
                );
            }
            command.push("--overwrite".into());
        }
        Ok((command, Continue::FromScratch))
    }
}

/// Whether `dir` does not exist or is an empty folder.
fn is_empty_or_absent(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::super::words;
    use super::*;

    #[test]
    fn only_train_is_restarted_and_a_bad_train_line_is_named() {
        let e = Restartable::new(&words(&["calibrate", "--host"])).unwrap_err();
        assert!(
            e.to_string().contains("`calibrate` is not restarted"),
            "{e}"
        );
        let e = Restartable::new(&words(&["train", "--bogus"])).unwrap_err();
        assert!(e.to_string().contains("--bogus"), "{e}");
    }

    #[test]
    fn a_failed_job_resumes_from_its_checkpoint_with_the_users_settings() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let out_arg = out.to_str().unwrap();
        let r = Restartable::new(&words(&[
            "train",
            "--config",
            "job.toml",
            "--set",
            "iterations=50",
            "--out",
            out_arg,
            "--quiet",
        ]))
        .unwrap();
        assert_eq!(r.out(), out);
        // Nothing written yet: the same command again.
        assert_eq!(
            r.next().unwrap(),
            (r.first().to_vec(), Continue::FromScratch)
        );
        std::fs::create_dir_all(out.join("trace")).unwrap();
        std::fs::write(out.join("trace/worker-0.json.tmp"), "{").unwrap();
        // Files but no checkpoint in a folder the launch found absent: cleared and run again.
        let (again, how) = r.next().unwrap();
        assert_eq!(how, Continue::FromScratch);
        assert_eq!(again.last().unwrap(), "--overwrite");
        // A checkpoint: resumed, with the user's `--set`s, the half-written timeline removed.
        std::fs::write(out.join(concord_engine::checkpoint::FILE_NAME), "").unwrap();
        let (resumed, how) = r.next().unwrap();
        assert_eq!(how, Continue::Resume);
        assert_eq!(
            resumed,
            words(&[
                "train",
                "--resume",
                out_arg,
                "--set",
                "iterations=50",
                "--quiet"
            ])
        );
        assert!(!out.join("trace/worker-0.json.tmp").exists());
        // An ended run is not restarted.
        std::fs::write(out.join("summary.json"), "{}").unwrap();
        let e = r.next().unwrap_err();
        assert!(e.to_string().contains("not restarted"), "{e}");
    }

    #[test]
    fn a_folder_that_held_an_earlier_run_is_never_cleared() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("metrics.jsonl"), "").unwrap();
        let out_arg = dir.path().to_str().unwrap();
        let r = Restartable::new(&words(&["train", "--out", out_arg])).unwrap();
        let e = r.next().unwrap_err();
        assert!(e.to_string().contains("does not clear it"), "{e}");
        // Unless the user asked for it.
        let r = Restartable::new(&words(&["train", "--out", out_arg, "--overwrite"])).unwrap();
        assert_eq!(r.next().unwrap().1, Continue::FromScratch);
    }

    #[test]
    fn a_default_run_folder_is_named_for_every_attempt() {
        let r = Restartable::new(&words(&["train", "--config", "job.toml"])).unwrap();
        assert_eq!(r.first()[1], "--out");
        assert_eq!(Path::new(&r.first()[2]), r.out());
        assert!(r.out().starts_with("runs"));
        // A resumed job's folder is the one it resumes.
        let r = Restartable::new(&words(&["train", "--resume", "runs/old"])).unwrap();
        assert_eq!(r.out(), Path::new("runs/old"));
        assert_eq!(
            r.first(),
            words(&["train", "--resume", "runs/old"]).as_slice()
        );
    }
}
