//! Ctrl-C and SIGTERM sent to `concord launch`: passed on to its processes as SIGTERM, so that a
//! stopped launch stops its job (each `train` process cleans up its run folder as an interrupted
//! run does) instead of leaving it running without its launcher.

use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The signal caught, if any: set by the signal handlers, read by the launch's wait loop.
pub(super) struct Caught(Arc<AtomicUsize>);

impl Caught {
    /// Catches SIGINT and SIGTERM from now on instead of ending the launch at once. A second
    /// one ends the launch at once (exit 128 + its number), for a user who will not wait for the
    /// processes to stop.
    pub(super) fn install() -> anyhow::Result<Caught> {
        let caught = Arc::new(AtomicUsize::new(0));
        #[cfg(unix)]
        {
            let once = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watch =
                |e: std::io::Error| anyhow::anyhow!("cannot watch for Ctrl-C and SIGTERM: {e}");
            for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                // Registered first, so it sees the flag as the earlier signal left it.
                signal_hook::flag::register_conditional_shutdown(
                    signal,
                    128 + signal,
                    once.clone(),
                )
                .map_err(watch)?;
                signal_hook::flag::register(signal, once.clone()).map_err(watch)?;
                signal_hook::flag::register_usize(signal, caught.clone(), signal as usize)
                    .map_err(watch)?;
            }
        }
        Ok(Caught(caught))
    }

    /// The signal caught so far, if any.
    pub(super) fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            s => i32::try_from(s).ok(),
        }
    }
}

/// Asks `child` to stop (SIGTERM), as an interrupted launch does with each of its processes.
pub(super) fn terminate(child: &Child) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a pid this launch started and has not yet waited for.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    #[cfg(not(unix))]
    let _ = child;
}
