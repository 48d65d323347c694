//! The allreduce a job asks for: the message ring (the reference) or NCCL.

use super::{allreduce_sum, Group};
use crate::config::CollectiveBackend;
use crate::context::RoleContext;
use crate::error::Result;
use crate::job::Job;
use crate::payload::Payload;

/// One member's allreduce over a group, run by the backend of the job's `collective` key.
///
/// Strategies sum through this rather than calling the ring directly, so a run moves to NCCL by
/// configuration alone. The ring is the default and the reference: deterministic, and timed by
/// the link model in `sim`. NCCL runs on the members' GPUs in real time.
#[derive(Debug)]
pub struct Allreduce {
    group: Group,
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Ring,
    #[cfg(feature = "nccl")]
    Nccl(super::nccl::NcclMember),
}

impl Allreduce {
    /// `ctx`'s role joining `group` with the backend `job` asks for; NCCL members first agree on
    /// a communicator over the transport (every member must join before any sums).
    pub async fn join(ctx: &mut RoleContext, job: &Job, group: Group) -> Result<Allreduce> {
        group.require_rank(ctx.id())?;
        let backend = match job.config.collective {
            CollectiveBackend::Ring => Backend::Ring,
            CollectiveBackend::Nccl => nccl_backend(ctx, job, &group).await?,
        };
        Ok(Allreduce { group, backend })
    }

    /// The members, in rank order.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Sums `buf` over the group in place, cut into `buckets` for the ring (NCCL takes the
    /// buffer whole); `op` names the operation among the ring's messages. Returns the bytes
    /// this member sent.
    pub async fn sum(
        &mut self,
        ctx: &mut RoleContext,
        op: u64,
        buf: &mut Payload,
        buckets: &[(usize, usize)],
    ) -> Result<u64> {
        match &self.backend {
            Backend::Ring => allreduce_sum(ctx, &self.group, op, buf, buckets).await,
            #[cfg(feature = "nccl")]
            Backend::Nccl(member) => member.sum(buf),
        }
    }
}

#[cfg(feature = "nccl")]
async fn nccl_backend(ctx: &mut RoleContext, job: &Job, group: &Group) -> Result<Backend> {
    let gpu = job.cluster.gpu_of(ctx.id()).ok_or_else(|| {
        crate::error::EngineError::config(
            "collective",
            "\"nccl\"",
            format!("{} has no GPU: every NCCL member must be on CUDA", ctx.id()),
        )
    })?;
    Ok(Backend::Nccl(
        super::nccl::NcclMember::join(ctx, group, gpu).await?,
    ))
}

#[cfg(not(feature = "nccl"))]
async fn nccl_backend(_: &mut RoleContext, _: &Job, _: &Group) -> Result<Backend> {
    Err(crate::error::EngineError::config(
        "collective",
        "\"nccl\"",
        crate::gpu::NO_NCCL,
    ))
}
