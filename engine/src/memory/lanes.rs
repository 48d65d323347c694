//! The two-lane executor: one training iteration over a model's operator graph on a simulated
//! device, with a compute lane running the layers and a memory lane copying feature maps to and
//! from the host, as a [`LayerPolicy`] directs. It returns the iteration's time, how much of the
//! transfer time hid behind compute, the device memory over time as the allocator placed it, and
//! the moves it made (a [`MovePlan`] a real-math executor can replay to check that no layer ever
//! reads a tensor that is not on the device).
//!
//! Rules the executor keeps for every policy:
//! - A layer computes only when every tensor it needs is on the device: its inputs in the
//!   forward pass; its inputs, its output and the gradient of its output in the backward pass.
//! - A feature map with a host copy leaves the device once the copy is complete and every
//!   forward reader has run; one without stays until the backward pass no longer needs it.
//! - A placement the allocator cannot serve waits for pending releases (compute stalls); with
//!   none pending it is an out-of-memory error naming the layer and the tensor.
//! - A feature map the backward pass needs that is on the host and not on its way back is
//!   fetched on demand, and the layer waits for it.

use super::alloc::{AllocError, Block, DeviceAllocator};
use super::layers::{IterationGraph, LaneView, LayerPolicy, MemOp, Residency, SyncMode};
use crate::graph::{Move, MovePlan, MovePoint, Pass};
use serde::Serialize;
use thiserror::Error;

/// The host link the memory lane copies over.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HostLink {
    /// Bandwidth, bytes per second.
    pub bytes_per_s: f64,
    /// Fixed cost of one copy, seconds.
    pub latency_s: f64,
}

impl HostLink {
    /// Seconds one copy of `bytes` takes.
    pub fn seconds(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.bytes_per_s
    }
}

/// Why an iteration could not run.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum LaneError {
    /// The device could not hold what a layer needed.
    #[error("out of device memory at the {pass:?} pass of `{layer}` placing {what}: {source}")]
    OutOfMemory {
        /// The pass.
        pass: Pass,
        /// The layer (node name).
        layer: String,
        /// What was being placed.
        what: String,
        /// The allocator's refusal.
        #[source]
        source: AllocError,
    },
    /// The policy asked for something that would lose a tensor a layer still needs.
    #[error("policy `{policy}` at the {pass:?} pass of `{layer}`: {what}")]
    Policy {
        /// The policy.
        policy: String,
        /// The pass.
        pass: Pass,
        /// The layer (node name) whose hook asked.
        layer: String,
        /// What it asked and why it cannot be done.
        what: String,
    },
}

impl LaneError {
    /// The layer the error happened at.
    pub fn layer(&self) -> &str {
        match self {
            LaneError::OutOfMemory { layer, .. } | LaneError::Policy { layer, .. } => layer,
        }
    }
}

/// Device memory at one moment of the iteration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MemPoint {
    /// Seconds from the start of the iteration.
    pub t: f64,
    /// The pass.
    pub pass: Pass,
    /// How many layers of the pass have been issued.
    pub step: usize,
    /// Bytes held by live tensors.
    pub used: u64,
    /// Bytes the allocator spans, holes included.
    pub footprint: u64,
}

/// One iteration as the executor ran it.
#[derive(Clone, Debug, Serialize)]
pub struct IterationReport {
    /// The policy.
    pub policy: String,
    /// The allocator.
    pub allocator: &'static str,
    /// Seconds from the first layer's start to the end of the backward pass.
    pub seconds: f64,
    /// When the forward pass (and its synchronisation) ended.
    pub forward_end_s: f64,
    /// Seconds the compute lane computed.
    pub compute_s: f64,
    /// Seconds of host-link copies.
    pub transfer_s: f64,
    /// Seconds during which a copy and a computation ran at once.
    pub overlap_s: f64,
    /// Bytes copied to the host.
    pub offloaded_bytes: u64,
    /// Bytes copied back to the device.
    pub prefetched_bytes: u64,
    /// The most device memory the iteration needed with this allocator (its high-water mark).
    pub high_water: u64,
    /// The mean fragmentation each placement met (the allocator's U_f for its size).
    pub mean_fragmentation: f64,
    /// Device memory after every layer.
    pub series: Vec<MemPoint>,
    /// The moves made, in order.
    #[serde(skip)]
    pub plan: MovePlan,
    /// Figures the caller adds about the run around the iteration (its pool, say), reported
    /// with [`IterationReport::figures`].
    #[serde(skip)]
    pub figures_extra: Vec<(&'static str, f64)>,
}

impl IterationReport {
    /// Seconds the iteration took beyond its computation: copies that did not hide behind
    /// compute and waits for memory.
    pub fn stall_s(&self) -> f64 {
        (self.seconds - self.compute_s).max(0.0)
    }

    /// The iteration as run figures (`memory.<name>`): its seconds, its stall, the share of
    /// copying that ran beside computation, the copying that did not, its high-water mark, the
    /// mean fragmentation its placements met, and the bytes sent to the host.
    pub fn figures(&self) -> std::collections::BTreeMap<String, f64> {
        [
            ("iteration_s", self.seconds),
            ("stall_s", self.stall_s()),
            ("overlap_share", self.overlap_share()),
            (
                "exposed_copy_s",
                (self.transfer_s - self.overlap_s).max(0.0),
            ),
            ("high_water_bytes", self.high_water as f64),
            ("mean_fragmentation", self.mean_fragmentation),
            ("offloaded_bytes", self.offloaded_bytes as f64),
        ]
        .into_iter()
        .chain(self.figures_extra.iter().copied())
        .map(|(k, v)| (format!("memory.{k}"), v))
        .collect()
    }

    /// Share of the transfer time that ran beside computation (0 with no transfers).
    pub fn overlap_share(&self) -> f64 {
        if self.transfer_s > 0.0 {
            self.overlap_s / self.transfer_s
        } else {
            0.0
        }
    }
}

/// Something placed on the device.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Held {
    /// A node's feature map.
    Map(usize),
    /// The gradient of a node's feature map.
    Grad(usize),
}

/// Runs one iteration of `it` under `policy`, placing tensors with `allocator` (reset by the
/// caller) and copying over `link`.
pub fn run_iteration(
    it: &IterationGraph<'_>,
    policy: &mut dyn LayerPolicy,
    allocator: &mut dyn DeviceAllocator,
    link: HostLink,
) -> Result<IterationReport, LaneError> {
    let mut ex = Executor::new(it, policy, allocator, link);
    ex.forward(policy)?;
    ex.backward(policy)?;
    policy.on_iteration_end();
    Ok(ex.report(policy.name()))
}

struct Executor<'e, 'a> {
    it: &'e IterationGraph<'a>,
    policy: String,
    sync: SyncMode,
    alloc: &'e mut dyn DeviceAllocator,
    link: HostLink,
    residency: Vec<Residency>,
    map_block: Vec<Option<Block>>,
    grad_block: Vec<Option<Block>>,
    ready: Vec<f64>,
    offload_done: Vec<f64>,
    host_copy: Vec<bool>,
    readers_left: Vec<usize>,
    last_reader_end: Vec<f64>,
    pending: Vec<(f64, Held)>,
    compute_free: f64,
    memory_free: f64,
    barrier: f64,
    compute: Vec<(f64, f64)>,
    transfers: Vec<(f64, f64)>,
    offloaded: u64,
    prefetched: u64,
    fragmentation: (f64, u64),
    series: Vec<MemPoint>,
    plan: MovePlan,
    forward_end: f64,
}

impl<'e, 'a> Executor<'e, 'a> {
    fn new(
        it: &'e IterationGraph<'a>,
        policy: &dyn LayerPolicy,
        alloc: &'e mut dyn DeviceAllocator,
        link: HostLink,
    ) -> Executor<'e, 'a> {
        let n = it.graph.len();
        let sync = policy.sync();
        Executor {
            it,
            policy: policy.name(),
            sync,
            alloc,
            link,
            residency: vec![Residency::Pending; n],
            map_block: vec![None; n],
            grad_block: vec![None; n],
            ready: vec![0.0; n],
            offload_done: vec![0.0; n],
            host_copy: vec![false; n],
            readers_left: it.consumers.iter().map(Vec::len).collect(),
            last_reader_end: vec![0.0; n],
            pending: Vec::new(),
            compute_free: 0.0,
            memory_free: 0.0,
            barrier: 0.0,
            compute: Vec::new(),
            transfers: Vec::new(),
            offloaded: 0,
            prefetched: 0,
            fragmentation: (0.0, 0),
            series: Vec::new(),
            plan: MovePlan::default(),
            forward_end: 0.0,
        }
    }

    fn name(&self, node: usize) -> String {
        self.it.graph.nodes[node].name.clone()
    }

    fn view(&self) -> LaneView<'_, 'a> {
        LaneView {
            iteration: self.it,
            residency: &self.residency,
            host_copy: &self.host_copy,
        }
    }

    fn set(&mut self, node: usize, next: Residency) {
        debug_assert!(
            self.residency[node].may_become(next),
            "feature map of node {node}: {} -> {next}",
            self.residency[node]
        );
        self.residency[node] = next;
    }

    /// Releases everything pending up to time `t`, in time order.
    fn release_until(&mut self, t: f64) {
        self.pending.sort_by(|a, b| a.0.total_cmp(&b.0));
        let due = self.pending.partition_point(|p| p.0 <= t);
        let released: Vec<(f64, Held)> = self.pending.drain(..due).collect();
        for (_, held) in released {
            match held {
                Held::Map(n) => {
                    if self.residency[n] == Residency::Freed {
                        continue;
                    }
                    if let Some(b) = self.map_block[n].take() {
                        self.alloc.free(b);
                    }
                    let next = if self.residency[n] == Residency::OffloadingToHost {
                        Residency::Host
                    } else {
                        Residency::Freed
                    };
                    self.set(n, next);
                }
                Held::Grad(n) => {
                    if let Some(b) = self.grad_block[n].take() {
                        self.alloc.free(b);
                    }
                }
            }
        }
    }

    /// Places `bytes` at time `t` or later: waits for pending releases while the allocator
    /// refuses; returns the block and when it was placed. `wait = false` refuses at once.
    fn place(
        &mut self,
        bytes: u64,
        mobility: super::alloc::Mobility,
        mut t: f64,
        wait: bool,
    ) -> Result<(Block, f64), AllocError> {
        self.release_until(t);
        let uf = self.alloc.fragmentation(bytes);
        loop {
            match self.alloc.alloc(bytes, mobility) {
                Ok(b) => {
                    self.fragmentation.0 += uf;
                    self.fragmentation.1 += 1;
                    return Ok((b, t));
                }
                Err(e) => {
                    let next = self
                        .pending
                        .iter()
                        .map(|p| p.0)
                        .min_by(f64::total_cmp)
                        .filter(|_| wait);
                    let Some(next) = next else {
                        return Err(e);
                    };
                    t = t.max(next);
                    self.release_until(t);
                }
            }
        }
    }

    fn oom(&self, pass: Pass, node: usize, what: String, source: AllocError) -> LaneError {
        LaneError::OutOfMemory {
            pass,
            layer: self.name(node),
            what,
            source,
        }
    }

    fn refuse(&self, at: MovePoint, what: String) -> LaneError {
        LaneError::Policy {
            policy: self.policy.clone(),
            pass: at.pass,
            layer: self.name(at.node),
            what,
        }
    }

    /// When the copy under way for `node` completes (now if none is).
    fn copy_done(&self, node: usize) -> f64 {
        match self.residency[node] {
            Residency::OffloadingToHost => self.offload_done[node],
            Residency::PrefetchingToDevice => self.ready[node],
            _ => 0.0,
        }
    }

    /// A policy's early release of `node`'s device copy: allowed once it has a host copy (made
    /// or under way) and no forward reader or the current layer still reads it; the copy leaves
    /// when the host copy is complete.
    fn free(&mut self, at: MovePoint, node: usize, t: f64) -> Result<(), LaneError> {
        let name = self.name(node);
        match self.residency[node] {
            Residency::Device | Residency::OffloadingToHost => {}
            Residency::PrefetchingToDevice => {
                return Err(self.refuse(
                    at,
                    format!("frees `{name}` while it is on its way back (wait for it first)"),
                ))
            }
            Residency::Pending | Residency::Host | Residency::Freed => return Ok(()),
        }
        if !self.host_copy[node] {
            return Err(self.refuse(
                at,
                format!("frees `{name}`, which has no host copy and is still needed"),
            ));
        }
        let reads = self.it.graph.nodes[at.node].inputs.contains(&node)
            || (at.pass == Pass::Backward && at.node == node);
        if self.readers_left[node] > 0 || (at.before && reads) {
            return Err(self.refuse(at, format!("frees `{name}` while a layer still reads it")));
        }
        if self.pending.iter().any(|p| p.1 == Held::Map(node)) {
            return Ok(());
        }
        if self.residency[node] == Residency::Device {
            self.set(node, Residency::OffloadingToHost);
        }
        self.pending
            .push((t.max(self.offload_done[node]), Held::Map(node)));
        self.plan.moves.push((at, Move::Free(node)));
        Ok(())
    }

    /// A copy of `bytes` that may start at `not_before`; returns its end.
    fn copy(&mut self, bytes: u64, not_before: f64) -> f64 {
        let lane = match self.sync {
            SyncMode::Serial => self.compute_free,
            SyncMode::PassEnd | SyncMode::PerLayer => self.memory_free,
        };
        let start = lane.max(not_before);
        let end = start + self.link.seconds(bytes);
        match self.sync {
            SyncMode::Serial => self.compute_free = end,
            SyncMode::PassEnd | SyncMode::PerLayer => self.memory_free = end,
        }
        self.transfers.push((start, end));
        end
    }

    fn point(&mut self, t: f64, pass: Pass, step: usize) {
        let stats = self.alloc.stats();
        self.series.push(MemPoint {
            t,
            pass,
            step,
            used: stats.used,
            footprint: stats.footprint,
        });
    }

    fn offload(&mut self, at: MovePoint, node: usize, not_before: f64) {
        if self.residency[node] != Residency::Device {
            return;
        }
        let end = self.copy(self.it.bytes(node), not_before);
        self.offloaded += self.it.bytes(node);
        self.offload_done[node] = end;
        self.host_copy[node] = true;
        self.set(node, Residency::OffloadingToHost);
        self.plan.moves.push((at, Move::Offload(node)));
        self.release_when_done(node, at);
    }

    /// Queues the release of an offloaded feature map once its copy is done and its forward
    /// readers have run.
    fn release_when_done(&mut self, node: usize, at: MovePoint) {
        if self.residency[node] == Residency::OffloadingToHost && self.readers_left[node] == 0 {
            let t = self.offload_done[node].max(self.last_reader_end[node]);
            self.pending.push((t, Held::Map(node)));
            let at = at.after();
            self.plan.moves.push((at, Move::Free(node)));
        }
    }

    /// Starts bringing `node`'s feature map back; `wait` lets the placement stall for room.
    fn prefetch(
        &mut self,
        at: MovePoint,
        node: usize,
        t: f64,
        wait: bool,
    ) -> Result<bool, LaneError> {
        if self.residency[node] != Residency::Host {
            return Ok(true);
        }
        let bytes = self.it.bytes(node);
        let mobility = self.it.mobility(node, Pass::Backward);
        let (block, t) = match self.place(bytes, mobility, t, wait) {
            Ok(placed) => placed,
            Err(_) if !wait => return Ok(false),
            Err(e) => {
                return Err(self.oom(
                    at.pass,
                    at.node,
                    format!("the feature map of `{}`", self.name(node)),
                    e,
                ))
            }
        };
        self.map_block[node] = Some(block);
        self.ready[node] = self.copy(bytes, t);
        self.prefetched += bytes;
        self.set(node, Residency::PrefetchingToDevice);
        self.plan.moves.push((at, Move::Prefetch(node)));
        Ok(true)
    }

    fn apply(&mut self, ops: Vec<MemOp>, at: MovePoint, t: f64) -> Result<(), LaneError> {
        let mut prefetching = true;
        for op in ops {
            match op {
                MemOp::Offload(n) => self.offload(at, n, t),
                MemOp::Prefetch(n) => {
                    // After a prefetch that found no room, the hook's later ones wait too.
                    prefetching = prefetching && self.prefetch(at, n, t, false)?;
                }
                MemOp::Free(n) => self.free(at, n, t)?,
                MemOp::WaitFor(n) => self.barrier = self.barrier.max(self.copy_done(n)),
            }
        }
        Ok(())
    }

    fn lane_start(&self) -> f64 {
        self.compute_free.max(self.barrier)
    }

    fn end_of_layer(&mut self, end: f64) {
        if self.sync == SyncMode::PerLayer {
            self.barrier = end.max(self.memory_free);
        }
    }

    fn sync_pass(&mut self) -> f64 {
        let t = self.compute_free.max(self.memory_free).max(self.barrier);
        self.release_until(t);
        self.compute_free = t;
        t
    }

    fn forward(&mut self, policy: &mut dyn LayerPolicy) -> Result<(), LaneError> {
        let order = self.it.order.clone();
        for (step, &n) in order.iter().enumerate() {
            let begin = self.lane_start();
            let at = MovePoint {
                pass: Pass::Forward,
                node: n,
                before: true,
            };
            let bytes = self.it.bytes(n);
            let mobility = policy.mobility(self.it, n, Pass::Forward);
            let (block, placed) = self.place(bytes, mobility, begin, true).map_err(|e| {
                self.oom(Pass::Forward, n, format!("its output ({bytes} bytes)"), e)
            })?;
            self.map_block[n] = Some(block);
            let inputs = distinct(&self.it.graph.nodes[n].inputs);
            let mut start = placed;
            for &i in &inputs {
                start = start.max(self.ready[i]);
            }
            let ops = policy.on_forward_begin(n, &self.view());
            self.apply(ops, at, start)?;
            let start = start.max(self.compute_free).max(self.barrier);
            let end = start + self.it.forward_s[n];
            self.compute_free = end;
            self.compute.push((start, end));
            self.ready[n] = end;
            self.set(n, Residency::Device);
            for &i in &inputs {
                self.readers_left[i] -= 1;
                self.last_reader_end[i] = self.last_reader_end[i].max(end);
                self.release_when_done(i, at.after());
            }
            let ops = policy.on_forward_end(n, &self.view());
            self.apply(ops, at.after(), end)?;
            self.end_of_layer(end);
            self.point(end, Pass::Forward, step + 1);
        }
        self.forward_end = self.sync_pass();
        Ok(())
    }

    fn backward(&mut self, policy: &mut dyn LayerPolicy) -> Result<(), LaneError> {
        let order: Vec<usize> = self.it.order.iter().rev().copied().collect();
        let Some(&output) = order.first() else {
            return Ok(());
        };
        for (step, &n) in order.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let begin = self.lane_start();
            self.release_until(begin);
            let at = MovePoint {
                pass: Pass::Backward,
                node: n,
                before: true,
            };
            let mut t = begin;
            if n == output && self.grad_block[n].is_none() {
                let (b, placed) = self.place_grad(policy, n, t, at)?;
                self.grad_block[n] = Some(b);
                t = placed;
            }
            let ops = policy.on_backward_begin(n, &self.view());
            self.apply(ops, at, t)?;
            let inputs = distinct(&self.it.graph.nodes[n].inputs);
            let mut needed = inputs.clone();
            needed.push(n);
            for &m in &needed {
                if self.residency[m] == Residency::Host {
                    self.prefetch(at, m, t, true)?;
                }
            }
            for &i in inputs.iter().filter(|&&i| i != 0) {
                if self.grad_block[i].is_none() {
                    let (b, placed) = self.place_grad(policy, i, t, at)?;
                    self.grad_block[i] = Some(b);
                    t = placed;
                }
            }
            let mut start = t.max(self.compute_free).max(self.barrier);
            for &m in &needed {
                start = start.max(self.ready[m]);
                if self.residency[m] == Residency::PrefetchingToDevice {
                    self.set(m, Residency::Device);
                }
            }
            let end = start + self.it.backward_s[n];
            self.compute_free = end;
            self.compute.push((start, end));
            self.pending.push((end, Held::Grad(n)));
            self.pending.push((end, Held::Map(n)));
            self.plan.moves.push((at.after(), Move::Free(n)));
            let ops = policy.on_backward_end(n, &self.view());
            self.apply(ops, at.after(), end)?;
            self.end_of_layer(end);
            self.point(end, Pass::Backward, step + 1);
        }
        self.sync_pass();
        if self.residency[0].on_device() || self.residency[0] == Residency::Host {
            if let Some(b) = self.map_block[0].take() {
                self.alloc.free(b);
            }
            self.set(0, Residency::Freed);
        }
        Ok(())
    }

    fn place_grad(
        &mut self,
        policy: &mut dyn LayerPolicy,
        node: usize,
        t: f64,
        at: MovePoint,
    ) -> Result<(Block, f64), LaneError> {
        let bytes = self.it.bytes(node);
        let mobility = policy.mobility(self.it, node, Pass::Backward);
        self.place(bytes, mobility, t, true).map_err(|e| {
            self.oom(
                Pass::Backward,
                at.node,
                format!("the gradient of `{}` ({bytes} bytes)", self.name(node)),
                e,
            )
        })
    }

    fn report(self, policy: String) -> IterationReport {
        let compute_s = self.compute.iter().map(|(a, b)| b - a).sum();
        let transfer_s = self.transfers.iter().map(|(a, b)| b - a).sum();
        let overlap_s = if self.sync == SyncMode::Serial {
            0.0
        } else {
            overlap(&self.compute, &self.transfers)
        };
        let (uf_sum, uf_n) = self.fragmentation;
        IterationReport {
            policy,
            allocator: self.alloc.name(),
            seconds: self.compute_free,
            forward_end_s: self.forward_end,
            compute_s,
            transfer_s,
            overlap_s,
            offloaded_bytes: self.offloaded,
            prefetched_bytes: self.prefetched,
            high_water: self.alloc.stats().high_water,
            mean_fragmentation: if uf_n > 0 { uf_sum / uf_n as f64 } else { 0.0 },
            series: self.series,
            plan: self.plan,
            figures_extra: Vec::new(),
        }
    }
}

/// A node's inputs without repeats, in argument order.
fn distinct(inputs: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(inputs.len());
    for &i in inputs {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Total length of the intersection of two sets of intervals, each made of disjoint intervals.
fn overlap(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_by(|x, y| x.0.total_cmp(&y.0));
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (mut i, mut j, mut total) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            total += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::LayerCost;
    use crate::graph::{OpGraph, OpKind};
    use crate::memory::alloc::{AllocStats, Mobility};

    /// Places every request with no fragmentation: footprint = bytes in use.
    struct Exact {
        used: u64,
        high: u64,
        cap: u64,
    }

    impl DeviceAllocator for Exact {
        fn name(&self) -> &'static str {
            "exact"
        }
        fn alloc(&mut self, bytes: u64, _: Mobility) -> Result<Block, AllocError> {
            if self.used + bytes > self.cap {
                return Err(AllocError {
                    bytes,
                    used: self.used,
                    free: self.cap - self.used,
                    largest_hole: self.cap - self.used,
                    capacity: self.cap,
                });
            }
            self.used += bytes;
            self.high = self.high.max(self.used);
            Ok(Block {
                offset: 0,
                bytes,
                space: 0,
            })
        }
        fn free(&mut self, block: Block) {
            self.used -= block.bytes;
        }
        fn stats(&self) -> AllocStats {
            AllocStats {
                used: self.used,
                footprint: self.used,
                high_water: self.high,
                holes: 0,
            }
        }
        fn fragmentation(&self, _: u64) -> f64 {
            0.0
        }
        fn capacity(&self) -> u64 {
            self.cap
        }
        fn reset(&mut self, capacity: u64) {
            *self = Exact {
                used: 0,
                high: 0,
                cap: capacity,
            };
        }
    }

    fn exact(cap: u64) -> Exact {
        Exact {
            used: 0,
            high: 0,
            cap,
        }
    }

    /// Offloads every candidate at its first reader; prefetches the next backward layer's
    /// tensors (or nothing).
    struct Swap {
        sync: SyncMode,
        offload: bool,
        lookahead: bool,
        /// Wait for each offload before the layer that starts it computes.
        wait: bool,
        /// Free the inputs of every layer after its backward pass (they come back on demand).
        free_inputs: bool,
        /// Free the output of every layer before it is read (a policy bug).
        bad_free: bool,
    }

    impl LayerPolicy for Swap {
        fn name(&self) -> String {
            "swap".into()
        }
        fn sync(&self) -> SyncMode {
            self.sync
        }
        fn on_forward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
            if !self.offload {
                return Vec::new();
            }
            let it = view.iteration;
            let mut ops: Vec<MemOp> = it.graph.nodes[node]
                .inputs
                .iter()
                .filter(|&&i| it.offload_candidate(i) && view.residency[i] == Residency::Device)
                .map(|&i| MemOp::Offload(i))
                .collect();
            if self.wait {
                let waits: Vec<MemOp> = ops
                    .iter()
                    .filter_map(|op| match op {
                        MemOp::Offload(i) => Some(MemOp::WaitFor(*i)),
                        _ => None,
                    })
                    .collect();
                ops.extend(waits);
            }
            ops
        }
        fn on_forward_end(&mut self, node: usize, _view: &LaneView<'_, '_>) -> Vec<MemOp> {
            if self.bad_free && node > 0 {
                vec![MemOp::Free(node)]
            } else {
                Vec::new()
            }
        }
        fn on_backward_end(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
            if !self.free_inputs {
                return Vec::new();
            }
            view.iteration.graph.nodes[node]
                .inputs
                .iter()
                .filter(|&&i| view.host_copy[i])
                .map(|&i| MemOp::Free(i))
                .collect()
        }
        fn on_backward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
            let it = view.iteration;
            if !self.lookahead {
                return Vec::new();
            }
            let pos = it.position(node);
            let Some(&next) = pos.checked_sub(1).and_then(|p| it.order.get(p)) else {
                return Vec::new();
            };
            let mut need = it.graph.nodes[next].inputs.clone();
            need.push(next);
            need.into_iter()
                .filter(|&t| view.residency[t] == Residency::Host)
                .map(MemOp::Prefetch)
                .collect()
        }
    }

    /// conv → relu → conv → relu → … with a residual add every two convs, then fc and softmax.
    fn net(blocks: usize, elems: u64) -> OpGraph {
        let mut g = OpGraph::with_input(elems);
        let conv = |flops: f64| LayerCost {
            conv_flops: flops,
            ..LayerCost::default()
        };
        let mut x = 0;
        for b in 0..blocks {
            let c1 = g.push(
                format!("c{b}a"),
                OpKind::Conv,
                vec![x],
                elems,
                100,
                conv(2e6),
            );
            let r1 = g.push(
                format!("r{b}a"),
                OpKind::Activation,
                vec![c1],
                elems,
                0,
                LayerCost::default(),
            );
            let c2 = g.push(
                format!("c{b}b"),
                OpKind::Conv,
                vec![r1],
                elems,
                100,
                conv(2e6),
            );
            let add = g.push(
                format!("add{b}"),
                OpKind::Add,
                vec![c2, x],
                elems,
                0,
                LayerCost::default(),
            );
            x = g.push(
                format!("r{b}b"),
                OpKind::Activation,
                vec![add],
                elems,
                0,
                LayerCost::default(),
            );
        }
        let fc = g.push("fc", OpKind::FullyConnected, vec![x], 10, 10, conv(1e4));
        g.push(
            "loss",
            OpKind::Softmax,
            vec![fc],
            10,
            0,
            LayerCost::default(),
        );
        g.validate().unwrap();
        g
    }

    fn iteration(g: &OpGraph) -> IterationGraph<'_> {
        // Convolutions take 1 ms forward; everything else 0.1 ms.
        IterationGraph::new(g, 8, |op| match op.kind {
            OpKind::Input => (0.0, 0.0),
            OpKind::Conv => (1e-3, 2e-3),
            _ => (1e-4, 2e-4),
        })
    }

    /// 1 MB/ms: a 8 × 50 000-float feature map (1.6 MB) takes 1.6 ms, longer than a conv.
    const LINK: HostLink = HostLink {
        bytes_per_s: 1e9,
        latency_s: 0.0,
    };

    fn run(g: &OpGraph, policy: &mut Swap, cap: u64) -> Result<IterationReport, LaneError> {
        let it = iteration(g);
        let mut a = exact(cap);
        run_iteration(&it, policy, &mut a, LINK)
    }

    fn swap(sync: SyncMode, offload: bool, lookahead: bool) -> Swap {
        Swap {
            sync,
            offload,
            lookahead,
            wait: false,
            free_inputs: false,
            bad_free: false,
        }
    }

    #[test]
    fn waiting_for_each_copy_hides_none_of_it_in_the_forward_pass() {
        let g = net(4, 50_000);
        let free = run(&g, &mut swap(SyncMode::PassEnd, true, true), u64::MAX).unwrap();
        let mut waiting = swap(SyncMode::PassEnd, true, true);
        waiting.wait = true;
        let waited = run(&g, &mut waiting, u64::MAX).unwrap();
        assert!(
            waited.seconds > free.seconds,
            "{} vs {}",
            waited.seconds,
            free.seconds
        );
        assert!(waited.forward_end_s > free.forward_end_s);
        check_plan(&g, &waited.plan);
    }

    #[test]
    fn freeing_what_has_a_host_copy_lowers_the_backward_pass_and_it_comes_back_when_needed() {
        let g = net(4, 50_000);
        let kept = run(&g, &mut swap(SyncMode::PassEnd, true, false), u64::MAX).unwrap();
        let mut eager = swap(SyncMode::PassEnd, true, false);
        eager.free_inputs = true;
        let freed = run(&g, &mut eager, u64::MAX).unwrap();
        // Memory held over the backward pass, layer step by layer step.
        let held = |r: &IterationReport| -> u64 {
            r.series
                .iter()
                .filter(|p| p.pass == Pass::Backward)
                .map(|p| p.used)
                .sum()
        };
        assert!(
            held(&freed) < held(&kept),
            "{} vs {}",
            held(&freed),
            held(&kept)
        );
        assert!(freed.high_water <= kept.high_water);
        assert!(
            freed.prefetched_bytes > kept.prefetched_bytes,
            "brought back twice"
        );
        check_plan(&g, &freed.plan);
    }

    #[test]
    fn a_free_that_would_lose_a_tensor_is_refused_and_named() {
        let g = net(2, 50_000);
        let mut bad = swap(SyncMode::PassEnd, false, false);
        bad.bad_free = true;
        let e = run(&g, &mut bad, u64::MAX).unwrap_err();
        assert!(matches!(e, LaneError::Policy { .. }), "{e}");
        assert!(e.to_string().contains("no host copy"), "{e}");
    }

    #[test]
    fn without_moves_an_iteration_is_its_computation_and_frees_everything() {
        let g = net(3, 50_000);
        let it = iteration(&g);
        let mut a = exact(u64::MAX);
        let r = run_iteration(
            &it,
            &mut swap(SyncMode::PassEnd, false, false),
            &mut a,
            LINK,
        )
        .unwrap();
        let total: f64 = it.forward_s.iter().chain(&it.backward_s).sum();
        assert!(
            (r.seconds - total).abs() < 1e-12,
            "{} vs {total}",
            r.seconds
        );
        assert_eq!(r.transfer_s, 0.0);
        assert_eq!(a.used, 0, "every tensor released at the end");
        // Every feature map lives until the backward pass: the peak holds them all.
        let maps: u64 = (0..g.len()).map(|n| it.bytes(n)).sum();
        assert!(r.high_water >= maps, "{} < {maps}", r.high_water);
    }

    #[test]
    fn offloading_lowers_the_peak_and_brings_back_what_it_sent() {
        let g = net(4, 50_000);
        let keep = run(&g, &mut swap(SyncMode::PassEnd, false, false), u64::MAX).unwrap();
        let moved = run(&g, &mut swap(SyncMode::PassEnd, true, true), u64::MAX).unwrap();
        assert!(
            moved.high_water < keep.high_water,
            "{} vs {}",
            moved.high_water,
            keep.high_water
        );
        assert!(moved.offloaded_bytes > 0);
        assert_eq!(moved.offloaded_bytes, moved.prefetched_bytes);
    }

    #[test]
    fn the_plan_never_computes_on_a_tensor_off_the_device() {
        let g = net(3, 50_000);
        for sync in [SyncMode::PassEnd, SyncMode::PerLayer, SyncMode::Serial] {
            for lookahead in [false, true] {
                let r = run(&g, &mut swap(sync, true, lookahead), u64::MAX).unwrap();
                check_plan(&g, &r.plan);
            }
        }
    }

    /// Replays a plan symbolically: every node's forward inputs, and its backward inputs and
    /// output, are on the device when it computes.
    fn check_plan(g: &OpGraph, plan: &MovePlan) {
        let order = g.exec_order();
        let mut on_device = vec![false; g.len()];
        let mut on_host = vec![false; g.len()];
        let mut apply = |point: MovePoint, on_device: &mut Vec<bool>| {
            for m in plan.at(point) {
                match m {
                    Move::Offload(t) => {
                        assert!(on_device[t]);
                        on_host[t] = true;
                    }
                    Move::Free(t) => on_device[t] = false,
                    Move::Prefetch(t) => {
                        assert!(on_host[t], "prefetch of {t} with no host copy");
                        on_device[t] = true;
                    }
                }
            }
        };
        for &n in &order {
            let at = MovePoint {
                pass: Pass::Forward,
                node: n,
                before: true,
            };
            apply(at, &mut on_device);
            for &i in &g.nodes[n].inputs {
                assert!(on_device[i], "forward of {n} reads {i} off the device");
            }
            on_device[n] = true;
            apply(at.after(), &mut on_device);
        }
        for &n in order.iter().rev().filter(|&&n| n != 0) {
            let at = MovePoint {
                pass: Pass::Backward,
                node: n,
                before: true,
            };
            apply(at, &mut on_device);
            for &i in g.nodes[n].inputs.iter().chain([&n]) {
                assert!(on_device[i], "backward of {n} needs {i} off the device");
            }
            apply(at.after(), &mut on_device);
        }
    }

    #[test]
    fn barrier_free_beats_a_barrier_per_layer_which_beats_one_stream() {
        let g = net(4, 50_000);
        let time = |sync| run(&g, &mut swap(sync, true, true), u64::MAX).unwrap();
        let (free, barrier, serial) = (
            time(SyncMode::PassEnd),
            time(SyncMode::PerLayer),
            time(SyncMode::Serial),
        );
        assert!(
            free.seconds < barrier.seconds,
            "{} vs {}",
            free.seconds,
            barrier.seconds
        );
        assert!(
            barrier.seconds < serial.seconds,
            "{} vs {}",
            barrier.seconds,
            serial.seconds
        );
        assert_eq!(serial.overlap_s, 0.0);
        assert!(free.overlap_s > barrier.overlap_s);
        // One stream is exactly computation plus every copy.
        assert!((serial.seconds - serial.compute_s - serial.transfer_s).abs() < 1e-9);
    }

    #[test]
    fn a_tight_device_waits_for_releases_and_a_too_small_one_names_the_layer() {
        let g = net(4, 50_000);
        let free = run(&g, &mut swap(SyncMode::PassEnd, true, true), u64::MAX).unwrap();
        let tight = run(
            &g,
            &mut swap(SyncMode::PassEnd, true, true),
            free.high_water - free.high_water / 8,
        );
        if let Ok(t) = &tight {
            assert!(t.high_water <= free.high_water - free.high_water / 8);
            assert!(t.seconds >= free.seconds);
        }
        let e = run(&g, &mut swap(SyncMode::PassEnd, true, true), 100_000).unwrap_err();
        assert!(e.to_string().contains("out of device memory"), "{e}");
        assert!(!e.layer().is_empty());
    }
}
