//! NCCL allreduce on the members' GPUs (builds with the `nccl` feature).
//!
//! The members agree on a communicator the way `torch.distributed` does: rank 0 makes NCCL's
//! unique id and sends it to the others, here as an engine message over the transport; each member
//! then joins with its rank on its own GPU. A sum runs on the device: a member whose gradients are
//! already there hands them over as a tensor ([`NcclMember::sum_tensor`]) and nothing crosses to
//! the host; a host buffer goes up, is reduced in place, and comes back ([`NcclMember::sum`]).

use super::Group;
use crate::context::RoleContext;
use crate::error::{EngineError, Result};
use crate::message::Message;
use crate::payload::Payload;
use candle_core::cuda_backend::cudarc::driver::{CudaContext, CudaStream};
use candle_core::cuda_backend::cudarc::nccl::{Comm, Id, ReduceOp};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, Device, Storage, Tensor};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Tag of the message that carries the communicator's unique id from rank 0.
const ID_TAG: &str = "nccl-unique-id";

/// The unique id as it travels.
#[derive(Serialize, Deserialize)]
struct UniqueId {
    bytes: Vec<u8>,
}

/// One member's NCCL communicator in a group.
#[derive(Debug)]
pub struct NcclMember {
    comm: Comm,
    stream: Arc<CudaStream>,
}

// SAFETY: an NCCL communicator may be used from any thread as long as no two calls on it run at
// once (NCCL's thread-safety rules). A member is owned by one role, whose task may move between
// threads but runs one call at a time: `sum` takes `&self` only from the owning role's `&mut`
// borrow of its `Allreduce`, and `NcclMember` is not `Sync`, so it is never shared.
unsafe impl Send for NcclMember {}

/// An NCCL failure as an engine error naming what was being done.
fn gpu_error(what: &str, e: impl std::fmt::Debug) -> EngineError {
    EngineError::Gpu {
        what: what.into(),
        reason: format!("{e:?}"),
    }
}

impl NcclMember {
    /// Joins `group` as `ctx`'s role on GPU `gpu`: rank 0 makes the unique id and sends it to
    /// every other member; all then make the communicator (which waits for every rank).
    pub async fn join(ctx: &mut RoleContext, group: &Group, gpu: u32) -> Result<NcclMember> {
        let rank = group.require_rank(ctx.id())?;
        let id = if rank == 0 {
            let id = Id::new().map_err(|e| gpu_error("make an NCCL unique id", e))?;
            let bytes = id.internal().iter().map(|&c| c as u8).collect();
            let msg = Message::custom(ID_TAG, &UniqueId { bytes })?;
            for &peer in &group.members()[1..] {
                ctx.send(peer, msg.clone());
            }
            id
        } else {
            let root = group.member(0);
            let env = ctx
                .recv_matching(|e| {
                    e.from == root && matches!(&e.msg, Message::Custom(m) if m.tag == ID_TAG)
                })
                .await?;
            let got: UniqueId = env
                .msg
                .decode_custom(ID_TAG)?
                .ok_or_else(|| EngineError::protocol(ctx.id(), "expected the NCCL unique id"))?;
            let mut internal = [0 as std::ffi::c_char; 128];
            if got.bytes.len() != internal.len() {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("an NCCL unique id of {} bytes, not 128", got.bytes.len()),
                ));
            }
            for (slot, b) in internal.iter_mut().zip(&got.bytes) {
                *slot = *b as std::ffi::c_char;
            }
            Id::uninit(internal)
        };
        let size = group.size();
        // Joining waits for every rank, as the math of a step does: off the async threads.
        tokio::task::block_in_place(|| {
            let cuda = CudaContext::new(gpu as usize)
                .map_err(|e| gpu_error(&format!("open GPU {gpu}"), e))?;
            let stream = cuda
                .new_stream()
                .map_err(|e| gpu_error(&format!("make a stream on GPU {gpu}"), e))?;
            let comm = Comm::from_rank(stream.clone(), rank, size, id).map_err(|e| {
                gpu_error(
                    &format!("join an NCCL communicator as rank {rank} of {size}"),
                    e,
                )
            })?;
            Ok(NcclMember { comm, stream })
        })
    }

    /// Sums `buf` over the group in place; a virtual payload (throughput mode) is summed as a
    /// zero buffer of its size on the device, so its time is NCCL's own. Returns the bytes this
    /// member sent by NCCL's ring algorithm, 2(P−1)/P of the buffer, as the message ring reports.
    pub fn sum(&self, buf: &mut Payload) -> Result<u64> {
        let what = "allreduce with NCCL";
        tokio::task::block_in_place(|| {
            match buf {
                Payload::Real(values) => {
                    let mut on_device = self
                        .stream
                        .clone_htod(values.as_slice())
                        .map_err(|e| gpu_error(what, e))?;
                    self.comm
                        .all_reduce_in_place(&mut on_device, &ReduceOp::Sum)
                        .map_err(|e| gpu_error(what, e))?;
                    self.stream
                        .memcpy_dtoh(&on_device, values.as_mut_slice())
                        .map_err(|e| gpu_error(what, e))?;
                }
                Payload::Virtual { elems } => {
                    let mut zeros = self
                        .stream
                        .alloc_zeros::<f32>(*elems as usize)
                        .map_err(|e| gpu_error(what, e))?;
                    self.comm
                        .all_reduce_in_place(&mut zeros, &ReduceOp::Sum)
                        .map_err(|e| gpu_error(what, e))?;
                }
            }
            self.stream.synchronize().map_err(|e| gpu_error(what, e))
        })?;
        let p = self.comm.world_size() as u64;
        Ok(2 * (p - 1) * buf.bytes() / p)
    }

    /// Sums the flat tensor `buf`, on this member's GPU, over the group without leaving the
    /// device: NCCL reads it where it lies and writes the sum into a new device buffer, returned
    /// as a tensor on `buf`'s device (the input is left as it was). Returns the bytes sent, as
    /// [`NcclMember::sum`].
    pub fn sum_tensor(&self, buf: &Tensor) -> Result<(Tensor, u64)> {
        let what = "allreduce a device tensor with NCCL";
        let Device::Cuda(device) = buf.device() else {
            return Err(gpu_error(what, "the buffer is not on a CUDA device"));
        };
        let flat = buf.flatten_all().map_err(|e| gpu_error(what, e))?;
        let elems = flat.elem_count();
        let summed = tokio::task::block_in_place(|| {
            let (storage, layout) = flat.storage_and_layout();
            let Storage::Cuda(cuda) = &*storage else {
                return Err(gpu_error(what, "the buffer's storage is not on CUDA"));
            };
            let (start, end) = layout
                .contiguous_offsets()
                .ok_or_else(|| gpu_error(what, "the buffer is not contiguous"))?;
            let src = cuda
                .as_cuda_slice::<f32>()
                .map_err(|e| gpu_error(what, e))?
                .slice(start..end);
            let mut dst = self
                .stream
                .alloc_zeros::<f32>(elems)
                .map_err(|e| gpu_error(what, e))?;
            self.comm
                .all_reduce(&src, &mut dst, &ReduceOp::Sum)
                .map_err(|e| gpu_error(what, e))?;
            self.stream.synchronize().map_err(|e| gpu_error(what, e))?;
            Ok(dst)
        })?;
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(summed, device.clone()));
        let sum = Tensor::from_storage(storage, elems, BackpropOp::none(), false);
        let p = self.comm.world_size() as u64;
        Ok((sum, 2 * (p - 1) * 4 * elems as u64 / p))
    }
}

/// What [`self_check`] measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NcclCheck {
    /// Timed allreduce calls.
    pub calls: u32,
    /// Mean milliseconds per call, synchronised (after one untimed warm-up call).
    pub mean_ms: f64,
    /// Whether every element came back as the sum (on one rank: unchanged).
    pub correct: bool,
}

/// Allreduces `elems` f32 on GPU `gpu` with a one-rank communicator `calls` times, out of place
/// (in place, one rank has nothing to move): a check that NCCL loads and runs on this machine,
/// with its time per call.
pub fn self_check(gpu: u32, elems: usize, calls: u32) -> Result<NcclCheck> {
    let what = "run a one-rank NCCL allreduce";
    let cuda = CudaContext::new(gpu as usize).map_err(|e| gpu_error(what, e))?;
    let stream = cuda.new_stream().map_err(|e| gpu_error(what, e))?;
    let comm = Comm::from_devices(vec![stream.clone()])
        .map_err(|e| gpu_error(what, e))?
        .pop()
        .ok_or_else(|| gpu_error(what, "no communicator"))?;
    let host: Vec<f32> = (0..elems).map(|i| (i % 1024) as f32).collect();
    let src = stream.clone_htod(&host).map_err(|e| gpu_error(what, e))?;
    let mut dst = stream
        .alloc_zeros::<f32>(elems)
        .map_err(|e| gpu_error(what, e))?;
    let mut run = || -> Result<()> {
        comm.all_reduce(&src, &mut dst, &ReduceOp::Sum)
            .map_err(|e| gpu_error(what, e))?;
        stream.synchronize().map_err(|e| gpu_error(what, e))
    };
    run()?;
    let started = std::time::Instant::now();
    for _ in 0..calls {
        run()?;
    }
    let mean_ms = started.elapsed().as_secs_f64() * 1e3 / f64::from(calls.max(1));
    let back = stream.clone_dtoh(&dst).map_err(|e| gpu_error(what, e))?;
    Ok(NcclCheck {
        calls,
        mean_ms,
        correct: back == host,
    })
}
