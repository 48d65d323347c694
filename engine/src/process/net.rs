//! The transport of `--runtime process`: a message to a role of this process goes straight to its
//! mailbox; one to a role of another process is encoded into a frame and queued on the
//! connection to that process (its machine's rank).

use super::mesh::Peers;
use super::wire::{Frame, Padding};
use crate::cluster::Cluster;
use crate::ids::RoleId;
use crate::message::Message;
use crate::time::TimeBase;
use crate::transport::tables::{ByRole, LinkCounts};
use crate::transport::{Departure, Envelope, LinkTraffic, Transport};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::mpsc;

/// The mailboxes of the roles of this process.
pub type Mailboxes = ByRole<mpsc::UnboundedSender<Envelope>>;

/// Where messages for this process's roles go: the mailboxes of the stretch of clocks now
/// running. A run cut by checkpoints builds its roles afresh for every stretch, and their
/// mailboxes with them; the connections to the other processes, which deliver here, stay.
pub struct Postbox(RwLock<Mailboxes>);

impl Default for Postbox {
    /// No mailboxes yet: the roles of the first stretch are not built.
    fn default() -> Postbox {
        Postbox(RwLock::new(Mailboxes::new([])))
    }
}

impl Postbox {
    /// Delivers to `mailboxes` from now on.
    pub fn replace(&self, mailboxes: Mailboxes) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = mailboxes;
    }

    /// Hands a message that arrived for a role of this process to its mailbox (a role that has
    /// already finished drops it, as in the one-process runtimes).
    pub fn deliver(&self, env: Envelope) {
        let mailboxes = self.0.read().unwrap_or_else(|p| p.into_inner());
        match mailboxes.get(env.to) {
            Some(tx) => {
                let _ = tx.send(env);
            }
            None => tracing::warn!(
                "dropped a message for {} from {}: that role does not run in this process",
                env.to.label(),
                env.from.label()
            ),
        }
    }
}

/// The role-facing side of the mesh (see the module docs).
pub struct MeshTransport {
    cluster: Arc<Cluster>,
    time: TimeBase,
    wall_start: std::time::Instant,
    rank: u32,
    postbox: Arc<Postbox>,
    peers: Arc<Peers>,
    traffic: Mutex<LinkCounts>,
}

impl MeshTransport {
    /// The transport of rank `peers.rank()`, delivering locally through `postbox`.
    pub fn new(
        cluster: Arc<Cluster>,
        time: TimeBase,
        roles: &[RoleId],
        postbox: Arc<Postbox>,
        peers: Arc<Peers>,
    ) -> MeshTransport {
        MeshTransport {
            cluster,
            time,
            wall_start: std::time::Instant::now(),
            rank: peers.rank(),
            postbox,
            peers,
            traffic: Mutex::new(LinkCounts::new(roles)),
        }
    }

    /// Traffic this process's roles sent, per directed role pair.
    pub fn traffic(&self) -> BTreeMap<(RoleId, RoleId), LinkTraffic> {
        self.traffic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .to_map()
    }
}

impl Transport for MeshTransport {
    fn time(&self) -> TimeBase {
        self.time
    }

    fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn wall_now(&self) -> f64 {
        self.wall_start.elapsed().as_secs_f64()
    }

    fn send_at(&self, from: RoleId, to: RoleId, msg: Message, now: f64) -> Departure {
        let bytes = msg.wire_bytes();
        self.traffic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(from, to, bytes);
        let machine = self.cluster.machine_of(to);
        if machine == self.rank {
            self.postbox.deliver(Envelope {
                from,
                to,
                sent_at: now,
                msg,
            });
        } else {
            let pad = Padding(msg.virtual_bytes());
            let frame = Frame::Deliver {
                from,
                to,
                sent_at: now,
                msg,
                pad,
            };
            if !self.peers.send_owned(machine, frame) {
                tracing::debug!(
                    "dropped a message from {} to {}: machine {machine} has left the run",
                    from.label(),
                    to.label()
                );
            }
        }
        Departure {
            start: now,
            arrival: now,
        }
    }
}
