//! Timing what a role does to a message's tensors, as `sim` charges it by `message_copy_gbps`:
//! packing a payload out of a model's values into a fresh buffer (as a parameter server cuts its
//! values for a reply, or a worker its gradients for a push) and unpacking one into the values
//! (as a worker writes a reply into them).
//!
//! Unlike a training step, a copy is timed with the caches as a job leaves them, not emptied:
//! what a message carries was written just before it is copied (by the server's update, the
//! step that made the gradients, the runtime that decoded it), and what it is copied into was
//! in use a clock before. On the development machine a traced job's server packed the larger
//! MLP's 7 MB replies in 0.44 ms, as such a copy takes with the data just written (0.435 ms),
//! where after a sweep of twice the last-level cache it took 0.70–0.73. A model whose values
//! outgrow the caches copies from memory either way.

use super::{HostModel, Repeats};
use crate::payload::ELEM_BYTES;
use std::cell::RefCell;

/// A role's measured copies of one message carrying every parameter of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyPoint {
    /// The model's name.
    pub model: String,
    /// Bytes of the payload.
    pub bytes: u64,
    /// Median seconds to pack it.
    pub pack_seconds: f64,
    /// Median seconds to unpack it.
    pub unpack_seconds: f64,
}

impl CopyPoint {
    /// The rate `sim` charges each end of a message at, Gbit/s: the payload over the mean of
    /// packing and unpacking it.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / (0.5 * (self.pack_seconds + self.unpack_seconds)) / 1e9
    }
}

/// Times packing and unpacking a message of every parameter of `model`, the data copied written
/// afresh before every run.
pub fn measure_message_copy(model: &HostModel, repeats: &Repeats) -> CopyPoint {
    let elems = model.param_elems();
    // The values and the message buffer, written between runs and copied in them.
    let values = RefCell::new(
        (0..elems)
            .map(|i| (i % 89) as f32 * 1e-3)
            .collect::<Vec<_>>(),
    );
    let packed = RefCell::new(Vec::<f32>::new());
    let time = |r: Result<(f64, usize), std::convert::Infallible>| r.map_or(f64::NAN, |(s, _)| s);
    let pack_seconds = time(repeats.median_after(
        || {
            // The last message's buffer was sent and freed; the values were just updated.
            packed.replace(Vec::new());
            touch(&mut values.borrow_mut());
        },
        || {
            packed.replace(values.borrow().to_vec());
            Ok(())
        },
    ));
    let unpack_seconds = time(repeats.median_after(
        // The message was just decoded.
        || touch(&mut packed.borrow_mut()),
        || {
            values.borrow_mut().copy_from_slice(&packed.borrow());
            Ok(())
        },
    ));
    std::hint::black_box(&values);
    CopyPoint {
        model: model.name.clone(),
        bytes: elems as u64 * ELEM_BYTES,
        pack_seconds,
        unpack_seconds,
    }
}

/// Writes every value, as the role or the runtime that produced them last did (their values
/// unchanged).
pub(super) fn touch(values: &mut [f32]) {
    for v in values.iter_mut() {
        *v = std::hint::black_box(*v) + 0.0;
    }
}
