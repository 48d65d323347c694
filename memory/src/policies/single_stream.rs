//! The single-stream baseline of the thesis's Fig. 4.6: Dymem's offload set and order, with
//! every copy on the compute stream, so no transfer ever runs beside a layer. A feature map the
//! backward pass needs is brought back when its layer is reached.

use super::{offload_inputs, OffloadSet};
use concord_engine::memory::layers::{LaneView, LayerPolicy, MemOp, SyncMode};

/// Copies and computation on one stream; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct SingleStream;

impl LayerPolicy for SingleStream {
    fn name(&self) -> String {
        "single-stream".into()
    }

    fn sync(&self) -> SyncMode {
        SyncMode::Serial
    }

    fn on_forward_begin(&mut self, node: usize, view: &LaneView<'_, '_>) -> Vec<MemOp> {
        offload_inputs(OffloadSet::All, node, view)
    }
}
