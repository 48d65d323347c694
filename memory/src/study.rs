//! One training iteration of a model under each swapping policy, side by side: what `concord
//! memory` prints. For every policy: the iteration's time and how much of its copying hid behind
//! compute (the thesis's Fig. 4.6 breakdown), the memory it reached on a device with room to
//! spare, the least memory it can train in (stalling for room, Fig. 4.4a's "aggregated memory"),
//! the fragmentation its allocator met in a pool sized to that iteration, and the device memory
//! after every layer (Fig. 4.7).

use crate::options::{AllocatorKind, SwapOptions};
use crate::policies::NoOffload;
use crate::SwapStrategy;
use concord_engine::cluster::DeviceProfile;
use concord_engine::graph::OpGraph;
use concord_engine::memory::lanes::{run_iteration, IterationReport, LaneError, MemPoint};
use concord_engine::memory::layers::{IterationGraph, LayerPolicy};
use serde::Serialize;

/// The policies a study knows, by the names the memory-slot strategies use, and `no-offload`
/// (every feature map resident, the reference).
pub const POLICIES: &[&str] = &[
    "no-offload",
    "dymem",
    "vdnn",
    "single-stream",
    "superneurons",
];

/// A policy by name with the allocator the thesis runs it with (a swapping strategy's, under
/// its default options); `None` for an unknown name.
pub fn policy(name: &str) -> Option<(Box<dyn LayerPolicy>, AllocatorKind)> {
    if name == "no-offload" {
        return Some((Box::new(NoOffload), AllocatorKind::BestFit));
    }
    SwapStrategy::all()
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| s.layer_policy(&SwapOptions::default()))
}

/// The least capacity, to 1 % of `high_water` (the memory an iteration reached with room to
/// spare), under which `fits` says the iteration completes: a binary search.
pub fn least_memory(high_water: u64, mut fits: impl FnMut(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (0, high_water);
    while hi - lo > hi / 100 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// One policy's iteration, or why it does not fit.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyStudy {
    /// The policy.
    pub policy: String,
    /// Its allocator.
    pub allocator: &'static str,
    /// What was measured; `None` when even the whole device does not hold the iteration.
    pub measured: Option<Measured>,
    /// Where the iteration ran out of memory on the whole device, when it did.
    pub does_not_fit: Option<String>,
}

/// What one policy's iteration measured.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// Seconds of the iteration.
    pub seconds: f64,
    /// Seconds of computation.
    pub compute_s: f64,
    /// Seconds of copying that ran beside computation.
    pub overlapped_s: f64,
    /// Seconds of copying that did not.
    pub exposed_copy_s: f64,
    /// Bytes sent to the host.
    pub offloaded_bytes: u64,
    /// The memory the iteration reached with the whole device free.
    pub high_water: u64,
    /// The least memory (to 1 %) the iteration completes in, waiting for room when short.
    pub min_memory: u64,
    /// Mean fragmentation its placements met in a pool sized to its high-water mark.
    pub mean_fragmentation: f64,
    /// Device memory after every layer, with the whole device free.
    pub series: Vec<MemPoint>,
}

/// What cannot be studied.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// An unknown policy name.
    #[error("unknown memory policy `{0}`; known: {known}", known = POLICIES.join(", "))]
    UnknownPolicy(String),
}

/// One iteration of `graph` on `batch` samples on `device` (its whole memory free) under each
/// of `policies`.
pub fn study(
    graph: &OpGraph,
    batch: u64,
    device: &DeviceProfile,
    policies: &[String],
) -> Result<Vec<PolicyStudy>, StudyError> {
    let it = IterationGraph::new(graph, batch, |op| device.op_seconds(op, batch));
    let budget = device.memory_bytes();
    policies
        .iter()
        .map(|name| {
            let (mut p, kind) =
                policy(name).ok_or_else(|| StudyError::UnknownPolicy(name.clone()))?;
            let mut run = |capacity: u64| -> Result<IterationReport, LaneError> {
                let mut a = kind.build();
                a.reset(capacity);
                run_iteration(&it, p.as_mut(), a.as_mut(), device.host_link())
            };
            let allocator = kind.build().name();
            let full = match run(budget) {
                Ok(full) => full,
                Err(e) => {
                    return Ok(PolicyStudy {
                        policy: name.clone(),
                        allocator,
                        measured: None,
                        does_not_fit: Some(e.to_string()),
                    })
                }
            };
            // A pool sized to the iteration holds it: the same moves, no waits.
            let pooled = run(full.high_water).unwrap_or_else(|_| full.clone());
            let least = least_memory(full.high_water, |capacity| run(capacity).is_ok());
            Ok(PolicyStudy {
                policy: name.clone(),
                allocator,
                measured: Some(Measured {
                    seconds: full.seconds,
                    compute_s: full.compute_s,
                    overlapped_s: full.overlap_s,
                    exposed_copy_s: (full.transfer_s - full.overlap_s).max(0.0),
                    offloaded_bytes: full.offloaded_bytes,
                    high_water: full.high_water,
                    min_memory: least,
                    mean_fragmentation: pooled.mean_fragmentation,
                    series: full.series,
                }),
                does_not_fit: None,
            })
        })
        .collect()
}
