//! Every feature map stays on the device from its forward to its backward pass: the
//! no-offload reference whose peak the swapping policies are measured against, placed layer by
//! layer like them.

use concord_engine::memory::layers::{LayerPolicy, SyncMode};

/// Moves nothing; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct NoOffload;

impl LayerPolicy for NoOffload {
    fn name(&self) -> String {
        "no-offload".into()
    }

    fn sync(&self) -> SyncMode {
        SyncMode::PassEnd
    }
}
