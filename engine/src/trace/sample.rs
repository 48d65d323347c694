//! What `trace = "sampled"` keeps: a fixed set of roles, at a fixed set of clocks, with a cap on
//! the events of each clock — at most [`Sampling::max_events`] events, whatever the run's length
//! and worker count.

use crate::ids::{Clock, RoleId};
use crate::message::Message;

/// Workers traced: evenly spaced over the worker indices, the first and the last included.
pub const SAMPLED_WORKERS: u64 = 8;
/// Servers traced: evenly spaced over the server indices (standby servers included).
pub const SAMPLED_SERVERS: u64 = 4;
/// Clocks traced: evenly spaced over the run's iterations, the first and the last included.
pub const SAMPLED_CLOCKS: u64 = 8;
/// Events a traced role keeps of one traced clock (the first ones); the rest of that clock's
/// events are dropped.
pub const EVENTS_PER_CLOCK: usize = 512;

/// The sampled roles and clocks of one run.
///
/// Straggler hunting starts from `metrics.jsonl` (every worker's compute, wait and communication
/// seconds in every iteration); the sampled timelines show what a few roles did, span by span,
/// in a few iterations spread over the run: the start, the end and evenly between. A role's clock
/// is the iteration it works on (what it last passed to `RoleContext::set_iter`); a role that
/// never sets one (servers, the coordinator) takes the highest clock among the messages it has
/// received (pushes, pulls, directives, reports), and stays at clock 0 if none carries one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampling {
    workers: Vec<u64>,
    servers: Vec<u64>,
    clocks: Vec<Clock>,
}

impl Sampling {
    /// The sample of a run of `workers` workers, `servers` servers and `iterations` clocks.
    pub fn new(workers: u32, servers: u32, iterations: u64) -> Sampling {
        Sampling {
            workers: evenly_spaced(u64::from(workers), SAMPLED_WORKERS),
            servers: evenly_spaced(u64::from(servers), SAMPLED_SERVERS),
            clocks: evenly_spaced(iterations, SAMPLED_CLOCKS),
        }
    }

    /// Whether `role`'s timeline is sampled at all (the coordinator always is).
    pub fn traces(&self, role: RoleId) -> bool {
        match role {
            RoleId::Coordinator => true,
            RoleId::Worker(w) => self.workers.binary_search(&u64::from(w)).is_ok(),
            RoleId::Server(s) => self.servers.binary_search(&u64::from(s)).is_ok(),
        }
    }

    /// The traced clocks, ascending.
    pub fn clocks(&self) -> &[Clock] {
        &self.clocks
    }

    /// The position of `clock` among the traced clocks, if it is one.
    pub fn window(&self, clock: Clock) -> Option<usize> {
        self.clocks.binary_search(&clock).ok()
    }

    /// The most events one traced role keeps.
    pub fn max_events_per_role() -> usize {
        SAMPLED_CLOCKS as usize * EVENTS_PER_CLOCK
    }

    /// The most events a whole run keeps: every traced role at its most.
    pub fn max_events() -> usize {
        (SAMPLED_WORKERS + SAMPLED_SERVERS + 1) as usize * Sampling::max_events_per_role()
    }
}

/// `k` values evenly spaced over `0..n`, the first and the last included (all of them when
/// `n <= k`).
fn evenly_spaced(n: u64, k: u64) -> Vec<u64> {
    if n <= k {
        return (0..n).collect();
    }
    // n > k >= 2: consecutive values differ by (n - 1) / (k - 1) > 1, so they are distinct.
    (0..k).map(|j| j * (n - 1) / (k - 1)).collect()
}

/// The clock a message is about, for the engine's messages that carry one.
pub fn message_clock(msg: &Message) -> Option<Clock> {
    match msg {
        Message::Push { clock, .. } | Message::Pull { clock, .. } => Some(*clock),
        Message::Directive(d) => Some(d.clock),
        Message::Report(r) => Some(r.clock),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spacing_includes_both_ends_and_stays_bounded() {
        assert_eq!(evenly_spaced(3, 8), vec![0, 1, 2]);
        assert_eq!(evenly_spaced(8, 8), (0..8).collect::<Vec<_>>());
        assert_eq!(evenly_spaced(100, 8), vec![0, 14, 28, 42, 56, 70, 84, 99]);
        assert_eq!(evenly_spaced(1024, 4), vec![0, 341, 682, 1023]);
        assert!(evenly_spaced(0, 8).is_empty());
    }

    #[test]
    fn the_sample_names_few_roles_and_clocks_however_large_the_run() {
        let s = Sampling::new(1024, 128, 1_000_000);
        let workers = (0..1024).filter(|&w| s.traces(RoleId::Worker(w))).count();
        let servers = (0..128).filter(|&w| s.traces(RoleId::Server(w))).count();
        assert_eq!((workers, servers), (8, 4));
        assert!(s.traces(RoleId::Worker(0)) && s.traces(RoleId::Worker(1023)));
        assert!(s.traces(RoleId::Coordinator));
        assert_eq!(s.clocks().len(), 8);
        assert_eq!(s.window(999_999), Some(7));
        assert_eq!(s.window(1), None);
        assert_eq!(Sampling::max_events(), 13 * 8 * 512);
    }

    #[test]
    fn clocks_come_from_the_engine_messages_that_carry_one() {
        let pull = Message::Pull {
            clock: 7,
            min_version: None,
        };
        assert_eq!(message_clock(&pull), Some(7));
        assert_eq!(message_clock(&Message::Shutdown), None);
    }
}
