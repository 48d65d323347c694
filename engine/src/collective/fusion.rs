//! Tensor fusion: many tensors and a few trailing scalars in one flat buffer, cut into buckets.

use crate::error::{EngineError, Result};
use crate::payload::Payload;
use crate::submodel::tensor_error;
use candle_core::Tensor;

/// The layout of a fused buffer: tensors of `sizes` elements back to back, then `extras` scalars
/// (e.g. RNA's contribution weight, which rides in the same allreduce), cut into buckets of whole
/// tensors of at most `bucket_elems` elements (a larger tensor gets a bucket of its own; the
/// scalars join the last bucket). One allreduce of a few large buckets instead of one per tensor
/// is Horovod's Tensor Fusion: per-message latency is paid per bucket, not per tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fusion {
    sizes: Vec<usize>,
    extras: usize,
    buckets: Vec<(usize, usize)>,
}

impl Fusion {
    /// The layout for tensors of `sizes` elements plus `extras` scalars.
    pub fn new(sizes: Vec<usize>, extras: usize, bucket_elems: usize) -> Fusion {
        let cap = bucket_elems.max(1);
        let mut buckets: Vec<(usize, usize)> = Vec::new();
        let mut offset = 0;
        for &n in &sizes {
            match buckets.last_mut() {
                Some(b) if b.1 - b.0 + n <= cap => b.1 += n,
                _ => buckets.push((offset, offset + n)),
            }
            offset += n;
        }
        match buckets.last_mut() {
            Some(b) => b.1 += extras,
            None => buckets.push((0, extras)),
        }
        Fusion {
            sizes,
            extras,
            buckets,
        }
    }

    /// Elements of the fused buffer.
    pub fn len(&self) -> usize {
        self.sizes.iter().sum::<usize>() + self.extras
    }

    /// Whether the buffer holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buckets, as contiguous `[start, end)` ranges in order.
    pub fn buckets(&self) -> &[(usize, usize)] {
        &self.buckets
    }

    /// Fuses `tensors` (one per size, in order) and `extras` into one real buffer.
    pub fn fuse(&self, tensors: &[Vec<f32>], extras: &[f32]) -> Payload {
        let mut flat = Vec::with_capacity(self.len());
        for t in tensors {
            flat.extend_from_slice(t);
        }
        flat.extend_from_slice(extras);
        Payload::Real(flat)
    }

    /// Fuses `tensors` (one per size, in order, each of any shape holding that many elements)
    /// and `extras` into one flat tensor on the tensors' device: the buffer of [`Fusion::fuse`]
    /// built where the gradients are, for a collective that sums on the device (NCCL), so they
    /// need not cross to the host. An error names a tensor whose size is not the layout's.
    pub fn fuse_tensors(&self, tensors: &[Tensor], extras: &[f32]) -> Result<Tensor> {
        let bad = |reason: String| EngineError::Tensor {
            context: "fusing gradients into one buffer".into(),
            source: candle_core::Error::Msg(reason),
        };
        if tensors.len() != self.sizes.len() {
            return Err(bad(format!(
                "{} tensors for a layout of {}",
                tensors.len(),
                self.sizes.len()
            )));
        }
        let mut parts = Vec::with_capacity(tensors.len() + 1);
        for (k, (t, &n)) in tensors.iter().zip(&self.sizes).enumerate() {
            if t.elem_count() != n {
                return Err(bad(format!(
                    "{} elements for tensor {k} of {n}",
                    t.elem_count()
                )));
            }
            parts.push(
                t.flatten_all()
                    .map_err(|e| tensor_error("flatten a gradient", e))?,
            );
        }
        let device = tensors
            .first()
            .map_or(candle_core::Device::Cpu, |t| t.device().clone());
        parts.push(
            Tensor::from_slice(extras, extras.len(), &device)
                .map_err(|e| tensor_error("put the fused scalars beside the gradients", e))?,
        );
        Tensor::cat(&parts, 0).map_err(|e| tensor_error("fuse gradients", e))
    }

    /// A virtual buffer of the fused size (throughput mode).
    pub fn fuse_virtual(&self) -> Payload {
        Payload::Virtual {
            elems: self.len() as u64,
        }
    }

    /// The tensors and the scalars of a fused buffer, in place: views of `flat`, no copy.
    pub fn views<'a>(&self, flat: &'a [f32]) -> (Vec<&'a [f32]>, &'a [f32]) {
        let mut out = Vec::with_capacity(self.sizes.len());
        let mut rest = flat;
        for &n in &self.sizes {
            let (tensor, after) = rest.split_at(n.min(rest.len()));
            out.push(tensor);
            rest = after;
        }
        (out, rest)
    }

    /// The tensors of a fused flat tensor (on any device), each a view of its stretch of
    /// `flat` (no copy): the twin of [`Fusion::views`] for a buffer that stays on the device.
    /// An error if `flat` holds fewer elements than the tensors.
    pub fn tensor_views(&self, flat: &Tensor) -> Result<Vec<Tensor>> {
        let flat = flat
            .flatten_all()
            .map_err(|e| tensor_error("flatten a fused buffer", e))?;
        let mut out = Vec::with_capacity(self.sizes.len());
        let mut offset = 0;
        for &n in &self.sizes {
            let view = flat
                .narrow(0, offset, n)
                .map_err(|e| tensor_error("cut a tensor out of a fused buffer", e))?;
            out.push(view);
            offset += n;
        }
        Ok(out)
    }

    /// Bytes of the fused buffer.
    pub fn bytes(&self) -> u64 {
        self.len() as u64 * crate::payload::ELEM_BYTES
    }

    /// Elements of the fused buffer that belong to its tensors (the scalars follow them).
    pub fn tensor_elems(&self) -> usize {
        self.len() - self.extras
    }
}
