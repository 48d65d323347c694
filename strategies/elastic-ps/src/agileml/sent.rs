//! What a worker sent for its latest clocks, kept so that it can send it again where a server
//! it went to is gone: a warned server forwards the updates that reach it after it handed its
//! partitions on, but one that reaches it after its eviction (or its failure) is lost, and a
//! worker may have sent its clock's updates by the route it had before it handled the newer one
//! (it learns of a route change only between clocks). The new server keeps one copy of a sum
//! that arrives twice and drops one of a clock it already applied, so sending again is always
//! safe. It is done when servers are lost, not at every route change: while the servers of a
//! partition's way are there, each forwards what reaches it, and sending a clock's updates again
//! to every partition a warning moves would flood the servers that take them.
//!
//! Two clocks are enough: a worker reads a clock's parameters only once every update of the
//! clock before is applied, so an update of two clocks back has arrived wherever it went.

use super::ids::{Clock, NodeId, PartitionId};
use super::protocol::{Items, Update};
use concord_engine::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// How many of its latest clocks a worker keeps what it sent for: the clock whose updates may
/// still be on their way, and the one before it (see the module docs for why two suffice).
const CLOCKS_KEPT: u64 = 2;

/// One update item as sent: a partition's slice of a node's sum, and the server it went to.
#[derive(Clone, Debug)]
struct SentItem {
    epoch: u64,
    clock: Clock,
    part: PartitionId,
    node: NodeId,
    server: ServerId,
    payload: Payload,
}

/// A worker's record of the update items of its latest clocks.
#[derive(Debug, Default)]
pub struct SentUpdates {
    items: Vec<SentItem>,
}

impl SentUpdates {
    /// Records `items` of `clock` in `epoch`, sent to `server`; forgets the items of clocks
    /// two or more before it, and those of other epochs (a roll-back recomputes
    /// them).
    pub fn record(
        &mut self,
        epoch: u64,
        clock: Clock,
        server: ServerId,
        items: &[(PartitionId, NodeId)],
        payloads: &[Payload],
    ) {
        self.items
            .retain(|i| i.epoch == epoch && i.clock + CLOCKS_KEPT > clock);
        self.items.extend(
            items
                .iter()
                .zip(payloads)
                .map(|(&(part, node), payload)| SentItem {
                    epoch,
                    clock,
                    part,
                    node,
                    server,
                    payload: payload.clone(),
                }),
        );
    }

    /// Sends every recorded item whose partition `route` (the server of each partition) no
    /// longer places where the item went, to the partition's server now, as worker `worker`'s
    /// updates, and remembers where each went: called when servers are lost (`gone`), since an
    /// item sent to a server the partition has since left may have been on its way through a
    /// lost one (forwarded to it, or waiting there). An item whose partition the route still
    /// places on a gone server stays as it is: that partition is lost with it, and the
    /// roll-back that follows recomputes its clocks.
    pub fn resend_moved(
        &mut self,
        ctx: &mut RoleContext,
        worker: WorkerId,
        gone: &BTreeSet<ServerId>,
        route: &[ServerId],
    ) -> Result<()> {
        let mut by_server: BTreeMap<(ServerId, u64, Clock), Items> = BTreeMap::new();
        for item in &mut self.items {
            let Some(&now) = route.get(item.part as usize) else {
                continue;
            };
            if now == item.server || gone.contains(&now) {
                continue;
            }
            item.server = now;
            let entry = by_server.entry((now, item.epoch, item.clock)).or_default();
            entry.0.push((item.part, item.node));
            entry.1.push(item.payload.clone());
        }
        for ((server, epoch, clock), (items, payloads)) in by_server {
            let update = Update {
                worker,
                epoch,
                clock,
                items,
            };
            ctx.send(
                RoleId::Server(server),
                Message::strategy_with(&update, payloads)?,
            );
        }
        Ok(())
    }

    /// Forgets everything (a roll-back: the clocks are recomputed in the new epoch).
    pub fn clear(&mut self) {
        self.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(x: f32) -> Payload {
        Payload::Real(vec![x])
    }

    fn clocks(s: &SentUpdates) -> Vec<Clock> {
        s.items.iter().map(|i| i.clock).collect()
    }

    #[test]
    fn keeps_the_latest_clocks_of_the_current_epoch_only() {
        let mut s = SentUpdates::default();
        s.record(0, 3, 1, &[(0, 5)], &[payload(1.0)]);
        s.record(0, 4, 1, &[(0, 5)], &[payload(2.0)]);
        assert_eq!(clocks(&s), vec![3, 4]);
        s.record(0, 5, 1, &[(0, 5), (1, 5)], &[payload(3.0), payload(4.0)]);
        assert_eq!(clocks(&s), vec![4, 5, 5]);
        // A late share of the latest clock keeps the clock before it.
        s.record(0, 5, 2, &[(1, 6)], &[payload(5.0)]);
        assert_eq!(clocks(&s), vec![4, 5, 5, 5]);
        s.record(1, 0, 1, &[(0, 5)], &[payload(6.0)]);
        assert_eq!(clocks(&s), vec![0]);
        s.clear();
        assert!(s.items.is_empty());
    }
}
