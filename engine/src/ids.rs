//! Identifiers of the roles of a run and of the machines they are placed on.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a worker, `0..workers`.
pub type WorkerId = u32;
/// Index of a parameter server, `0..servers`.
pub type ServerId = u32;
/// Index of a machine of the cluster model.
pub type MachineId = u32;
/// A synchronisation clock (iteration) number, counted from 0.
pub type Clock = u64;

/// Which role of the job a message comes from or goes to.
///
/// Ordered (coordinator < servers < workers, then by index) so that every aggregation can be done
/// in a canonical order, independent of arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RoleId {
    /// The job's control plane.
    Coordinator,
    /// A parameter server shard.
    Server(ServerId),
    /// A worker holding a model replica (or stages of it) and a data shard.
    Worker(WorkerId),
}

impl RoleId {
    /// Short file-name friendly label, e.g. `worker-3`.
    pub fn label(&self) -> String {
        match self {
            RoleId::Coordinator => "coordinator".to_string(),
            RoleId::Server(s) => format!("server-{s}"),
            RoleId::Worker(w) => format!("worker-{w}"),
        }
    }
}

impl fmt::Display for RoleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}
