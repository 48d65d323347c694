//! The roles a job is made of: [`Worker`], [`Server`], [`Coordinator`].
//!
//! Each role is an actor: the engine starts it as one task with a [`RoleCtx`] and it runs until its
//! work is done (workers) or it is told to shut down (servers, coordinators). Roles talk only
//! through messages. The engine ships a default for each (data-parallel worker, sharded parameter
//! server, static coordinator); strategies replace them or configure them through slots.

use crate::error::Result;
use crate::message::Report;
use crate::metrics::IterRecord;
use crate::ps::ServerReport;
use crate::role::RoleCtx;
use async_trait::async_trait;

/// What a worker hands back at the end of a run.
#[derive(Clone, Debug, Default)]
pub struct WorkerReport {
    /// One record per clock.
    pub iterations: Vec<IterRecord>,
    /// Peak bytes resident on the worker's device.
    pub peak_memory: u64,
    /// The model, where workers hold it instead of servers (allreduce, RNA): its final blocks,
    /// optimizer state and snapshots in a server's form. The run evaluates and checkpoints the
    /// lowest-numbered worker's model when one is given, the servers' blocks otherwise.
    pub model: Option<ServerReport>,
}

/// A worker: holds a model replica (or stages of it) and a data shard, and executes the units of
/// work it is given.
#[async_trait]
pub trait Worker: Send {
    /// Runs the worker's whole job.
    async fn run(&mut self, ctx: &mut RoleCtx) -> Result<WorkerReport>;
}

/// A server: holds parameter blocks and answers reads and updates.
#[async_trait]
pub trait Server: Send {
    /// Serves until [`crate::message::Message::Shutdown`].
    async fn run(&mut self, ctx: &mut RoleCtx) -> Result<ServerReport>;
}

/// What a coordinator hands back at the end of a run.
#[derive(Clone, Debug, Default)]
pub struct CoordinatorReport {
    /// Every report received from workers, in arrival order.
    pub reports: Vec<(u32, Report)>,
    /// Free-form per-strategy figures for the summary (e.g. predictor RMSE).
    pub figures: Vec<(String, f64)>,
}

/// The job's control plane: sees worker telemetry and decides what workers do.
#[async_trait]
pub trait Coordinator: Send {
    /// Whether workers must wait for a [`crate::message::Directive`] before each clock.
    fn directs_batches(&self) -> bool {
        false
    }
    /// Runs until [`crate::message::Message::Shutdown`].
    async fn run(&mut self, ctx: &mut RoleCtx) -> Result<CoordinatorReport>;
}
