//! `--runtime process`: one OS process per machine of the cluster, messages between processes
//! over TCP.
//!
//! Rank `r` of the job runs the roles placed on machine `r` (the coordinator is on machine 0, so
//! rank 0 also gathers every role's output and writes the run folder). Each process learns its
//! rank, the world size and where rank 0 listens from its launcher's environment ([`World`]:
//! torchrun's `RANK`/`WORLD_SIZE`/`MASTER_ADDR`/`MASTER_PORT`, Slurm, Open MPI), meets the others
//! at rank 0 (the rendezvous), and then holds one TCP connection to every other process (the
//! mesh, [`mesh`]). Messages between roles of one process stay in memory; the others travel as
//! length-prefixed MessagePack frames ([`wire`]) checked against the job's identity.
//!
//! A process that dies or stops answering for `process.peer_timeout_s` ends the run everywhere
//! with an error naming its machine, its roles and the last iteration it reported.

pub mod mesh;
pub(crate) mod net;
pub mod pieces;
pub mod probe;
pub mod wire;
pub mod world;

pub use world::{first_slurm_host, Launcher, World, WorldError};

use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The `[process]` section: timeouts and limits of `--runtime process`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessConfig {
    /// How long the rendezvous waits for every process to join, in seconds.
    pub connect_timeout_s: f64,
    /// A peer silent for this long (no frame, not even a heartbeat) is taken as dead, in seconds.
    pub peer_timeout_s: f64,
    /// Seconds between heartbeats on every connection.
    pub heartbeat_s: f64,
    /// Largest frame accepted, in MiB: a larger one is refused (and its connection closed).
    pub max_frame_mib: u64,
    /// Which of its host's GPUs a process's worker slots run on.
    #[serde(skip_serializing_if = "GpuBinding::is_default")]
    pub gpus: GpuBinding,
}

/// Which of its host's GPUs a process's workers use when several processes of a job share a host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuBinding {
    /// Every process sees all of its host's GPUs (torchrun, `concord launch`, `mpirun`): slot `k`
    /// of the process of local rank `L`, on a machine of `S` slots, runs on GPU `L·S + k`, so the
    /// processes of one host take GPUs of their own, as `torch.cuda.set_device(LOCAL_RANK)` does.
    #[default]
    LocalRank,
    /// The launcher gave each process its own GPUs through `CUDA_VISIBLE_DEVICES` (as
    /// `srun --gpus-per-task` does): slot `k` runs on the `k`-th GPU the process sees.
    Visible,
}

impl GpuBinding {
    /// Whether this is the default binding.
    pub fn is_default(&self) -> bool {
        *self == GpuBinding::default()
    }

    /// The first GPU of its host that the process of `local_rank`, running a machine of `slots`
    /// worker slots, uses.
    pub fn first_gpu(self, local_rank: u32, slots: u32) -> u32 {
        match self {
            GpuBinding::LocalRank => local_rank.saturating_mul(slots),
            GpuBinding::Visible => 0,
        }
    }
}

/// The tokio runtime a process of a job runs its roles on: one thread per worker role the process
/// holds (at least one), so that its workers can step at once.
///
/// No more: a thread more than the roles need costs every message. Each wake of a task from
/// another thread, and each task a thread finds and the other then looks for, wakes a parked
/// thread; on two cores, a two-process BSP job of the small MLP took 1.5× as long a clock with
/// two threads a process as with one. A role's long math hands its thread over instead
/// (`RoleContext::compute`), so the transport and the heartbeats go on meanwhile.
pub fn runtime(worker_roles: usize) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_roles.max(1))
        .enable_time()
        .enable_io()
        .build()
        .map_err(|source| EngineError::Io {
            path: "tokio runtime".into(),
            source,
        })
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            connect_timeout_s: 120.0,
            peer_timeout_s: 30.0,
            heartbeat_s: 1.0,
            max_frame_mib: 2048,
            gpus: GpuBinding::default(),
        }
    }
}

impl ProcessConfig {
    /// Whether every key has its default (the section is then left out of a written config).
    pub fn is_default(&self) -> bool {
        *self == ProcessConfig::default()
    }

    /// Checks every key is usable.
    pub fn validate(&self) -> Result<()> {
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(EngineError::config(
                    format!("process.{key}"),
                    v,
                    "must be a positive number of seconds",
                ))
            }
        };
        positive("connect_timeout_s", self.connect_timeout_s)?;
        positive("peer_timeout_s", self.peer_timeout_s)?;
        positive("heartbeat_s", self.heartbeat_s)?;
        if self.heartbeat_s >= self.peer_timeout_s {
            return Err(EngineError::config(
                "process.heartbeat_s",
                self.heartbeat_s,
                format!(
                    "must be below process.peer_timeout_s = {} (a live peer would look dead)",
                    self.peer_timeout_s
                ),
            ));
        }
        if self.max_frame_mib == 0 || self.max_frame_mib > 4095 {
            return Err(EngineError::config(
                "process.max_frame_mib",
                self.max_frame_mib,
                "must be 1..=4095 (frames carry a 32-bit length)",
            ));
        }
        Ok(())
    }

    /// The limits as the mesh uses them.
    pub fn limits(&self) -> mesh::Limits {
        mesh::Limits {
            connect_timeout: Duration::from_secs_f64(self.connect_timeout_s),
            peer_timeout: Duration::from_secs_f64(self.peer_timeout_s),
            heartbeat: Duration::from_secs_f64(self.heartbeat_s),
            max_frame: (self.max_frame_mib as usize) << 20,
        }
    }
}
