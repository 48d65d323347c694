//! An AgileML worker: stateless, it reads the partitions from whichever server the route names,
//! computes the gradient of the data-tree leaves it holds, and sends each server the sums over
//! the largest subtrees it holds whole (so the servers' tree-ordered sums are the same bits
//! however the leaves are spread over workers).
//!
//! Leaves change hands at clock boundaries: a giver stops working on them at its next clock and
//! tells the taker from which clock they are its (`Begin`); a taker of a gone worker's leaves
//! works on them from the controller's current clock, recomputing that clock's share with the
//! parameters it read if its own updates already left, and the shares of any earlier clock it
//! has passed after reading their parameters again. A server keeps one copy of whatever arrives
//! twice, so a worker also sends again, to the new server, what it sent by a route that has
//! since moved a partition (see [`super::sent`]).

use super::holdings::{cover_of, leaves_under};
use super::ids::{Clock, NodeId, PartitionId};
use super::plan::Plan;
use super::protocol::{Begin, Items, Note, Order, Read, Route, Update, Values};
use super::sent::SentUpdates;
use super::tree::DataTree;
use super::treesum::subtree_sum;
use concord_engine::dp::{train_step, Charge, ClockTally, StepAt};
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The parameters a worker read for one clock.
struct ReadState {
    epoch: u64,
    clock: Clock,
    /// Values per partition (empty vectors in throughput mode).
    values: BTreeMap<PartitionId, Vec<f32>>,
}

/// What interrupts a clock.
enum Interrupt {
    /// A roll-back: start again at `from`.
    Restart(Clock),
    /// The job is over.
    Finish,
    /// Leaves taken from a clock this worker has passed: their shares of the clocks since are
    /// owed first (the clock it is on may wait for them).
    CatchUp,
}

/// An AgileML worker.
pub struct AgileWorker {
    id: WorkerId,
    job: Arc<Job>,
    plan: Arc<Plan>,
    replica: Option<Replica>,
    epoch: u64,
    tree: DataTree,
    route: Route,
    /// Leaves worked on from the next clock on.
    holdings: BTreeSet<NodeId>,
    /// Leaves to hand over at the next clock boundary, and whether to stop then.
    giving: Vec<(NodeId, WorkerId)>,
    retiring: bool,
    /// The parameters of the last clock whose updates were sent (for late shares).
    last: Option<ReadState>,
    /// The clock the worker is on.
    clock: Clock,
    /// The first clock of its epoch (where the last roll-back restarted it).
    epoch_start: Clock,
    /// What it sent for its latest clocks, sent again when servers are lost (see [`super::sent`]).
    sent: SentUpdates,
    /// How many times the controller has said servers were lost (`Order::Lost`): a read out
    /// then asks again for what it still misses.
    losses: u64,
    /// Leaves taken from a clock this worker had passed, per clock it owes their share of.
    owed: BTreeMap<Clock, BTreeSet<NodeId>>,
}

impl AgileWorker {
    /// Worker `id` of `job`.
    pub fn new(job: Arc<Job>, id: WorkerId, plan: Arc<Plan>) -> Result<AgileWorker> {
        let holdings = plan.tree.leaves_of(id).into_iter().collect();
        Ok(AgileWorker {
            id,
            replica: job.replica(RoleId::Worker(id))?,
            route: Route {
                version: 0,
                servers: plan.owners.clone(),
            },
            tree: plan.tree.clone(),
            job,
            plan,
            epoch: 0,
            holdings,
            giving: Vec::new(),
            retiring: false,
            last: None,
            clock: 0,
            epoch_start: 0,
            sent: SentUpdates::default(),
            losses: 0,
            owed: BTreeMap::new(),
        })
    }

    /// Takes a newer data tree: a held leaf that has since been split is held as its leaves
    /// (until the worker hands some of them over).
    fn set_tree(&mut self, tree: DataTree) {
        let held: Vec<NodeId> = self.holdings.iter().copied().collect();
        self.holdings = held
            .into_iter()
            .flat_map(|n| leaves_under(&tree, n))
            .collect();
        self.tree = tree;
    }

    /// Takes `route` unless this worker has a newer one.
    fn set_route(&mut self, route: Route) {
        if route.version >= self.route.version {
            self.route = route;
        }
    }

    /// Handles one message that is not a value reply; returns an interrupt where it ends the
    /// clock.
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<Option<Interrupt>> {
        if let Some(order) = env.msg.decode::<Order>()? {
            return self.order(ctx, order).await;
        }
        if let Some(route) = env.msg.decode::<Route>()? {
            self.set_route(route);
            return Ok(None);
        }
        if let Some(begin) = env.msg.decode::<Begin>()? {
            // A hand-over in an epoch a roll-back has ended: the giver does the clocks of this
            // epoch without the leaves, so they are this worker's from the epoch's first clock.
            let from = if begin.epoch < self.epoch {
                self.epoch_start
            } else {
                begin.clock
            };
            // Leaves of a split this worker has not heard of (trees only grow).
            if begin.tree.nodes().len() > self.tree.nodes().len() {
                self.set_tree(begin.tree.clone());
            }
            // An idle worker (a newcomer, or a reliable worker in stage 3) starts at the giver's
            // clock.
            if self.holdings.is_empty() {
                self.clock = from;
            }
            self.take(ctx, &begin.leaves, from).await?;
            return Ok(None);
        }
        if env.msg.decode::<Values>()?.is_some() {
            // A reply to a read of an earlier clock or epoch.
            return Ok(None);
        }
        Err(unexpected(ctx, &env))
    }

    async fn order(&mut self, ctx: &mut RoleContext, order: Order) -> Result<Option<Interrupt>> {
        match order {
            Order::Load {
                items,
                epoch,
                tree,
                route,
            } => {
                // Loads the partner's range in the background of the job, then says so.
                self.epoch = epoch;
                self.set_tree(tree);
                self.set_route(route);
                let load_s = self.plan.load_seconds(items);
                let t0 = ctx.now();
                ctx.sleep(load_s).await;
                ctx.trace_span("load data", "comm", t0, ctx.now());
                ctx.send(RoleId::Coordinator, Message::strategy(&Note::Ready)?);
                Ok(None)
            }
            Order::Give {
                leaves,
                retire,
                tree,
            } => {
                self.set_tree(tree);
                self.giving.extend(leaves);
                self.retiring |= retire;
                Ok(None)
            }
            Order::Take {
                leaves,
                tree,
                clock,
            } => {
                self.set_tree(tree);
                // A hand-over the controller undid stays here: its tree no longer gives the
                // node's leaves to the taker (gone before it took them). The others still go,
                // such as a newcomer's onward hand-over of part of a leaf it now takes.
                let tree = &self.tree;
                self.giving.retain(|&(node, to)| {
                    leaves_under(tree, node)
                        .iter()
                        .any(|&leaf| tree.node(leaf).and_then(|n| n.holder) == Some(to))
                });
                if self.holdings.is_empty() {
                    self.clock = clock;
                }
                self.take(ctx, &leaves, clock).await?;
                Ok(None)
            }
            Order::Lost { servers } => {
                self.losses += 1;
                let gone: BTreeSet<ServerId> = servers.into_iter().collect();
                self.sent
                    .resend_moved(ctx, self.id, &gone, &self.route.servers)?;
                Ok(None)
            }
            Order::Restart { epoch, from } => {
                self.epoch = epoch;
                self.epoch_start = from;
                self.last = None;
                self.sent.clear();
                self.owed.clear();
                Ok(Some(Interrupt::Restart(from)))
            }
            Order::Finish => Ok(Some(Interrupt::Finish)),
        }
    }

    /// Adds `leaves` from clock `from` on. Where this worker has passed `from`, their shares of
    /// the clocks since are owed: that of the last clock it sent is computed now, with the
    /// parameters it read for it; the others wait in `owed` for [`AgileWorker::catch_up`] (a
    /// newcomer that started on its own share later than the leaves' clock has read none).
    async fn take(&mut self, ctx: &mut RoleContext, nodes: &[NodeId], from: Clock) -> Result<()> {
        // A node handed over may have been split since: it is held as its current leaves.
        let leaves: Vec<NodeId> = nodes
            .iter()
            .flat_map(|&n| leaves_under(&self.tree, n))
            .collect();
        self.holdings.extend(leaves.iter().copied());
        // The clocks from `from` this worker has passed owe the leaves' shares; the last one it
        // sent is computed now, with the parameters it read for it, the others after reading
        // theirs.
        let epoch = self.epoch;
        let last = self
            .last
            .take_if(|last| last.clock >= from && last.epoch == epoch);
        let owed_until = last.as_ref().map_or(self.clock, |last| last.clock);
        for clock in from..owed_until {
            self.owed
                .entry(clock)
                .or_default()
                .extend(leaves.iter().copied());
        }
        let Some(last) = last else {
            return Ok(());
        };
        let set: BTreeSet<NodeId> = leaves.iter().copied().collect();
        let (_, _, nodes, _) = self.compute_and_send(ctx, &last, &set).await?;
        let note = Note::Done {
            epoch: last.epoch,
            clock: last.clock,
            nodes,
        };
        ctx.send(RoleId::Coordinator, Message::strategy(&note)?);
        self.last = Some(last);
        Ok(())
    }

    /// Waits for the data of a joining worker's share: the order to load it, the load, then the
    /// partner's `Begin`.
    async fn join(&mut self, ctx: &mut RoleContext) -> Result<bool> {
        loop {
            let env = ctx.recv().await?;
            if let Some(Interrupt::Finish) = self.handle(ctx, env).await? {
                return Ok(false);
            }
            if !self.holdings.is_empty() {
                return Ok(true);
            }
        }
    }

    /// Hands over what the controller asked to, at this clock boundary; returns whether the
    /// worker retires.
    fn give(&mut self, ctx: &mut RoleContext) -> Result<bool> {
        if self.giving.is_empty() && !self.retiring {
            return Ok(false);
        }
        let leaves = std::mem::take(&mut self.giving);
        let retire = self.retiring;
        let mut by_taker: BTreeMap<WorkerId, Vec<NodeId>> = BTreeMap::new();
        for (node, to) in leaves {
            // The node may have been split since the order: its leaves held here go.
            let mut any = false;
            for leaf in leaves_under(&self.tree, node) {
                any |= self.holdings.remove(&leaf);
            }
            if any {
                by_taker.entry(to).or_default().push(node);
            }
        }
        for (to, leaves) in by_taker {
            let begin = Begin {
                clock: self.clock,
                epoch: self.epoch,
                tree: self.tree.clone(),
                leaves,
            };
            ctx.send(RoleId::Worker(to), Message::strategy(&begin)?);
        }
        if retire {
            ctx.send(RoleId::Coordinator, Message::strategy(&Note::Retired)?);
        }
        Ok(retire)
    }

    /// Asks the servers of the current route for the values of the partitions `wanted` says
    /// this worker still needs for `clock` of `epoch`.
    fn send_reads(
        &self,
        ctx: &mut RoleContext,
        epoch: u64,
        clock: Clock,
        wanted: impl Fn(PartitionId) -> bool,
    ) -> Result<()> {
        let mut by_server: BTreeMap<ServerId, Vec<PartitionId>> = BTreeMap::new();
        for (p, &s) in self.route.servers.iter().enumerate() {
            let p = p as PartitionId;
            if wanted(p) {
                by_server.entry(s).or_default().push(p);
            }
        }
        for (s, parts) in by_server {
            let read = Read {
                worker: self.id,
                epoch,
                clock,
                parts,
            };
            ctx.send(RoleId::Server(s), Message::strategy(&read)?);
        }
        Ok(())
    }

    /// Computes the owed shares of clocks this worker has passed (see [`AgileWorker::take`]),
    /// the oldest first, each after reading its parameters; an interrupt that ends them first.
    async fn catch_up(&mut self, ctx: &mut RoleContext) -> Result<Option<Interrupt>> {
        while let Some((&clock, leaves)) = self.owed.first_key_value() {
            let leaves = leaves.clone();
            let state = match self.read_at(ctx, clock, false).await? {
                Ok(state) => state,
                Err(interrupt) => return Ok(Some(interrupt)),
            };
            // Leaves taken meanwhile for the same clock stay owed, and are computed next.
            if let Some(rest) = self.owed.get_mut(&clock) {
                rest.retain(|l| !leaves.contains(l));
                if rest.is_empty() {
                    self.owed.remove(&clock);
                }
            }
            let (_, _, nodes, _) = self.compute_and_send(ctx, &state, &leaves).await?;
            let note = Note::Done {
                epoch: state.epoch,
                clock,
                nodes,
            };
            ctx.send(RoleId::Coordinator, Message::strategy(&note)?);
        }
        Ok(None)
    }

    /// Reads every partition for the current clock; `Err(interrupt)` when a control message
    /// ends the clock first, or leaves taken from an earlier clock owe shares of it first.
    async fn read(
        &mut self,
        ctx: &mut RoleContext,
    ) -> Result<std::result::Result<ReadState, Interrupt>> {
        self.read_at(ctx, self.clock, true).await
    }

    /// Reads every partition for `clock`; `Err(interrupt)` when a control message ends the read
    /// first (with `owed_first`, also when it leaves shares of an earlier clock owed).
    ///
    /// Where servers are lost while the read is out, the partitions still missing are asked of
    /// their servers by the current route: a warned server forwards what reaches it, but a read
    /// that reaches it after its eviction is lost (a joining worker that loaded its data
    /// meanwhile reads with the route it was given before the warning). A route change alone
    /// asks nothing again: the servers a read went to forward it, and asking the new ones too
    /// would bring the values twice.
    async fn read_at(
        &mut self,
        ctx: &mut RoleContext,
        clock: Clock,
        owed_first: bool,
    ) -> Result<std::result::Result<ReadState, Interrupt>> {
        let epoch = self.epoch;
        self.send_reads(ctx, epoch, clock, |_| true)?;
        let mut asked = self.losses;
        let np = self.plan.np();
        let mut values = BTreeMap::new();
        while values.len() < np {
            let env = ctx.recv().await?;
            match env.msg.decode::<Values>()? {
                Some(v) if v.epoch == epoch && v.clock == clock => {
                    let Message::Custom(m) = env.msg else {
                        unreachable!("decoded as a strategy message")
                    };
                    for (p, payload) in v.parts.iter().zip(m.payloads) {
                        let data = match payload {
                            Payload::Real(v) => v,
                            Payload::Virtual { .. } => Vec::new(),
                        };
                        values.insert(*p, data);
                    }
                }
                Some(_) => {}
                None => {
                    if let Some(i) = self.handle(ctx, env).await? {
                        return Ok(Err(i));
                    }
                    if self.epoch != epoch {
                        return Ok(Err(Interrupt::Restart(self.clock)));
                    }
                    if owed_first && !self.owed.is_empty() {
                        return Ok(Err(Interrupt::CatchUp));
                    }
                    if self.losses != asked {
                        asked = self.losses;
                        self.send_reads(ctx, epoch, clock, |p| !values.contains_key(&p))?;
                    }
                }
            }
        }
        Ok(Ok(ReadState {
            epoch,
            clock,
            values,
        }))
    }

    /// Computes the gradient sums of `leaves` at `state` and sends each partition's server its
    /// slices, one item per largest whole subtree; returns (samples, loss sum, nodes sent, bytes).
    async fn compute_and_send(
        &mut self,
        ctx: &mut RoleContext,
        state: &ReadState,
        leaves: &BTreeSet<NodeId>,
    ) -> Result<(u64, f64, Vec<NodeId>, u64)> {
        let job = self.job.clone();
        let real = job.model.is_real();
        let params = if real {
            Some(assemble(&self.plan, &job, &state.values))
        } else {
            None
        };
        let flops = job.model.training_flops_per_sample();
        let device = job.cluster.device_of(ctx.id());
        let total: u64 = leaves
            .iter()
            .filter_map(|&l| self.tree.node(l).map(|n| n.range.end - n.range.start))
            .sum();
        let step_s = device.step_seconds(&job.cost_sheet, flops, total as f64);
        let mut sums: BTreeMap<NodeId, Vec<f32>> = BTreeMap::new();
        let (mut samples, mut loss_sum) = (0u64, 0.0f64);
        for &leaf in leaves {
            let Some(node) = self.tree.node(leaf) else {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("holds leaf {leaf}, which its data tree does not have"),
                ));
            };
            let items = node.range.end - node.range.start;
            let at = StepAt {
                clock: state.clock,
                stream_offset: state.clock * self.plan.total_items + node.range.start,
                batch: items,
            };
            // The leaf's share of one step over all the worker's items (a worker steps through
            // its data at the rate of its whole batch), counting the leaf's own FLOPs.
            let share = step_s * items as f64 / total.max(1) as f64;
            let work = Work {
                modeled_s: Some(share),
                ..Work::training_step(flops, items as f64)
            };
            let replica = self.replica.as_ref();
            let blocks = params.as_deref().unwrap_or(&[]);
            let ((loss, grads), _) = train_step(
                ctx,
                &job,
                replica,
                ParamSource::Host(blocks),
                at,
                work,
                Charge::Whole,
            )
            .await?;
            samples += items;
            if loss.is_finite() {
                loss_sum += loss * items as f64;
            }
            // The leaf's value: the gradient summed over its items.
            let flat = grads.map_or_else(Vec::new, |g| flatten_blocks(&job, &g, items as f32));
            sums.insert(leaf, flat);
        }
        // One item per largest subtree held whole.
        let covers = cover_of(&self.tree, leaves);
        let mut by_server: BTreeMap<ServerId, Items> = BTreeMap::new();
        for &node in &covers {
            let value = if real {
                let leaf_values: Vec<(NodeId, Vec<f32>)> = leaves_under(&self.tree, node)
                    .into_iter()
                    .filter_map(|l| sums.get(&l).map(|v| (l, v.clone())))
                    .collect();
                subtree_sum(&self.tree, Clock::MAX, node, &leaf_values).map_err(|e| {
                    EngineError::protocol(ctx.id(), format!("summing its leaves: {e}"))
                })?
            } else {
                Vec::new()
            };
            let mut offset = 0usize;
            for (p, spec) in self.plan.parts.iter().enumerate() {
                let payload = if real {
                    Payload::Real(value[offset..offset + spec.elems].to_vec())
                } else {
                    Payload::Virtual {
                        elems: spec.elems as u64,
                    }
                };
                offset += spec.elems;
                let server = self.route.servers[p];
                let entry = by_server.entry(server).or_default();
                entry.0.push((p as PartitionId, node));
                entry.1.push(payload);
            }
        }
        let mut bytes = 0;
        for (server, (items, payloads)) in by_server {
            let update = Update {
                worker: self.id,
                epoch: state.epoch,
                clock: state.clock,
                items,
            };
            self.sent
                .record(state.epoch, state.clock, server, &update.items, &payloads);
            let msg = Message::strategy_with(&update, payloads)?;
            bytes += msg.wire_bytes();
            ctx.send(RoleId::Server(server), msg);
        }
        Ok((samples, loss_sum, covers, bytes))
    }
}

/// The model's parameters (one vector per parameter tensor) from the partitions' values.
fn assemble(plan: &Plan, job: &Job, values: &BTreeMap<PartitionId, Vec<f32>>) -> Vec<Vec<f32>> {
    let blocks = job.layout.blocks();
    let mut out = job.layout.zeros();
    for (p, spec) in plan.parts.iter().enumerate() {
        let Some(v) = values.get(&(p as PartitionId)) else {
            continue;
        };
        let mut offset = 0;
        for b in &blocks[spec.blocks.clone()] {
            out[b.param][b.offset..b.offset + b.len].copy_from_slice(&v[offset..offset + b.len]);
            offset += b.len;
        }
    }
    out
}

/// A gradient (one vector per parameter tensor) as one flat vector in block order — the order
/// partitions cut — scaled by `scale`.
fn flatten_blocks(job: &Job, grads: &[Vec<f32>], scale: f32) -> Vec<f32> {
    job.layout
        .blocks()
        .iter()
        .flat_map(|b| {
            grads[b.param][b.offset..b.offset + b.len]
                .iter()
                .map(move |x| x * scale)
        })
        .collect()
}

#[async_trait]
impl Worker for AgileWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        let end = job.config.iterations;
        let machine = job.cluster.machine_of(ctx.id());
        if !job.membership.present_at_start(machine) && !self.join(ctx).await? {
            return Ok(WorkerReport::default());
        }
        concord_engine::dp::hold_replica(ctx, &job).await?;
        let mut records = Vec::new();
        'clocks: while self.clock < end {
            if self.give(ctx)? {
                break;
            }
            if self.holdings.is_empty() {
                // Idle (stage 3 on a reliable machine, or all its leaves given away): wait for
                // work or the end.
                let env = ctx.recv().await?;
                match self.handle(ctx, env).await? {
                    Some(Interrupt::Finish) => break,
                    Some(Interrupt::Restart(from)) => self.clock = from,
                    Some(Interrupt::CatchUp) | None => {}
                }
                continue;
            }
            match self.catch_up(ctx).await? {
                Some(Interrupt::Finish) => break,
                Some(Interrupt::Restart(from)) => {
                    self.clock = from;
                    continue;
                }
                Some(Interrupt::CatchUp) | None => {}
            }
            ctx.set_iter(self.clock);
            let start = ctx.now();
            let state = match self.read(ctx).await? {
                Ok(s) => s,
                Err(Interrupt::Finish) => break 'clocks,
                Err(Interrupt::Restart(from)) => {
                    self.clock = from;
                    continue;
                }
                // The owed shares first, then this clock's read again.
                Err(Interrupt::CatchUp) => continue,
            };
            let read_done = ctx.now();
            let leaves = self.holdings.clone();
            let (samples, loss_sum, nodes, bytes_sent) =
                self.compute_and_send(ctx, &state, &leaves).await?;
            let compute_end = ctx.now();
            let note = Note::Done {
                epoch: state.epoch,
                clock: state.clock,
                nodes,
            };
            ctx.send(RoleId::Coordinator, Message::strategy(&note)?);
            let tally = ClockTally {
                samples,
                compute_s: compute_end - read_done,
                wait_s: read_done - start,
                comm_s: 0.0,
                loss: if samples > 0 && job.model.is_real() {
                    loss_sum / samples as f64
                } else {
                    f64::NAN
                },
                version_read: state.clock as i64 - 1,
                bytes_sent,
            };
            records.push(close_clock(ctx, &job, state.clock, start, tally));
            self.last = Some(state);
            self.clock += 1;
        }
        // Leaves given at the very end: their takers learn there is nothing left to do.
        self.give(ctx)?;
        Ok(WorkerReport {
            iterations: records,
            ..WorkerReport::default()
        })
    }
}
