//! AgileML's elasticity controller (the coordinator role): it tracks the machines in the job and
//! their tiers, picks the stage from their ratio, places ActivePSs on the longest-running
//! transient machines and moves partitions to them (the old server forwarding meanwhile), splits
//! the data of a worker with a joining one, hands the data of a leaving worker to the worker that
//! has it loaded, tracks the clock the backups are consistent at, and rolls everything back to it
//! when transient state is lost.

use super::holdings::{keep_once, leaves_under, loaded_leaves, tiles};
use super::ids::{Clock, MachineId, NodeId, PartitionId};
use super::ledger::Ledger;
use super::plan::{choose_stage, owners_for, Plan};
use super::protocol::{Adopted, Commit, Handoff, Note, Order, Pushed, Rollback, Route, TreeUpdate};
use super::stage::{MachineInfo, Stage};
use super::tree::DataTree;
use concord_engine::membership::MembershipEvent;
use concord_engine::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Counts the controller reports in the run summary (`agileml.*`).
#[derive(Debug, Default)]
struct Counts {
    stage_changes: u64,
    handoffs: u64,
    rollbacks: u64,
    joins: u64,
    departures: u64,
    reloads: u64,
}

/// The elasticity controller.
pub struct Controller {
    job: Arc<Job>,
    plan: Arc<Plan>,
    epoch: u64,
    stage: Stage,
    /// Machines in the job, with when they joined.
    present: BTreeMap<MachineId, f64>,
    /// Machines warned of an eviction.
    warned: BTreeSet<MachineId>,
    tree: DataTree,
    owners: Vec<ServerId>,
    route_version: u64,
    /// Clock each partition's backup is consistent at (partitions an ActivePS serves).
    consistent: Vec<Option<Clock>>,
    committed: Option<Clock>,
    /// Joining workers: their partner and the leaf they will take from it.
    joining: BTreeMap<WorkerId, (WorkerId, NodeId)>,
    /// Workers told to hand over their leaves and stop, with the leaves and their takers.
    retiring: BTreeMap<WorkerId, Vec<(NodeId, WorkerId)>>,
    /// Workers told to hand leaves over and go on (to a newcomer, or between tiers at a stage
    /// change), with the leaves and their takers, until the taker reports work on them: where
    /// the giver leaves first, the takers are told to take them.
    handing: BTreeMap<WorkerId, Vec<(NodeId, WorkerId)>>,
    /// Workers that stopped (retired or gone).
    stopped: BTreeSet<WorkerId>,
    /// Item ranges worked on per clock of the current epoch, one copy each (a range inside one
    /// already there is a recomputed share).
    coverage: BTreeMap<Clock, Vec<std::ops::Range<u64>>>,
    /// Items worked on twice (recomputed shares of a clock whose holder left).
    recomputed: u64,
    counts: Counts,
    /// Stage at each change: (run time, stage number).
    stages: Vec<(f64, u8)>,
    /// Partitions on their way from their home to an ActivePS: the home keeps a backup at the
    /// clock the ActivePS reports when it adopts them.
    from_home: BTreeSet<PartitionId>,
    /// Partitions on their way between servers, with every server of the way that was to hand
    /// them on (a partition may be sent on again before it arrives), until the server that
    /// serves them now reports it adopted them: one whose giver goes first is lost with it.
    moving: BTreeMap<PartitionId, BTreeSet<ServerId>>,
    /// The first clock of the current epoch.
    epoch_start: Clock,
    /// When each clock's last update left its worker (the clock's end as the controller sees it).
    clock_ends: BTreeMap<Clock, f64>,
    /// When machines first joined, and when a warning was first given.
    first_added: Option<f64>,
    first_warned: Option<f64>,
}

impl Controller {
    /// The controller of `job`.
    pub fn new(job: Arc<Job>, plan: Arc<Plan>) -> Controller {
        let present = plan.present.iter().map(|&m| (m, 0.0)).collect();
        Controller {
            epoch: 0,
            stage: plan.stage,
            present,
            warned: BTreeSet::new(),
            tree: plan.tree.clone(),
            owners: plan.owners.clone(),
            route_version: 0,
            consistent: vec![None; plan.np()],
            committed: None,
            joining: BTreeMap::new(),
            retiring: BTreeMap::new(),
            handing: BTreeMap::new(),
            stopped: BTreeSet::new(),
            coverage: BTreeMap::new(),
            recomputed: 0,
            counts: Counts::default(),
            stages: vec![(0.0, stage_number(plan.stage))],
            from_home: BTreeSet::new(),
            moving: BTreeMap::new(),
            epoch_start: 0,
            clock_ends: BTreeMap::new(),
            first_added: None,
            first_warned: None,
            job,
            plan,
        }
    }

    fn transient(&self, m: MachineId) -> bool {
        self.plan.transient[m as usize]
    }

    /// Machines that stay (present and not warned), as the stage policy sees them.
    fn staying(&self) -> Vec<MachineInfo> {
        self.present
            .iter()
            .filter(|(m, _)| !self.warned.contains(m))
            .map(|(&id, &joined)| MachineInfo {
                id,
                transient: self.transient(id),
                joined,
            })
            .collect()
    }

    /// Workers on machines in the job that are not stopping.
    fn live_workers(&self) -> Vec<WorkerId> {
        self.present
            .keys()
            .filter(|m| !self.warned.contains(m))
            .flat_map(|&m| self.plan.workers_of[m as usize].iter().copied())
            .filter(|w| !self.stopped.contains(w) && !self.retiring.contains_key(w))
            .collect()
    }

    /// The lowest clock whose items are not all worked on yet (in the current epoch): where a
    /// taker of a gone worker's leaves must start.
    fn current_clock(&self) -> Clock {
        let mut c = self.epoch_start;
        while self
            .coverage
            .get(&c)
            .is_some_and(|r| tiles(r.iter().cloned(), self.plan.total_items))
        {
            c += 1;
        }
        c
    }

    fn send_all_servers<T: StrategyMessage>(&self, ctx: &mut RoleContext, msg: &T) -> Result<()> {
        for &m in self.present.keys() {
            ctx.send(
                RoleId::Server(self.plan.server_of(m)),
                Message::strategy(msg)?,
            );
        }
        Ok(())
    }

    /// Tells every server of the new data tree (a split: sums may name its new nodes).
    fn send_tree(&self, ctx: &mut RoleContext) -> Result<()> {
        let update = TreeUpdate {
            tree: self.tree.clone(),
        };
        self.send_all_servers(ctx, &update)
    }

    fn send_route(&mut self, ctx: &mut RoleContext) -> Result<()> {
        self.route_version += 1;
        let route = Route {
            version: self.route_version,
            servers: self.owners.clone(),
        };
        for &m in self.present.keys() {
            for &w in &self.plan.workers_of[m as usize] {
                if !self.stopped.contains(&w) {
                    ctx.send(RoleId::Worker(w), Message::strategy(&route)?);
                }
            }
        }
        Ok(())
    }

    /// Moves partitions to the servers the stage wants (forwarding covers the gap); where the
    /// stage changes, moves data between reliable and transient workers.
    fn restage(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let staying = self.staying();
        let stage = choose_stage(&self.plan.options, &staying)?;
        if stage != self.stage {
            self.counts.stage_changes += 1;
            self.stages.push((ctx.now(), stage_number(stage)));
            let (from, to) = (self.stage, stage);
            self.stage = stage;
            if to == Stage::Three {
                self.reliable_workers_stop(ctx)?;
            } else if from == Stage::Three {
                self.reliable_workers_resume(ctx)?;
            }
        }
        let current: BTreeMap<PartitionId, MachineId> = self
            .owners
            .iter()
            .enumerate()
            .filter(|(_, &s)| self.transient(self.plan.machine_of_server(s)))
            .filter(|(_, &s)| !self.warned.contains(&self.plan.machine_of_server(s)))
            .map(|(p, &s)| (p as PartitionId, self.plan.machine_of_server(s)))
            .collect();
        let wanted = owners_for(
            self.stage,
            &self.plan.options,
            &staying,
            &self.plan.homes,
            &current,
        );
        let mut moved = false;
        for (p, (&now, &want)) in self.owners.clone().iter().zip(&wanted).enumerate() {
            if now != want {
                if now == self.plan.homes[p] {
                    self.from_home.insert(p as PartitionId);
                }
                self.moving.entry(p as PartitionId).or_default().insert(now);
                ctx.send(
                    RoleId::Server(now),
                    Message::strategy(&Handoff {
                        epoch: self.epoch,
                        part: p as PartitionId,
                        to: want,
                    })?,
                );
                self.owners[p] = want;
                self.counts.handoffs += 1;
                moved = true;
            }
        }
        if moved {
            self.send_route(ctx)?;
        }
        Ok(())
    }

    /// Stage 3: workers on reliable machines hand their leaves to transient workers (which
    /// preloaded them) and idle.
    fn reliable_workers_stop(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let takers: Vec<WorkerId> = self
            .live_workers()
            .into_iter()
            .filter(|&w| self.transient(self.job.cluster.worker_machine[w as usize]))
            .collect();
        if takers.is_empty() {
            return Ok(());
        }
        let givers: Vec<WorkerId> = self
            .tree
            .holders()
            .into_iter()
            .filter(|&w| !self.transient(self.job.cluster.worker_machine[w as usize]))
            .collect();
        for giver in givers {
            let mut moves = Vec::new();
            for leaf in self.tree.leaves_of(giver) {
                let to = *takers
                    .iter()
                    .min_by_key(|&&t| (self.tree.items_of(t), t))
                    .unwrap_or(&takers[0]);
                self.tree.preload(to, leaf).map_err(tree_error)?;
                self.tree.reassign(leaf, to).map_err(tree_error)?;
                moves.push((leaf, to));
            }
            self.give(ctx, giver, moves, false)?;
        }
        Ok(())
    }

    /// Back from stage 3: reliable workers take back the leaves they have loaded.
    fn reliable_workers_resume(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let reliable: BTreeSet<WorkerId> = self
            .live_workers()
            .into_iter()
            .filter(|&w| !self.transient(self.job.cluster.worker_machine[w as usize]))
            .collect();
        let mut by_giver: BTreeMap<WorkerId, Vec<(NodeId, WorkerId)>> = BTreeMap::new();
        for w in &reliable {
            for leaf in loaded_leaves(&self.tree, *w) {
                let Some(holder) = self.tree.node(leaf).and_then(|n| n.holder) else {
                    continue;
                };
                if holder != *w && !reliable.contains(&holder) {
                    self.tree.reassign(leaf, *w).map_err(tree_error)?;
                    by_giver.entry(holder).or_default().push((leaf, *w));
                }
            }
        }
        for (giver, moves) in by_giver {
            self.give(ctx, giver, moves, false)?;
        }
        // Reliable workers that never had data (the job started in stage 3) join like newcomers.
        let mut split = false;
        for w in reliable {
            if self.tree.items_of(w) == 0 && !self.joining.contains_key(&w) {
                split |= self.join_worker(ctx, w)?;
            }
        }
        if split {
            self.send_tree(ctx)?;
        }
        Ok(())
    }

    fn give(
        &mut self,
        ctx: &mut RoleContext,
        giver: WorkerId,
        leaves: Vec<(NodeId, WorkerId)>,
        retire: bool,
    ) -> Result<()> {
        if !retire {
            self.handing
                .entry(giver)
                .or_default()
                .extend(leaves.iter().copied());
        }
        let order = Order::Give {
            leaves,
            retire,
            tree: self.tree.clone(),
        };
        ctx.send(RoleId::Worker(giver), Message::strategy(&order)?);
        Ok(())
    }

    /// Machines joined: each of their workers pairs with the worker holding the most data and
    /// loads its range; their servers may become ActivePSs.
    fn added(&mut self, ctx: &mut RoleContext, machines: &[MachineId]) -> Result<()> {
        let now = ctx.now();
        self.first_added.get_or_insert(now);
        for &m in machines {
            self.present.insert(m, now);
            // A server joining after a roll-back enters the job's epoch: what the others send
            // it is of that epoch, and it would hold all of it, waiting for the epoch.
            if self.epoch > 0 {
                let rollback = Rollback::enter(self.epoch, self.committed);
                ctx.send(
                    RoleId::Server(self.plan.server_of(m)),
                    Message::strategy(&rollback)?,
                );
            }
        }
        let mut split = false;
        for &m in machines {
            if self.stage == Stage::Three && !self.transient(m) {
                continue;
            }
            for &w in &self.plan.workers_of[m as usize].clone() {
                split |= self.join_worker(ctx, w)?;
            }
        }
        if split {
            self.send_tree(ctx)?;
        }
        self.restage(ctx)
    }

    /// Worker `w` joins the work: it pairs with the worker holding the most data, which will
    /// hand it half of its largest leaf once it has loaded that leaf; returns whether the tree
    /// was split (the servers must hear of it).
    fn join_worker(&mut self, ctx: &mut RoleContext, w: WorkerId) -> Result<bool> {
        let Some(partner) = self.tree.partner() else {
            return Ok(false);
        };
        let s = self
            .tree
            .split(partner, w, self.current_clock())
            .map_err(tree_error)?;
        self.joining.insert(w, (partner, s.right));
        self.counts.joins += 1;
        let order = Order::Load {
            items: s.load_items.end - s.load_items.start,
            epoch: self.epoch,
            tree: self.tree.clone(),
            route: Route {
                version: self.route_version,
                servers: self.owners.clone(),
            },
        };
        ctx.send(RoleId::Worker(w), Message::strategy(&order)?);
        Ok(true)
    }

    /// A joining worker has its data: its partner hands it the leaf at its next clock.
    fn ready(&mut self, ctx: &mut RoleContext, w: WorkerId) -> Result<()> {
        if let Some((partner, leaf)) = self.joining.remove(&w) {
            self.give(ctx, partner, vec![(leaf, w)], false)?;
        }
        Ok(())
    }

    /// Machines warned of an eviction: ActivePSs there hand their partitions on (all of them to
    /// their homes, END-OF-LIFE, when every transient machine goes), workers there hand their
    /// leaves to the workers that have them loaded and stop.
    fn warned(&mut self, ctx: &mut RoleContext, machines: &[MachineId]) -> Result<()> {
        self.first_warned.get_or_insert(ctx.now());
        self.warned.extend(machines.iter().copied());
        self.leave_workers(ctx, machines, true)?;
        self.restage(ctx)
    }

    /// Workers of `machines` leave: their leaves go to survivors. Warned ones hand over at a
    /// clock boundary themselves; for gone ones the takers start from the current clock.
    fn leave_workers(
        &mut self,
        ctx: &mut RoleContext,
        machines: &[MachineId],
        warned: bool,
    ) -> Result<()> {
        let gone: BTreeSet<WorkerId> = machines
            .iter()
            .flat_map(|&m| self.plan.workers_of[m as usize].iter().copied())
            .collect();
        // A joining worker that leaves before it got its leaf: the partner keeps it (the tree
        // removal below hands the leaf back). A joining worker whose partner leaves takes its
        // leaf at once.
        for w in &gone {
            self.joining.remove(w);
        }
        let orphaned: Vec<(WorkerId, NodeId)> = self
            .joining
            .iter()
            .filter(|(_, (partner, _))| gone.contains(partner))
            .map(|(&w, &(_, leaf))| (w, leaf))
            .collect();
        for (w, leaf) in orphaned {
            self.joining.remove(&w);
            self.take(ctx, vec![(leaf, w)])?;
        }
        let holders = self.tree.holders();
        if gone.iter().all(|w| !holders.contains(w)) {
            for w in &gone {
                self.stopped.insert(*w);
            }
            return Ok(());
        }
        if holders.iter().all(|w| gone.contains(w)) && self.live_workers().is_empty() {
            return Err(EngineError::protocol(
                RoleId::Coordinator,
                "every worker of the job is leaving: no machine is left to train on",
            ));
        }
        let removal = self.tree.remove(&gone).map_err(tree_error)?;
        self.counts.reloads += removal.reloads.len() as u64;
        self.counts.departures += gone.len() as u64;
        // Every leaf that changes holder (reloads are among them: their taker loads them from
        // storage, which the job's data being shared makes a copy of).
        if warned {
            let mut by_giver: BTreeMap<WorkerId, Vec<(NodeId, WorkerId)>> = BTreeMap::new();
            for (leaf, from, to) in removal.moves.iter().copied() {
                by_giver.entry(from).or_default().push((leaf, to));
            }
            for (giver, moves) in by_giver {
                self.retiring.insert(giver, moves.clone());
                self.give(ctx, giver, moves, true)?;
            }
            for w in &gone {
                if !self.retiring.contains_key(w) {
                    self.stopped.insert(*w);
                }
            }
        } else {
            let all: Vec<(NodeId, WorkerId)> = removal
                .moves
                .iter()
                .map(|&(leaf, _, to)| (leaf, to))
                .collect();
            for w in &gone {
                self.stopped.insert(*w);
            }
            self.take(ctx, all)?;
        }
        Ok(())
    }

    /// Tells takers to work on leaves whose holder is gone, from the current clock.
    fn take(&mut self, ctx: &mut RoleContext, moves: Vec<(NodeId, WorkerId)>) -> Result<()> {
        let clock = self.current_clock();
        let mut by_taker: BTreeMap<WorkerId, Vec<NodeId>> = BTreeMap::new();
        for (leaf, to) in moves {
            by_taker.entry(to).or_default().push(leaf);
        }
        for (to, leaves) in by_taker {
            let order = Order::Take {
                leaves,
                tree: self.tree.clone(),
                clock,
            };
            ctx.send(RoleId::Worker(to), Message::strategy(&order)?);
        }
        Ok(())
    }

    /// Machines evicted at their deadline: workers that did not hand over in time are gone; a
    /// partition whose hand-off had not arrived is lost (an effective failure).
    fn evicted(&mut self, ctx: &mut RoleContext, machines: &[MachineId]) -> Result<()> {
        let set: BTreeSet<MachineId> = machines.iter().copied().collect();
        for &m in machines {
            for &w in &self.plan.workers_of[m as usize] {
                self.stopped.insert(w);
            }
        }
        self.retirees_gone(ctx, &set)?;
        self.handers_gone(ctx, &set)?;
        if !self.machines_gone(ctx, &set)? {
            self.servers_lost(ctx, &set)?;
        }
        Ok(())
    }

    /// Machines failed: their workers' leaves go to survivors; if they served partitions, every
    /// partition rolls back to the committed clock and the workers redo from the next.
    fn failed(&mut self, ctx: &mut RoleContext, machines: &[MachineId]) -> Result<()> {
        let set: BTreeSet<MachineId> = machines.iter().copied().collect();
        self.leave_workers(ctx, machines, false)?;
        self.retirees_gone(ctx, &set)?;
        self.handers_gone(ctx, &set)?;
        if !self.machines_gone(ctx, &set)? {
            self.servers_lost(ctx, &set)?;
            self.restage(ctx)?;
        }
        Ok(())
    }

    /// Tells every worker still running that the servers of `gone` machines are gone, where no
    /// roll-back followed (their partitions had all moved on): updates that reached them after
    /// their hand-overs and were not forwarded are lost with them, and the workers send again
    /// what they sent them (see [`super::sent`]). A roll-back needs none: the workers redo the
    /// clocks from the committed one.
    fn servers_lost(&mut self, ctx: &mut RoleContext, gone: &BTreeSet<MachineId>) -> Result<()> {
        let servers: Vec<ServerId> = gone.iter().map(|&m| self.plan.server_of(m)).collect();
        let order = Order::Lost { servers };
        let running: Vec<WorkerId> = self
            .present
            .keys()
            .flat_map(|&m| self.plan.workers_of[m as usize].iter().copied())
            .filter(|w| !self.stopped.contains(w))
            .collect();
        for w in running {
            ctx.send(RoleId::Worker(w), Message::strategy(&order)?);
        }
        Ok(())
    }

    /// Workers on `gone` machines that were handing their leaves over and did not finish: the
    /// takers start on the leaves from the current clock.
    fn retirees_gone(&mut self, ctx: &mut RoleContext, gone: &BTreeSet<MachineId>) -> Result<()> {
        let machine_of = |w: WorkerId| self.job.cluster.worker_machine[w as usize];
        let late: Vec<(NodeId, WorkerId)> = self
            .retiring
            .iter()
            .filter(|(&w, _)| gone.contains(&machine_of(w)))
            .flat_map(|(_, moves)| moves.iter().copied())
            .collect();
        let cluster = self.job.cluster.clone();
        self.retiring
            .retain(|&w, _| !gone.contains(&cluster.worker_machine[w as usize]));
        self.take(ctx, late)
    }

    /// Workers on `gone` machines that were to hand leaves to others and go on, and may not
    /// have: the takers (those that stay) start on the leaves from the current clock. A taker
    /// that already has them recomputes at most a share the servers keep one copy of.
    fn handers_gone(&mut self, ctx: &mut RoleContext, gone: &BTreeSet<MachineId>) -> Result<()> {
        let cluster = self.job.cluster.clone();
        let gone_worker = |w: WorkerId| gone.contains(&cluster.worker_machine[w as usize]);
        let late: Vec<(NodeId, WorkerId)> = self
            .handing
            .iter()
            .filter(|(&w, _)| gone_worker(w))
            .flat_map(|(_, moves)| moves.iter().copied())
            .filter(|&(_, to)| !gone_worker(to) && !self.stopped.contains(&to))
            .collect();
        self.handing.retain(|&w, _| !gone_worker(w));
        for moves in self.handing.values_mut() {
            moves.retain(|&(_, to)| !gone_worker(to));
        }
        self.take(ctx, late)
    }

    /// Worker `w` reported work on `nodes`: the hand-overs to it of leaves under them are done.
    fn handed(&mut self, w: WorkerId, nodes: &[NodeId]) {
        if self.handing.is_empty() {
            return;
        }
        let worked: BTreeSet<NodeId> = nodes
            .iter()
            .flat_map(|&n| leaves_under(&self.tree, n))
            .collect();
        let tree = &self.tree;
        for moves in self.handing.values_mut() {
            moves.retain(|&(leaf, to)| {
                to != w || !leaves_under(tree, leaf).iter().all(|l| worked.contains(l))
            });
        }
        self.handing.retain(|_, moves| !moves.is_empty());
    }

    /// Takes `gone` machines out of the job; where one still served a partition, rolls every
    /// partition back. Returns whether it did.
    fn machines_gone(&mut self, ctx: &mut RoleContext, gone: &BTreeSet<MachineId>) -> Result<bool> {
        // A partition a gone server was still handing over may never reach its new server: it
        // is lost with the giver.
        let plan = self.plan.clone();
        let on_gone = |s: ServerId| gone.contains(&plan.machine_of_server(s));
        let lost = self
            .moving
            .values()
            .any(|givers| givers.iter().any(|&s| on_gone(s)))
            || self.owners.iter().any(|&s| on_gone(s));
        // A roll-back serves every partition still on its way again from its backup, at the
        // server it was going to: where it is on the way is not known.
        let in_transit: BTreeSet<PartitionId> = if lost {
            std::mem::take(&mut self.moving).into_keys().collect()
        } else {
            BTreeSet::new()
        };
        for m in gone {
            self.present.remove(m);
            self.warned.remove(m);
        }
        if lost {
            self.roll_back(ctx, gone, &in_transit)?;
        }
        Ok(lost)
    }

    /// Rolls every partition back to the committed clock: partitions whose server is gone are
    /// served again from their backups (at their home, or sent by it to a surviving ActivePS);
    /// surviving ActivePSs subtract their pending deltas; workers restart at the next clock.
    /// `in_transit`: partitions on their way between servers, which the server they were going
    /// to (where it stays) serves again from their backups.
    fn roll_back(
        &mut self,
        ctx: &mut RoleContext,
        gone: &BTreeSet<MachineId>,
        in_transit: &BTreeSet<PartitionId>,
    ) -> Result<()> {
        self.epoch += 1;
        self.counts.rollbacks += 1;
        let staying = self.staying();
        let stage = choose_stage(&self.plan.options, &staying)?;
        if stage != self.stage {
            self.counts.stage_changes += 1;
            self.stages.push((ctx.now(), stage_number(stage)));
            if self.stage == Stage::Three {
                self.reliable_workers_resume(ctx)?;
            }
            self.stage = stage;
        }
        let current: BTreeMap<PartitionId, MachineId> = self
            .owners
            .iter()
            .enumerate()
            .map(|(p, &s)| (p as PartitionId, self.plan.machine_of_server(s)))
            .filter(|(_, m)| !gone.contains(m) && self.transient(*m))
            .collect();
        let wanted = owners_for(
            self.stage,
            &self.plan.options,
            &staying,
            &self.plan.homes,
            &current,
        );
        let mut orders: BTreeMap<ServerId, Rollback> = self
            .present
            .keys()
            .map(|&m| {
                (
                    self.plan.server_of(m),
                    Rollback::enter(self.epoch, self.committed),
                )
            })
            .collect();
        let mut reserved = Vec::new();
        for (p, &wanted_owner) in wanted.iter().enumerate() {
            let owner_lost = gone.contains(&self.plan.machine_of_server(self.owners[p]));
            // On its way: the server it was going to (which may have adopted it meanwhile)
            // serves it again, from the backup, so that no other server does too.
            let to = if owner_lost {
                wanted_owner
            } else if in_transit.contains(&(p as PartitionId)) {
                self.owners[p]
            } else {
                continue;
            };
            let home = self.plan.homes[p];
            if let Some(o) = orders.get_mut(&home) {
                if to == home {
                    o.serve_from_backup.push(p as PartitionId);
                } else {
                    o.send_backup.push((p as PartitionId, to));
                }
            }
            self.owners[p] = to;
            reserved.push(p as PartitionId);
        }
        for (s, mut order) in orders {
            order.reserved = reserved.clone();
            ctx.send(RoleId::Server(s), Message::strategy(&order)?);
        }
        // Every backup returns to the committed clock: the pushes it staged past it are void.
        for c in &mut self.consistent {
            *c = self.committed;
        }
        self.send_route(ctx)?;
        let from = self.committed.map_or(0, |c| c + 1);
        // Workers handing their leaves over are still running: they restart too (and hand over
        // at the new epoch's first clock boundary).
        let retiring: Vec<WorkerId> = self.retiring.keys().copied().collect();
        for w in self.live_workers().into_iter().chain(retiring) {
            ctx.send(
                RoleId::Worker(w),
                Message::strategy(&Order::Restart {
                    epoch: self.epoch,
                    from,
                })?,
            );
        }
        self.epoch_start = from;
        self.coverage.split_off(&from);
        Ok(())
    }

    /// The clock every partition is backed up to, told to the servers when it moves.
    fn advance_commit(&mut self, ctx: &mut RoleContext) -> Result<()> {
        // The last clock every item of which was worked on in this epoch (its updates all
        // sent): after a roll-back, or while newcomers start, a holder may not have reported
        // any clock yet, and one worker's report says nothing of the others'.
        let covered = self.current_clock();
        let mut commit = (covered > self.epoch_start).then(|| covered - 1);
        for (p, &s) in self.owners.iter().enumerate() {
            // A partition on its way between servers is, until it arrives, what its backup
            // holds, wherever it is going.
            let moving = self.moving.contains_key(&(p as PartitionId));
            if moving || self.transient(self.plan.machine_of_server(s)) {
                commit = match (commit, self.consistent[p]) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    _ => None,
                };
            }
        }
        if commit > self.committed {
            self.committed = commit;
            if let Some(clock) = commit {
                self.send_all_servers(ctx, &Commit { clock })?;
            }
        }
        Ok(())
    }

    /// Whether the last clock's items have all been worked on.
    fn all_done(&self) -> bool {
        let last = self.job.config.iterations.saturating_sub(1);
        self.coverage
            .get(&last)
            .is_some_and(|r| tiles(r.iter().cloned(), self.plan.total_items))
    }

    /// Records that `nodes` of `clock` were worked on, one copy of each item.
    fn cover(&mut self, clock: Clock, nodes: &[NodeId]) {
        let ranges = self.coverage.entry(clock).or_default();
        for &n in nodes {
            let Some(r) = self.tree.node(n).map(|x| x.range.clone()) else {
                continue;
            };
            let present = ranges.iter().enumerate().map(|(i, o)| (i, o.clone()));
            match keep_once(present, &r) {
                None => self.recomputed += r.end - r.start,
                Some(replaced) => {
                    for i in replaced.into_iter().rev() {
                        let o = ranges.remove(i);
                        self.recomputed += o.end - o.start;
                    }
                    ranges.push(r);
                }
            }
        }
    }

    /// Checks that every clock of the job was worked on exactly once over its items (the
    /// exactly-once coverage of claim 6); returns the clocks verified.
    fn verify_ledger(&self) -> Result<usize> {
        let mut ledger = Ledger::new();
        let total = self.plan.total_items;
        for (&clock, ranges) in &self.coverage {
            ledger.record(clock, ranges.iter().cloned());
            ledger
                .verify(clock, total)
                .map_err(|e| EngineError::protocol(RoleId::Coordinator, format!("ledger: {e}")))?;
        }
        let expected = self.job.config.iterations;
        let verified = ledger.verified_clocks().len();
        if self.all_done() && (verified as u64) < expected {
            return Err(EngineError::protocol(
                RoleId::Coordinator,
                format!("ledger: {verified} of {expected} clocks were worked on"),
            ));
        }
        Ok(verified)
    }

    /// Per-clock durations around membership changes: the clock time before the first join,
    /// the worst clock between a join and the first warning relative to it (a join must not
    /// disrupt), the worst clock after an eviction relative to the clocks after it (the blip),
    /// and the last clocks' time relative to the first ones.
    fn timing_figures(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        let ends: Vec<(Clock, f64)> = self.clock_ends.iter().map(|(&c, &t)| (c, t)).collect();
        let durations: Vec<(f64, f64)> = ends
            .windows(2)
            .filter(|w| w[1].0 == w[0].0 + 1)
            .map(|w| (w[1].1, w[1].1 - w[0].1))
            .collect();
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
        let Some(added) = self.first_added else {
            return out;
        };
        let before: Vec<f64> = durations
            .iter()
            .filter(|(t, _)| *t <= added)
            .map(|d| d.1)
            .collect();
        if before.is_empty() {
            return out;
        }
        let base = mean(&before);
        out.push(("agileml.iter_s_before_join".to_string(), base));
        let until = self.first_warned.unwrap_or(f64::INFINITY);
        let joined: Vec<f64> = durations
            .iter()
            .filter(|(t, d)| *t - *d >= added && *t <= until)
            .map(|d| d.1)
            .collect();
        let around: Vec<f64> = durations
            .iter()
            .filter(|(t, _)| *t > added && *t <= until)
            .map(|d| d.1)
            .collect();
        if let Some(worst) = around.iter().copied().reduce(f64::max) {
            out.push(("agileml.join_disruption".to_string(), worst / base - 1.0));
        }
        if !joined.is_empty() {
            out.push(("agileml.iter_s_joined".to_string(), mean(&joined)));
            out.push(("agileml.join_speedup".to_string(), base / mean(&joined)));
        }
        if let Some(warned) = self.first_warned {
            let after: Vec<f64> = durations
                .iter()
                .filter(|(t, _)| *t > warned)
                .map(|d| d.1)
                .collect();
            if after.len() >= 3 {
                let tail = &after[after.len() / 2..];
                let settled = mean(tail);
                let worst = after.iter().copied().fold(0.0, f64::max);
                out.push(("agileml.eviction_blip".to_string(), worst / settled - 1.0));
                out.push((
                    "agileml.after_eviction_vs_before_join".to_string(),
                    settled / base - 1.0,
                ));
            }
        }
        out
    }

    fn report(&self) -> CoordinatorReport {
        let c = &self.counts;
        let mut figures = vec![
            ("agileml.stage_changes".to_string(), c.stage_changes as f64),
            ("agileml.handoffs".to_string(), c.handoffs as f64),
            ("agileml.rollbacks".to_string(), c.rollbacks as f64),
            ("agileml.joins".to_string(), c.joins as f64),
            ("agileml.departures".to_string(), c.departures as f64),
            ("agileml.reloads".to_string(), c.reloads as f64),
            (
                "agileml.final_stage".to_string(),
                stage_number(self.stage) as f64,
            ),
            (
                "agileml.recomputed_items".to_string(),
                self.recomputed as f64,
            ),
        ];
        figures.extend(self.timing_figures());
        CoordinatorReport {
            figures,
            ..CoordinatorReport::default()
        }
    }
}

fn stage_number(s: Stage) -> u8 {
    match s {
        Stage::One => 1,
        Stage::Two => 2,
        Stage::Three => 3,
    }
}

fn tree_error(e: impl std::fmt::Display) -> EngineError {
    EngineError::protocol(RoleId::Coordinator, format!("agileml data tree: {e}"))
}

#[async_trait]
impl Coordinator for Controller {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let mut finished = false;
        loop {
            let env = ctx.recv().await?;
            match &env.msg {
                Message::Shutdown => break,
                Message::Membership(event) => match event {
                    MembershipEvent::Added { machines } => self.added(ctx, machines)?,
                    MembershipEvent::Warned { machines, .. } => self.warned(ctx, machines)?,
                    MembershipEvent::Evicted { machines } => self.evicted(ctx, machines)?,
                    MembershipEvent::Failed { machines } => self.failed(ctx, machines)?,
                },
                _ => {}
            }
            if let Some(note) = env.msg.decode::<Note>()? {
                let RoleId::Worker(w) = env.from else {
                    continue;
                };
                match note {
                    Note::Ready => self.ready(ctx, w)?,
                    Note::Retired => {
                        self.retiring.remove(&w);
                        self.stopped.insert(w);
                    }
                    Note::Done {
                        epoch,
                        clock,
                        nodes,
                    } => {
                        if epoch == self.epoch {
                            self.handed(w, &nodes);
                            self.cover(clock, &nodes);
                            self.clock_ends
                                .entry(clock)
                                .and_modify(|t| *t = t.max(ctx.now()))
                                .or_insert(ctx.now());
                            self.advance_commit(ctx)?;
                        }
                    }
                }
            } else if let Some(p) = env.msg.decode::<Pushed>()? {
                for (part, clock) in p.parts {
                    let c = &mut self.consistent[part as usize];
                    *c = (*c).max(Some(clock));
                }
                self.advance_commit(ctx)?;
            } else if let Some(a) = env.msg.decode::<Adopted>()? {
                if env.from == RoleId::Server(self.owners[a.part as usize]) {
                    self.moving.remove(&a.part);
                }
                // A partition fresh from its home: the home's backup holds its state at the
                // clock it was handed over at.
                if self.from_home.remove(&a.part) {
                    let c = &mut self.consistent[a.part as usize];
                    *c = (*c).max(a.applied);
                }
            }
            if !finished && self.all_done() {
                finished = true;
                // Idle workers (stage 3 on reliable machines, joining ones) may return.
                for &m in self.present.keys() {
                    for &w in &self.plan.workers_of[m as usize] {
                        if !self.stopped.contains(&w) {
                            ctx.send(RoleId::Worker(w), Message::strategy(&Order::Finish)?);
                        }
                    }
                }
            }
        }
        let verified = self.verify_ledger()?;
        let mut report = self.report();
        report
            .figures
            .push(("agileml.ledger_clocks".to_string(), verified as f64));
        Ok(report)
    }
}
