//! The immutable description of a running job that every role is built from.
//!
//! It is read-only configuration (the resolved config, the cluster, the model, the data set as if
//! on a shared file system); roles never communicate through it.

use crate::cluster::Cluster;
use crate::config::RunConfig;
use crate::cost::LayerCost;
use crate::data::{SampleStream, Split};
use crate::error::Result;
use crate::guard::RunGuard;
use crate::ids::RoleId;
use crate::ids::WorkerId;
use crate::membership::MembershipPlan;
use crate::memory::MemoryPolicy;
use crate::model::{ModelSpec, Replica};
use crate::ps::Consistency;
use crate::ps::ParamLayout;
use crate::resume::{ResumePoint, RoleCheckpoint};
use std::ops::Range;
use std::sync::{Arc, OnceLock, RwLock};

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
    /// Activation bytes per sample each stage keeps from its forward pass to its backward pass,
    /// in stage order (what a training step reports to the memory policy), computed once from
    /// the model ([`StageFacts::kept_bytes`](crate::model::StageFacts)).
    pub stage_kept_bytes: Vec<u64>,
    /// Bytes per sample of each stage's output, in stage order: what crosses a stage boundary
    /// placed after it.
    pub stage_output_bytes: Vec<u64>,
    /// The model's per-layer cost facts, computed once (what a calibrated device charges a
    /// training step by; empty for a model without them).
    pub cost_sheet: Arc<[LayerCost]>,
    /// The model's operator graph, when it has one: what a layer-granular memory policy runs
    /// each training iteration over.
    pub op_graph: Option<Arc<crate::graph::OpGraph>>,
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
    /// Whether parameter servers keep a record of every read they answer, for the run's result
    /// ([`crate::run::RunOptions::record_reads`]).
    pub record_reads: bool,
    /// The part of the run the roles built from this job run: its clocks and, when it continues
    /// from a checkpoint, where it starts. Set by the engine before the roles are built.
    pub(crate) segment: RwLock<Segment>,
    /// The divergence guard: every clock record passes through it, and it can stop the run.
    /// Roles never read from it.
    pub guard: RunGuard,
    /// Which machines are absent at the start and when machines join, are warned or leave
    /// ([`crate::membership`]); static for a job without a `[[membership]]` trace.
    pub membership: Arc<MembershipPlan>,
}

/// The clocks one launch of the roles runs, and the checkpoint it starts from.
#[derive(Clone, Debug, Default)]
pub(crate) struct Segment {
    /// Clocks `start..end`.
    pub clocks: std::ops::Range<u64>,
    /// The checkpoint the roles continue from (none for a fresh start).
    pub from: Option<Arc<ResumePoint>>,
}

impl Job {
    /// Whether workers wait for the coordinator's directive each clock.
    pub fn directed(&self) -> bool {
        self.directed.get().copied().unwrap_or(false)
    }

    /// The clocks the roles run now: `0..iterations` for a run without checkpoints; between two
    /// checkpoints otherwise. Every worker loops over these, not over `0..iterations`.
    pub fn clocks(&self) -> std::ops::Range<u64> {
        self.segment
            .read()
            .map(|s| s.clocks.clone())
            .unwrap_or(0..self.config.iterations)
    }

    /// `role`'s checkpoint when the roles continue a run: what it must restore before its first
    /// clock (the engine has already restarted it at the checkpoint's time). `None` on a fresh
    /// start.
    pub fn resumed(&self, role: RoleId) -> Option<RoleCheckpoint> {
        let segment = self.segment.read().ok()?;
        segment.from.as_ref()?.roles.get(&role).cloned()
    }

    /// The state `role` saved at the checkpoint the roles continue from
    /// ([`RoleCheckpoint::decode_state`], `what` naming it when missing); `T::default()` on a
    /// fresh start.
    pub fn resumed_state<T: serde::de::DeserializeOwned + Default>(
        &self,
        role: RoleId,
        what: &str,
    ) -> Result<T> {
        match self.resumed(role) {
            Some(cp) => cp.decode_state(role, what),
            None => Ok(T::default()),
        }
    }

    /// The checkpoint the roles continue from, if any.
    pub(crate) fn segment_start(&self) -> Option<Arc<ResumePoint>> {
        self.segment.read().ok()?.from.clone()
    }

    /// Sets the clocks the next roles run and the checkpoint they continue from.
    pub(crate) fn set_segment(&self, segment: Segment) {
        let mut s = self.segment.write().unwrap_or_else(|p| p.into_inner());
        *s = segment;
    }

    /// A replica of the job's model for `role`, on the device its machine computes on (a GPU for
    /// a worker on a CUDA machine, else the CPU); `None` in throughput mode.
    pub fn replica(&self, role: RoleId) -> Result<Option<Replica>> {
        let device = crate::gpu::tensor_device(self.cluster.gpu_of(role))?;
        Ok(Replica::new(&self.model, &device)?)
    }

    /// [`Job::replica`] holding the parameters of stages `stages` alone ([`Replica::part`]):
    /// for a worker that computes only those, so the rest of the model takes none of its
    /// device's memory.
    pub fn part_replica(&self, role: RoleId, stages: Range<usize>) -> Result<Option<Replica>> {
        let device = crate::gpu::tensor_device(self.cluster.gpu_of(role))?;
        Ok(Replica::part(&self.model, &device, stages)?)
    }

    /// Tells the observer a worker finished a clock.
    pub fn observe(&self, worker: WorkerId, clocks: u64) {
        if let Some(p) = &self.progress {
            p(worker, clocks);
        }
    }
}
