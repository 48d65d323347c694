//! An AgileML server: one per machine, playing each partition's part as the controller assigns
//! it — serving it (a ParamServ on a reliable machine, an ActivePS on a transient one), backing
//! it up (a BackupPS, home of the partition), or forwarding what still arrives for it after a
//! hand-off.
//!
//! A served partition applies clock `c` once the gradient sums it received for `c` tile the data
//! tree's root exactly once, summed in the tree's order (the same bits however the leaves were
//! spread over workers); a sum that arrives twice, or inside one already there, is kept once. An
//! ActivePS streams the deltas of its applied clocks to each partition's home, one push in
//! flight per home, so the backup stream goes at the rate the network allows.

use super::holdings::{keep_once, tiles};
use super::ids::{Clock, NodeId, PartitionId};
use super::partition::{Backup, Partition, PartitionSnapshot};
use super::plan::Plan;
use super::protocol::{
    Adopt, Adopted, BackupPush, Commit, Forwarded, Handoff, Items, PushAck, Pushed, Read, Rollback,
    TreeUpdate, Update, Values,
};
use super::tree::DataTree;
use super::treesum::tree_sum;
use concord_engine::prelude::*;
use concord_engine::ps::Snapshot;
use concord_engine::serve::ServerHandler;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The gradient sums received for one clock of a partition, by node.
type Sums = BTreeMap<NodeId, Vec<f32>>;

/// A partition served here.
struct Served {
    part: Partition,
    /// Sums of clocks not yet applied.
    pending: BTreeMap<Clock, Sums>,
    /// Reads waiting for their clock.
    reads: Vec<Read>,
}

/// An AgileML server.
pub struct AgileServer {
    id: ServerId,
    job: Arc<Job>,
    plan: Arc<Plan>,
    epoch: u64,
    tree: DataTree,
    serving: BTreeMap<PartitionId, Served>,
    backups: BTreeMap<PartitionId, Backup>,
    forward: BTreeMap<PartitionId, ServerId>,
    /// Homes with a push in flight.
    pushing: BTreeSet<ServerId>,
    /// Messages that wait for something to arrive first (a later epoch, a partition or tree
    /// that is on its way).
    held: Vec<Envelope>,
    /// Snapshots for evaluation: iterations → partition → its blocks.
    snapshots: BTreeMap<u64, (f64, BTreeMap<PartitionId, Vec<BlockPayload>>)>,
    /// Sums dropped as already there (a recomputed share).
    duplicates: u64,
    /// The clock of the last roll-back.
    rolled_to: Option<Clock>,
    /// The partitions the last roll-back serves again from their backups: what was on its way
    /// of them before it (hand-overs, adoptions) is void.
    reserved: BTreeSet<PartitionId>,
}

impl AgileServer {
    /// Server `id` of `job`: it serves the partitions the plan gives it and backs up those
    /// homed here that an ActivePS serves.
    pub fn new(job: Arc<Job>, id: ServerId, plan: Arc<Plan>) -> Result<AgileServer> {
        let mut serving = BTreeMap::new();
        let mut backups = BTreeMap::new();
        for p in 0..plan.np() as PartitionId {
            let value = initial_value(&job, &plan, p);
            let opt = &job.config.optimizer;
            let part = Partition::new(p, 0..value.len(), value, opt).map_err(part_error)?;
            if plan.owners[p as usize] == id {
                serving.insert(
                    p,
                    Served {
                        part,
                        pending: BTreeMap::new(),
                        reads: Vec::new(),
                    },
                );
            } else if plan.homes[p as usize] == id {
                backups.insert(
                    p,
                    Backup::from_snapshot(&part.export()).map_err(part_error)?,
                );
            }
        }
        Ok(AgileServer {
            id,
            tree: plan.tree.clone(),
            job,
            plan,
            epoch: 0,
            serving,
            backups,
            forward: BTreeMap::new(),
            pushing: BTreeSet::new(),
            held: Vec::new(),
            snapshots: BTreeMap::new(),
            duplicates: 0,
            rolled_to: None,
            reserved: BTreeSet::new(),
        })
    }

    fn real(&self) -> bool {
        self.job.model.is_real()
    }

    /// A partition's values as a payload (virtual in throughput mode).
    fn payload(&self, p: PartitionId, values: &[f32]) -> Payload {
        if self.real() {
            Payload::Real(values.to_vec())
        } else {
            Payload::Virtual {
                elems: self.plan.parts[p as usize].elems as u64,
            }
        }
    }

    /// Whether partition `p` (served here) can answer a read of `clock`.
    fn ready(&self, p: PartitionId, clock: Clock) -> bool {
        self.serving.get(&p).is_some_and(|s| match s.part.applied {
            Some(a) => a + 1 >= clock,
            None => clock == 0,
        })
    }

    /// Answers what of `read` is ready now and keeps the rest; forwards the parts served
    /// elsewhere; holds the whole read if a part is neither here nor forwarded (on its way).
    fn read(&mut self, ctx: &mut RoleContext, read: Read) -> Result<bool> {
        if read
            .parts
            .iter()
            .any(|p| !self.serving.contains_key(p) && !self.forward.contains_key(p))
        {
            return Ok(false);
        }
        let mut onward: BTreeMap<ServerId, Vec<PartitionId>> = BTreeMap::new();
        let mut now = Vec::new();
        for &p in &read.parts {
            if let Some(&to) = self.forward.get(&p) {
                onward.entry(to).or_default().push(p);
            } else if self.ready(p, read.clock) {
                now.push(p);
            } else if let Some(s) = self.serving.get_mut(&p) {
                s.reads.push(Read {
                    parts: vec![p],
                    ..read.clone()
                });
            }
        }
        for (to, parts) in onward {
            let fwd = Forwarded::Read(Read {
                parts,
                ..read.clone()
            });
            ctx.send(RoleId::Server(to), Message::strategy(&fwd)?);
        }
        if !now.is_empty() {
            self.reply(ctx, &read, now)?;
        }
        Ok(true)
    }

    /// Sends `read`'s worker the values of `parts`.
    fn reply(&self, ctx: &mut RoleContext, read: &Read, parts: Vec<PartitionId>) -> Result<()> {
        let payloads = parts
            .iter()
            .map(|p| {
                let values = self
                    .serving
                    .get(p)
                    .map(|s| s.part.value.as_slice())
                    .unwrap_or(&[]);
                self.payload(*p, values)
            })
            .collect();
        let values = Values {
            epoch: read.epoch,
            clock: read.clock,
            parts,
        };
        ctx.send(
            RoleId::Worker(read.worker),
            Message::strategy_with(&values, payloads)?,
        );
        Ok(())
    }

    /// Takes the sums of `update` (payloads in item order); forwards those of partitions served
    /// elsewhere; returns false (hold it) if a partition or a node is not known here yet.
    async fn update(
        &mut self,
        ctx: &mut RoleContext,
        update: Update,
        payloads: Vec<Payload>,
    ) -> Result<bool> {
        let known = update.items.iter().all(|(p, node)| {
            (self.serving.contains_key(p) || self.forward.contains_key(p))
                && self.tree.node(*node).is_some()
        });
        if !known {
            return Ok(false);
        }
        let mut onward: BTreeMap<ServerId, Items> = BTreeMap::new();
        let mut touched = BTreeSet::new();
        for ((p, node), payload) in update.items.iter().copied().zip(payloads) {
            if let Some(&to) = self.forward.get(&p) {
                let e = onward.entry(to).or_default();
                e.0.push((p, node));
                e.1.push(payload);
                continue;
            }
            let values = match payload {
                Payload::Real(v) => v,
                Payload::Virtual { .. } => Vec::new(),
            };
            let tree = &self.tree;
            let Some(served) = self.serving.get_mut(&p) else {
                continue;
            };
            if served.part.applied.is_some_and(|a| update.clock <= a) {
                // A recomputed share of a clock already applied.
                self.duplicates += 1;
                continue;
            }
            let sums = served.pending.entry(update.clock).or_default();
            if !insert_sum(tree, sums, node, values) {
                self.duplicates += 1;
            }
            touched.insert(p);
        }
        for (to, (items, payloads)) in onward {
            let fwd = Forwarded::Update(Update {
                items,
                ..update.clone()
            });
            ctx.send(RoleId::Server(to), Message::strategy_with(&fwd, payloads)?);
        }
        for p in touched {
            self.try_apply(ctx, p).await?;
        }
        Ok(true)
    }

    /// Applies every clock of `p` whose sums are complete, in order; answers the reads that
    /// become ready; pushes to the home where this is an ActivePS.
    async fn try_apply(&mut self, ctx: &mut RoleContext, p: PartitionId) -> Result<()> {
        let total = self.plan.total_items;
        loop {
            let Some(served) = self.serving.get_mut(&p) else {
                return Ok(());
            };
            let next = served.part.applied.map_or(0, |a| a + 1);
            let complete = served
                .pending
                .get(&next)
                .is_some_and(|sums| complete(&self.tree, sums, total));
            if !complete {
                break;
            }
            let sums = served.pending.remove(&next).unwrap_or_default();
            let elems = self.plan.parts[p as usize].elems;
            let opt = self.job.config.optimizer.clone();
            let work = Work::fixed(elems as f64 * opt.flops_per_elem());
            ctx.compute("apply", work, || ()).await;
            let served = self.serving.get_mut(&p).ok_or_else(|| {
                EngineError::protocol(ctx.id(), format!("partition {p} left while applying"))
            })?;
            let mean: Vec<f32> = if self.job.model.is_real() {
                let contributions: Vec<(NodeId, Vec<f32>)> = sums.into_iter().collect();
                let sum = tree_sum(&self.tree, Clock::MAX, &contributions).map_err(|e| {
                    EngineError::protocol(ctx.id(), format!("partition {p}, clock {next}: {e}"))
                })?;
                sum.into_iter().map(|x| x / total as f32).collect()
            } else {
                Vec::new()
            };
            served
                .part
                .apply(next, &mean, &opt)
                .map_err(|e| EngineError::protocol(ctx.id(), format!("partition {p}: {e}")))?;
            self.snapshot(ctx, p, next);
            // Reads of the next clock are ready now.
            let served = self.serving.get_mut(&p).ok_or_else(|| {
                EngineError::protocol(ctx.id(), format!("partition {p} left while applying"))
            })?;
            let (ready, waiting): (Vec<Read>, Vec<Read>) =
                served.reads.drain(..).partition(|r| r.clock <= next + 1);
            served.reads = waiting;
            for r in ready {
                if r.epoch == self.epoch {
                    let parts = r.parts.clone();
                    self.reply(ctx, &r, parts)?;
                }
            }
        }
        let home = self.plan.homes[p as usize];
        if home != self.id {
            self.push(ctx, home)?;
        }
        Ok(())
    }

    /// Records partition `p`'s blocks after `clock` where the run evaluates.
    fn snapshot(&mut self, ctx: &RoleContext, p: PartitionId, clock: Clock) {
        let iterations = clock + 1;
        let cfg = &self.job.config;
        if !iterations.is_multiple_of(cfg.eval_every) && iterations != cfg.iterations {
            return;
        }
        let blocks = self.blocks_of(p);
        let entry = self
            .snapshots
            .entry(iterations)
            .or_insert_with(|| (ctx.now(), BTreeMap::new()));
        entry.0 = entry.0.max(ctx.now());
        entry.1.insert(p, blocks);
    }

    /// Partition `p`'s current values as the layout's blocks.
    fn blocks_of(&self, p: PartitionId) -> Vec<BlockPayload> {
        let layout = &self.job.layout;
        let spec = &self.plan.parts[p as usize];
        let value = self.serving.get(&p).map(|s| s.part.value.as_slice());
        let mut offset = 0;
        spec.blocks
            .clone()
            .map(|b| {
                let len = layout.blocks()[b].len;
                let data = match value {
                    Some(v) if self.real() => Payload::Real(v[offset..offset + len].to_vec()),
                    _ => Payload::Virtual { elems: len as u64 },
                };
                offset += len;
                BlockPayload {
                    block: b as BlockId,
                    data,
                }
            })
            .collect()
    }

    /// Sends `home` the deltas of every partition homed there that applied clocks since the
    /// last push, unless a push to it is still in flight.
    fn push(&mut self, ctx: &mut RoleContext, home: ServerId) -> Result<()> {
        if self.pushing.contains(&home) {
            return Ok(());
        }
        let mut pushes = Vec::new();
        let mut payloads = Vec::new();
        for (&p, served) in self.serving.iter_mut() {
            if self.plan.homes[p as usize] != home {
                continue;
            }
            let Some(upto) = served.part.applied else {
                continue;
            };
            if let Some(mut push) = served.part.take_push(upto) {
                let delta = std::mem::take(&mut push.delta);
                payloads.push(if self.job.model.is_real() {
                    Payload::Real(delta)
                } else {
                    Payload::Virtual {
                        elems: self.plan.parts[p as usize].elems as u64,
                    }
                });
                pushes.push(push);
            }
        }
        if pushes.is_empty() {
            return Ok(());
        }
        let msg = BackupPush {
            pushes,
            epoch: self.epoch,
        };
        ctx.send(
            RoleId::Server(home),
            Message::strategy_with(&msg, payloads)?,
        );
        self.pushing.insert(home);
        Ok(())
    }

    /// Hands partition `p` to server `to`: its state, buffered sums and held reads; forwards
    /// what still comes for it. A home handing its partition to an ActivePS keeps a backup.
    fn handoff(&mut self, ctx: &mut RoleContext, p: PartitionId, to: ServerId) -> Result<bool> {
        let Some(served) = self.serving.remove(&p) else {
            return Ok(false);
        };
        let mut snapshot = served.part.export();
        if self.plan.homes[p as usize] == self.id && to != self.id {
            // The home served it: every clock it applied is in its backup already (staged past
            // the committed one, which a roll-back returns to), so the new server pushes only
            // what it applies itself.
            self.backups
                .insert(p, Backup::from_served(&snapshot).map_err(part_error)?);
            snapshot.pushed = snapshot.applied;
        }
        let value = std::mem::take(&mut snapshot.value);
        let mut payloads = vec![self.payload(p, &value)];
        let mut buffered = Vec::new();
        for (clock, sums) in served.pending {
            for (node, v) in sums {
                buffered.push((clock, node));
                payloads.push(if self.real() {
                    Payload::Real(v)
                } else {
                    Payload::Virtual {
                        elems: self.plan.parts[p as usize].elems as u64,
                    }
                });
            }
        }
        let adopt = Adopt {
            snapshot,
            buffered,
            reads: served.reads,
            epoch: self.epoch,
        };
        ctx.send(
            RoleId::Server(to),
            Message::strategy_with(&adopt, payloads)?,
        );
        self.forward.insert(p, to);
        Ok(true)
    }

    /// Serves a partition handed over by another server (or by its own backup).
    async fn adopt(
        &mut self,
        ctx: &mut RoleContext,
        adopt: Adopt,
        payloads: Vec<Payload>,
    ) -> Result<()> {
        let mut payloads = payloads.into_iter();
        let mut snapshot: PartitionSnapshot = adopt.snapshot;
        if let Some(Payload::Real(v)) = payloads.next() {
            snapshot.value = v;
        }
        let p = snapshot.id;
        // An END-OF-LIFE push to the home supersedes its backup.
        self.backups.remove(&p);
        self.forward.remove(&p);
        let mut pending: BTreeMap<Clock, Sums> = BTreeMap::new();
        for ((clock, node), payload) in adopt.buffered.into_iter().zip(payloads) {
            let v = match payload {
                Payload::Real(v) => v,
                Payload::Virtual { .. } => Vec::new(),
            };
            pending.entry(clock).or_default().insert(node, v);
        }
        let part = Partition::import(snapshot).map_err(part_error)?;
        let applied = part.applied;
        self.serving.insert(
            p,
            Served {
                part,
                pending,
                reads: Vec::new(),
            },
        );
        ctx.send(
            RoleId::Coordinator,
            Message::strategy(&Adopted { part: p, applied })?,
        );
        for read in adopt.reads {
            if read.epoch == self.epoch {
                self.read(ctx, read)?;
            }
        }
        self.try_apply(ctx, p).await
    }

    /// Receives an ActivePS's push into the backups, acknowledges it, tells the controller.
    fn backup_push(
        &mut self,
        ctx: &mut RoleContext,
        from: RoleId,
        push: BackupPush,
        payloads: Vec<Payload>,
    ) -> Result<()> {
        let mut done = Vec::new();
        for (mut one, payload) in push.pushes.into_iter().zip(payloads) {
            if let Payload::Real(v) = payload {
                one.delta = v;
            }
            let p = one.partition;
            let upto = one.upto;
            if let Some(b) = self.backups.get_mut(&p) {
                b.receive(one).map_err(|e| {
                    EngineError::protocol(ctx.id(), format!("backup of partition {p}: {e}"))
                })?;
                done.push((p, upto));
            }
        }
        ctx.send(from, Message::strategy(&PushAck)?);
        if !done.is_empty() {
            ctx.send(
                RoleId::Coordinator,
                Message::strategy(&Pushed { parts: done })?,
            );
        }
        Ok(())
    }

    fn commit(&mut self, clock: Clock) -> Result<()> {
        for served in self.serving.values_mut() {
            let upto = served.part.applied.map(|a| a.min(clock));
            if let Some(c) = upto {
                served.part.commit(c).map_err(part_error)?;
            }
        }
        for backup in self.backups.values_mut() {
            backup.commit(clock);
        }
        Ok(())
    }

    /// Rolls every partition back to the committed clock and enters the new epoch.
    fn rollback(&mut self, ctx: &mut RoleContext, rb: Rollback) -> Result<()> {
        self.epoch = rb.epoch;
        self.pushing.clear();
        self.rolled_to = rb.to;
        // Partitions served again from their backups elsewhere (or here, from the backup this
        // home keeps) are dropped: a copy of one that came here on its way is not the one served.
        for &p in &rb.reserved {
            let home_without_backup =
                rb.serve_from_backup.contains(&p) && !self.backups.contains_key(&p);
            if !home_without_backup {
                self.serving.remove(&p);
            }
            self.forward.remove(&p);
        }
        self.reserved = rb.reserved.iter().copied().collect();
        for (&p, served) in self.serving.iter_mut() {
            roll_back_to(ctx, p, served, rb.to)?;
        }
        for backup in self.backups.values_mut() {
            // The clock rolled back to is committed (its pushes reached every backup), though
            // the commit may not have reached this one yet.
            if let Some(to) = rb.to {
                backup.commit(to);
            }
            backup.discard_staged();
        }
        for p in rb.serve_from_backup {
            if let Some(b) = self.backups.remove(&p) {
                self.forward.remove(&p);
                self.serving.insert(
                    p,
                    Served {
                        part: b.to_partition(),
                        pending: BTreeMap::new(),
                        reads: Vec::new(),
                    },
                );
            }
        }
        for (p, to) in rb.send_backup {
            if let Some(b) = self.backups.get(&p) {
                let mut snapshot = b.to_partition().export();
                let value = std::mem::take(&mut snapshot.value);
                let adopt = Adopt {
                    snapshot,
                    buffered: Vec::new(),
                    reads: Vec::new(),
                    epoch: self.epoch,
                };
                let payload = self.payload(p, &value);
                ctx.send(
                    RoleId::Server(to),
                    Message::strategy_with(&adopt, vec![payload])?,
                );
                self.forward.insert(p, to);
            }
        }
        Ok(())
    }

    /// Dispatches one message; returns false where it must wait (it is then held).
    async fn dispatch(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<bool> {
        let msg = &env.msg;
        let payloads = |m: &Message| match m {
            Message::Custom(c) => c.payloads.clone(),
            _ => Vec::new(),
        };
        if let Some(read) = msg.decode::<Read>()? {
            return self.epoch_then(read.epoch, |s| s.read(ctx, read.clone()));
        }
        if let Some(update) = msg.decode::<Update>()? {
            if update.epoch < self.epoch {
                return Ok(true);
            }
            if update.epoch > self.epoch {
                return Ok(false);
            }
            return self.update(ctx, update, payloads(msg)).await;
        }
        if let Some(fwd) = msg.decode::<Forwarded>()? {
            return match fwd {
                Forwarded::Read(read) => self.epoch_then(read.epoch, |s| s.read(ctx, read.clone())),
                Forwarded::Update(update) => {
                    if update.epoch < self.epoch {
                        return Ok(true);
                    }
                    if update.epoch > self.epoch {
                        return Ok(false);
                    }
                    self.update(ctx, update, payloads(msg)).await
                }
            };
        }
        if let Some(h) = msg.decode::<Handoff>()? {
            if h.epoch < self.epoch && self.reserved.contains(&h.part) {
                return Ok(true);
            }
            return self.handoff(ctx, h.part, h.to);
        }
        if let Some(mut a) = msg.decode::<Adopt>()? {
            if a.epoch > self.epoch {
                return Ok(false);
            }
            if a.epoch < self.epoch && self.reserved.contains(&a.snapshot.id) {
                // On its way when a roll-back served it again from its backup.
                return Ok(true);
            }
            if a.epoch < self.epoch {
                // Handed over before a roll-back: the partition is served here all the same, at
                // the clock everything returned to; what it carried of the old epoch goes.
                let value = payloads(msg).into_iter().next().into_iter().collect();
                a.buffered.clear();
                a.reads.clear();
                let p = a.snapshot.id;
                self.adopt(ctx, a, value).await?;
                let to = self.rolled_to;
                if let Some(served) = self.serving.get_mut(&p) {
                    roll_back_to(ctx, p, served, to)?;
                }
                return Ok(true);
            }
            self.adopt(ctx, a, payloads(msg)).await?;
            return Ok(true);
        }
        if let Some(push) = msg.decode::<BackupPush>()? {
            if push.epoch < self.epoch {
                ctx.send(env.from, Message::strategy(&PushAck)?);
                return Ok(true);
            }
            self.backup_push(ctx, env.from, push, payloads(msg))?;
            return Ok(true);
        }
        if msg.decode::<PushAck>()?.is_some() {
            if let RoleId::Server(home) = env.from {
                self.pushing.remove(&home);
                self.push(ctx, home)?;
            }
            return Ok(true);
        }
        if let Some(c) = msg.decode::<Commit>()? {
            self.commit(c.clock)?;
            return Ok(true);
        }
        if let Some(rb) = msg.decode::<Rollback>()? {
            self.rollback(ctx, rb)?;
            return Ok(true);
        }
        if let Some(t) = msg.decode::<TreeUpdate>()? {
            self.tree = t.tree;
            return Ok(true);
        }
        Err(unexpected(ctx, &env))
    }

    /// Runs `f` for a message of `epoch`: drops an older one, holds a newer one.
    fn epoch_then(
        &mut self,
        epoch: u64,
        f: impl FnOnce(&mut Self) -> Result<bool>,
    ) -> Result<bool> {
        if epoch < self.epoch {
            return Ok(true);
        }
        if epoch > self.epoch {
            return Ok(false);
        }
        f(self)
    }
}

/// Inserts `node`'s sum into a clock's `sums`, keeping one copy of each item: a node inside
/// one already there is dropped, one containing some replaces them. Returns whether it was kept.
fn insert_sum(tree: &DataTree, sums: &mut Sums, node: NodeId, values: Vec<f32>) -> bool {
    let range_of = |n: NodeId| tree.node(n).map(|x| x.range.clone());
    let Some(range) = range_of(node) else {
        return false;
    };
    let present = sums.keys().filter_map(|&k| range_of(k).map(|r| (k, r)));
    let Some(replaced) = keep_once(present, &range) else {
        return false;
    };
    for k in replaced {
        sums.remove(&k);
    }
    sums.insert(node, values);
    true
}

/// Whether the nodes of `sums` tile the items `0..total` exactly.
fn complete(tree: &DataTree, sums: &Sums, total: u64) -> bool {
    tiles(
        sums.keys()
            .filter_map(|&n| tree.node(n).map(|n| n.range.clone())),
        total,
    )
}

/// Brings a served partition back to clock `to` (the controller's committed clock), dropping
/// the sums and reads of the epoch that ends: one that has not heard of the latest commit yet
/// commits to it first; one that cannot land there is an error naming it.
fn roll_back_to(
    ctx: &RoleContext,
    p: PartitionId,
    served: &mut Served,
    to: Option<Clock>,
) -> Result<()> {
    if to.is_some() && served.part.committed < to && served.part.applied >= to {
        if let Some(to) = to {
            served.part.commit(to).map_err(part_error)?;
        }
    }
    served.part.rollback();
    if served.part.applied != to {
        return Err(EngineError::protocol(
            ctx.id(),
            format!(
                "partition {p} rolled back to clock {:?}, not the committed {to:?}",
                served.part.applied
            ),
        ));
    }
    served.pending.clear();
    served.reads.clear();
    Ok(())
}

/// A partition error as the engine's.
fn part_error(e: impl std::fmt::Display) -> EngineError {
    EngineError::Composition(format!("agileml partition: {e}"))
}

/// The initial values of partition `p` (empty in throughput mode).
fn initial_value(job: &Job, plan: &Plan, p: PartitionId) -> Vec<f32> {
    let Some(init) = &job.init else {
        return Vec::new();
    };
    let blocks = job.layout.blocks();
    plan.parts[p as usize]
        .blocks
        .clone()
        .flat_map(|b| {
            let b = &blocks[b];
            init[b.param][b.offset..b.offset + b.len].iter().copied()
        })
        .collect()
}

#[async_trait]
impl ServerHandler for AgileServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        if self.dispatch(ctx, env.clone()).await? {
            // Something changed: what waited may go now.
            let held = std::mem::take(&mut self.held);
            for e in held {
                if !self.dispatch(ctx, e.clone()).await? {
                    self.held.push(e);
                }
            }
        } else {
            self.held.push(env);
        }
        Ok(())
    }

    fn finish(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        ctx.set_figure("agileml.duplicate_sums", self.duplicates as f64);
        let blocks = self
            .serving
            .keys()
            .flat_map(|&p| self.blocks_of(p))
            .collect();
        let snapshots = std::mem::take(&mut self.snapshots)
            .into_iter()
            .map(|(iterations, (time_s, parts))| Snapshot {
                iterations,
                time_s,
                blocks: parts.into_values().flatten().collect(),
            })
            .collect();
        Ok(ServerReport {
            model: ModelState {
                blocks,
                snapshots,
                ..ModelState::default()
            },
            ..ServerReport::default()
        })
    }
}

#[async_trait]
impl Server for AgileServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        concord_engine::serve::serve(self, ctx).await
    }
}
