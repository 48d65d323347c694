//! The immutable description of a running job that every role is built from.
//!
//! It is read-only configuration (the resolved config, the cluster, the model, the data set as if
//! on a shared file system); roles never communicate through it.

use crate::cluster::Cluster;
use crate::config::RunConfig;
use crate::data::{SampleStream, Split};
use crate::error::Result;
use crate::guard::RunGuard;
use crate::ids::RoleId;
use crate::ids::WorkerId;
use crate::memory::MemoryPolicy;
use crate::model::ModelSpec;
use crate::ps::Consistency;
use crate::ps::ParamLayout;
use std::sync::{Arc, OnceLock};

/// Builds the memory policy of one role's device.
pub type MemoryPolicyFactory =
    Arc<dyn Fn(&Job, RoleId) -> Result<Box<dyn MemoryPolicy>> + Send + Sync>;

/// A progress observer: `(worker, clocks completed)`.
pub type ProgressFn = Arc<dyn Fn(WorkerId, u64) + Send + Sync>;

/// Everything a role factory may read.
pub struct Job {
    /// The resolved configuration.
    pub config: RunConfig,
    /// Machines and role placement.
    pub cluster: Arc<Cluster>,
    /// The model.
    pub model: ModelSpec,
    /// Activation bytes per sample of each stage, in stage order (what a training step reports to
    /// the memory policy), computed once from the model.
    pub stage_activation_bytes: Vec<u64>,
    /// Parameter blocks and their servers.
    pub layout: Arc<ParamLayout>,
    /// Initial parameter values (real models).
    pub init: Option<Vec<Vec<f32>>>,
    /// Training and test data (real models).
    pub data: Option<Split>,
    /// The order samples are drawn in.
    pub stream: SampleStream,
    /// The read-freshness rule.
    pub consistency: Arc<dyn Consistency>,
    /// Memory policy per device.
    pub memory: MemoryPolicyFactory,
    /// Whether workers wait for the coordinator's directive each clock; set once, after the
    /// coordinator is built and before any worker is.
    pub directed: OnceLock<bool>,
    /// Progress observer (the CLI's progress bar).
    pub progress: Option<ProgressFn>,
    /// The divergence guard: every clock record passes through it, and it can stop the run.
    /// Roles never read from it.
    pub guard: RunGuard,
}

impl Job {
    /// Whether workers wait for the coordinator's directive each clock.
    pub fn directed(&self) -> bool {
        self.directed.get().copied().unwrap_or(false)
    }

    /// Tells the observer a worker finished a clock.
    pub fn observe(&self, worker: WorkerId, clocks: u64) {
        if let Some(p) = &self.progress {
            p(worker, clocks);
        }
    }
}
