//! Dymem (Yang, HPDC 2020; thesis ch. 4): dependency-aware offload in the forward pass (each
//! candidate starts for the host with its first reader's compute and leaves the device once
//! copied and read), a prefetch window of two convolutions in the backward pass, and no barrier
//! between the lanes before the end of a pass.

use super::{backward_after, offload_inputs, prefetch_for, OffloadSet};
use concord_engine::graph::OpKind;
use concord_engine::memory::layers::{LaneView, LayerPolicy, MemOp, SyncMode};

/// Convolutions a prefetch window may span, the current layer included (thesis §4.1.2.2).
pub const WINDOW_CONVS: usize = 2;

/// Dymem's scheduling; see the module docs.
#[derive(Clone, Debug)]
pub struct Dymem {
    offload: OffloadSet,
}

impl Default for Dymem {
    fn default() -> Dymem {
        Dymem {
            offload: OffloadSet::All,
        }
    }
}

impl LayerPolicy for Dymem {
    fn name(&self) -> String {
        "dymem".into()
    }

    fn sync(&self) -> SyncMode {
        SyncMode::PassEnd
    }

    fn on_forward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        offload_inputs(self.offload, node, view)
    }

    /// The cleaned Algorithm 3: walk the backward order from the current layer, counting
    /// convolutions (the current one included); the window closes at the third. Every layer
    /// inside it gets its offloaded tensors back, in order; the executor stops at the first
    /// that does not fit and the next layer's search retries.
    fn on_backward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        let it = view.iteration;
        let mut convs = usize::from(it.kind(node) == OpKind::Conv);
        let mut window = vec![node];
        for next in backward_after(it, node) {
            if it.kind(next) == OpKind::Conv {
                if convs >= WINDOW_CONVS {
                    break;
                }
                convs += 1;
            }
            window.push(next);
        }
        prefetch_for(&window, view)
    }
}
