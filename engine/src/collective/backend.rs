//! The allreduce a job asks for: the message ring (the reference) or NCCL.

use super::{allreduce_sum, Group};
use crate::config::CollectiveBackend;
use crate::context::RoleContext;
use crate::error::{EngineError, Result};
use crate::job::Job;
use crate::payload::Payload;
use candle_core::Tensor;

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

    /// The message ring over `group`, whatever the job asks for (tests of the ring's paths).
    #[cfg(test)]
    pub(crate) fn ring(group: Group) -> Allreduce {
        Allreduce {
            group,
            backend: Backend::Ring,
        }
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

    /// Whether this allreduce sums on the members' devices (NCCL): a member whose gradients are
    /// on its device then hands them over as a tensor ([`Allreduce::sum_tensor`]), so they
    /// need not cross to the host.
    pub fn sums_on_device(&self) -> bool {
        match &self.backend {
            Backend::Ring => false,
            #[cfg(feature = "nccl")]
            Backend::Nccl(_) => true,
        }
    }

    /// Sums the flat tensor `buf` over the group and returns the sum on `buf`'s device, with
    /// the bytes this member sent. NCCL sums it where it lies; the ring, whose hops are
    /// messages, takes it through the host (down, around the ring cut into `buckets`, back up):
    /// the same sum as [`Allreduce::sum`] of its values.
    pub async fn sum_tensor(
        &mut self,
        ctx: &mut RoleContext,
        op: u64,
        buf: &Tensor,
        buckets: &[(usize, usize)],
    ) -> Result<(Tensor, u64)> {
        match &self.backend {
            Backend::Ring => {
                let fail = |what: &str, source| EngineError::Tensor {
                    context: format!("{what} for the ring allreduce"),
                    source,
                };
                let values = buf
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .map_err(|e| fail("read the buffer", e))?;
                let mut host = Payload::Real(values);
                let sent = allreduce_sum(ctx, &self.group, op, &mut host, buckets).await?;
                let Payload::Real(values) = host else {
                    return Err(EngineError::protocol(
                        ctx.id(),
                        "the ring lost the buffer's values",
                    ));
                };
                let n = values.len();
                let sum = Tensor::from_vec(values, n, buf.device())
                    .map_err(|e| fail("put back the sum", e))?;
                Ok((sum, sent))
            }
            #[cfg(feature = "nccl")]
            Backend::Nccl(member) => member.sum_tensor(buf),
        }
    }

    /// Sums `tensors` (gradients, any shapes, on one device) over the group in one call and
    /// returns the sums, each flat, in order, with the bytes this member sent: they are fused
    /// into one buffer where they lie and [`Allreduce::sum_tensor`] sums it (on the device under
    /// NCCL).
    pub async fn sum_tensors(
        &mut self,
        ctx: &mut RoleContext,
        op: u64,
        tensors: &[Tensor],
    ) -> Result<(Vec<Tensor>, u64)> {
        let sizes = tensors.iter().map(Tensor::elem_count).collect();
        let fusion = super::Fusion::new(sizes, 0, usize::MAX);
        let buf = fusion.fuse_tensors(tensors, &[])?;
        let (sum, sent) = self.sum_tensor(ctx, op, &buf, &[]).await?;
        Ok((fusion.tensor_views(&sum)?, sent))
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
