//! Parameters up to a GPU and gradients down from it through page-locked staging buffers.
//!
//! A parameter-server worker on a GPU uploads the parameters it pulled before every step and
//! downloads its gradients after it. candle copies from and to pageable memory, which the driver
//! stages through small buffers of its own, one synchronous copy per tensor. Here each thread
//! keeps one page-locked buffer per direction and device (grown to the largest model it moved):
//! every tensor's copy is queued from or to its own range of it, and the thread waits once for
//! them all. The upload writes into the variables' storage in place, as the CPU path does, so a
//! step allocates nothing for its parameters.

use super::vars::cuda_f32_view;
use candle_core::cuda_backend::cudarc::driver::{CudaStream, PinnedHostSlice};
use candle_core::cuda_backend::{CudaDevice, DeviceId};
use candle_core::{CudaStorage, InplaceOp1, Layout, Result, Storage, Tensor, Var};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// The direction of a copy, which decides its buffer's kind.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Direction {
    /// Host to GPU: write-combined memory, which the host writes fast and never reads.
    Up,
    /// GPU to host: ordinary page-locked memory, which the host reads.
    Down,
}

thread_local! {
    /// This thread's staging buffers, by device and direction.
    static BUFFERS: RefCell<HashMap<(DeviceId, Direction), PinnedHostSlice<f32>>> =
        RefCell::new(HashMap::new());
}

/// Runs `f` on this thread's `direction` buffer for `dev`, at least `len` elements long.
fn with_buffer<R>(
    dev: &CudaDevice,
    direction: Direction,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> Result<R>,
) -> Result<R> {
    BUFFERS.with(|buffers| {
        let mut buffers = buffers.borrow_mut();
        let key = (dev.id(), direction);
        if buffers.get(&key).is_none_or(|b| b.len() < len) {
            buffers.remove(&key);
            let ctx = dev.cuda_stream().context().clone();
            let flags = match direction {
                Direction::Up => {
                    candle_core::cuda_backend::cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED
                }
                Direction::Down => 0,
            };
            // SAFETY: the buffer's contents are written (up) or overwritten by a copy (down)
            // before they are read.
            let buffer = unsafe { ctx.alloc_pinned_with_flags::<f32>(len, flags)? };
            buffers.insert(key, buffer);
        }
        let buffer = buffers.get_mut(&key).expect("inserted above");
        f(&mut buffer.as_mut_slice()?[..len])
    })
}

/// Whether every variable is on one CUDA device; that device.
fn one_cuda_device<'a>(
    mut devices: impl Iterator<Item = &'a candle_core::Device>,
) -> Option<CudaDevice> {
    let first = match devices.next()? {
        candle_core::Device::Cuda(d) => d.clone(),
        _ => return None,
    };
    devices
        .all(|d| matches!(d, candle_core::Device::Cuda(c) if c.id() == first.id()))
        .then_some(first)
}

/// Sets `vars` (all on one CUDA device) from `values`, lengths already checked; `false` when
/// the variables are not all on one CUDA device (nothing done).
pub(crate) fn upload(vars: &[&Var], values: &[Vec<f32>]) -> Result<bool> {
    let Some(dev) = one_cuda_device(vars.iter().map(|v| v.device())) else {
        return Ok(false);
    };
    let total: usize = values.iter().map(Vec::len).sum();
    if total == 0 {
        return Ok(true);
    }
    let stream = dev.cuda_stream();
    with_buffer(&dev, Direction::Up, total, |buffer| {
        let mut at = 0;
        let queued = vars.iter().zip(values).try_for_each(|(var, v)| {
            let range = &mut buffer[at..at + v.len()];
            range.copy_from_slice(v);
            at += v.len();
            var.inplace_op1(&CopyUp {
                src: range,
                stream: &stream,
            })
        });
        // The buffer is reused by the next upload: every copy queued out of it must be done,
        // also when a later one failed.
        let synced = stream.synchronize();
        queued?;
        synced?;
        Ok(true)
    })
}

/// Queues a copy of host values from the staging buffer over a CUDA tensor's elements.
struct CopyUp<'a> {
    src: &'a [f32],
    stream: &'a Arc<CudaStream>,
}

impl InplaceOp1 for CopyUp<'_> {
    fn name(&self) -> &'static str {
        "staged-upload"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> Result<()> {
        candle_core::bail!("staged-upload: the tensor is on the CPU")
    }

    fn cuda_fwd(&self, storage: &mut CudaStorage, layout: &Layout) -> Result<()> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("staged-upload: the tensor is not contiguous");
        };
        if end - start != self.src.len() {
            candle_core::bail!(
                "staged-upload: {} values for {} elements",
                self.src.len(),
                end - start
            );
        }
        let mut dst = storage.as_cuda_slice_mut::<f32>()?.slice_mut(start..end);
        self.stream.memcpy_htod(self.src, &mut dst)?;
        Ok(())
    }
}

/// Each tensor's values as a flat row-major vector, for tensors all on one CUDA device; `None`
/// when they are not (nothing done).
pub(crate) fn download(tensors: &[Tensor]) -> Result<Option<Vec<Vec<f32>>>> {
    let Some(dev) = one_cuda_device(tensors.iter().map(|t| t.device())) else {
        return Ok(None);
    };
    let tensors: Vec<Tensor> = tensors
        .iter()
        .map(|t| t.contiguous())
        .collect::<Result<_>>()?;
    let total: usize = tensors.iter().map(Tensor::elem_count).sum();
    if total == 0 {
        return Ok(Some(vec![Vec::new(); tensors.len()]));
    }
    let stream = dev.cuda_stream();
    with_buffer(&dev, Direction::Down, total, |buffer| {
        let mut at = 0;
        let queued = tensors.iter().try_for_each(|t| {
            let (storage, layout) = t.storage_and_layout();
            let Storage::Cuda(s) = &*storage else {
                candle_core::bail!("staged-download: a tensor left the GPU");
            };
            let src = cuda_f32_view(s, layout, "staged-download")?;
            let len = src.len();
            stream.memcpy_dtoh(&src, &mut buffer[at..at + len])?;
            at += len;
            Ok(())
        });
        // The copies were queued: the values are there once the stream is done, and the buffer
        // is free for the next download only then, also when a later copy failed.
        let synced = stream.synchronize();
        queued?;
        synced?;
        let mut at = 0;
        Ok(Some(
            tensors
                .iter()
                .map(|t| {
                    let v = buffer[at..at + t.elem_count()].to_vec();
                    at += t.elem_count();
                    v
                })
                .collect(),
        ))
    })
}
