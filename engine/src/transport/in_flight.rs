//! The messages of the simulated wire, in flight and delivered, one lane per receiver.
//!
//! A run at scale keeps a hundred thousand messages in flight at once (every worker pushing to
//! every server), so the order they wait in must not cost a tree insertion and a cache miss per
//! message, nor a second copy into a mailbox. The link model makes arrivals at one receiver come
//! in send order nearly always: a receiver's NIC (or bus port) takes messages one after another,
//! so each one is fully received after the one before. Each receiver therefore has one lane in
//! (arrival, send order): its front holds what has been delivered and not yet taken (its
//! mailbox), the rest what is still in flight. Only the first message in flight of each lane is
//! ordered against the other lanes (a heap as small as the number of roles). The rare message
//! that would overtake its lane's last one (a receiver reached both over its bus and its NIC, or
//! from senders of different latencies, or an engine notice) is placed where it belongs in the
//! lane. Either way messages are delivered in exactly (arrival, send order) across the run, and
//! each receiver takes its own in that order.

use super::tables::ByRole;
use crate::ids::RoleId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::task::Waker;
use tokio::time::Instant;

/// When a message is due and its place among messages due at the same instant (send order).
pub(super) type Due = (Instant, u64);

/// One receiver's messages: the first `delivered` are its mailbox, the rest are in flight.
struct Lane<T> {
    dues: VecDeque<Due>,
    items: VecDeque<T>,
    delivered: usize,
    /// The receiver waiting for its next message, if it waits.
    waiting: Option<Waker>,
    /// The receiver is gone: what comes for it is dropped.
    closed: bool,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Lane {
            dues: VecDeque::new(),
            items: VecDeque::new(),
            delivered: 0,
            waiting: None,
            closed: false,
        }
    }
}

impl<T> Lane<T> {
    /// When its first message in flight is due.
    fn next_due(&self) -> Option<Due> {
        self.dues.get(self.delivered).copied()
    }
}

/// Every receiver's lane, and the order of their next arrivals.
pub(super) struct Lanes<T> {
    /// The lane of every role of the run.
    lanes: ByRole<Lane<T>>,
    /// The next arrival of every lane with messages in flight (entries whose message has moved
    /// are dropped when they come up: see [`Lanes::settle`]).
    heads: BinaryHeap<Reverse<(Due, RoleId)>>,
    in_flight: usize,
}

impl<T> Lanes<T> {
    /// A lane for each of `roles`.
    pub(super) fn new(roles: &[RoleId]) -> Lanes<T> {
        Lanes {
            lanes: ByRole::new(roles.iter().map(|&role| (role, Lane::default()))),
            heads: BinaryHeap::new(),
            in_flight: 0,
        }
    }

    /// Puts `item` in flight to `to`, due at `due` (unique: its send order is). A message to a
    /// role that is not in the run, or is gone, is dropped.
    pub(super) fn push(&mut self, to: RoleId, due: Due, item: T) {
        let Some(lane) = self.lanes.get_mut(to).filter(|lane| !lane.closed) else {
            return;
        };
        let at = if lane.dues.back().is_none_or(|last| *last < due) {
            lane.dues.push_back(due);
            lane.items.push_back(item);
            lane.dues.len() - 1
        } else {
            // Never before what is delivered: a message is due no earlier than it is sent.
            let flying = lane.dues.range(lane.delivered..);
            let at = lane.delivered + flying.take_while(|d| **d < due).count();
            lane.dues.insert(at, due);
            lane.items.insert(at, item);
            at
        };
        self.in_flight += 1;
        if at == lane.delivered {
            self.heads.push(Reverse((due, to)));
        }
    }

    /// Hands `item` to `to` at once, as delivered: the sender found nothing in flight that it
    /// could overtake. Returns the receiver to wake.
    pub(super) fn hand_over(&mut self, to: RoleId, due: Due, item: T) -> Option<Waker> {
        let lane = self.lanes.get_mut(to).filter(|lane| !lane.closed)?;
        debug_assert_eq!(lane.delivered, lane.items.len(), "nothing in flight");
        lane.dues.push_back(due);
        lane.items.push_back(item);
        lane.delivered += 1;
        lane.waiting.take()
    }

    /// Drops heap entries whose message has moved (overtaken in its lane, or delivered), so the
    /// heap's top is the next arrival.
    fn settle(&mut self) {
        while let Some(Reverse((due, role))) = self.heads.peek().copied() {
            let current = self.lanes.get(role).and_then(Lane::next_due);
            if current == Some(due) {
                return;
            }
            self.heads.pop();
        }
    }

    /// When the next message in flight is due.
    pub(super) fn first_due(&mut self) -> Option<Due> {
        self.settle();
        self.heads.peek().map(|Reverse((due, _))| *due)
    }

    /// When the last message in flight is due.
    pub(super) fn last_due(&self) -> Option<Due> {
        self.lanes
            .values()
            .filter(|lane| lane.delivered < lane.dues.len())
            .filter_map(|lane| lane.dues.back().copied())
            .max()
    }

    /// Whether nothing is in flight.
    pub(super) fn nothing_in_flight(&self) -> bool {
        self.in_flight == 0
    }

    /// Delivers the next message in flight if it is due at or before `now`: it joins its
    /// receiver's mailbox. Returns `None` when nothing is due, else the receiver to wake if it
    /// waits.
    pub(super) fn deliver_due(&mut self, now: Instant) -> Option<Option<Waker>> {
        self.settle();
        let Reverse((due, role)) = *self.heads.peek()?;
        if due.0 > now {
            return None;
        }
        self.heads.pop();
        self.in_flight -= 1;
        let lane = self.lanes.get_mut(role)?;
        lane.delivered += 1;
        if let Some(next) = lane.next_due() {
            self.heads.push(Reverse((next, role)));
        }
        Some(lane.waiting.take())
    }

    /// Takes `role`'s first delivered message, if any.
    pub(super) fn take(&mut self, role: RoleId) -> Option<T> {
        let lane = self.lanes.get_mut(role)?;
        if lane.delivered == 0 {
            return None;
        }
        lane.delivered -= 1;
        lane.dues.pop_front();
        lane.items.pop_front()
    }

    /// Takes `role`'s first delivered message, or leaves `waker` to be woken by the next one.
    pub(super) fn take_or_wait(&mut self, role: RoleId, waker: &Waker) -> Option<T> {
        let item = self.take(role);
        if item.is_none() {
            if let Some(lane) = self.lanes.get_mut(role) {
                match &mut lane.waiting {
                    Some(w) if w.will_wake(waker) => {}
                    slot => *slot = Some(waker.clone()),
                }
            }
        }
        item
    }

    /// The receiver `role` is gone: drops its messages, delivered or in flight, and any that
    /// come for it later.
    pub(super) fn close(&mut self, role: RoleId) {
        let Some(lane) = self.lanes.get_mut(role) else {
            return;
        };
        let flying = lane.dues.len() - lane.delivered;
        lane.closed = true;
        lane.dues.clear();
        lane.items.clear();
        lane.delivered = 0;
        lane.waiting = None;
        self.in_flight -= flying;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, us: u64) -> Instant {
        base + Duration::from_micros(us)
    }

    /// Delivers everything due by `now`, then lets each receiver take its mail: the labels in
    /// delivery order.
    fn deliver(q: &mut Lanes<u32>, roles: &[RoleId], now: Instant) -> Vec<u32> {
        let mut order = Vec::new();
        while q.deliver_due(now).is_some() {}
        // Delivery order across receivers is checked through the dues; here each receiver takes
        // its own, in its order.
        for &r in roles {
            while let Some(label) = q.take(r) {
                order.push(label);
            }
        }
        order
    }

    #[test]
    fn each_receiver_takes_its_messages_in_arrival_then_send_order() {
        let t = Instant::now();
        let w = RoleId::Worker;
        let roles = [w(0), w(1), RoleId::Server(0)];
        let mut q = Lanes::new(&roles);
        // (receiver, arrival µs, send order, label)
        let sends = [
            (w(0), 5, 0, 10),
            (w(1), 3, 1, 11),
            (w(0), 7, 2, 12),
            (w(0), 4, 3, 13), // overtakes its lane's last two
            (RoleId::Server(0), 3, 4, 14),
            (w(1), 3, 5, 15), // same instant as an earlier one: after it
            (w(0), 7, 6, 16),
        ];
        for &(to, us, seq, label) in &sends {
            q.push(to, (at(t, us), seq), label);
        }
        assert_eq!(q.first_due(), Some((at(t, 3), 1)));
        assert_eq!(q.last_due(), Some((at(t, 7), 6)));
        assert_eq!(deliver(&mut q, &roles, at(t, 4)), [13, 11, 15, 14]);
        assert!(!q.nothing_in_flight());
        assert_eq!(q.first_due(), Some((at(t, 5), 0)));
        assert_eq!(deliver(&mut q, &roles, at(t, 100)), [10, 12, 16]);
        assert!(q.nothing_in_flight());
        assert_eq!(q.first_due(), None);
        assert_eq!(q.last_due(), None);
    }

    #[test]
    fn deliveries_follow_arrival_order_across_receivers() {
        let t = Instant::now();
        let roles = [RoleId::Worker(0), RoleId::Worker(1), RoleId::Coordinator];
        let mut q = Lanes::new(&roles);
        q.push(roles[0], (at(t, 9), 0), 1u32);
        q.push(roles[1], (at(t, 2), 1), 2u32);
        q.push(roles[0], (at(t, 3), 2), 3u32); // overtakes in its lane
        q.push(roles[2], (at(t, 3), 3), 4u32);
        let mut receivers = Vec::new();
        let mut dues = Vec::new();
        while let Some(due) = q.first_due() {
            assert!(q.deliver_due(due.0).is_some());
            dues.push(due);
            let who = roles.iter().find(|&&r| q.take(r).is_some());
            receivers.push(*who.expect("one receiver got it"));
        }
        assert_eq!(dues.iter().map(|d| d.1).collect::<Vec<_>>(), [1, 2, 3, 0]);
        assert_eq!(receivers, [roles[1], roles[0], roles[2], roles[0]]);
    }

    #[test]
    fn nothing_is_delivered_before_it_is_due() {
        let t = Instant::now();
        let role = RoleId::Coordinator;
        let mut q = Lanes::new(&[role]);
        q.push(role, (at(t, 9), 0), 1u32);
        assert!(q.deliver_due(at(t, 8)).is_none());
        assert_eq!(q.take(role), None);
        assert!(q.deliver_due(at(t, 9)).is_some());
        assert_eq!(q.take(role), Some(1));
    }

    #[test]
    fn a_waiting_receiver_is_handed_back_to_be_woken() {
        let t = Instant::now();
        let role = RoleId::Worker(3);
        let mut q = Lanes::new(&[role]);
        let waker = std::task::Waker::noop();
        assert_eq!(q.take_or_wait(role, waker), None);
        q.push(role, (at(t, 1), 0), 7u32);
        let woken = q.deliver_due(at(t, 1)).expect("due");
        assert!(woken.is_some(), "the waiting receiver is returned");
        assert_eq!(q.take_or_wait(role, waker), Some(7));
        assert!(
            q.hand_over(role, (at(t, 2), 1), 8).is_none(),
            "nobody waits now"
        );
        assert_eq!(q.take(role), Some(8));
    }

    #[test]
    fn a_closed_lane_drops_its_mail_and_what_comes_later() {
        let t = Instant::now();
        let (gone, other) = (RoleId::Worker(0), RoleId::Worker(1));
        let mut q = Lanes::new(&[gone, other]);
        q.push(gone, (at(t, 1), 0), 1u32);
        q.push(other, (at(t, 2), 1), 2u32);
        q.close(gone);
        q.push(gone, (at(t, 3), 2), 3u32);
        assert!(q.hand_over(gone, (at(t, 3), 3), 4).is_none());
        assert_eq!(q.first_due(), Some((at(t, 2), 1)));
        assert!(q.deliver_due(at(t, 9)).is_some());
        assert!(q.nothing_in_flight());
        assert_eq!(q.take(gone), None);
        assert_eq!(q.take(other), Some(2));
        // A role that is not in the run has no lane: its messages are dropped.
        q.push(RoleId::Server(5), (at(t, 4), 4), 5u32);
        assert!(q.nothing_in_flight());
    }
}
