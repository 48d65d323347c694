//! Tensor fusion: many tensors and a few trailing scalars in one flat buffer, cut into buckets.

use crate::payload::Payload;

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

    /// Bytes of the fused buffer.
    pub fn bytes(&self) -> u64 {
        self.len() as u64 * crate::payload::ELEM_BYTES
    }

    /// Elements of the fused buffer that belong to its tensors (the scalars follow them).
    pub fn tensor_elems(&self) -> usize {
        self.len() - self.extras
    }
}
