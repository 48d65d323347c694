//! Layer-granular memory management: the hooks a swapping policy (Dymem, vDNN, …) answers at
//! every layer of a training iteration, the residency of each feature map, and what one
//! iteration over a model's operator graph is made of.
//!
//! The executor ([`super::lanes`]) walks the graph in its execution order, forward then
//! backward, on two lanes of the device: a **compute lane** that runs the layers and a **memory
//! lane** that copies feature maps to and from the host over the host link. At each layer it
//! asks the policy what to move ([`LayerPolicy`]'s `on_*` hooks); the policy's
//! [`SyncMode`] says how the lanes wait for one another. Frees follow from reference counts: a
//! feature map leaves the device once its forward readers have run and its host copy (if any) is
//! complete, and for good after the backward pass no longer needs it. A policy may also release a
//! copy early ([`MemOp::Free`], refused when it would lose a tensor) and hold the next layer for
//! one tensor's copy ([`MemOp::WaitFor`]).

use super::alloc::Mobility;
use crate::graph::{OpGraph, OpKind, Pass};
use serde::Serialize;
use std::fmt;

/// How the compute and memory lanes wait for one another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// The lanes meet only at the end of the forward and of the backward pass; a layer waits
    /// only for the transfers of the tensors it reads (Dymem).
    PassEnd,
    /// The lanes meet after every layer: the next layer starts once every transfer issued so
    /// far has completed (vDNN, SuperNeurons).
    PerLayer,
    /// One lane: transfers run in turn with the layers, never beside them (the single-stream
    /// baseline).
    Serial,
}

/// Where a feature map is, as the executor tracks it:
/// `Device → OffloadingToHost → Host → PrefetchingToDevice → Device`, and `Freed` once no
/// pass needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Residency {
    /// Not computed yet.
    Pending,
    /// On the device only.
    Device,
    /// On the device, with a host copy being made (or made, while forward readers still run).
    OffloadingToHost,
    /// On the host only.
    Host,
    /// On the host, with a device copy being made.
    PrefetchingToDevice,
    /// Gone: no pass needs it any more.
    Freed,
}

impl Residency {
    /// Whether a move from `self` to `next` is one the state machine allows.
    pub fn may_become(self, next: Residency) -> bool {
        use Residency::*;
        matches!(
            (self, next),
            (Pending, Device)
                | (Device, OffloadingToHost)
                | (OffloadingToHost, Host)
                | (Host, PrefetchingToDevice)
                | (PrefetchingToDevice, Device)
                | (Device | OffloadingToHost | Host, Freed)
        )
    }

    /// Whether the device holds a usable copy.
    pub fn on_device(self) -> bool {
        matches!(self, Residency::Device | Residency::OffloadingToHost)
    }
}

impl fmt::Display for Residency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Residency::Pending => "pending",
            Residency::Device => "device",
            Residency::OffloadingToHost => "offloading",
            Residency::Host => "host",
            Residency::PrefetchingToDevice => "prefetching",
            Residency::Freed => "freed",
        };
        f.write_str(s)
    }
}

/// What a policy may ask for at a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "op", content = "node")]
pub enum MemOp {
    /// Copy node's feature map to the host, starting with the current layer's compute; its
    /// device copy is released once the copy is done and its forward readers have run.
    Offload(usize),
    /// Copy node's feature map back to the device. The executor places it now; if the device
    /// has no room, this and the rest of the hook's prefetches wait for a later hook.
    Prefetch(usize),
    /// Release node's device copy early, once its host copy is complete (a feature map brought
    /// back too soon, say). Refused, as an error naming the layer, when the feature map has no
    /// host copy or a layer still reads it: a policy never loses a tensor.
    Free(usize),
    /// Start the next computation (this layer's, from a `begin` hook) only once node's copy under
    /// way has completed: a barrier on one tensor.
    WaitFor(usize),
}

/// One training iteration of a model on a device, as the executor runs it: the graph, its
/// execution order, the batch, and what every node costs on this device.
#[derive(Clone, Debug)]
pub struct IterationGraph<'a> {
    /// The model's operators.
    pub graph: &'a OpGraph,
    /// The forward order ([`OpGraph::exec_order`]); the backward pass runs it reversed.
    pub order: Vec<usize>,
    /// Samples in the batch.
    pub batch: u64,
    /// Forward seconds of each node on this device.
    pub forward_s: Vec<f64>,
    /// Backward seconds of each node on this device.
    pub backward_s: Vec<f64>,
    /// Every node's readers ([`OpGraph::consumers`]).
    pub consumers: Vec<Vec<usize>>,
    /// Every node's index in `order`.
    position: Vec<usize>,
}

impl<'a> IterationGraph<'a> {
    /// The iteration of `graph` on `batch` samples with per-node costs `cost(node) ->
    /// (forward_s, backward_s)`.
    pub fn new(
        graph: &'a OpGraph,
        batch: u64,
        cost: impl Fn(&crate::graph::OpNode) -> (f64, f64),
    ) -> IterationGraph<'a> {
        let (forward_s, backward_s) = graph.nodes.iter().map(cost).unzip();
        let order = graph.exec_order();
        let mut position = vec![0; graph.len()];
        for (i, &n) in order.iter().enumerate() {
            position[n] = i;
        }
        IterationGraph {
            graph,
            order,
            batch,
            forward_s,
            backward_s,
            consumers: graph.consumers(),
            position,
        }
    }

    /// Node's index in the forward order.
    pub fn position(&self, node: usize) -> usize {
        self.position[node]
    }

    /// Bytes of node's feature map for this batch.
    pub fn bytes(&self, node: usize) -> u64 {
        self.graph.nodes[node].out_bytes(self.batch)
    }

    /// Node's kind.
    pub fn kind(&self, node: usize) -> OpKind {
        self.graph.nodes[node].kind
    }

    /// Whether a feature map is worth moving to the host: it is read by a convolution, a
    /// batch-norm, an activation or a pooling window (whose inputs are read-only in the forward
    /// pass), and it is not the output of a small layer (fully-connected, softmax, dropout).
    pub fn offload_candidate(&self, node: usize) -> bool {
        !self.kind(node).is_reclaimed()
            && self.consumers[node].iter().any(|&c| {
                matches!(
                    self.kind(c),
                    OpKind::Conv | OpKind::BatchNorm | OpKind::Activation | OpKind::Pool
                )
            })
    }

    /// Dymem's grouping of a feature map by mobility (Algorithm 4): the outputs of small
    /// layers are reclaimed; in the forward pass a fork output, or an output whose next node in
    /// execution order does not read it (it waits for a join), is temporary; everything else,
    /// and every tensor of the backward pass, is movable.
    pub fn mobility(&self, node: usize, pass: Pass) -> Mobility {
        if self.kind(node).is_reclaimed() {
            return Mobility::Reclaimed;
        }
        if pass == Pass::Backward {
            return Mobility::Movable;
        }
        let readers = &self.consumers[node];
        let next = self.order.get(self.position(node) + 1);
        let read_next = next.is_some_and(|n| readers.contains(n));
        if readers.len() > 1 || !read_next {
            Mobility::Temporary
        } else {
            Mobility::Movable
        }
    }
}

/// What a policy sees at a hook: the iteration and where every feature map is.
pub struct LaneView<'v, 'a> {
    /// The iteration.
    pub iteration: &'v IterationGraph<'a>,
    /// Residency of every node's feature map.
    pub residency: &'v [Residency],
    /// Whether each node's feature map has a host copy (made or under way), which a device
    /// copy brought back keeps.
    pub host_copy: &'v [bool],
}

/// A layer-granular swapping policy: which feature maps leave the device in the forward pass,
/// when they come back in the backward pass, how the lanes synchronise, and how tensors are
/// grouped for the allocator. The executor does the rest (placement, transfers, frees, time).
pub trait LayerPolicy: Send {
    /// Short name for reports.
    fn name(&self) -> String;

    /// How the compute and memory lanes wait for one another.
    fn sync(&self) -> SyncMode;

    /// The allocator group of node's feature map (or of its gradient, in the backward pass).
    /// Defaults to Dymem's classification ([`IterationGraph::mobility`]); single-arena
    /// allocators ignore it.
    fn mobility(&self, iteration: &IterationGraph<'_>, node: usize, pass: Pass) -> Mobility {
        iteration.mobility(node, pass)
    }

    /// Before node's forward compute; offloads start with it.
    fn on_forward_begin(&mut self, _node: usize, _view: &LaneView<'_, '_>) -> Vec<MemOp> {
        Vec::new()
    }

    /// After node's forward compute.
    fn on_forward_end(&mut self, _node: usize, _view: &LaneView<'_, '_>) -> Vec<MemOp> {
        Vec::new()
    }

    /// Before node's backward compute (its inputs may still be on their way back).
    fn on_backward_begin(&mut self, _node: usize, _view: &LaneView<'_, '_>) -> Vec<MemOp> {
        Vec::new()
    }

    /// After node's backward compute.
    fn on_backward_end(&mut self, _node: usize, _view: &LaneView<'_, '_>) -> Vec<MemOp> {
        Vec::new()
    }

    /// At the end of an iteration: a policy that adapts (a pool sized from the last
    /// iteration) learns from it here.
    fn on_iteration_end(&mut self) {}
}
