//! AgileML's messages: the data plane between workers and whichever server serves a partition,
//! the backup stream from ActivePSs to BackupPSs, partition hand-offs, and the elasticity
//! controller's orders.
//!
//! Every message that a stale sender could still have in flight after a roll-back carries the
//! `epoch` it belongs to; a receiver drops what belongs to an earlier epoch and holds back what
//! belongs to a later one until it has rolled back itself.

use super::ids::{Clock, NodeId, PartitionId};
use super::partition::{PartitionSnapshot, Push};
use super::tree::DataTree;
use concord_engine::prelude::*;

/// Worker → server: read these partitions once every update of `clock − 1` is applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Read {
    /// The reader (replies go to it, also when the read was forwarded).
    pub worker: WorkerId,
    /// The roll-back epoch the reader is in.
    pub epoch: u64,
    /// The clock the reader is about to work on.
    pub clock: Clock,
    /// The partitions it reads from this server.
    pub parts: Vec<PartitionId>,
}

impl StrategyMessage for Read {
    const TAG: &'static str = "agileml.read";
    const BODY_IN_HEADER: bool = true;
}

/// Server → worker: the values of `parts` with every update of `clock − 1` applied, one payload
/// per partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Values {
    /// The epoch of the read.
    pub epoch: u64,
    /// The clock the read was for.
    pub clock: Clock,
    /// The partitions, in payload order.
    pub parts: Vec<PartitionId>,
}

impl StrategyMessage for Values {
    const TAG: &'static str = "agileml.values";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → server: gradient sums of `clock` over data-tree nodes, one payload per item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Update {
    /// The sender.
    pub worker: WorkerId,
    /// The epoch it computed in.
    pub epoch: u64,
    /// The clock.
    pub clock: Clock,
    /// `(partition, node)` per payload: the partition's slice of the gradient summed over the
    /// node's items.
    pub items: Vec<(PartitionId, NodeId)>,
}

impl StrategyMessage for Update {
    const TAG: &'static str = "agileml.update";
    const BODY_IN_HEADER: bool = true;
}

/// Update items bound for one server: `(partition, node)` per payload, and the payloads.
pub type Items = (Vec<(PartitionId, NodeId)>, Vec<Payload>);

/// A read or update a server no longer serving a partition passes on to its new server
/// (forwarding during propagation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Forwarded {
    /// A read.
    Read(Read),
    /// An update (its payloads travel with the message).
    Update(Update),
}

impl StrategyMessage for Forwarded {
    const TAG: &'static str = "agileml.forwarded";
    const BODY_IN_HEADER: bool = true;
}

/// Controller → server: hand partition `part` to server `to` now (migration, the stage 1 → 2
/// start of ActivePSs, or the END-OF-LIFE push of an ActivePS to its BackupPS).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Handoff {
    /// The partition.
    pub part: PartitionId,
    /// Its next server.
    pub to: ServerId,
    /// The controller's epoch: a roll-back voids the hand-overs of a partition it re-serves.
    #[serde(default)]
    pub epoch: u64,
}

impl StrategyMessage for Handoff {
    const TAG: &'static str = "agileml.handoff";
    const BODY_IN_HEADER: bool = true;
}

/// Server → server: take over partition `part`: its state (values and optimizer state as
/// payloads, the rest in the snapshot), the updates it buffered for unfinished clocks and the
/// reads it held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Adopt {
    /// The partition's state.
    pub snapshot: PartitionSnapshot,
    /// Buffered updates: `(clock, node, worker)` per buffered payload, after the value payload.
    pub buffered: Vec<(Clock, NodeId)>,
    /// Held reads.
    pub reads: Vec<Read>,
    /// The sender's epoch.
    pub epoch: u64,
}

impl StrategyMessage for Adopt {
    const TAG: &'static str = "agileml.adopt";
}

/// Server → controller: a hand-off arrived and the partition is served here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Adopted {
    /// The partition.
    pub part: PartitionId,
    /// Its last applied clock.
    pub applied: Option<Clock>,
}

impl StrategyMessage for Adopted {
    const TAG: &'static str = "agileml.adopted";
    const BODY_IN_HEADER: bool = true;
}

/// ActivePS → BackupPS: the aggregated deltas of its partitions homed there since the last push.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackupPush {
    /// One push per partition; the deltas travel as payloads in this order.
    pub pushes: Vec<Push>,
    /// The sender's epoch.
    pub epoch: u64,
}

impl StrategyMessage for BackupPush {
    const TAG: &'static str = "agileml.backup-push";
}

/// BackupPS → ActivePS: a push is applied; the next may go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PushAck;

impl StrategyMessage for PushAck {
    const TAG: &'static str = "agileml.push-ack";
    const BODY_IN_HEADER: bool = true;
}

/// BackupPS → controller: partitions now consistent at these clocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pushed {
    /// `(partition, clock)`.
    pub parts: Vec<(PartitionId, Clock)>,
}

impl StrategyMessage for Pushed {
    const TAG: &'static str = "agileml.pushed";
    const BODY_IN_HEADER: bool = true;
}

/// Controller → servers: every partition is backed up to `clock`; deltas up to it can go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    /// The committed clock.
    pub clock: Clock,
}

impl StrategyMessage for Commit {
    const TAG: &'static str = "agileml.commit";
    const BODY_IN_HEADER: bool = true;
}

/// Controller → server: roll every partition back to the committed clock and enter `epoch`;
/// partitions whose server was lost are re-served from their backups.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rollback {
    /// The new epoch.
    pub epoch: u64,
    /// The committed clock every partition returns to (`None`: the start).
    pub to: Option<Clock>,
    /// Partitions this server (their home) must now serve from its backup.
    pub serve_from_backup: Vec<PartitionId>,
    /// Partitions whose home must send its backup to a new server: `(partition, server)`.
    pub send_backup: Vec<(PartitionId, ServerId)>,
    /// Every partition served again from its backup after this roll-back (its server is gone,
    /// or it was on its way between servers): a server drops what it holds or forwards of one
    /// it is not told to serve from its own backup (its reads wait for the backup to arrive),
    /// and hand-overs of it from before the roll-back are void.
    #[serde(default)]
    pub reserved: Vec<PartitionId>,
}

impl Rollback {
    /// Enter `epoch` and return to clock `to`, with no partition to serve again from a backup:
    /// the order a server gets where none of its partitions was lost (or one that joins after
    /// the roll-back, to enter the job's epoch).
    pub fn enter(epoch: u64, to: Option<Clock>) -> Rollback {
        Rollback {
            epoch,
            to,
            serve_from_backup: Vec::new(),
            send_backup: Vec::new(),
            reserved: Vec::new(),
        }
    }
}

impl StrategyMessage for Rollback {
    const TAG: &'static str = "agileml.rollback";
}

/// Controller → server: the data tree changed (a split); contributions may name its new nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreeUpdate {
    /// The whole tree.
    pub tree: DataTree,
}

impl StrategyMessage for TreeUpdate {
    const TAG: &'static str = "agileml.tree";
}

/// Controller → worker: where each partition is served now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// Version (increasing); an older table is ignored.
    pub version: u64,
    /// Server of each partition.
    pub servers: Vec<ServerId>,
}

impl StrategyMessage for Route {
    const TAG: &'static str = "agileml.route";
}

/// Controller → worker: orders about the data a worker works on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Order {
    /// A joining worker: load these items (the partner's whole range) in the background, then
    /// say `Ready`; the epoch, tree and route to work with come along.
    Load {
        /// Items to load.
        items: u64,
        /// The controller's epoch: a worker joining after a roll-back missed the `Restart` that
        /// moved the others to it.
        epoch: u64,
        /// The data tree.
        tree: DataTree,
        /// The route.
        route: Route,
    },
    /// Hand leaves to other workers at the next clock boundary (a split with a newcomer, stage
    /// 2 ↔ 3 moves, a warned eviction): `(leaf, to)`; with `retire`, stop after that.
    Give {
        /// Leaves and their takers.
        leaves: Vec<(NodeId, WorkerId)>,
        /// Whether the worker stops once it has handed them over.
        retire: bool,
        /// The data tree after the change.
        tree: DataTree,
    },
    /// Take leaves whose holder is gone: work on them from the current clock on (recomputing
    /// the current one where its updates were already sent).
    Take {
        /// The leaves.
        leaves: Vec<NodeId>,
        /// The data tree after the change.
        tree: DataTree,
        /// The earliest clock that may lack their updates (where an idle taker starts).
        clock: Clock,
    },
    /// Servers gone (evicted, or failed without a roll-back) after their partitions moved on:
    /// an update that reached one after the hand-over and before it went is lost with it, so
    /// the worker sends again, by its route, what it sent of its latest clocks whose partitions
    /// have moved since, and asks again for the partitions a read still misses.
    Lost {
        /// The servers gone.
        servers: Vec<ServerId>,
    },
    /// Roll back: drop the current clock and work again from `from` in `epoch`.
    Restart {
        /// The new epoch.
        epoch: u64,
        /// The first clock to redo.
        from: Clock,
    },
    /// The job is done: an idle worker returns.
    Finish,
}

impl StrategyMessage for Order {
    const TAG: &'static str = "agileml.order";
}

/// Worker → worker: the leaves are yours from `clock` on (the giver worked on them up to
/// `clock − 1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Begin {
    /// The first clock the taker works on them.
    pub clock: Clock,
    /// The giver's epoch: a hand-over of an epoch a roll-back has since ended happened at a
    /// clock the new epoch does again, without the giver.
    pub epoch: u64,
    /// The giver's data tree: the leaves may come of a split the taker has not heard of.
    pub tree: DataTree,
    /// The leaves.
    pub leaves: Vec<NodeId>,
}

impl StrategyMessage for Begin {
    const TAG: &'static str = "agileml.begin";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Note {
    /// A joining worker has loaded its data.
    Ready,
    /// A clock is done: the nodes whose gradients this worker sent for it.
    Done {
        /// The epoch.
        epoch: u64,
        /// The clock.
        clock: Clock,
        /// Nodes covered (for the controller's ledger).
        nodes: Vec<NodeId>,
    },
    /// The worker handed its leaves over and stopped (a warned eviction).
    Retired,
}

impl StrategyMessage for Note {
    const TAG: &'static str = "agileml.note";
    const BODY_IN_HEADER: bool = true;
}
