//! # AgileML's data structures (the elastic tiered parameter server of Proteus)
//!
//! Engine-independent logic the AgileML roles (workers, ParamServs / ActivePSs / BackupPSs and
//! the elasticity controller) share and send to each other; everything here is serializable:
//!
//! - [`tree`]: the data split tree: which worker processes which items of a clock, who has which
//!   items loaded, and how ranges move when workers join or leave (a newcomer loads its partner's
//!   whole range and works on half; a leaver's range goes back to whoever still has it loaded).
//! - [`treesum`]: one clock's update summed in the tree's shape, bit-identical however leaves are
//!   grouped among workers, with a check that contributions tile the items exactly once.
//! - [`partition`]: parameter partitions with per-clock deltas for consistent pushes to a
//!   BackupPS, commits and roll-backs, END-OF-LIFE hand-over and migration.
//! - [`stage`]: the stage policy (r = transient/reliable: 1:1 and 15:1 thresholds), ActivePS
//!   placement on the longest-running transient machines, balanced partition assignment.
//! - [`ledger`]: the coordinator's exactly-once account of processed items per clock.
//!
//! And the roles built on them, with what they share:
//!
//! - [`plan`]: what every role derives from the job alone (tiers, partitions and their homes, the
//!   stage, ActivePSs and data tree at the start); [`options`]: `[strategy.agileml]`.
//! - [`worker`], [`server`] (one per machine: ParamServ, ActivePS or BackupPS per partition) and
//!   [`controller`] (the elasticity controller), talking in [`protocol`]'s messages;
//!   [`holdings`]: a worker's leaves in terms of the tree; [`sent`]: what a worker sent for its
//!   latest clocks, sent again where the route moves a partition.
//! - [`strategy`]: the `agileml` strategy that composes them.

pub mod controller;
pub mod holdings;
pub mod ids;
pub mod ledger;
pub mod options;
pub mod partition;
pub mod plan;
pub mod protocol;
pub mod sent;
pub mod server;
pub mod stage;
pub mod strategy;
pub mod tree;
pub mod treesum;
pub mod worker;

pub use ids::{Clock, MachineId, NodeId, PartitionId, WorkerId};
pub use ledger::{Ledger, LedgerError};
pub use partition::{partition_ranges, Backup, Partition, PartitionError, PartitionSnapshot, Push};
pub use stage::{
    active_ps_machines, assign_partitions, home_of, stage_for, MachineInfo, Stage, StageError,
    StageThresholds,
};
pub use strategy::AgileMl;
pub use tree::{DataTree, Node, Removal, Split, TreeError};
pub use treesum::{subtree_sum, tree_sum, TilingError};
