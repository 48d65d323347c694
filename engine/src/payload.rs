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
    /// Real fp32 values (bytes on a binary wire, see [`f32_bytes`]).
    Real(#[serde(with = "f32_bytes")] Vec<f32>),
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

/// The serde form of real values: little-endian bytes in one piece for binary formats (the
/// process runtime's frames, checkpoints' MessagePack), so a tensor crosses a socket at memory
/// speed rather than one tagged float at a time; a list of numbers for human-readable ones.
pub mod f32_bytes {
    use serde::de::{self, Deserializer, SeqAccess, Visitor};
    use serde::{Deserialize, Serialize, Serializer};
    use std::fmt;

    /// Writes `values`.
    pub fn serialize<S: Serializer>(values: &[f32], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return values.serialize(s);
        }
        if cfg!(target_endian = "little") {
            // The values' own memory is their little-endian bytes: written without a copy.
            return s.serialize_bytes(bytemuck::cast_slice(values));
        }
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for x in values {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        s.serialize_bytes(&bytes)
    }

    /// Reads values [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        if d.is_human_readable() {
            return Vec::<f32>::deserialize(d);
        }
        d.deserialize_byte_buf(F32Visitor)
    }

    struct F32Visitor;

    impl<'de> Visitor<'de> for F32Visitor {
        type Value = Vec<f32>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fp32 values as little-endian bytes")
        }

        fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Vec<f32>, E> {
            if !bytes.len().is_multiple_of(4) {
                return Err(E::invalid_length(bytes.len(), &"a multiple of 4 bytes"));
            }
            Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        }

        fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Vec<f32>, E> {
            self.visit_bytes(&bytes)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f32>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(x) = seq.next_element()? {
                out.push(x);
            }
            Ok(out)
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
