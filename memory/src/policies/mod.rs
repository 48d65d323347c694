//! The layer-granular swapping policies: Dymem and the baselines it is measured against. Each
//! answers the executor's hooks
//! ([`LayerPolicy`](concord_engine::memory::layers::LayerPolicy)); they differ in which feature
//! maps leave the device, when they come back, and how the compute and memory lanes wait for one
//! another.

mod dymem;
mod no_offload;
mod single_stream;
mod superneurons;
mod vdnn;

pub use dymem::Dymem;
pub use no_offload::NoOffload;
pub use single_stream::SingleStream;
pub use superneurons::SuperNeurons;
pub use vdnn::Vdnn;

use concord_engine::graph::OpKind;
use concord_engine::memory::layers::{IterationGraph, LaneView, MemOp, Residency};

/// Which feature maps a policy sends to the host in the forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadSet {
    /// Every candidate: inputs of convolutions, batch-norms, activations and pools
    /// ([`IterationGraph::offload_candidate`]).
    All,
    /// Inputs of convolutions only (SuperNeurons; vDNN's `conv` policy).
    ConvInputs,
}

impl OffloadSet {
    /// Whether `node`'s feature map is in the set.
    pub fn contains(self, it: &IterationGraph<'_>, node: usize) -> bool {
        match self {
            OffloadSet::All => it.offload_candidate(node),
            OffloadSet::ConvInputs => {
                !it.kind(node).is_reclaimed()
                    && it.consumers[node]
                        .iter()
                        .any(|&c| it.kind(c) == OpKind::Conv)
            }
        }
    }
}

/// The offloads to start with `node`'s forward compute: its inputs in `set` still only on the
/// device (a fork output goes with its first reader).
fn offload_inputs(set: OffloadSet, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
    let it = view.iteration;
    let mut ops: Vec<MemOp> = Vec::new();
    for &i in &it.graph.nodes[node].inputs {
        let op = MemOp::Offload(i);
        if view.residency[i] == Residency::Device && set.contains(it, i) && !ops.contains(&op) {
            ops.push(op);
        }
    }
    ops
}

/// What `node`'s backward pass reads from the feature maps: its inputs and its output.
fn backward_needs<'i>(it: &'i IterationGraph<'_>, node: usize) -> impl Iterator<Item = usize> + 'i {
    it.graph.nodes[node]
        .inputs
        .iter()
        .copied()
        .chain(std::iter::once(node))
}

/// The nodes after `node` in backward order.
fn backward_after<'i>(it: &'i IterationGraph<'_>, node: usize) -> impl Iterator<Item = usize> + 'i {
    let pos = it.position(node);
    it.order[..pos].iter().rev().copied().filter(|&n| n != 0)
}

/// Prefetches of every feature map `nodes`' backward passes read that is on the host.
fn prefetch_for(nodes: &[usize], view: &LaneView<'_, '_>) -> Vec<MemOp> {
    let mut ops: Vec<MemOp> = Vec::new();
    for &n in nodes {
        for t in backward_needs(view.iteration, n) {
            let op = MemOp::Prefetch(t);
            if view.residency[t] == Residency::Host && !ops.contains(&op) {
                ops.push(op);
            }
        }
    }
    ops
}
