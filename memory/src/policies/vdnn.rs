//! vDNN (Rhu et al., MICRO 2016) as the Dymem thesis runs it (§4.2.1): the same depth-first
//! order, offloads that start with the reader's compute, but a barrier after every layer (the
//! next layer waits for every transfer issued so far), and in the backward pass a prefetch one
//! layer ahead.

use super::{backward_after, offload_inputs, prefetch_for, OffloadSet};
use concord_engine::memory::layers::{LaneView, LayerPolicy, MemOp, SyncMode};

/// vDNN's scheduling; see the module docs.
#[derive(Clone, Debug)]
pub struct Vdnn {
    offload: OffloadSet,
}

impl Vdnn {
    /// vDNN offloading `offload` (`All`: vDNN-all; `ConvInputs`: vDNN-conv).
    pub fn new(offload: OffloadSet) -> Vdnn {
        Vdnn { offload }
    }
}

impl LayerPolicy for Vdnn {
    fn name(&self) -> String {
        match self.offload {
            OffloadSet::All => "vdnn".into(),
            OffloadSet::ConvInputs => "vdnn-conv".into(),
        }
    }

    fn sync(&self) -> SyncMode {
        SyncMode::PerLayer
    }

    fn on_forward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        offload_inputs(self.offload, node, view)
    }

    fn on_backward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        let next: Vec<usize> = backward_after(view.iteration, node).take(1).collect();
        prefetch_for(&next, view)
    }
}
