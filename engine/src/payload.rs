//! Tensor payloads carried by messages: real values, or virtual ones of a true byte size.
//!
//! Throughput mode moves the papers' big models (hundreds of MB) through the same protocol as
//! real training; those payloads carry only their size. One type serves both so strategy code
//! never branches on the mode.

use serde::{Deserialize, Serialize};

/// Bytes per element on the wire (fp32).
pub const ELEM_BYTES: u64 = 4;

/// The values of one tensor (or one block of a flattened tensor).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Payload {
    /// Real fp32 values.
    Real(Vec<f32>),
    /// A stand-in with only an element count: no math is done on it.
    Virtual {
        /// Number of fp32 elements it stands for.
        elems: u64,
    },
}

impl Payload {
    /// Number of elements, real or virtual.
    pub fn elems(&self) -> u64 {
        match self {
            Payload::Real(v) => v.len() as u64,
            Payload::Virtual { elems } => *elems,
        }
    }

    /// Size on the wire.
    pub fn bytes(&self) -> u64 {
        self.elems() * ELEM_BYTES
    }

    /// The real values, if any.
    pub fn values(&self) -> Option<&[f32]> {
        match self {
            Payload::Real(v) => Some(v),
            Payload::Virtual { .. } => None,
        }
    }

    /// A zero payload of the same kind and size.
    pub fn zeros_like(&self) -> Payload {
        match self {
            Payload::Real(v) => Payload::Real(vec![0.0; v.len()]),
            Payload::Virtual { elems } => Payload::Virtual { elems: *elems },
        }
    }

    /// `self += weight * other`, element-wise (no-op on virtual payloads).
    pub fn axpy(&mut self, weight: f32, other: &Payload) {
        if let (Payload::Real(a), Payload::Real(b)) = (self, other) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += weight * y;
            }
        }
    }

    /// Multiplies every element by `k` (no-op on virtual payloads).
    pub fn scale(&mut self, k: f32) {
        if let Payload::Real(a) = self {
            for x in a.iter_mut() {
                *x *= k;
            }
        }
    }
}

/// Identifier of a parameter block (see [`crate::ps::ParamLayout`]).
pub type BlockId = u32;

/// One parameter block's values travelling in a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockPayload {
    /// Which block.
    pub block: BlockId,
    /// Its values.
    pub data: Payload,
}

/// Total wire size of a list of blocks.
pub fn blocks_bytes(blocks: &[BlockPayload]) -> u64 {
    blocks.iter().map(|b| b.data.bytes()).sum()
}
