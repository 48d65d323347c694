//! Carrying frames once the mesh is up: a writer task per peer (its queue of encoded frames and a
//! heartbeat), a reader task per peer (role messages into mailboxes, heartbeats into the peer's
//! last iteration, everything else an [`Event`]), and [`Peers`], the writing side the run holds.

use super::{Deliver, Event};
use crate::process::wire::{self, Encoded, Frame};
use crate::transport::Envelope;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// The writing side of the mesh: a queue of encoded frames per peer, and what each peer last
/// reported.
pub struct Peers {
    pub(super) rank: u32,
    pub(super) tag: u64,
    pub(super) queues: RwLock<Vec<Option<mpsc::UnboundedSender<Encoded>>>>,
    pub(super) writers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    pub(super) last_iteration: Arc<Vec<AtomicU64>>,
    pub(super) max_frame: usize,
    pub(super) events: mpsc::UnboundedSender<Event>,
}

/// How long closing waits for the writers to send what is queued.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes the frames queued for one peer, with a heartbeat whenever it has been quiet for
/// `every`; ends when the queue closes or the connection does.
pub(super) async fn write_loop(
    mut sink: OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Encoded>,
    tag: u64,
    every: Duration,
    progress: Arc<AtomicU64>,
    rank: u32,
) {
    let mut beat = tokio::time::interval(every);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let bytes = tokio::select! {
            next = queue.recv() => match next {
                Some(bytes) => bytes,
                None => break,
            },
            _ = beat.tick() => {
                let iteration = progress.load(Ordering::Relaxed);
                match wire::encode_framed(tag, &Frame::Heartbeat { iteration }) {
                    Ok(b) => b,
                    Err(_) => continue,
                }
            }
        };
        for piece in bytes.pieces() {
            if let Err(e) = sink.write_all(piece).await {
                // Not reported as a loss from here: the peer's own last frames (its divergence
                // records, its bye) may still wait unread on the other half of the connection.
                // The reader reports the loss, or the bye, once it has delivered them all.
                tracing::debug!("stopped sending to rank {rank}: {e}");
                return;
            }
        }
        wire::recycle(bytes);
    }
    let _ = sink.shutdown().await;
}

/// Reads the length-prefixed frames [`wire::codec`] describes into one buffer kept for the
/// connection's life: a large frame's pages are mapped once, not once per frame.
pub(super) struct FrameReader<R> {
    pub(super) io: R,
    pub(super) buf: Vec<u8>,
    pub(super) max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// The next frame's bytes; `None` when the stream ends between frames.
    async fn next(&mut self) -> std::io::Result<Option<&[u8]>> {
        let mut len = [0u8; 4];
        if self.io.read(&mut len[..1]).await? == 0 {
            return Ok(None);
        }
        self.io.read_exact(&mut len[1..]).await?;
        let n = u32::from_be_bytes(len) as usize;
        if n > self.max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a frame of {n} bytes, over the limit of {} (process.max_frame_mib)",
                    self.max
                ),
            ));
        }
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        self.io.read_exact(&mut self.buf[..n]).await?;
        Ok(Some(&self.buf[..n]))
    }
}

pub(super) async fn read_loop(
    mut stream: FrameReader<impl AsyncRead + Unpin>,
    tag: u64,
    silence: Duration,
    rank: u32,
    deliver: Deliver,
    last_iteration: Arc<Vec<AtomicU64>>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut said_bye = false;
    let lost = |why: String| {
        let _ = events.send(Event::Lost { rank, why });
    };
    loop {
        let next = timeout(silence, stream.next()).await;
        let bytes = match next {
            Err(_) if said_bye => return,
            Err(_) => {
                return lost(format!(
                    "it sent nothing for {:.0} s (process.peer_timeout_s)",
                    silence.as_secs_f64()
                ))
            }
            Ok(Ok(None)) if said_bye => return,
            Ok(Ok(None)) => return lost("it closed the connection".into()),
            Ok(Err(e)) if said_bye => {
                tracing::debug!("rank {rank} after its bye: {e}");
                return;
            }
            Ok(Err(e)) => return lost(format!("its connection broke: {e}")),
            Ok(Ok(Some(bytes))) => bytes,
        };
        match wire::decode(tag, bytes) {
            Err(e) => tracing::warn!("dropped a frame from rank {rank}: {e}"),
            Ok(Frame::Deliver {
                from,
                to,
                sent_at,
                msg,
                ..
            }) => deliver(Envelope {
                from,
                to,
                sent_at,
                msg,
            }),
            Ok(Frame::Heartbeat { iteration }) => {
                last_iteration[rank as usize].fetch_max(iteration, Ordering::Relaxed);
            }
            Ok(frame) => {
                if let Frame::Progress { clocks, .. } = frame {
                    last_iteration[rank as usize].fetch_max(clocks, Ordering::Relaxed);
                }
                said_bye |= matches!(frame, Frame::Bye);
                let _ = events.send(Event::Frame { rank, frame });
            }
        }
    }
}

impl Peers {
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Queues `frame` for `rank`; false when that connection is closed.
    pub fn send(&self, rank: u32, frame: &Frame) -> bool {
        match wire::encode_framed(self.tag, frame) {
            Ok(bytes) => self.send_encoded(rank, bytes),
            Err(e) => {
                tracing::error!("{e}");
                false
            }
        }
    }

    /// Queues `frame`, which the caller gives away, for `rank`, the tensors it carries not
    /// copied on the way to the socket ([`wire::encode_framed_owned`]); false when that
    /// connection is closed.
    pub fn send_owned(&self, rank: u32, frame: Frame) -> bool {
        match wire::encode_framed_owned(self.tag, frame) {
            Ok(bytes) => self.send_encoded(rank, bytes),
            Err(e) => {
                tracing::error!("{e}");
                false
            }
        }
    }

    /// Queues a frame [`wire::encode_framed`] encoded for `rank`; one over the frame limit fails
    /// this process (the peer would refuse it) instead.
    fn send_encoded(&self, rank: u32, bytes: Encoded) -> bool {
        if bytes.body_len() > self.max_frame {
            let _ = self.events.send(Event::Failed {
                why: format!(
                    "a message of {} MiB for rank {rank} exceeds process.max_frame_mib = {}",
                    bytes.body_len() >> 20,
                    self.max_frame >> 20
                ),
            });
            return false;
        }
        let queues = self.queues.read().unwrap_or_else(|p| p.into_inner());
        match queues.get(rank as usize) {
            Some(Some(q)) => q.send(bytes).is_ok(),
            _ => false,
        }
    }

    /// Queues `frame` for every peer; a frame that cannot be encoded, or is over the frame
    /// limit, fails this process (the peers would wait for it) instead.
    pub fn broadcast(&self, frame: &Frame) {
        let bytes = match wire::encode_framed(self.tag, frame) {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = self.events.send(Event::Failed { why: e.to_string() });
                return;
            }
        };
        let peers = self.queues.read().unwrap_or_else(|p| p.into_inner()).len() as u32;
        for rank in (0..peers).filter(|&r| r != self.rank) {
            self.send_encoded(rank, bytes.clone());
        }
    }

    /// The highest iteration `rank` reported (heartbeats and progress).
    pub fn last_iteration(&self, rank: u32) -> u64 {
        self.last_iteration
            .get(rank as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Says `Bye` to every peer, closes the queues and waits (a bounded time) for the writers
    /// to send what is queued and close their connections: a process that exits right after
    /// leaves no peer wondering whether it died.
    pub async fn close(&self) {
        self.broadcast(&Frame::Bye);
        {
            let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
            for q in queues.iter_mut() {
                *q = None;
            }
        }
        let writers = std::mem::take(&mut *self.writers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in writers {
            let _ = timeout(FLUSH_TIMEOUT, w).await;
        }
    }
}
