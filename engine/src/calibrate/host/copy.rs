//! Timing what a role does to a message's tensors, as `sim` charges it by `message_copy_gbps`:
//! packing a payload out of a model's values into a fresh buffer (as a parameter-server layout
//! cuts a block for a push or a reply) and unpacking one into the values (as it writes a reply
//! into them), with the caches emptied first: in a job, the data a message carries was last
//! touched before a training step.

use super::{CacheSweep, HostModel, Repeats};
use crate::payload::{Payload, ELEM_BYTES};

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

/// Times packing and unpacking a message of every parameter of `model`; `sweep` empties the
/// caches before every run.
pub fn measure_message_copy(
    model: &HostModel,
    repeats: &Repeats,
    sweep: &mut CacheSweep,
) -> CopyPoint {
    let elems = model.param_elems();
    let mut values: Vec<f32> = (0..elems).map(|i| (i % 89) as f32 * 1e-3).collect();
    let mut packed = Payload::Real(Vec::new());
    let time = |r: Result<(f64, usize), std::convert::Infallible>| r.map_or(f64::NAN, |(s, _)| s);
    let pack_seconds = time(repeats.median_after(
        || sweep.sweep(),
        || {
            packed = Payload::Real(values.to_vec());
            Ok(())
        },
    ));
    let unpack_seconds = time(repeats.median_after(
        || sweep.sweep(),
        || {
            if let Some(v) = packed.values() {
                values.copy_from_slice(v);
            }
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
