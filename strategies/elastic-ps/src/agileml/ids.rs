//! Identifier types shared by AgileML's data structures and the roles that exchange them.
//!
//! Plain integers keep messages small and serde-friendly; the aliases name what each number means.

/// A worker (one data-processing role; one per machine in AgileML).
pub type WorkerId = u32;

/// A machine (reliable or transient) that can host workers and parameter-server roles.
pub type MachineId = u32;

/// A training clock (iteration); clock `c` is the `c`-th global batch.
pub type Clock = u64;

/// A node of the data split tree ([`DataTree`](super::DataTree)).
pub type NodeId = u32;

/// One of the `Np` fixed parameter partitions (never resharded, only reassigned).
pub type PartitionId = u32;
