//! Ctrl-C and SIGTERM during `concord train`: the run ends as a failed one does. Its folder is
//! removed, or kept with the last checkpoint it cut and the command that continues it, and
//! nothing half-written stays; the process exits with 128 + the signal's number, as a shell
//! expects of an interrupted program. A signal that comes while a finished run writes its
//! folder waits for the folder to be written.

use super::out_dir::{keep_for_resume, OutDir};
use concord_engine::output::FolderGate;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// What an interrupted run cleans up: its folder, the folders the run created for it, and the
/// door through which the run writes there.
struct Cleanup {
    out: PathBuf,
    dir: Option<Arc<OutDir>>,
    gate: FolderGate,
}

impl Cleanup {
    /// Removes what the run wrote, or keeps its checkpoint, and says which. The run's roles go on
    /// until the process exits: the folder's door is shut first, so none of them starts or
    /// completes a file in what is being cleaned.
    fn run(&self, signal: &str) {
        self.gate.shut();
        if keep_for_resume(&self.out) {
            eprintln!(
                "interrupted ({signal}): {} keeps the run's last checkpoint; `concord train \
                 --resume {}` continues from it",
                self.out.display(),
                self.out.display()
            );
        } else if let Some(dir) = &self.dir {
            dir.discard();
            eprintln!(
                "interrupted ({signal}): no checkpoint had been cut; {} was removed",
                self.out.display()
            );
        } else {
            eprintln!("interrupted ({signal})");
        }
    }
}

/// Watches for Ctrl-C (SIGINT) and SIGTERM from its creation until [`Interrupts::finish`].
pub(super) struct Interrupts {
    cleanup: Arc<Mutex<Option<Cleanup>>>,
}

impl Interrupts {
    /// Starts watching: until a run folder is named ([`Interrupts::clean_up`]), a signal just
    /// ends the process.
    pub(super) fn watch() -> anyhow::Result<Interrupts> {
        let cleanup = Arc::new(Mutex::new(None));
        #[cfg(unix)]
        spawn_watcher(cleanup.clone())?;
        Ok(Interrupts { cleanup })
    }

    /// From now on an interrupt cleans up the run folder `out`, which this run prepared as `dir`
    /// (`None` for a resumed run's own folder, which holds its checkpoint) and writes into
    /// through `gate`.
    pub(super) fn clean_up(&self, out: PathBuf, dir: Option<Arc<OutDir>>, gate: FolderGate) {
        *self.lock() = Some(Cleanup { out, dir, gate });
    }

    /// The run is over (finished, failed or stopped) and its folder is being written: an
    /// interrupt no longer touches it, and waits while the returned guard is held.
    pub(super) fn finish(&self) -> Finished<'_> {
        let mut guard = self.lock();
        *guard = None;
        Finished(guard)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Cleanup>> {
        self.cleanup.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Held while a finished run writes its folder: an interrupt meanwhile waits for it.
pub(super) struct Finished<'a>(#[allow(dead_code)] MutexGuard<'a, Option<Cleanup>>);

/// The name of a signal the CLI watches for (SIGINT or SIGTERM), as its messages print it.
pub(super) fn signal_name(signal: i32) -> &'static str {
    #[cfg(unix)]
    if signal == signal_hook::consts::SIGINT {
        return "SIGINT";
    }
    "SIGTERM"
}

/// A thread that waits for SIGINT or SIGTERM, cleans up what is registered, and exits.
#[cfg(unix)]
fn spawn_watcher(cleanup: Arc<Mutex<Option<Cleanup>>>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| anyhow::anyhow!("cannot watch for Ctrl-C and SIGTERM: {e}"))?;
    std::thread::Builder::new()
        .name("interrupts".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let taken = cleanup.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(c) = taken {
                    c.run(signal_name(signal));
                }
                std::process::exit(128 + signal);
            }
        })
        .map_err(|e| anyhow::anyhow!("cannot watch for Ctrl-C and SIGTERM: {e}"))?;
    Ok(())
}
