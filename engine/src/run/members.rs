//! Replaying a job's membership trace while it runs: roles of absent machines wait for their
//! machine to join, roles of a machine that leaves stop where they are, and the coordinator hears
//! of every change at its time.

use crate::error::Result;
use crate::ids::MachineId;
use crate::membership::{MembershipEvent, MembershipPlan};
use crate::message::Message;
use crate::time::TimeBase;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;

/// Where a machine stands while the job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    /// Not in the job yet.
    Absent,
    /// In the job.
    Present,
    /// Left the job (or never joined before the job ended).
    Gone,
}

/// Every machine's standing, watched by the roles placed on it.
pub(super) struct Presence {
    machines: Vec<watch::Sender<Standing>>,
    dynamic: bool,
}

impl Presence {
    /// The standing at the start: machines the plan adds later are absent.
    pub fn new(plan: &MembershipPlan, machines: usize) -> Arc<Presence> {
        let machines = (0..machines as MachineId)
            .map(|m| {
                let s = if plan.present_at_start(m) {
                    Standing::Present
                } else {
                    Standing::Absent
                };
                watch::channel(s).0
            })
            .collect();
        Arc::new(Presence {
            machines,
            dynamic: !plan.is_static(),
        })
    }

    /// What the roles of machine `m` watch; `None` in a job whose membership never changes
    /// (its roles run unwatched).
    pub fn gate(&self, m: MachineId) -> Option<watch::Receiver<Standing>> {
        self.dynamic
            .then(|| self.machines.get(m as usize).map(watch::Sender::subscribe))
            .flatten()
    }

    /// Whether the job's membership changes at all.
    pub fn is_dynamic(&self) -> bool {
        self.dynamic
    }

    /// Whether machine `m` has not joined (yet).
    pub fn is_absent(&self, m: MachineId) -> bool {
        self.machines
            .get(m as usize)
            .is_some_and(|s| *s.borrow() == Standing::Absent)
    }

    /// Moves machine `m` to `to`; a machine that is gone stays gone. Returns whether it moved.
    fn set(&self, m: MachineId, to: Standing) -> bool {
        self.machines.get(m as usize).is_some_and(|s| {
            s.send_if_modified(|cur| {
                let moves = *cur != to && *cur != Standing::Gone;
                if moves {
                    *cur = to;
                }
                moves
            })
        })
    }

    /// Ends the wait of every machine that has not joined: the job is over before they would.
    pub fn cancel_absent(&self) {
        for s in &self.machines {
            s.send_if_modified(|cur| {
                let moves = *cur == Standing::Absent;
                if moves {
                    *cur = Standing::Gone;
                }
                moves
            });
        }
    }
}

/// How a role's run ended under a changing membership.
pub(super) enum Gated<T> {
    /// It ran (to the end, or until it failed).
    Ran(Result<T>),
    /// Its machine never joined before the job ended.
    NeverJoined,
    /// Its machine left while it ran; it stopped where it was.
    Departed,
}

/// Runs `run` once the role's machine is in the job, and drops it where it is when the machine
/// leaves; without a gate (a static job) simply runs it.
pub(super) async fn gated<T>(
    gate: Option<watch::Receiver<Standing>>,
    run: impl Future<Output = Result<T>>,
) -> Gated<T> {
    let Some(mut gate) = gate else {
        return Gated::Ran(run.await);
    };
    let joined = match gate.wait_for(|s| *s != Standing::Absent).await {
        Ok(s) => *s == Standing::Present,
        Err(_) => false,
    };
    if !joined {
        return Gated::NeverJoined;
    }
    tokio::select! {
        biased;
        _ = gate.wait_for(|s| *s == Standing::Gone) => Gated::Departed,
        r = run => Gated::Ran(r),
    }
}

/// Replays the plan: at each event's time, moves its machines (roles start or stop) and tells the
/// coordinator through `notify` (a process without the coordinator passes one that does
/// nothing). Runs until the last event or until the launch drops it.
pub(super) async fn drive(
    plan: Arc<MembershipPlan>,
    presence: Arc<Presence>,
    notify: impl Fn(Message) + Send + 'static,
    time: TimeBase,
) {
    for timed in &plan.events {
        time.sleep_until(timed.at_s).await;
        let event = &timed.event;
        let to = match event {
            MembershipEvent::Added { .. } => Some(Standing::Present),
            MembershipEvent::Evicted { .. } | MembershipEvent::Failed { .. } => {
                Some(Standing::Gone)
            }
            MembershipEvent::Warned { .. } => None,
        };
        let mut moved = to.is_none();
        if let Some(to) = to {
            for &m in event.machines() {
                moved |= presence.set(m, to);
            }
        }
        // A machine that was never started (the job ended first) makes no news.
        if moved {
            notify(Message::Membership(event.clone()));
        }
    }
}
