//! # The contract: everything a strategy implements
//!
//! Read this file first. A concord job is made of **roles** — [`Worker`]s, parameter
//! [`Server`]s and one [`Coordinator`] — each an actor that runs as one task with a
//! [`RoleContext`], its only door to the run: messages, time, compute charging and device memory.
//! Roles never share state; they talk through serializable messages, so the same role code runs in
//! virtual time (`sim`), on threads in real time (`wall`), and across processes.
//!
//! A **strategy** ([`Strategy`]) is a mechanism from a paper. It fills one or more [`Slot`]s of
//! the [`Assembly`] a run is built from: a role factory, a read-freshness rule ([`Consistency`]), a
//! block placement ([`Placement`]), a per-device [`MemoryPolicy`]. Slots no strategy claims keep the
//! engine's default (the data-parallel worker, the sharded parameter server, a coordinator that
//! directs nothing, resident memory). Slowdowns are injected by [`Straggler`] patterns, which live
//! in their own crate and are picked in the config, not by strategies.
//!
//! A strategy's own protocol is a set of [`StrategyMessage`] types: serde structs with a tag,
//! sent with [`Message::strategy`](crate::message::Message::strategy), optionally carrying tensors.
//!
//! Each role returns its own report: workers their clock records and, where they hold some of the
//! model, a [`ModelState`]; servers the [`ModelState`] of the blocks they hold; the coordinator
//! what it gathered. The run assembles the model it evaluates and checkpoints from the holders'
//! parts.
//!
//! The roles, the composition types, strategy messages and the reports are defined here. Three
//! seams are defined beside the code that calls them and re-exported here, so that no file imports
//! in a circle: [`MemoryPolicy`] (in [`crate::memory`], called by the role context),
//! [`Consistency`] and [`Placement`] (in [`crate::ps`], called by the job and the parameter
//! layout). [`Straggler`] comes from the `concord-stragglers` crate.
//!
//! Strategy crates import [`crate::prelude`], which re-exports this file and the building blocks
//! roles are written with.

use crate::config::RunConfig;
use crate::error::{EngineError, Result};
use crate::ids::{Clock, RoleId, ServerId, WorkerId};
use crate::job::Job;
use crate::message::{CustomMessage, Message, Report};
use crate::metrics::IterRecord;
use crate::optim::OptState;
use crate::payload::Payload;
use crate::payload::{BlockId, BlockPayload};
use crate::ps::{Snapshot, TimedSnapshot};
pub use crate::resume::{RoleCheckpoint, RoleState};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use crate::context::RoleContext;
pub use crate::job::MemoryPolicyFactory;
pub use crate::memory::MemoryPolicy;
pub use crate::ps::{ApplyMode, Consistency, Placement};
pub use crate::stragglers::Straggler;

// ---------------------------------------------------------------------------------------------
// Roles

/// A worker: holds a model replica (or some stages or a parameter range of it) and a data shard,
/// and executes the units of work it is given.
///
/// ```
/// use concord_engine::prelude::*;
///
/// /// A worker that computes nothing and finishes at once.
/// struct Idle;
///
/// #[async_trait]
/// impl Worker for Idle {
///     async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
///         ctx.send(RoleId::Coordinator, Message::WorkerDone);
///         Ok(WorkerReport::default())
///     }
/// }
/// ```
#[async_trait]
pub trait Worker: Send {
    /// Runs the worker's whole job.
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport>;
}

/// A server: holds parameter blocks and answers reads and updates until
/// [`Message::Shutdown`].
///
/// Most servers are a message handler run by [`crate::serve::serve`], which owns the loop and the
/// shutdown.
#[async_trait]
pub trait Server: Send {
    /// Serves until told to shut down; returns the blocks it holds then.
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport>;
}

/// The job's control plane: sees worker telemetry and decides what workers do.
///
/// ```
/// use concord_engine::prelude::*;
///
/// /// Gathers reports until the engine shuts it down.
/// struct Listener;
///
/// #[async_trait]
/// impl Coordinator for Listener {
///     async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
///         let mut report = CoordinatorReport::default();
///         loop {
///             let env = ctx.recv().await?;
///             match (env.msg, env.from) {
///                 (Message::Shutdown, _) => return Ok(report),
///                 (Message::Report(r), RoleId::Worker(w)) => report.reports.push((w, r)),
///                 _ => {}
///             }
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait Coordinator: Send {
    /// Whether workers must wait for a [`crate::message::Directive`] before each clock.
    fn directs_batches(&self) -> bool {
        false
    }
    /// Runs until [`Message::Shutdown`].
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport>;
}

// ---------------------------------------------------------------------------------------------
// Parameter-server rules

// ---------------------------------------------------------------------------------------------
// Strategy messages

/// A strategy's own message type: serializable, with a tag naming it on the wire.
///
/// Strategies define their protocols as plain serde types and send them with
/// [`Message::strategy`](crate::message::Message::strategy) (or
/// [`Message::strategy_with`](crate::message::Message::strategy_with) to carry tensors beside the
/// body); the receiver matches with [`Message::decode`](crate::message::Message::decode). The
/// engine never looks inside.
///
/// ```
/// use concord_engine::prelude::*;
///
/// #[derive(Serialize, Deserialize, PartialEq, Debug)]
/// struct Hello { round: u64 }
/// impl StrategyMessage for Hello { const TAG: &'static str = "example.hello"; }
///
/// let msg = Message::strategy(&Hello { round: 3 }).unwrap();
/// assert_eq!(msg.decode::<Hello>().unwrap(), Some(Hello { round: 3 }));
/// ```
pub trait StrategyMessage: Serialize + DeserializeOwned {
    /// The tag on the wire: `<strategy>.<message>`, unique in a build.
    const TAG: &'static str;
    /// Whether the body is addressing metadata (clocks, ids, flags) that rides in the fixed
    /// message header, like the fields of the engine's own `Push` or `Params`, rather than content
    /// charged by its encoded size. The tensor payloads are charged either way.
    const BODY_IN_HEADER: bool = false;
}

/// A strategy message addressed by a key (an iteration, a minibatch, a micro-batch…), so that a
/// role can wait for the one it needs ([`crate::transport::Envelope::is_keyed`] with
/// `recv_matching`) and leave the others queued in order.
pub trait Keyed: StrategyMessage {
    /// What addresses it.
    type Key: PartialEq;
    /// Its key.
    fn key(&self) -> Self::Key;
}

impl crate::transport::Envelope {
    /// Whether this is a `T` from `from` with key `key`.
    pub fn is_keyed<T: Keyed>(&self, from: RoleId, key: T::Key) -> bool {
        self.from == from
            && self
                .msg
                .decode::<T>()
                .ok()
                .flatten()
                .is_some_and(|m| m.key() == key)
    }
}

/// Sending and receiving [`StrategyMessage`]s.
impl Message {
    /// The typed strategy message this is and the tensors it carries, taking them out of the
    /// message: `Ok(None)` for other messages, an error naming the tag if the body does not decode.
    pub fn into_strategy<T: StrategyMessage>(self) -> Result<Option<(T, Vec<Payload>)>> {
        match self {
            Message::Custom(m) if m.tag == T::TAG => Ok(Some((m.body()?, m.payloads))),
            _ => Ok(None),
        }
    }

    /// Wraps a strategy's value as a [`Message::Custom`] tagged `T::TAG`, with no tensors.
    pub fn strategy<T: StrategyMessage>(value: &T) -> Result<Message, EngineError> {
        Message::strategy_with(value, Vec::new())
    }

    /// Wraps a strategy's value and the tensors it carries as a [`Message::Custom`] tagged
    /// `T::TAG`; the tensors are charged on the wire by their size.
    pub fn strategy_with<T: StrategyMessage>(
        value: &T,
        payloads: Vec<Payload>,
    ) -> Result<Message, EngineError> {
        let mut m = CustomMessage::encode(T::TAG, value, payloads)?;
        m.body_in_header = T::BODY_IN_HEADER;
        Ok(Message::Custom(m))
    }

    /// The typed strategy message this is: `Ok(None)` for other messages, an error naming the
    /// tag if the body does not decode.
    pub fn decode<T: StrategyMessage>(&self) -> Result<Option<T>, EngineError> {
        self.decode_custom(T::TAG)
    }
}

// ---------------------------------------------------------------------------------------------
// Reports

/// The part of the model one role holds at the end of a run: block values, their optimizer
/// state, and the snapshots the run evaluates offline. A role holding the whole model reports
/// every block; a pipeline stage or a server shard reports its own.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ModelState {
    /// Final block values.
    pub blocks: Vec<BlockPayload>,
    /// Final optimizer state per block.
    pub opt_state: BTreeMap<BlockId, OptState>,
    /// Values after every `eval_every` iterations.
    pub snapshots: Vec<Snapshot>,
    /// Values at fixed run times (`eval_every_s`); `None` if this holder does not record them.
    pub timed: Option<Vec<TimedSnapshot>>,
}

impl ModelState {
    /// The values and optimizer state alone, without the snapshots taken along the way: what a
    /// checkpoint keeps of a model part.
    pub fn values_only(&self) -> ModelState {
        ModelState {
            blocks: self.blocks.clone(),
            opt_state: self.opt_state.clone(),
            snapshots: Vec::new(),
            timed: None,
        }
    }

    /// Bytes held: values plus optimizer state.
    pub fn bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.data.bytes()).sum::<u64>()
            + self.opt_state.values().map(OptState::bytes).sum::<u64>()
    }
}

/// What a worker hands back at the end of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    /// One record per clock.
    pub iterations: Vec<IterRecord>,
    /// The part of the model this worker holds, where workers hold it instead of servers
    /// (allreduce, RNA, pipelines). The run evaluates and checkpoints the union of the workers'
    /// parts when any worker reports one, the servers' otherwise.
    pub model: Option<ModelState>,
    /// Its own state at the end, for a checkpoint (roles of strategies that can resume; see
    /// [`Strategy::resumes`]). The model part, if any, is in `model`.
    pub state: Option<RoleState>,
}

/// One read a server answered: who, at which clock, and which version it got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRecord {
    /// Reader.
    pub worker: WorkerId,
    /// The reader's clock.
    pub clock: Clock,
    /// Version required.
    pub min_version: Option<i64>,
    /// Version served.
    pub version: i64,
}

/// What a server hands back at the end of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServerReport {
    /// The blocks it holds.
    pub model: ModelState,
    /// Every versioned read it answered, for staleness checks, where the run records them
    /// ([`crate::job::Job::record_reads`]); empty otherwise.
    pub reads: Vec<ReadRecord>,
    /// Last version applied.
    pub version: i64,
    /// Its own state at the end beyond its blocks, for a checkpoint (see [`Strategy::resumes`]).
    pub state: Option<RoleState>,
}

/// What a coordinator hands back at the end of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CoordinatorReport {
    /// Every report received from workers, in arrival order.
    pub reports: Vec<(u32, Report)>,
    /// Free-form per-strategy figures for the summary (e.g. predictor RMSE).
    pub figures: Vec<(String, f64)>,
    /// Its own state at the end, for a checkpoint (see [`Strategy::resumes`]).
    pub state: Option<RoleState>,
}

// ---------------------------------------------------------------------------------------------
// Strategies and the assembly they fill

/// A part of a run a strategy can provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// The parameter server's read-freshness rule.
    Consistency,
    /// Which server holds each parameter block.
    Placement,
    /// The worker role.
    Worker,
    /// The server role.
    Server,
    /// The coordinator role.
    Coordinator,
    /// The per-device memory policy.
    Memory,
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Slot::Consistency => "consistency",
            Slot::Placement => "placement",
            Slot::Worker => "worker",
            Slot::Server => "server",
            Slot::Coordinator => "coordinator",
            Slot::Memory => "memory",
        };
        f.write_str(s)
    }
}

/// Builds worker `id` of a job.
pub type WorkerFactory = Arc<dyn Fn(Arc<Job>, WorkerId) -> Result<Box<dyn Worker>> + Send + Sync>;
/// Builds server `id` of a job.
pub type ServerFactory = Arc<dyn Fn(Arc<Job>, ServerId) -> Result<Box<dyn Server>> + Send + Sync>;
/// Builds the coordinator of a job.
pub type CoordinatorFactory = Arc<dyn Fn(Arc<Job>) -> Result<Box<dyn Coordinator>> + Send + Sync>;
/// The parts a run is assembled from; `None` means "engine default".
#[derive(Default, Clone)]
pub struct Assembly {
    /// Read-freshness rule.
    pub consistency: Option<Arc<dyn Consistency>>,
    /// Block placement.
    pub placement: Option<Arc<dyn Placement>>,
    /// Memory policy.
    pub memory: Option<MemoryPolicyFactory>,
    /// Worker role.
    pub worker: Option<WorkerFactory>,
    /// Server role.
    pub server: Option<ServerFactory>,
    /// Coordinator role.
    pub coordinator: Option<CoordinatorFactory>,
    /// Extra server roles started idle beyond `servers`, with ids `servers..`: capacity an elastic
    /// strategy can bring into the job later (scale-out). Built by the same server factory.
    pub standby_servers: u32,
    /// The workers update embedding tables row-wise (they gather the rows a batch uses and
    /// apply its gradient to those rows only), so a DLRM (`[model] kind = "dlrm"`) may train.
    /// Default false: workers that train dense replicas through whole-model gradients cannot
    /// train a DLRM, and such a run is refused before any work.
    pub sparse_embeddings: bool,
    /// The roles handle machines that join, are warned of an eviction, or fail while the job
    /// runs ([`crate::membership`]): the coordinator hears of each change and reassigns work.
    /// Default false: a run with a `[[membership]]` trace is refused before any work unless a
    /// strategy sets it, since workers that wait for a fixed set of peers would hang.
    pub elastic_membership: bool,
    pub(crate) owners: BTreeMap<Slot, String>,
    pub(crate) names: Vec<String>,
    /// Strategies of the run that cannot resume, with the reason (see [`Strategy::resumes`]).
    pub(crate) not_resumable: Vec<(String, String)>,
    /// Strategies the registry knows that have a `[strategy.<name>]` table but were not composed.
    pub(crate) unused_options: Vec<String>,
}

impl Assembly {
    /// The strategy that filled each slot.
    pub fn owners(&self) -> &BTreeMap<Slot, String> {
        &self.owners
    }

    /// Strategies composed, in order.
    pub fn strategies(&self) -> &[String] {
        &self.names
    }

    /// `Ok` when every strategy of the run can stop at a checkpoint and continue exactly;
    /// otherwise the first that cannot, and why.
    pub fn resumable(&self) -> Result<()> {
        match self.not_resumable.first() {
            None => Ok(()),
            Some((strategy, reason)) => Err(EngineError::NotResumable {
                strategy: strategy.clone(),
                reason: reason.clone(),
            }),
        }
    }

    /// Marks `strategy` as unable to resume in this run, for `reason`: for a strategy that resumes
    /// under some of its options only ([`Strategy::resumes`] says it does), called from its
    /// `install` for the others.
    pub fn refuse_resume(&mut self, strategy: &str, reason: impl Into<String>) {
        self.not_resumable
            .push((strategy.to_string(), reason.into()));
    }

    /// Strategies with options in the config (`[strategy.<name>]`) that this run does not
    /// compose: a file may keep the options of the strategies one switches between with
    /// `--set strategies=…`, and the caller tells the user those options go unused.
    pub fn unused_options(&self) -> &[String] {
        &self.unused_options
    }

    /// Whether `slot` was filled by a strategy (rather than left to the engine's default).
    pub fn is_claimed(&self, slot: Slot) -> bool {
        self.owners.contains_key(&slot)
    }

    /// Fills the worker slot with `build`, called once per worker.
    pub fn set_worker<W, F>(&mut self, build: F)
    where
        W: Worker + 'static,
        F: Fn(Arc<Job>, WorkerId) -> Result<W> + Send + Sync + 'static,
    {
        self.worker = Some(Arc::new(move |job, id| {
            Ok(Box::new(build(job, id)?) as Box<dyn Worker>)
        }));
    }

    /// Fills the server slot with `build`, called once per server (standby ones included).
    pub fn set_server<S, F>(&mut self, build: F)
    where
        S: Server + 'static,
        F: Fn(Arc<Job>, ServerId) -> Result<S> + Send + Sync + 'static,
    {
        self.server = Some(Arc::new(move |job, id| {
            Ok(Box::new(build(job, id)?) as Box<dyn Server>)
        }));
    }

    /// Fills the coordinator slot with `build`.
    pub fn set_coordinator<C, F>(&mut self, build: F)
    where
        C: Coordinator + 'static,
        F: Fn(Arc<Job>) -> Result<C> + Send + Sync + 'static,
    {
        self.coordinator = Some(Arc::new(move |job| {
            Ok(Box::new(build(job)?) as Box<dyn Coordinator>)
        }));
    }

    /// Fills the memory slot with `build`, called once per role.
    pub fn set_memory<M, F>(&mut self, build: F)
    where
        M: MemoryPolicy + 'static,
        F: Fn(&Job, RoleId) -> Result<M> + Send + Sync + 'static,
    {
        self.memory = Some(Arc::new(move |job, role| {
            Ok(Box::new(build(job, role)?) as Box<dyn MemoryPolicy>)
        }));
    }
}

/// A coordination mechanism that fills slots of a run.
///
/// ```
/// use concord_engine::prelude::*;
/// use concord_engine::ps::StaleSynchronous;
///
/// /// SSP with a slack of 3, under its own name.
/// struct Ssp3;
///
/// impl Strategy for Ssp3 {
///     fn name(&self) -> &'static str {
///         "ssp3"
///     }
///     fn summary(&self) -> &'static str {
///         "Stale synchronous parallel, three clocks of slack"
///     }
///     fn slots(&self) -> &'static [Slot] {
///         &[Slot::Consistency]
///     }
///     fn install(&self, _: Option<&toml::Value>, _: &RunConfig, asm: &mut Assembly) -> Result<()> {
///         asm.consistency = Some(std::sync::Arc::new(StaleSynchronous { slack: 3 }));
///         Ok(())
///     }
/// }
/// ```
pub trait Strategy: Send + Sync {
    /// The name users write in `strategies = [...]`.
    fn name(&self) -> &'static str;
    /// One line on what it is and where it comes from.
    fn summary(&self) -> &'static str;
    /// The slots it fills.
    fn slots(&self) -> &'static [Slot];
    /// Installs its parts. `options` is its `[strategy.<name>]` table, if any.
    fn install(
        &self,
        options: Option<&toml::Value>,
        config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()>;
    /// Checks the finished assembly for combinations this strategy cannot work with; the message
    /// should name the other strategy.
    fn check(&self, _asm: &Assembly, _config: &RunConfig) -> Result<()> {
        Ok(())
    }
    /// Whether a run with this strategy can stop at a checkpoint and continue exactly: `Ok` when
    /// its roles save what they keep in their reports' `state` (and model) and restore it from
    /// [`Job::resumed`]; otherwise the reason, which a user asking to resume or to checkpoint
    /// mid-run is told.
    ///
    /// By default, strategies that fill only rule slots (consistency, placement, memory) resume:
    /// rules keep no state of their own. Strategies with roles must opt in.
    fn resumes(&self) -> std::result::Result<(), String> {
        let rules_only = self
            .slots()
            .iter()
            .all(|s| matches!(s, Slot::Consistency | Slot::Placement | Slot::Memory));
        if rules_only {
            Ok(())
        } else {
            Err("its roles keep state that checkpoints do not capture yet".into())
        }
    }
}
