//! SuperNeurons (Wang et al., PPoPP 2018) as the Dymem thesis runs it (§4.2.1): liveness
//! analysis and a unified best-fit pool, recomputation turned off, and only the inputs of
//! convolutions sent to the host; copies synchronised per layer, prefetching one layer ahead.

use super::{backward_after, offload_inputs, prefetch_for, OffloadSet};
use concord_engine::memory::layers::{LaneView, LayerPolicy, MemOp, SyncMode};

/// SuperNeurons without recomputation; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct SuperNeurons;

impl LayerPolicy for SuperNeurons {
    fn name(&self) -> String {
        "superneurons".into()
    }

    fn sync(&self) -> SyncMode {
        SyncMode::PerLayer
    }

    fn on_forward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        offload_inputs(OffloadSet::ConvInputs, node, view)
    }

    fn on_backward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        let next: Vec<usize> = backward_after(view.iteration, node).take(1).collect();
        prefetch_for(&next, view)
    }
}
