//! The check a swapping policy makes before any work: the device must hold at least the
//! largest single layer's working set, or no schedule of moves can train the model.

use concord_engine::error::EngineError;
use concord_engine::ids::RoleId;
use concord_engine::job::Job;
use concord_engine::prelude::Result;

/// An error when `role`'s device budget is smaller than what one layer of the job's model
/// needs on the device at once in its backward pass (its inputs, its output and their
/// gradients) at the configured batch.
pub fn largest_layer_fits(job: &Job, role: RoleId) -> Result<()> {
    let Some(graph) = &job.op_graph else {
        return Ok(());
    };
    let batch = job.config.batch;
    let budget = job.cluster.device_of(role).memory_bytes();
    let Some((name, need)) = graph
        .nodes
        .iter()
        .map(|n| {
            let inputs: u64 = n
                .inputs
                .iter()
                .map(|&i| graph.nodes[i].out_bytes(batch))
                .sum();
            (&n.name, 2 * (inputs + n.out_bytes(batch)))
        })
        .max_by_key(|(_, need)| *need)
    else {
        return Ok(());
    };
    if need > budget {
        return Err(EngineError::OutOfMemory {
            device: job.cluster.device_label(role),
            role,
            needed: need,
            budget,
            what: format!(
                "layer `{name}` alone at batch {batch} (its inputs, output and their gradients): no swapping schedule can train this model on this device"
            ),
        });
    }
    Ok(())
}
