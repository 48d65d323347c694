//! Message passing between roles: the [`Transport`] seam every role's context sends through, and
//! its in-process implementation with a link model, [`Network`].
//!
//! `sim` and `wall` run every role in one process over a [`Network`]; `--runtime process` runs
//! one process per machine over a mesh of TCP connections (`crate::process`), which implements
//! the same trait. Strategy code sees only the role context, never which one carries it.
//!
//! Roles never share memory (DESIGN rule); they talk only through [`Network::send`]. A message of
//! `b` bytes from machine A to machine B occupies A's NIC egress and B's NIC ingress for
//! `b / bandwidth` each (NICs are shared FIFO by all roles of a machine, full duplex unless the
//! profile says `nic_duplex = "half"`: then a machine's sends and receives take turns on one port,
//! as processes on one host whose cores copy loopback traffic either way) and arrives one latency
//! after it leaves the second NIC. Roles on the same machine exchange messages without
//! touching the NIC: over the machine's bus when its device profile has one
//! ([`crate::cluster::DeviceProfile::bus_gbps`]), each role then having a port of its own (the
//! sender's port out and the receiver's port in, each FIFO, full duplex, cut-through as between
//! NICs, for `b / bus bandwidth`, with no latency added: a peer-to-peer hop costs microseconds,
//! far below the transfers a bus carries), and for free when it has none. The NIC slowdown
//! patterns (the bandwidth shaper) shape the NICs only. Where a machine's profile has a
//! message copy rate ([`crate::cluster::DeviceProfile::message_copy_gbps`]) or a per-message
//! overhead ([`crate::cluster::DeviceProfile::message_us`], messages between machines), its roles
//! also handle their messages: the sender handles a message and packs its tensors before it
//! leaves, the receiver handles it and unpacks the tensors it copies
//! ([`Message::unpacked_bytes`]) after it arrives, each role one message at a time (a role's out
//! and in queues, store-and-forward around the link). Where the receiving machine's profile has
//! a wake curve ([`crate::cluster::DeviceProfile::wake`]), a message from another machine also
//! waits for its receiver to wake, by how long that machine's roles had all been idle, neither
//! receiving nor sending a message nor doing modeled work ([`Transport::busy_until`]): a process
//! runs its roles on its runtime's threads, which sleep only while all of them wait. Where two
//! machines share a host's processors (`cluster.hosts`) and their devices have a
//! [`crate::cluster::DeviceProfile::loopback_share`], a transfer between them also keeps that
//! share of a processor busy at each end for its time (loopback TCP is the processors copying),
//! and ends no sooner than those copies do.
//! A single delivery pump hands messages over in
//! (arrival time, send order), so a simulated run is deterministic.
//!
//! The process mesh has no link model: its messages take what the real sockets and memory take,
//! so neither `nic_gbps` nor `bus_gbps` charges anything there.

use crate::cluster::{Cluster, Duplex, ProcessorClocks};
use crate::ids::RoleId;
use crate::message::Message;
use crate::time::{park_until, TimeBase, TIMER_TICK};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

mod in_flight;
pub(crate) mod tables;
use in_flight::Lanes;
use tables::{LinkCounts, PortClocks};

/// A message in flight or delivered, with its addressing.
#[derive(Clone, Debug)]
pub struct Envelope {
    /// Sender.
    pub from: RoleId,
    /// Receiver.
    pub to: RoleId,
    /// Seconds since the run started when it was sent.
    pub sent_at: f64,
    /// The message.
    pub msg: Message,
}

/// Bandwidth multiplier of a role's NIC at a time (from the straggler injector), `(role, t) -> f`.
pub type BandwidthShaper = Box<dyn FnMut(RoleId, f64) -> f64 + Send>;

/// Traffic counters of one directed link between two roles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LinkTraffic {
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent (header + payload).
    pub bytes: u64,
}

struct State {
    /// Every role's messages, in flight and delivered, in (arrival, send order).
    queue: Lanes<Envelope>,
    seq: u64,
    egress_free: Vec<f64>,
    ingress_free: Vec<f64>,
    /// Per role, when its bus port out / in is free (machines with a bus only).
    bus_out: PortClocks,
    bus_in: PortClocks,
    /// Per role, when it is done handling the messages it sent / received (machines with a copy
    /// rate or a per-message overhead only).
    handling_out: PortClocks,
    handling_in: PortClocks,
    /// Per role, when it last received or sent a message or ended modeled work (machines with a
    /// wake curve only).
    active: PortClocks,
    /// What each processor of a host several machines share is busy with (`cluster.hosts`
    /// only).
    processors: ProcessorClocks,
    traffic: LinkCounts,
    shaper: Option<BandwidthShaper>,
    closed: bool,
}

/// When each role's own queues are free again, run-time seconds, for the roles whose queues have
/// carried a message: the part of the link model's queues a checkpoint keeps besides the NICs'.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleQueues {
    /// Per role: when its bus port out is free.
    pub egress_free: BTreeMap<RoleId, f64>,
    /// Per role: when its bus port in is free.
    pub ingress_free: BTreeMap<RoleId, f64>,
    /// Per role: when it is done handling the messages it sent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sent_handled: BTreeMap<RoleId, f64>,
    /// Per role: when it is done handling the messages it received.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub received_handled: BTreeMap<RoleId, f64>,
    /// Per role: when it last received or sent a message or ended modeled work, where its machine
    /// wakes slowly.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub last_received: BTreeMap<RoleId, f64>,
}

impl RoleQueues {
    /// Whether no role's queue has carried a message (every run on machines without a bus, a
    /// message copy rate or a per-message overhead).
    pub fn is_empty(&self) -> bool {
        self.egress_free.is_empty()
            && self.ingress_free.is_empty()
            && self.sent_handled.is_empty()
            && self.received_handled.is_empty()
            && self.last_received.is_empty()
    }
}

/// One transfer through a sender's port out and a receiver's port in, cut-through: the receiver
/// takes bytes as they leave the sender. Given when each port is free, the clock, and the seconds
/// each side needs for the bytes, returns (when the first byte leaves, when the port out is free,
/// when the message is fully received). Public so that a strategy's planner can replay transfers
/// as this network times them.
pub fn cut_through(
    out_free: f64,
    in_free: f64,
    now: f64,
    tx_time: f64,
    rx_time: f64,
) -> (f64, f64, f64) {
    let out_start = out_free.max(now);
    let out_end = out_start + tx_time;
    let in_start = in_free.max(out_start);
    let in_end = (in_start + rx_time).max(out_end);
    (out_start, out_end, in_end)
}

/// When `role` is done with `seconds` of its end of a message it may start on at `at` (the run's
/// clock reading `now`), after what is queued before on its `queue` and, where its machine shares
/// `host`'s processors, once one of them is free; `at` itself when there is nothing to do.
fn in_turn_on(
    queue: &mut PortClocks,
    processors: &mut ProcessorClocks,
    host: Option<&crate::cluster::Host>,
    role: RoleId,
    (now, at): (f64, f64),
    seconds: f64,
) -> f64 {
    if seconds <= 0.0 {
        return at;
    }
    let start = queue.free_at(role).max(at);
    let start = start + host.map_or(0.0, |h| processors.run(h, now, start, seconds));
    let done = start + seconds;
    queue.busy_until(role, done);
    done
}

/// The host both ends of a transfer between two machines run on, where they share one: their
/// messages then cross loopback, copied by the host's processors.
fn loopback<'h>(
    from: Option<&'h crate::cluster::Host>,
    to: Option<&crate::cluster::Host>,
) -> Option<&'h crate::cluster::Host> {
    from.filter(|f| to.is_some_and(|t| t.name == f.name))
}

/// When a sent message leaves its sender and reaches its receiver, run-time seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Departure {
    /// When its first byte leaves the sender's NIC (after the sender's earlier messages).
    pub start: f64,
    /// When it is fully received.
    pub arrival: f64,
}

/// What a role's context sends through and reads the run's time from.
///
/// Two implementations: [`Network`], the simulated wire of the one-process runtimes, and the
/// process mesh of `--runtime process`, where a message to a role of another process travels over
/// TCP and one to a role of the same process stays in memory.
pub trait Transport: Send + Sync {
    /// The run's time base (virtual in `sim`, real otherwise).
    fn time(&self) -> TimeBase;

    /// The cluster the roles run on.
    fn cluster(&self) -> &Cluster;

    /// Real seconds since the run started, whatever the runtime.
    fn wall_now(&self) -> f64;

    /// Sends `msg` from `from` to `to`, the sender's clock read as `now`: when it starts leaving
    /// the sender and when it is received (as far as the transport can tell: a real network
    /// reports `now` for both, the send being all the sender observes).
    fn send_at(&self, from: RoleId, to: RoleId, msg: Message, now: f64) -> Departure;

    /// How much later than `at + seconds` the `seconds` of modeled work that `role` is ready to
    /// start at `at` is done. Where the role's machine shares a host's processors with other
    /// machines (`cluster.hosts`), the work runs in the free time of whichever of them finishes
    /// it first; otherwise, and by default, it runs at once.
    fn processor_wait(&self, role: RoleId, at: f64, seconds: f64) -> f64 {
        let _ = (role, at, seconds);
        0.0
    }

    /// Tells the transport that `role` does modeled work until `until`: its machine is not idle
    /// meanwhile, so a message reaching it then finds it awake. By default (a real network, whose
    /// wake-ups take what they take) nothing.
    fn busy_until(&self, role: RoleId, until: f64) {
        let _ = (role, until);
    }

    /// Seconds since the run started.
    fn now(&self) -> f64 {
        self.time().now()
    }
}

/// The in-process transport shared by the roles of one run: the simulated wire.
pub struct Network {
    cluster: Arc<Cluster>,
    time: TimeBase,
    wall_start: std::time::Instant,
    state: Mutex<State>,
    wake: Notify,
}

impl Network {
    /// Creates the network and one mailbox per role; returns the mailboxes by role.
    pub fn new(
        cluster: Arc<Cluster>,
        time: TimeBase,
        roles: &[RoleId],
        shaper: Option<BandwidthShaper>,
    ) -> (Arc<Network>, BTreeMap<RoleId, Inbox>) {
        let n = cluster.machines.len();
        let net = Network {
            cluster,
            time,
            wall_start: std::time::Instant::now(),
            state: Mutex::new(State {
                queue: Lanes::new(roles),
                seq: 0,
                egress_free: vec![0.0; n],
                ingress_free: vec![0.0; n],
                bus_out: PortClocks::default(),
                bus_in: PortClocks::default(),
                handling_out: PortClocks::default(),
                handling_in: PortClocks::default(),
                active: PortClocks::default(),
                processors: ProcessorClocks::default(),
                traffic: LinkCounts::new(roles),
                shaper,
                closed: false,
            }),
            wake: Notify::new(),
        };
        let net = Arc::new(net);
        let inboxes = roles
            .iter()
            .map(|&role| {
                let wire = InboxKind::Wire {
                    net: net.clone(),
                    role,
                };
                (role, Inbox(wire))
            })
            .collect();
        (net, inboxes)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a role panicked mid-send; the counters are still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seconds since the run started (virtual in `sim`, real in `wall`).
    pub fn now(&self) -> f64 {
        self.time.now()
    }

    /// Real seconds since the network (and so the run) was created, in either runtime.
    pub fn wall_now(&self) -> f64 {
        self.wall_start.elapsed().as_secs_f64()
    }

    /// When each machine's NIC is free again, (egress, ingress) per machine: the queues a
    /// checkpoint keeps, so a resumed run's first messages wait behind the last ones before it.
    pub fn queues(&self) -> (Vec<f64>, Vec<f64>) {
        let st = self.lock();
        (st.egress_free.clone(), st.ingress_free.clone())
    }

    /// Restores the NIC queues [`Network::queues`] returned (machines beyond either list stay
    /// free).
    pub fn restore_queues(&self, egress: &[f64], ingress: &[f64]) {
        let mut st = self.lock();
        for (free, &at) in st.egress_free.iter_mut().zip(egress) {
            *free = at;
        }
        for (free, &at) in st.ingress_free.iter_mut().zip(ingress) {
            *free = at;
        }
    }

    /// When each role's bus ports and handling queues are free again: the queues a checkpoint keeps
    /// beside [`Network::queues`].
    pub fn role_queues(&self) -> RoleQueues {
        let st = self.lock();
        RoleQueues {
            egress_free: st.bus_out.to_map(),
            ingress_free: st.bus_in.to_map(),
            sent_handled: st.handling_out.to_map(),
            received_handled: st.handling_in.to_map(),
            last_received: st.active.to_map(),
        }
    }

    /// Restores the queues [`Network::role_queues`] returned (roles not listed stay free).
    pub fn restore_role_queues(&self, queues: &RoleQueues) {
        let mut st = self.lock();
        let restore = |clocks: &mut PortClocks, map: &BTreeMap<RoleId, f64>| {
            for (&role, &at) in map {
                clocks.busy_until(role, at);
            }
        };
        restore(&mut st.bus_out, &queues.egress_free);
        restore(&mut st.bus_in, &queues.ingress_free);
        restore(&mut st.handling_out, &queues.sent_handled);
        restore(&mut st.handling_in, &queues.received_handled);
        restore(&mut st.active, &queues.last_received);
    }

    /// What each processor of the hosts that machines share is busy with: what a checkpoint
    /// keeps so that a resumed run's first work waits behind the last work before it.
    pub fn processor_clocks(&self) -> ProcessorClocks {
        self.lock().processors.clone()
    }

    /// Restores the processors [`Network::processor_clocks`] returned.
    pub fn restore_processor_clocks(&self, clocks: &ProcessorClocks) {
        self.lock().processors = clocks.clone();
    }

    /// The run's time base.
    pub fn time(&self) -> TimeBase {
        self.time
    }

    /// The host whose processors `role`'s modeled work takes turns on: in `sim` only, where the
    /// cluster puts its machine on one; in `wall` the roles' threads share the real processors.
    fn shared_host(&self, role: RoleId) -> Option<&crate::cluster::Host> {
        self.time
            .is_dilated()
            .then(|| self.cluster.host_of_role(role))
            .flatten()
    }

    /// The cluster the network connects.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Sends `msg`; returns the virtual time (seconds since start) it will arrive.
    pub fn send(&self, from: RoleId, to: RoleId, msg: Message) -> f64 {
        self.send_timed(from, to, msg).arrival
    }

    /// Like [`Network::send`], also telling when the message starts leaving the sender's NIC
    /// (after the sender's earlier messages): what a sender can observe of its own queue, so a
    /// measured transfer can exclude it.
    pub fn send_timed(&self, from: RoleId, to: RoleId, msg: Message) -> Departure {
        self.send_timed_at(from, to, msg, self.time.now())
    }

    /// [`Network::send_timed`] with the clock already read as `now`, for a sender that stamps the
    /// message with the same reading (one clock read instead of two).
    pub(crate) fn send_timed_at(
        &self,
        from: RoleId,
        to: RoleId,
        msg: Message,
        now: f64,
    ) -> Departure {
        let bytes = msg.wire_bytes();
        let mut st = self.lock();
        let (src, dst) = (self.cluster.machine_of(from), self.cluster.machine_of(to));
        let s_dev = &self.cluster.machines[src as usize].device;
        let d_dev = &self.cluster.machines[dst as usize].device;
        // Summed only where a role handles its messages: the common case sends millions.
        let (packed, unpacked) = if s_dev.handles_messages() || d_dev.handles_messages() {
            (msg.payload_bytes(), msg.unpacked_bytes())
        } else {
            (0, 0)
        };
        // The sender handles the message and packs its tensors before any byte leaves, after
        // its earlier messages.
        let (from_host, to_host) = (self.shared_host(from), self.shared_host(to));
        let state = &mut *st;
        let ready = in_turn_on(
            &mut state.handling_out,
            &mut state.processors,
            from_host,
            from,
            (now, now),
            s_dev.message_handling_seconds(packed, src != dst),
        );
        if s_dev.wake.is_some() {
            // The sender's machine is awake while it handles the message.
            st.active.busy_at_least(from, ready);
        }
        let mut start = ready;
        let arrive = if src == dst {
            match s_dev.bus_bytes_per_s() {
                None => ready,
                Some(rate) => {
                    let time = bytes as f64 / rate;
                    let (out_start, out_end, in_end) = cut_through(
                        st.bus_out.free_at(from),
                        st.bus_in.free_at(to),
                        ready,
                        time,
                        time,
                    );
                    start = out_start;
                    st.bus_out.busy_until(from, out_end);
                    st.bus_in.busy_until(to, in_end);
                    in_end
                }
            }
        } else {
            let (fs, fd) = match st.shaper.as_mut() {
                Some(shape) => (shape(from, ready), shape(to, ready)),
                None => (1.0, 1.0),
            };
            let tx_time = bytes as f64 / (s_dev.nic_bytes_per_s() * fs.max(1e-9));
            let rx_time = bytes as f64 / (d_dev.nic_bytes_per_s() * fd.max(1e-9));
            let (s, d) = (src as usize, dst as usize);
            // A half-duplex NIC is one port for both directions: free when both are.
            let port = |free: &[f64], other: &[f64], m: usize, half: bool| {
                if half {
                    free[m].max(other[m])
                } else {
                    free[m]
                }
            };
            let (s_half, d_half) = (
                s_dev.nic_duplex == Duplex::Half,
                d_dev.nic_duplex == Duplex::Half,
            );
            let (out_free, in_free) = (
                port(&st.egress_free, &st.ingress_free, s, s_half),
                port(&st.ingress_free, &st.egress_free, d, d_half),
            );
            let (out_start, mut out_end, mut in_end) =
                cut_through(out_free, in_free, ready, tx_time, rx_time);
            if let Some(host) = loopback(from_host, to_host) {
                // Between two machines of one host the wire is its processors: each end's copies
                // of the bytes keep its share of one busy for the transfer's time, in the free
                // time around the work booked there (a step, another transfer), and the
                // transfer is done no sooner than they are.
                let state = &mut *st;
                let mut copy = |share: Option<f64>, at: f64, seconds: f64| {
                    share.map_or(at, |share| {
                        let work = share * seconds;
                        at + work + state.processors.run(host, now, at, work)
                    })
                };
                out_end = out_end.max(copy(s_dev.loopback_share, out_start, tx_time));
                let in_start = in_free.max(out_start);
                in_end = in_end
                    .max(copy(d_dev.loopback_share, in_start, rx_time))
                    .max(out_end);
                if s_dev.wake.is_some() && s_dev.loopback_share.is_some() {
                    // The sender's machine is awake while it copies the bytes out.
                    st.active.busy_at_least(from, out_end);
                }
            }
            start = out_start;
            // A transfer on a half-duplex NIC starts once both its clocks are free, so it ends
            // after both: the two clocks move together.
            st.egress_free[s] = out_end;
            st.ingress_free[d] = in_end;
            if s_half {
                st.ingress_free[s] = out_end;
            }
            if d_half {
                st.egress_free[d] = in_end;
            }
            let reached = in_end + s_dev.latency_us.max(d_dev.latency_us) * 1e-6;
            // A machine whose roles have all been idle long wakes for this one.
            reached
                + d_dev.wake.as_ref().map_or(0.0, |curve| {
                    let cluster = &self.cluster;
                    let active = st.active.latest(|role| cluster.machine_of(role) == dst);
                    curve.extra_seconds(reached - active)
                })
        };
        // The receiver handles it and unpacks its tensors (those it copies) once it is all there,
        // after the messages it handles before.
        let state = &mut *st;
        let arrive = in_turn_on(
            &mut state.handling_in,
            &mut state.processors,
            to_host,
            to,
            (now, arrive),
            d_dev.message_handling_seconds(unpacked, src != dst),
        );
        if d_dev.wake.is_some() {
            st.active.busy_at_least(to, arrive);
        }
        st.traffic.add(from, to, bytes);
        let env = Envelope {
            from,
            to,
            sent_at: now,
            msg,
        };
        if arrive <= now && st.queue.nothing_in_flight() {
            // Nothing in flight can be overtaken: hand it over directly, in send order.
            let due = (self.time.instant_at(arrive), st.seq);
            st.seq += 1;
            let woken = st.queue.hand_over(to, due, env);
            drop(st);
            if let Some(waker) = woken {
                waker.wake();
            }
            return Departure {
                start,
                arrival: arrive,
            };
        }
        let at = self.time.instant_at(arrive);
        self.enqueue(st, at, env);
        Departure {
            start,
            arrival: arrive,
        }
    }

    /// Delivers `msg` to `to` after every message already in flight, outside the link model and
    /// the counters: the engine's own control (shutdown), which must not overtake the last updates
    /// and is not part of what a strategy costs.
    pub fn control_after_in_flight(&self, to: RoleId, msg: Message) {
        let now = self.time.now();
        let st = self.lock();
        let at = st
            .queue
            .last_due()
            .map_or(self.time.instant_at(now), |due| due.0);
        let env = Envelope {
            from: RoleId::Coordinator,
            to,
            sent_at: now,
            msg,
        };
        self.enqueue(st, at, env);
    }

    /// Delivers `msg` to `to` now (after what is already due at this instant), outside the link
    /// model and the counters: the engine's notices (membership changes) that no role sends.
    pub fn control_now(&self, to: RoleId, msg: Message) {
        let now = self.time.now();
        let st = self.lock();
        let env = Envelope {
            from: RoleId::Coordinator,
            to,
            sent_at: now,
            msg,
        };
        self.enqueue(st, self.time.instant_at(now), env);
    }

    /// Queues `env` for delivery at `at`, after everything already queued for that instant, and
    /// wakes the pump if the message is now the first due: otherwise the pump already waits for
    /// an earlier one and delivers this one in its turn (sparing a wake-up per message).
    fn enqueue(&self, mut st: MutexGuard<'_, State>, at: Instant, env: Envelope) {
        let seq = st.seq;
        st.seq += 1;
        let key = (at, seq);
        let first = st.queue.first_due().is_none_or(|head| key < head);
        st.queue.push(env.to, key, env);
        drop(st);
        if first {
            self.wake.notify_one();
        }
    }

    /// Traffic per directed role pair so far.
    pub fn traffic(&self) -> BTreeMap<(RoleId, RoleId), LinkTraffic> {
        self.lock().traffic.to_map()
    }

    /// Stops the delivery pump once the queue is empty.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// Delivers messages at their arrival times until [`Network::close`] and the queue drains.
    pub async fn pump(self: Arc<Self>) {
        // One timer, moved to each next arrival: a run delivers millions of messages at distinct
        // instants, and re-arming a timer costs less than making and dropping one per instant.
        let sleep = tokio::time::sleep_until(Instant::now());
        tokio::pin!(sleep);
        let precise = !self.time.is_dilated();
        let mut woken = Vec::new();
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = {
                let mut st = self.lock();
                let now = Instant::now();
                while let Some(receiver) = st.queue.deliver_due(now) {
                    woken.extend(receiver);
                }
                let done = st.closed && st.queue.nothing_in_flight();
                let next = st.queue.first_due().map(|due| due.0);
                drop(st);
                // Receivers wake in delivery order, outside the lock they will take.
                for waker in woken.drain(..) {
                    waker.wake();
                }
                if done {
                    return;
                }
                next
            };
            match next {
                // In real time, tokio's timer would hand a message over on the first millisecond
                // tick after its arrival: the last tick before it is waited on the finer timer
                // of a parked pool thread instead (one a new first arrival leaves parked for
                // the rest of that tick at most).
                Some(t) if precise && t <= Instant::now() + TIMER_TICK => {
                    tokio::select! {
                        biased;
                        _ = &mut notified => {}
                        _ = park_until(t) => {}
                    }
                }
                Some(t) => {
                    let wake_at = if precise { t - TIMER_TICK } else { t };
                    if sleep.deadline() != wake_at || sleep.is_elapsed() {
                        sleep.as_mut().reset(wake_at);
                    }
                    tokio::select! {
                        biased;
                        _ = &mut notified => {}
                        _ = &mut sleep => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// A role's mailbox: what has been delivered to it, in order of arrival (then of sending).
///
/// On the simulated wire it is the role's own lane of the network (delivered messages are not
/// copied again); the process runtime fills a channel.
pub struct Inbox(InboxKind);

enum InboxKind {
    Channel(mpsc::UnboundedReceiver<Envelope>),
    Wire { net: Arc<Network>, role: RoleId },
}

impl Inbox {
    /// The next message, waiting for it; `None` once nothing can come any more.
    pub async fn recv(&mut self) -> Option<Envelope> {
        match &mut self.0 {
            InboxKind::Channel(rx) => rx.recv().await,
            InboxKind::Wire { net, role } => {
                let (net, role) = (&**net, *role);
                std::future::poll_fn(|cx| match net.lock().queue.take_or_wait(role, cx.waker()) {
                    Some(env) => Poll::Ready(Some(env)),
                    None => Poll::Pending,
                })
                .await
            }
        }
    }

    /// The next message if one has been delivered, without waiting.
    pub fn try_recv(&mut self) -> Option<Envelope> {
        match &mut self.0 {
            InboxKind::Channel(rx) => rx.try_recv().ok(),
            InboxKind::Wire { net, role } => net.lock().queue.take(*role),
        }
    }
}

impl From<mpsc::UnboundedReceiver<Envelope>> for Inbox {
    fn from(rx: mpsc::UnboundedReceiver<Envelope>) -> Inbox {
        Inbox(InboxKind::Channel(rx))
    }
}

impl Drop for Inbox {
    /// A role that is gone drops what is still sent to it; nothing waits on it.
    fn drop(&mut self) {
        if let InboxKind::Wire { net, role } = &self.0 {
            net.lock().queue.close(*role);
        }
    }
}

impl Transport for Network {
    fn time(&self) -> TimeBase {
        self.time
    }

    fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn wall_now(&self) -> f64 {
        Network::wall_now(self)
    }

    fn send_at(&self, from: RoleId, to: RoleId, msg: Message, now: f64) -> Departure {
        self.send_timed_at(from, to, msg, now)
    }

    fn processor_wait(&self, role: RoleId, at: f64, seconds: f64) -> f64 {
        match self.shared_host(role) {
            Some(host) if seconds > 0.0 => {
                let now = self.time.now();
                self.lock().processors.run(host, now, at, seconds)
            }
            _ => 0.0,
        }
    }

    fn busy_until(&self, role: RoleId, until: f64) {
        if self.cluster.device_of(role).wake.is_some() {
            self.lock().active.busy_at_least(role, until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::payload::{BlockPayload, Payload};

    /// Three machines with 8 Gbit/s (1 GB/s) NICs and 10 µs latency.
    fn cluster() -> Arc<Cluster> {
        crate::cluster::test_cluster(3)
    }

    fn push(elems: u64) -> Message {
        Message::Push {
            clock: 0,
            samples: 1,
            completes_clock: true,
            grads: vec![BlockPayload {
                block: 0,
                data: Payload::Virtual { elems },
            }],
        }
    }

    /// In real time a message is handed over at its arrival, never before, whether its arrival
    /// is under a timer tick away (a small message: 10 µs and its bytes) or several ticks away
    /// (a 4 MB one, 4 ms on a 1 GB/s NIC).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_real_time_wire_never_hands_a_message_over_early() {
        let roles = [RoleId::Worker(0), RoleId::Worker(1)];
        let (net, mut rx) = Network::new(cluster(), TimeBase::new(false), &roles, None);
        let pump = tokio::spawn(net.clone().pump());
        let inbox = rx.get_mut(&RoleId::Worker(1)).unwrap();
        for elems in [1, 1_000, 1_000_000, 1, 10] {
            let arrival = net.send(RoleId::Worker(0), RoleId::Worker(1), push(elems));
            inbox.recv().await.unwrap();
            let now = net.now();
            assert!(
                now >= arrival - 1e-9,
                "handed over at {now}, due at {arrival}"
            );
        }
        net.close();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn transfers_cost_latency_plus_bytes_over_bandwidth_and_share_the_nic() {
        let roles = [RoleId::Worker(0), RoleId::Worker(1), RoleId::Worker(2)];
        let (net, mut rx) = Network::new(cluster(), TimeBase::new(true), &roles, None);
        let pump = tokio::spawn(net.clone().pump());
        let msg = push(250_000); // 1 MB of payload
        let bytes = msg.wire_bytes() as f64;
        // Two messages leave machine 0 at once for two different machines: the second waits for
        // the first on machine 0's egress.
        let first = net.send(RoleId::Worker(0), RoleId::Worker(1), msg.clone());
        let second = net.send(RoleId::Worker(0), RoleId::Worker(2), msg);
        let one = bytes / 1e9;
        assert!((first - (one + 10e-6)).abs() < 1e-12, "{first}");
        assert!((second - (2.0 * one + 10e-6)).abs() < 1e-12, "{second}");
        let got = rx
            .get_mut(&RoleId::Worker(2))
            .unwrap()
            .recv()
            .await
            .unwrap();
        assert_eq!(got.from, RoleId::Worker(0));
        let arrived = net.now();
        assert!(
            (arrived - second).abs() < 1e-6,
            "delivered at {arrived}, expected {second}"
        );
        let traffic = net.traffic();
        assert_eq!(
            traffic[&(RoleId::Worker(0), RoleId::Worker(1))].bytes,
            bytes as u64
        );
        assert_eq!(traffic[&(RoleId::Worker(0), RoleId::Worker(2))].messages, 1);
        net.close();
        rx.clear();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn messages_on_one_link_arrive_in_send_order() {
        let roles = [RoleId::Worker(0), RoleId::Worker(1)];
        let (net, mut rx) = Network::new(cluster(), TimeBase::new(true), &roles, None);
        let pump = tokio::spawn(net.clone().pump());
        for elems in [1000, 1, 500, 0] {
            net.send(RoleId::Worker(0), RoleId::Worker(1), push(elems));
        }
        let inbox = rx.get_mut(&RoleId::Worker(1)).unwrap();
        let mut sizes = Vec::new();
        for _ in 0..4 {
            let env = inbox.recv().await.unwrap();
            sizes.push(env.msg.wire_bytes());
        }
        assert_eq!(sizes, [1000, 1, 500, 0].map(|e| HEADER_BYTES_TEST + 4 * e));
        net.close();
        pump.await.unwrap();
    }

    const HEADER_BYTES_TEST: u64 = crate::message::HEADER_BYTES;

    /// One machine of four workers whose bus is 8 Gbit/s (1 GB/s) when `bus` is set, and the
    /// network between them (paused virtual time).
    fn one_machine(bus: bool) -> (Arc<Network>, BTreeMap<RoleId, Inbox>) {
        let cluster = crate::cluster::test_cluster_with(1, 4, bus.then_some(8.0));
        let roles: Vec<RoleId> = (0..4).map(RoleId::Worker).collect();
        Network::new(cluster, TimeBase::new(true), &roles, None)
    }

    fn w(i: u32) -> RoleId {
        RoleId::Worker(i)
    }

    /// A message of exactly 1 MB on the wire (header included): a server's reply, whose tensors
    /// the receiver copies into its values.
    fn one_mb() -> Message {
        let msg = Message::Params {
            version: 0,
            served_at: 0.0,
            blocks: vec![BlockPayload {
                block: 0,
                data: Payload::Virtual {
                    elems: (1_000_000 - HEADER_BYTES_TEST) / 4,
                },
            }],
        };
        assert_eq!(msg.wire_bytes(), 1_000_000);
        msg
    }

    #[tokio::test(start_paused = true)]
    async fn a_bus_charges_bytes_over_its_bandwidth_and_delivers_then() {
        let (net, mut rx) = one_machine(true);
        let pump = tokio::spawn(net.clone().pump());
        let sent = net.send_timed(w(0), w(1), one_mb());
        assert_eq!(sent.start, 0.0);
        assert!((sent.arrival - 1e-3).abs() < 1e-12, "{}", sent.arrival);
        let got = rx.get_mut(&w(1)).unwrap().recv().await.unwrap();
        assert_eq!(got.from, w(0));
        assert!(
            (net.now() - 1e-3).abs() < 1e-6,
            "delivered at {}",
            net.now()
        );
        assert_eq!(net.traffic()[&(w(0), w(1))].bytes, 1_000_000);
        net.close();
        rx.clear();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_bus_a_message_on_one_machine_arrives_at_once() {
        let (net, mut rx) = one_machine(false);
        let pump = tokio::spawn(net.clone().pump());
        let sent = net.send_timed(w(0), w(1), one_mb());
        assert_eq!(
            sent,
            Departure {
                start: 0.0,
                arrival: 0.0
            }
        );
        let got = rx
            .get_mut(&w(1))
            .unwrap()
            .try_recv()
            .expect("handed over at once");
        assert_eq!(got.from, w(0));
        assert_eq!(net.role_queues(), RoleQueues::default());
        net.close();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn messages_from_one_sender_queue_on_its_port() {
        let (net, mut rx) = one_machine(true);
        let pump = tokio::spawn(net.clone().pump());
        let first = net.send_timed(w(0), w(1), one_mb());
        let second = net.send_timed(w(0), w(2), one_mb());
        assert!((first.arrival - 1e-3).abs() < 1e-12, "{first:?}");
        assert!((second.start - 1e-3).abs() < 1e-12, "{second:?}");
        assert!((second.arrival - 2e-3).abs() < 1e-12, "{second:?}");
        // One receiver's port takes the messages of two senders one after the other too.
        let third = net.send_timed(w(3), w(2), one_mb());
        assert_eq!(third.start, 0.0, "w3's own port is free");
        assert!((third.arrival - 3e-3).abs() < 1e-12, "{third:?}");
        let inbox = rx.get_mut(&w(2)).unwrap();
        assert_eq!(inbox.recv().await.unwrap().from, w(0));
        assert_eq!(inbox.recv().await.unwrap().from, w(3));
        assert!((net.now() - 3e-3).abs() < 1e-6, "{}", net.now());
        net.close();
        rx.clear();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn two_senders_to_two_receivers_go_in_parallel_and_ports_are_full_duplex() {
        let (net, mut rx) = one_machine(true);
        let pump = tokio::spawn(net.clone().pump());
        let a = net.send(w(0), w(1), one_mb());
        let b = net.send(w(2), w(3), one_mb());
        // The receivers send back at once: their ports out are free while their ports in work.
        let c = net.send(w(1), w(0), one_mb());
        for t in [a, b, c] {
            assert!((t - 1e-3).abs() < 1e-12, "{a} {b} {c}");
        }
        for (to, from) in [(1, 0), (3, 2), (0, 1)] {
            let got = rx.get_mut(&w(to)).unwrap().recv().await.unwrap();
            assert_eq!(got.from, w(from));
        }
        assert!((net.now() - 1e-3).abs() < 1e-6, "{}", net.now());
        net.close();
        rx.clear();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_message_over_the_bus_overtakes_one_still_on_the_nic() {
        // Two machines of two workers each, bus and NIC both 1 GB/s.
        let cluster = crate::cluster::test_cluster_with(2, 2, Some(8.0));
        let roles: Vec<RoleId> = (0..4).map(RoleId::Worker).collect();
        let (net, mut rx) = Network::new(cluster, TimeBase::new(true), &roles, None);
        let pump = tokio::spawn(net.clone().pump());
        let far = net.send(w(2), w(0), one_mb());
        let near = net.send(w(1), w(0), push(0));
        assert!(near < far, "the bus message arrives first: {near} vs {far}");
        let inbox = rx.get_mut(&w(0)).unwrap();
        assert!(
            inbox.try_recv().is_none(),
            "nothing is delivered before it arrives"
        );
        let first = inbox.recv().await.unwrap();
        assert_eq!(first.from, w(1));
        assert!((net.now() - near).abs() < 1e-6, "{} vs {near}", net.now());
        let second = inbox.recv().await.unwrap();
        assert_eq!(second.from, w(2));
        assert!((net.now() - far).abs() < 1e-6, "{} vs {far}", net.now());
        net.close();
        rx.clear();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn messages_to_a_role_that_is_gone_are_dropped() {
        let (net, mut rx) = one_machine(true);
        let pump = tokio::spawn(net.clone().pump());
        net.send(w(0), w(1), one_mb());
        drop(rx.remove(&w(1)));
        net.send(w(0), w(1), one_mb());
        // Traffic is still charged: the sender cannot know the receiver is gone.
        assert_eq!(net.traffic()[&(w(0), w(1))].messages, 2);
        net.send(w(0), w(2), one_mb());
        let got = rx.get_mut(&w(2)).unwrap().recv().await.unwrap();
        assert_eq!(got.from, w(0));
        net.close();
        rx.clear();
        // The pump ends: nothing is left in flight for the role that is gone.
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn bus_queues_restore_into_a_fresh_network() {
        let (net, _rx) = one_machine(true);
        net.send(w(0), w(1), one_mb());
        net.send(w(0), w(1), one_mb());
        let queues = net.role_queues();
        assert_eq!(queues.egress_free.len(), 1);
        assert!(
            (queues.egress_free[&w(0)] - 2e-3).abs() < 1e-12,
            "{queues:?}"
        );
        assert!(
            (queues.ingress_free[&w(1)] - 2e-3).abs() < 1e-12,
            "{queues:?}"
        );
        // A resumed stretch's first message waits behind the ports' last ones.
        let (fresh, _rx) = one_machine(true);
        fresh.restore_role_queues(&queues);
        assert_eq!(fresh.role_queues(), queues);
        let next = fresh.send_timed(w(0), w(2), one_mb());
        assert!((next.start - 2e-3).abs() < 1e-12, "{next:?}");
        let into = fresh.send_timed(w(3), w(1), one_mb());
        assert!((into.arrival - 3e-3).abs() < 1e-12, "{into:?}");
    }

    /// `machines` machines of two workers each (1 GB/s NICs, 10 µs latency) whose roles pack and
    /// unpack messages at 8 Gbit/s (1 GB/s), and the network between them.
    fn copying(machines: u32) -> (Arc<Network>, BTreeMap<RoleId, Inbox>) {
        handling(machines, |d| d.message_copy_gbps = Some(8.0))
    }

    /// `machines` machines of two workers each (1 GB/s NICs, 10 µs latency) whose device `set`
    /// changes, and the network between them.
    fn handling(
        machines: u32,
        set: impl Fn(&mut crate::cluster::DeviceProfile),
    ) -> (Arc<Network>, BTreeMap<RoleId, Inbox>) {
        let mut cluster = (*crate::cluster::test_cluster_with(machines, 2, None)).clone();
        for m in &mut cluster.machines {
            set(&mut m.device);
        }
        let roles: Vec<RoleId> = (0..2 * machines).map(RoleId::Worker).collect();
        Network::new(Arc::new(cluster), TimeBase::new(true), &roles, None)
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_is_packed_before_it_leaves_and_unpacked_after_it_arrives() {
        let (net, mut rx) = copying(2);
        let pump = tokio::spawn(net.clone().pump());
        let msg = one_mb();
        let copy = msg.payload_bytes() as f64 / 1e9;
        // Worker 0 (machine 0) to worker 2 (machine 1): pack, the NICs, latency, unpack.
        let sent = net.send_timed(w(0), w(2), msg.clone());
        assert!((sent.start - copy).abs() < 1e-12, "{sent:?}");
        let expect = copy + 1e-3 + 10e-6 + copy;
        assert!((sent.arrival - expect).abs() < 1e-12, "{sent:?}");
        let got = rx.get_mut(&w(2)).unwrap().recv().await.unwrap();
        assert_eq!(got.from, w(0));
        assert!((net.now() - expect).abs() < 1e-6, "at {}", net.now());
        // On one machine without a bus: the two copies only.
        let local = net.send_timed(w(2), w(3), msg);
        assert!(
            (local.arrival - (net.now() + 2.0 * copy)).abs() < 1e-9,
            "{local:?}"
        );
        net.close();
        rx.clear();
        pump.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_push_is_packed_but_its_gradients_are_not_unpacked() {
        let (net, _rx) = copying(2);
        let msg = push((1_000_000 - HEADER_BYTES_TEST) / 4);
        let copy = msg.payload_bytes() as f64 / 1e9;
        assert_eq!(msg.unpacked_bytes(), 0);
        // The worker packs its gradients; the server sums them as it aggregates, no copy first.
        let sent = net.send_timed(w(0), w(2), msg.clone());
        let expect = copy + 1e-3 + 10e-6;
        assert!((sent.arrival - expect).abs() < 1e-12, "{sent:?}");
        assert_eq!(net.role_queues().received_handled.get(&w(2)), None);
        // On one machine: the packing only.
        let local = net.send_timed(w(2), w(3), msg);
        assert!((local.arrival - copy).abs() < 1e-12, "{local:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_role_packs_and_unpacks_one_message_at_a_time_and_bare_messages_are_free() {
        let (net, _rx) = copying(1);
        let msg = one_mb();
        let copy = msg.payload_bytes() as f64 / 1e9;
        // Two messages packed by worker 0 at once: the second leaves a copy later.
        let a = net.send_timed(w(0), w(1), msg.clone());
        let b = net.send_timed(w(0), w(1), msg.clone());
        assert!((a.arrival - 2.0 * copy).abs() < 1e-12, "{a:?}");
        // Packed at 2 copies, unpacked after worker 1 has unpacked the first (at 2 copies).
        assert!((b.arrival - 3.0 * copy).abs() < 1e-12, "{b:?}");
        // A message without tensors is neither packed nor queued behind tensors.
        let bare = net.send_timed(w(0), w(1), Message::WorkerDone);
        assert_eq!(bare.arrival, 0.0);
        let queues = net.role_queues();
        assert!((queues.sent_handled[&w(0)] - 2.0 * copy).abs() < 1e-12);
        assert!((queues.received_handled[&w(1)] - 3.0 * copy).abs() < 1e-12);
        // The queues restore into a fresh network: its next message waits behind them.
        let (fresh, _rx) = copying(1);
        fresh.restore_role_queues(&queues);
        assert_eq!(fresh.role_queues(), queues);
        let next = fresh.send_timed(w(0), w(1), msg);
        assert!((next.arrival - 4.0 * copy).abs() < 1e-12, "{next:?}");
    }

    /// Two machines of two workers each (1 GB/s NICs, 10 µs latency) on one host of
    /// `processors` processors, whose roles pack and unpack messages at `copy_gbps` and keep
    /// `loopback_share` of a processor busy at each end of a transfer.
    fn on_one_host(
        processors: u32,
        copy_gbps: Option<f64>,
        loopback_share: Option<f64>,
    ) -> (Arc<Network>, BTreeMap<RoleId, Inbox>) {
        let mut cluster = (*crate::cluster::test_cluster_with(2, 2, None)).clone();
        for m in &mut cluster.machines {
            m.device.message_copy_gbps = copy_gbps;
            m.device.loopback_share = loopback_share;
        }
        cluster.hosts = vec![crate::cluster::Host {
            name: "box".into(),
            processors,
        }];
        cluster.host_of = vec![Some(0), Some(0)];
        let roles: Vec<RoleId> = (0..4).map(RoleId::Worker).collect();
        Network::new(Arc::new(cluster), TimeBase::new(true), &roles, None)
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_shared_host_a_message_is_packed_and_unpacked_on_its_processors() {
        let msg = one_mb();
        let copy = msg.payload_bytes() as f64 / 1e9;
        let wire = msg.wire_bytes() as f64 / 1e9;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // Processors free: packed, sent, unpacked, as on machines of their own.
        let (free, _rx) = on_one_host(1, Some(8.0), None);
        let a = free.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, copy + wire + 10e-6 + copy), "{a}");
        // The one processor busy with 3 ms of worker 1's step: the packing waits for it.
        let (busy, _rx) = on_one_host(1, Some(8.0), None);
        assert_eq!(busy.processor_wait(w(1), 0.0, 3e-3), 0.0);
        let a = busy.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, 3e-3 + copy + wire + 10e-6 + copy), "{a}");
        // Work asked for now runs in the free time around the packing and the unpacking booked
        // ahead: 2 ms of it, ready at once, gets the processor from the packing's end to the
        // unpacking's start (`wire` + 10 µs) and the rest after the unpacking, so it waits for
        // the step and both copies.
        let wait = busy.processor_wait(w(3), 0.0, 2e-3);
        assert!(close(wait, 3e-3 + 2.0 * copy), "{wait}");
        // Two processors: the step and the packing run side by side.
        let (two, _rx) = on_one_host(2, Some(8.0), None);
        assert_eq!(two.processor_wait(w(1), 0.0, 3e-3), 0.0);
        let a = two.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, copy + wire + 10e-6 + copy), "{a}");
        // Roles of machines without a host wait for nothing.
        let (apart, _rx) = copying(2);
        assert_eq!(apart.processor_wait(w(1), 0.0, 3e-3), 0.0);
        let a = apart.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, copy + wire + 10e-6 + copy), "{a}");
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_shared_host_a_transfer_copies_its_bytes_on_the_processors() {
        let wire = one_mb().wire_bytes() as f64 / 1e9;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // Two processors free, each end keeping a whole one busy: the ends copy side by side,
        // as on machines of their own.
        let (free, _rx) = on_one_host(2, None, Some(1.0));
        let a = free.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, wire + 10e-6), "{a}");
        // One processor: the sender's copies and the receiver's take turns on it.
        let (one, _rx) = on_one_host(1, None, Some(1.0));
        let a = one.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, 2.0 * wire + 10e-6), "{a}");
        // Half a processor an end: both fit in the transfer's time on one processor.
        let (half, _rx) = on_one_host(1, None, Some(0.5));
        let a = half.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, wire + 10e-6), "{a}");
        // Two processors, one busy with 3 ms of worker 1's step: the ends take turns on the
        // other, and work asked for now waits for them there.
        let (two, _rx) = on_one_host(2, None, Some(1.0));
        assert_eq!(two.processor_wait(w(1), 0.0, 3e-3), 0.0);
        let a = two.send_timed(w(0), w(2), one_mb()).arrival;
        assert!(close(a, 2.0 * wire + 10e-6), "{a}");
        let wait = two.processor_wait(w(3), 0.0, 1e-3);
        assert!(close(wait, 2.0 * wire), "{wait}");
        // Two messages sent each other at once on two free processors, 0.75 of one an end: the
        // first's ends hold both processors for 0.75 of its time, the second's start after
        // them, so the exchange takes 1.5 times a lone transfer (2 × the share: what
        // `calibrate` fits the share to).
        let (both, _rx) = on_one_host(2, None, Some(0.75));
        let first = both.send_timed(w(0), w(2), one_mb()).arrival;
        let second = both.send_timed(w(2), w(0), one_mb()).arrival;
        assert!(close(first, wire + 10e-6), "{first}");
        assert!(close(second, 1.5 * wire + 10e-6), "{second}");
        // Without a share the exchange goes at the NICs' full rate both ways.
        let (free, _rx) = on_one_host(2, None, None);
        free.send_timed(w(0), w(2), one_mb());
        let second = free.send_timed(w(2), w(0), one_mb()).arrival;
        assert!(close(second, wire + 10e-6), "{second}");
    }

    #[test]
    fn role_queues_without_copies_serialize_as_before() {
        let queues = RoleQueues {
            egress_free: BTreeMap::from([(w(0), 1.0)]),
            ..RoleQueues::default()
        };
        // Checkpoints hold them as named MessagePack.
        let bytes = rmp_serde::to_vec_named(&queues).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("sent_handled") && !text.contains("received_handled"),
            "{text}"
        );
        #[derive(Serialize)]
        struct Older {
            egress_free: BTreeMap<RoleId, f64>,
            ingress_free: BTreeMap<RoleId, f64>,
        }
        let older = Older {
            egress_free: queues.egress_free.clone(),
            ingress_free: BTreeMap::new(),
        };
        assert_eq!(bytes, rmp_serde::to_vec_named(&older).unwrap());
        let read: RoleQueues = rmp_serde::from_slice(&bytes).expect("an older checkpoint reads");
        assert_eq!(read, queues);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_between_machines_costs_its_handling_at_both_ends() {
        let (net, _rx) = handling(2, |d| d.message_us = Some(5.0));
        // Worker 0 (machine 0) to worker 2 (machine 1): handled, the header over the NICs,
        // latency, handled.
        let wire = HEADER_BYTES_TEST as f64 / 1e9;
        let bare = net.send_timed(w(0), w(2), Message::WorkerDone);
        assert!((bare.start - 5e-6).abs() < 1e-12, "{bare:?}");
        assert!(
            (bare.arrival - (5e-6 + wire + 10e-6 + 5e-6)).abs() < 1e-12,
            "{bare:?}"
        );
        // The next one waits for the first's handling at the sender.
        let next = net.send_timed(w(0), w(2), Message::WorkerDone);
        assert!((next.start - 10e-6).abs() < 1e-12, "{next:?}");
        // Between two roles of one machine there is nothing to handle.
        let local = net.send_timed(w(0), w(1), Message::WorkerDone);
        assert_eq!(local.arrival, 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_to_a_role_that_waited_long_waits_for_it_to_wake() {
        let curve = crate::cluster::WakeCurve {
            idle_us: vec![100.0, 1000.0],
            extra_us: vec![10.0, 60.0],
        };
        let (net, _rx) = handling(2, |d| d.wake = Some(curve.clone()));
        let (plain, _plain_rx) = handling(2, |_| {});
        let wire = HEADER_BYTES_TEST as f64 / 1e9;
        let lat = 10e-6;
        for n in [&net, &plain] {
            // Worker 2 (machine 1) last receives at 0, from a role of its own machine.
            n.send_timed_at(w(3), w(2), Message::WorkerDone, 0.0);
        }
        // 2 ms later a message from machine 0 finds it idle past the curve's last point.
        let woken = net.send_timed_at(w(0), w(2), Message::WorkerDone, 2e-3);
        let reached = 2e-3 + wire + lat;
        assert!(
            (woken.arrival - (reached + 60e-6)).abs() < 1e-12,
            "{woken:?}"
        );
        let unchanged = plain.send_timed_at(w(0), w(2), Message::WorkerDone, 2e-3);
        assert!((unchanged.arrival - reached).abs() < 1e-12, "{unchanged:?}");
        // The next one, sent as the first arrives, finds it idle only for its own trip: a tenth
        // of the first point's 10 µs per 10 µs waited.
        let at = woken.arrival;
        let next = net.send_timed_at(w(1), w(2), Message::WorkerDone, at);
        let idle = wire + lat;
        let expect = at + idle + idle / 100e-6 * 10e-6;
        assert!((next.arrival - expect).abs() < 1e-12, "{next:?}");
        // The roles' last messages are kept with the queues, for a resumed run.
        let queues = net.role_queues();
        assert!((queues.last_received[&w(2)] - next.arrival).abs() < 1e-12);
        let (fresh, _fresh_rx) = handling(2, |d| d.wake = Some(curve.clone()));
        fresh.restore_role_queues(&queues);
        assert_eq!(fresh.role_queues(), queues);
        assert!(plain.role_queues().last_received.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_machine_wakes_for_a_message_only_when_all_its_roles_were_idle() {
        let curve = crate::cluster::WakeCurve {
            idle_us: vec![100.0, 1000.0],
            extra_us: vec![10.0, 60.0],
        };
        let (net, _rx) = handling(2, |d| d.wake = Some(curve.clone()));
        let trip = HEADER_BYTES_TEST as f64 / 1e9 + 10e-6;
        // Worker 3 works until 3 ms: a message to worker 2, beside it on machine 1, finds the
        // machine awake at 2 ms, though worker 2 itself has received nothing.
        net.busy_until(w(3), 3e-3);
        let awake = net.send_timed_at(w(0), w(2), Message::WorkerDone, 2e-3);
        assert!((awake.arrival - (2e-3 + trip)).abs() < 1e-12, "{awake:?}");
        // Work known to end at 3 ms is not undone by a shorter report.
        net.busy_until(w(3), 1e-3);
        // 5 ms after the work ends, both roles have been idle past the curve's last point.
        let woken = net.send_timed_at(w(1), w(3), Message::WorkerDone, 8e-3);
        let expect = 8e-3 + trip + 60e-6;
        assert!((woken.arrival - expect).abs() < 1e-12, "{woken:?}");
        // A role sending keeps its machine awake: machine 0, which last received at 2 ms, sends
        // at 9 ms, and a message reaching it 50 µs later finds it idle since the send only.
        net.send_timed_at(w(0), w(2), Message::WorkerDone, 9e-3);
        let soon = net.send_timed_at(w(3), w(1), Message::WorkerDone, 9.05e-3);
        let idle = 0.05e-3 + trip;
        let expect = 9.05e-3 + trip + idle / 100e-6 * 10e-6;
        assert!((soon.arrival - expect).abs() < 1e-12, "{soon:?}");
        // Without a wake curve nothing is kept.
        let (plain, _plain_rx) = handling(2, |_| {});
        plain.busy_until(w(3), 3e-3);
        assert!(plain.role_queues().last_received.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_half_duplex_nic_takes_its_sends_and_receives_in_turn() {
        let msg = push(250_000); // 1 MB of payload
        let one = msg.wire_bytes() as f64 / 1e9;
        let lat = 10e-6;
        for duplex in [crate::cluster::Duplex::Full, crate::cluster::Duplex::Half] {
            let (net, _rx) = handling(3, |d| d.nic_duplex = duplex);
            // A lone transfer takes the same time either way.
            let lone = net.send_timed(w(0), w(2), msg.clone());
            assert!(
                (lone.arrival - (one + lat)).abs() < 1e-12,
                "{duplex:?}: {lone:?}"
            );
            // Machine 1 answers at once: its port out is free on a full-duplex NIC, and busy
            // receiving the first message until it is in on a half-duplex one.
            let answer = net.send_timed(w(2), w(0), msg.clone());
            let answered = match duplex {
                crate::cluster::Duplex::Full => one + lat,
                crate::cluster::Duplex::Half => 2.0 * one + lat,
            };
            assert!(
                (answer.arrival - answered).abs() < 1e-12,
                "{duplex:?}: {answer:?}"
            );
            // Machine 2 sends to machine 0, whose port is busy: its port in (full duplex) with
            // nothing, its one port (half) with the answer coming in.
            let third = net.send_timed(w(4), w(0), msg.clone());
            let expected = match duplex {
                crate::cluster::Duplex::Full => 2.0 * one + lat,
                crate::cluster::Duplex::Half => 3.0 * one + lat,
            };
            assert!(
                (third.arrival - expected).abs() < 1e-12,
                "{duplex:?}: {third:?}"
            );
        }
    }
}
