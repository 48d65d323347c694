//! A frame made ready for the socket: its length and body as a list of pieces.
//!
//! Small parts of a frame (its header, its fields, short payloads) are copied into pieces of at
//! most [`PIECE`] bytes taken from a pool, so a stream of large copied frames reuses the same
//! pages instead of mapping fresh ones for every frame. A frame the sender gives away
//! ([`encode_in_place`]) keeps its tensors where they are: the pieces that carry them point into
//! the frame's own memory, which stays alive until the last of them has been written. A 553 MB
//! push then costs the sender no copy before its first byte leaves, only the socket's own.

use bytes::Bytes;
use serde::Serialize;
use std::sync::Arc;

/// Largest piece of an [`Encoded`] frame, and the size of the zero block filler is written from.
pub const PIECE: usize = 4 << 20;

/// Zeros that filler bytes ([`super::wire::Padding`]) are written from, in place.
pub static ZEROS: [u8; PIECE] = [0; PIECE];

/// Writes shorter than this are copied even when they could stay in place: a piece of their own
/// would cost the writer more than the copy.
const IN_PLACE_MIN: usize = 64 << 10;

/// A frame ready for the socket: its 4-byte big-endian length and its body, in pieces.
#[derive(Clone, Debug)]
pub struct Encoded {
    pieces: Vec<Piece>,
}

/// One piece of an [`Encoded`] frame.
#[derive(Clone, Debug)]
enum Piece {
    /// Bytes copied into a buffer of the pool (or a small one of its own).
    Copied(Bytes),
    /// Bytes of the frame's own tensors, or of [`ZEROS`], not copied.
    InPlace(Bytes),
}

impl Piece {
    fn bytes(&self) -> &Bytes {
        match self {
            Piece::Copied(b) | Piece::InPlace(b) => b,
        }
    }
}

impl Encoded {
    /// The pieces in the order they go on the socket.
    pub fn pieces(&self) -> impl Iterator<Item = &Bytes> {
        self.pieces.iter().map(Piece::bytes)
    }

    /// Bytes of the body (without the length).
    pub fn body_len(&self) -> usize {
        self.pieces().map(Bytes::len).sum::<usize>() - 4
    }

    /// How many of the body's bytes were not copied to encode it.
    pub fn in_place_len(&self) -> usize {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::InPlace(b) => Some(b.len()),
                Piece::Copied(_) => None,
            })
            .sum()
    }
}

/// Pieces written out and free again, kept for the next frames (at most [`POOL_PIECES`]): a
/// steady stream of large messages then reuses the same pages.
static POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Most pieces the pool keeps (1 GiB: two frames of the largest models' gradients).
const POOL_PIECES: usize = 256;

/// A free piece of [`PIECE`] bytes' capacity.
fn fresh_piece() -> Vec<u8> {
    let reused = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let mut piece = reused.unwrap_or_else(|| Vec::with_capacity(PIECE));
    piece.clear();
    piece
}

/// Gives the copied pieces of a frame that has been written back for reuse (the pieces left in
/// place release their frame instead).
pub fn recycle(frame: Encoded) {
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    for piece in frame.pieces {
        if pool.len() >= POOL_PIECES {
            break;
        }
        let Piece::Copied(piece) = piece else {
            continue;
        };
        let piece = Vec::from(piece);
        if piece.capacity() == PIECE {
            pool.push(piece);
        }
    }
}

/// Where the bytes of a frame's tensors lie, so that a write of them can be recognised and
/// left in place.
pub trait TensorBytes: Send + Sync + 'static {
    /// The byte slices of the tensors it carries, always the same ones in the same order.
    fn tensor_bytes(&self) -> Vec<&[u8]>;
}

/// Bytes of tensor `index` of a shared frame, `start..start + len`: the owner of an in-place
/// piece, which keeps the frame alive for as long as the piece is.
struct FrameSlice<F> {
    frame: Arc<F>,
    index: usize,
    start: usize,
    len: usize,
}

impl<F: TensorBytes> AsRef<[u8]> for FrameSlice<F> {
    fn as_ref(&self) -> &[u8] {
        // The frame is shared and never mutated, so its tensors are the slices they were when
        // the piece was cut (`Bytes::from_owner` reads this once, when it is made).
        self.frame
            .tensor_bytes()
            .get(self.index)
            .and_then(|t| t.get(self.start..self.start + self.len))
            .unwrap_or(&[])
    }
}

/// What a frame's encoding may leave in place: the frame and the addresses of its tensors.
struct InPlaceSource<F> {
    frame: Arc<F>,
    /// (address of the first byte, length) of each tensor, by index.
    tensors: Vec<(usize, usize)>,
}

impl<F: TensorBytes> InPlaceSource<F> {
    fn new(frame: Arc<F>) -> Self {
        let tensors = frame
            .tensor_bytes()
            .iter()
            .map(|t| (t.as_ptr() as usize, t.len()))
            .collect();
        InPlaceSource { frame, tensors }
    }

    /// `buf` as pieces that point where it lies, if it lies within one of the frame's tensors
    /// or within [`ZEROS`]; `None` if it lies elsewhere (a temporary of the serializer).
    fn pieces_of(&self, buf: &[u8]) -> Option<Vec<Bytes>> {
        let at = buf.as_ptr() as usize;
        let zeros = ZEROS.as_ptr() as usize;
        if at >= zeros && at + buf.len() <= zeros + ZEROS.len() {
            let start = at - zeros;
            return Some(vec![Bytes::from_static(&ZEROS[start..start + buf.len()])]);
        }
        let (index, &(base, _)) = self
            .tensors
            .iter()
            .enumerate()
            .find(|(_, &(base, len))| at >= base && at + buf.len() <= base + len)?;
        let whole = Bytes::from_owner(FrameSlice {
            frame: Arc::clone(&self.frame),
            index,
            start: at - base,
            len: buf.len(),
        });
        // The same size of write as a copied frame's, for the socket.
        Some(
            (0..whole.len())
                .step_by(PIECE)
                .map(|from| whole.slice(from..(from + PIECE).min(whole.len())))
                .collect(),
        )
    }
}

/// A part of a frame as it is cut: bytes copied, or bytes left in place.
enum Part {
    Copied(Vec<u8>),
    InPlace(Bytes),
}

/// The writer an encoding goes through: copies into pool pieces, or, for a large write of the
/// frame's own tensors, pieces pointing at them.
struct Cutter<F> {
    done: Vec<Part>,
    current: Vec<u8>,
    in_place: Option<InPlaceSource<F>>,
}

impl<F: TensorBytes> Cutter<F> {
    fn new(in_place: Option<InPlaceSource<F>>) -> Self {
        let mut current = fresh_piece();
        // Room for the length, written once the body is known.
        current.extend_from_slice(&[0u8; 4]);
        Cutter {
            done: Vec::new(),
            current,
            in_place,
        }
    }

    /// The pieces, the length written in front.
    fn finish(mut self) -> Result<Encoded, usize> {
        self.close_current();
        let total = self
            .done
            .iter()
            .map(|p| match p {
                Part::Copied(v) => v.len(),
                Part::InPlace(b) => b.len(),
            })
            .sum::<usize>()
            - 4;
        let len = u32::try_from(total).map_err(|_| total)?;
        // The first part is always the copied one the length's room was made in.
        if let Some(Part::Copied(head)) = self.done.first_mut() {
            head[..4].copy_from_slice(&len.to_be_bytes());
        }
        let pieces = self
            .done
            .into_iter()
            .map(|p| match p {
                Part::Copied(v) => Piece::Copied(Bytes::from(v)),
                Part::InPlace(b) => Piece::InPlace(b),
            })
            .collect();
        Ok(Encoded { pieces })
    }

    fn close_current(&mut self) {
        if !self.current.is_empty() {
            self.done
                .push(Part::Copied(std::mem::take(&mut self.current)));
        }
    }
}

impl<F: TensorBytes> std::io::Write for Cutter<F> {
    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len();
        if n >= IN_PLACE_MIN {
            if let Some(pieces) = self.in_place.as_ref().and_then(|s| s.pieces_of(buf)) {
                self.close_current();
                self.done.extend(pieces.into_iter().map(Part::InPlace));
                return Ok(n);
            }
        }
        while !buf.is_empty() {
            if self.current.len() >= PIECE {
                self.close_current();
            }
            if self.current.capacity() == 0 {
                // After a part left in place: a small buffer for what follows, or a pool piece
                // for a large copy.
                self.current = if buf.len() >= IN_PLACE_MIN {
                    fresh_piece()
                } else {
                    Vec::new()
                };
            }
            let room = PIECE - self.current.len();
            let (now, later) = buf.split_at(room.min(buf.len()));
            self.current.extend_from_slice(now);
            buf = later;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Why a frame could not be made ready.
#[derive(Debug)]
pub enum CutError {
    /// The serializer failed.
    Encode(rmp_serde::encode::Error),
    /// The body is longer than a 4-byte length can say.
    TooLong(usize),
}

/// `value` encoded as MessagePack behind its length, every byte copied into the pieces.
pub fn encode_copied<T: Serialize + ?Sized>(value: &T) -> Result<Encoded, CutError> {
    let mut cutter = Cutter::<NoTensors>::new(None);
    rmp_serde::encode::write(&mut cutter, value).map_err(CutError::Encode)?;
    cutter.finish().map_err(CutError::TooLong)
}

/// `value` (which `frame` holds, and which serializes its tensors' bytes in one write each, as
/// [`crate::payload::f32_bytes`] does) encoded as MessagePack behind its length, its tensors left
/// in place: the pieces that carry them keep `frame` alive.
pub fn encode_in_place<F: TensorBytes, T: Serialize + ?Sized>(
    frame: Arc<F>,
    value: &T,
) -> Result<Encoded, CutError> {
    let mut cutter = Cutter::new(Some(InPlaceSource::new(frame)));
    rmp_serde::encode::write(&mut cutter, value).map_err(CutError::Encode)?;
    cutter.finish().map_err(CutError::TooLong)
}

/// A frame with no tensors to leave in place.
struct NoTensors;

impl TensorBytes for NoTensors {
    fn tensor_bytes(&self) -> Vec<&[u8]> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_bytes::ByteBuf;

    /// A frame of two tensors and a small field.
    struct Two {
        a: Vec<u8>,
        b: Vec<u8>,
    }

    impl TensorBytes for Two {
        fn tensor_bytes(&self) -> Vec<&[u8]> {
            vec![&self.a, &self.b]
        }
    }

    #[derive(Serialize)]
    struct View<'a> {
        name: &'a str,
        #[serde(with = "serde_bytes")]
        a: &'a [u8],
        #[serde(with = "serde_bytes")]
        b: &'a [u8],
        #[serde(with = "serde_bytes")]
        copy: &'a [u8],
        #[serde(with = "serde_bytes")]
        zeros: &'a [u8],
    }

    fn joined(e: &Encoded) -> Vec<u8> {
        e.pieces().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn a_frame_left_in_place_is_the_same_bytes_as_one_copied_without_copying_its_tensors() {
        let frame = Arc::new(Two {
            a: (0..(9u32 << 20)).map(|i| (i % 251) as u8).collect(),
            b: vec![7; 100 << 10],
        });
        // Out of place: a large temporary the serializer might hand over must be copied.
        let temporary = vec![3u8; 200 << 10];
        let view = View {
            name: "x",
            a: &frame.a,
            b: &frame.b[10..],
            copy: &temporary,
            zeros: &ZEROS[5..(1 << 20)],
        };
        let copied = encode_copied(&view).unwrap();
        let in_place = encode_in_place(Arc::clone(&frame), &view).unwrap();
        assert_eq!(joined(&copied), joined(&in_place));
        assert_eq!(copied.in_place_len(), 0);
        assert_eq!(
            in_place.in_place_len(),
            frame.a.len() + frame.b.len() - 10 + (1 << 20) - 5
        );
        // The tensor's pieces are its own memory, at most PIECE bytes each.
        let a_range = frame.a.as_ptr_range();
        let a_pieces: Vec<&Bytes> = in_place
            .pieces()
            .filter(|p| a_range.contains(&p.as_ptr()))
            .collect();
        assert_eq!(a_pieces.len(), 3);
        assert_eq!(a_pieces[0].as_ptr(), frame.a.as_ptr());
        assert!(a_pieces.iter().all(|p| p.len() <= PIECE));
        // The length in front is the body's.
        let all = joined(&in_place);
        let len = u32::from_be_bytes([all[0], all[1], all[2], all[3]]) as usize;
        assert_eq!(len, all.len() - 4);
        assert_eq!(in_place.body_len(), len);
        type Back = (String, ByteBuf, ByteBuf, ByteBuf, ByteBuf);
        let back: Back = rmp_serde::from_slice(&all[4..]).unwrap();
        assert_eq!(back.1.as_slice(), frame.a.as_slice());
        assert_eq!(back.3.as_slice(), temporary.as_slice());
    }

    #[test]
    fn the_pieces_keep_their_frame_alive_and_only_copies_return_to_the_pool() {
        let frame = Arc::new(Two {
            a: vec![1; 1 << 20],
            b: Vec::new(),
        });
        let encoded = {
            let view = View {
                name: "y",
                a: &frame.a,
                b: &[],
                copy: &[],
                zeros: &[],
            };
            encode_in_place(Arc::clone(&frame), &view).unwrap()
        };
        assert_eq!(Arc::strong_count(&frame), 2, "one piece holds the frame");
        let expected = joined(&encoded);
        let weak = Arc::downgrade(&frame);
        drop(frame);
        assert_eq!(
            joined(&encoded),
            expected,
            "the tensor outlives its sender's handle"
        );
        recycle(encoded);
        assert!(
            weak.upgrade().is_none(),
            "written and recycled: the frame is freed"
        );
    }
}
