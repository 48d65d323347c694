//! The parameter-server substrate: parameter blocks and their placement, consistency rules, and
//! the sharded server role that applies updates under a rule.

mod consistency;
mod layout;
mod reads;
mod server;
mod timed;

pub use consistency::{ApplyMode, Asynchronous, Consistency, StaleSynchronous};
pub use layout::{
    cut_into_blocks, BalancedPlacement, Block, ParamLayout, Placement, RoundRobinPlacement,
};
pub use reads::ReadGate;
pub use server::ParamServer;
pub use timed::{
    model_from, records_at, Holder, Snapshot, SnapshotPlan, TimedSnapshot, TimedSnapshots,
};
