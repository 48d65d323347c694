//! The first failure of a server or the coordinator, signalled the moment it happens.
//!
//! The launch waits for the workers first and collects the servers and the coordinator after.
//! A server or coordinator that fails mid-run leaves the workers waiting for messages that never
//! come: without this signal the run would end only at `time_limit_s` (`sim`) or the stall
//! watchdog (real time), with a deadlock message in place of the role's own error.

use super::launch::RoleOutput;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Where roles report their failure and the launch waits for the first one.
#[derive(Clone, Default)]
pub(super) struct FirstFailure(Arc<(Mutex<Option<String>>, Notify)>);

impl FirstFailure {
    /// Records `out`'s error, if it failed, as `"<what>: <error>"` (the first one recorded stays).
    pub(super) fn note<T>(&self, out: &RoleOutput<T>, what: &str) {
        if let Err(e) = &out.result {
            let mut first = self.0 .0.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                *first = Some(format!("{what}: {e}"));
            }
            drop(first);
            self.0 .1.notify_one();
        }
    }

    /// `ran`, noting its failure as `"<what>: <error>"` when it ends (see [`FirstFailure::note`]).
    pub(super) fn watching<T>(
        &self,
        ran: impl Future<Output = RoleOutput<T>>,
        what: String,
    ) -> impl Future<Output = RoleOutput<T>> {
        let failure = self.clone();
        async move {
            let out = ran.await;
            failure.note(&out, &what);
            out
        }
    }

    /// Waits for the first failure and returns its description.
    pub(super) async fn first(&self) -> String {
        loop {
            let first = self.0 .0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(what) = first {
                return what;
            }
            // A failure noted since the check left a permit: this returns at once.
            self.0 .1.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::RoleStats;
    use crate::error::EngineError;
    use crate::ids::RoleId;

    fn output(result: crate::error::Result<()>) -> RoleOutput<()> {
        RoleOutput {
            role: RoleId::Server(0),
            result,
            stats: RoleStats::default(),
            trace: None,
            peak_memory: 0,
            end_s: 0.0,
            stragglers: Vec::new(),
            left: false,
        }
    }

    #[tokio::test]
    async fn the_first_failure_is_kept_and_a_success_is_none() {
        let failure = FirstFailure::default();
        failure.note(&output(Ok(())), "a server failed");
        let waiting = tokio::spawn({
            let failure = failure.clone();
            async move { failure.first().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a success is no failure");
        failure.note(
            &output(Err(EngineError::protocol(RoleId::Server(0), "first"))),
            "a server failed",
        );
        failure.note(
            &output(Err(EngineError::protocol(RoleId::Server(1), "second"))),
            "a server failed",
        );
        let what = waiting.await.expect("join");
        assert!(
            what.starts_with("a server failed: ") && what.contains("first"),
            "{what}"
        );
        assert!(!what.contains("second"), "{what}");
        assert_eq!(failure.first().await, what, "asked again, the same failure");
    }
}
