//! The connections of a multi-process job: the rendezvous at rank 0, one TCP connection to every
//! other process, and the reader and writer tasks that carry [`Frame`]s over them.
//!
//! Rendezvous: rank 0 listens on `MASTER_ADDR:MASTER_PORT`; every other rank listens on a port of
//! its own, connects to rank 0 and says hello (job, token digest, rank, world, its port). Once all
//! have, rank 0 sends each the roster of addresses, and rank `r` connects to ranks `1..r` and
//! accepts ranks `r+1..`. Every connection opens with a checked hello; a stranger (another job,
//! a wrong token or config, garbage, a second connection for a rank already joined) is refused
//! and logged, and the listener goes on accepting, so it cannot disturb the run.
//!
//! Each connection then has a writer task (its queue of encoded frames, and a heartbeat every
//! `heartbeat`) and a reader task: role messages go straight to the receiving role's mailbox,
//! heartbeats update the peer's last reported iteration, everything else is an [`Event`] for the
//! launch. A connection that closes before its peer's `Bye`, breaks, or is silent for
//! `peer_timeout` is an [`Event::Lost`].

mod carry;

pub use carry::Peers;

use super::wire::{self, Frame, JobIdentity, WireError};
use super::World;
use crate::error::{EngineError, Result};
use crate::transport::Envelope;
use carry::{read_loop, write_loop, FrameReader};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// Timeouts and limits of the mesh (from the `[process]` config section).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How long the rendezvous may take.
    pub connect_timeout: Duration,
    /// Silence after which a peer counts as dead.
    pub peer_timeout: Duration,
    /// Time between heartbeats.
    pub heartbeat: Duration,
    /// Largest frame accepted, in bytes.
    pub max_frame: usize,
}

/// Time a stranger gets to say hello before its connection is closed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection, framed.
type Link = Framed<TcpStream, LengthDelimitedCodec>;

/// What a reader task reports to the launch.
#[derive(Debug)]
pub enum Event {
    /// A frame other than a role message or a heartbeat, from `rank`.
    Frame {
        /// The sender.
        rank: u32,
        /// The frame.
        frame: Frame,
    },
    /// The connection to `rank` failed before its `Bye`.
    Lost {
        /// The peer.
        rank: u32,
        /// What happened.
        why: String,
    },
    /// This process cannot go on (a message too large for a frame).
    Failed {
        /// What happened.
        why: String,
    },
}

/// The connections of this process once the rendezvous is over, not yet carrying frames.
pub struct Mesh {
    world: World,
    identity: JobIdentity,
    limits: Limits,
    links: Vec<Option<Link>>,
    listener: TcpListener,
}

/// Where the reader tasks hand role messages: the mailbox of the receiving role.
pub type Deliver = Arc<dyn Fn(Envelope) + Send + Sync>;

fn process_error(rank: u32, reason: impl Into<String>) -> EngineError {
    EngineError::Process {
        rank,
        reason: reason.into(),
    }
}

impl Mesh {
    /// Meets the other processes of `world` and opens a connection to each.
    pub async fn connect(world: &World, identity: JobIdentity, limits: Limits) -> Result<Mesh> {
        let deadline = Instant::now() + limits.connect_timeout;
        let mut links: Vec<Option<Link>> = (0..world.size).map(|_| None).collect();
        let rank = world.rank;
        let err = |reason: String| process_error(rank, reason);
        let listener = if rank == 0 {
            TcpListener::bind(("0.0.0.0", world.master_port))
                .await
                .map_err(|e| {
                    err(format!(
                        "cannot listen on port {} (MASTER_PORT) for the rendezvous: {e}",
                        world.master_port
                    ))
                })?
        } else {
            TcpListener::bind(("0.0.0.0", 0))
                .await
                .map_err(|e| err(format!("cannot listen for peers: {e}")))?
        };
        let port = listener
            .local_addr()
            .map_err(|e| err(format!("no local address: {e}")))?
            .port();
        let mut mesh = Mesh {
            world: world.clone(),
            identity,
            limits,
            links: Vec::new(),
            listener,
        };
        if rank == 0 {
            let mut addrs = vec![format!("{}:{}", world.master_host, world.master_port)];
            addrs.resize(world.size as usize, String::new());
            for (r, addr) in mesh.accept_ranks(&mut links, 1, deadline).await? {
                addrs[r as usize] = addr.to_string();
            }
            let roster = wire::encode(mesh.identity.tag, &Frame::Roster { addrs })
                .map_err(|e| err(e.to_string()))?;
            for link in links.iter_mut().flatten() {
                link.send(roster.clone())
                    .await
                    .map_err(|e| err(format!("cannot send the roster: {e}")))?;
            }
        } else {
            let master = format!("{}:{}", world.master_host, world.master_port);
            let mut link = mesh.dial(&master, deadline, port).await?;
            let addrs = match timeout_at(deadline, link.next()).await {
                Ok(Some(Ok(bytes))) => match wire::decode(mesh.identity.tag, &bytes) {
                    Ok(Frame::Roster { addrs }) if addrs.len() == world.size as usize => addrs,
                    Ok(other) => {
                        return Err(err(format!(
                            "rank 0 answered the hello with a {} frame instead of the roster",
                            other.kind()
                        )))
                    }
                    Err(e) => return Err(err(format!("rank 0's roster: {e}"))),
                },
                Ok(Some(Err(e))) => return Err(err(format!("rank 0 at {master}: {e}"))),
                Ok(None) => {
                    return Err(err(format!(
                        "rank 0 at {master} closed the connection: it refused this process \
                         (see its log: another job, token or config?)"
                    )))
                }
                Err(_) => {
                    return Err(err(format!(
                        "no roster from rank 0 at {master} within {:.0} s \
                         (process.connect_timeout_s): are all {} processes started?",
                        limits.connect_timeout.as_secs_f64(),
                        world.size
                    )))
                }
            };
            links[0] = Some(link);
            for (r, addr) in addrs.iter().enumerate().take(rank as usize).skip(1) {
                links[r] = Some(mesh.dial(addr, deadline, port).await?);
            }
            mesh.accept_ranks(&mut links, rank + 1, deadline).await?;
        }
        mesh.links = links;
        Ok(mesh)
    }

    /// Connects to `addr` (retrying until `deadline`: the peer may not listen yet) and says hello.
    async fn dial(&self, addr: &str, deadline: Instant, port: u16) -> Result<Link> {
        let rank = self.world.rank;
        let stream = loop {
            match TcpStream::connect(addr).await {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(process_error(
                        rank,
                        format!(
                        "cannot connect to {addr} within {:.0} s (process.connect_timeout_s): {e}",
                        self.limits.connect_timeout.as_secs_f64()
                    ),
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let _ = stream.set_nodelay(true);
        let mut link = Framed::new(stream, wire::codec(self.limits.max_frame));
        let hello = self.identity.hello(rank, self.world.size, port);
        let bytes = wire::encode(self.identity.tag, &hello)
            .map_err(|e| process_error(rank, e.to_string()))?;
        link.send(bytes)
            .await
            .map_err(|e| process_error(rank, format!("cannot say hello to {addr}: {e}")))?;
        Ok(link)
    }

    /// Accepts the ranks from `lowest` up until each has a link in `links`, reading every
    /// newcomer's hello on a task of its own (a stranger that says nothing holds up no one);
    /// anything but a hello of a rank still expected is logged and dropped. Returns where each
    /// accepted rank listens.
    async fn accept_ranks(
        &self,
        links: &mut [Option<Link>],
        lowest: u32,
        deadline: Instant,
    ) -> Result<Vec<(u32, SocketAddr)>> {
        let mut hellos = tokio::task::JoinSet::new();
        let mut listening = Vec::new();
        let expected =
            |links: &[Option<Link>]| links.iter().skip(lowest as usize).any(Option::is_none);
        while expected(links) {
            let next = tokio::select! {
                accepted = self.listener.accept() => {
                    if let Ok((stream, from)) = accepted {
                        let _ = stream.set_nodelay(true);
                        let mut link = Framed::new(stream, wire::codec(self.limits.max_frame));
                        let identity = self.identity.clone();
                        let world = self.world.size;
                        hellos.spawn(async move {
                            let hello = read_hello(&mut link, &identity, world).await;
                            (from, link, hello)
                        });
                    }
                    continue;
                }
                Some(Ok(greeted)) = hellos.join_next() => greeted,
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(process_error(
                        self.world.rank,
                        format!(
                            "the rendezvous timed out after {:.0} s (process.connect_timeout_s) \
                             waiting for ranks {}",
                            self.limits.connect_timeout.as_secs_f64(),
                            missing(links)
                        ),
                    ));
                }
            };
            match next {
                (from, _, Ok((r, _))) if r < lowest || links[r as usize].is_some() => {
                    tracing::warn!(
                        "refused a connection from {from}: rank {r} is not expected to connect here"
                    );
                }
                (from, link, Ok((r, port))) => {
                    links[r as usize] = Some(link);
                    listening.push((r, SocketAddr::new(from.ip(), port)));
                }
                (from, _, Err(why)) => tracing::warn!("refused a connection from {from}: {why}"),
            }
        }
        // Newcomers still saying hello when the last rank arrived are refused all the same, and
        // logged once their hello (or its timeout) tells why: never dropped unheard.
        if !hellos.is_empty() {
            tokio::spawn(async move {
                while let Some(greeted) = hellos.join_next().await {
                    if let Ok((from, _, hello)) = greeted {
                        log_refusal(from, hello);
                    }
                }
            });
        }
        Ok(listening)
    }

    /// Starts carrying frames: a writer and a reader task per peer, role messages handed to
    /// `deliver`, heartbeats carrying `progress` (the highest clock this process's workers
    /// completed). Late connections are refused from now on. Returns the writing side and the
    /// events of the readers.
    pub fn start(
        self,
        deliver: Deliver,
        progress: Arc<AtomicU64>,
    ) -> (Peers, mpsc::UnboundedReceiver<Event>) {
        let (events, rx) = mpsc::unbounded_channel();
        let tag = self.identity.tag;
        let last_iteration: Arc<Vec<AtomicU64>> =
            Arc::new((0..self.world.size).map(|_| AtomicU64::new(0)).collect());
        let mut queues = Vec::with_capacity(self.links.len());
        let mut writers = Vec::new();
        for (r, link) in self.links.into_iter().enumerate() {
            let Some(link) = link else {
                queues.push(None);
                continue;
            };
            // Frames go out as encoded (length included) straight onto the socket; frames come in
            // through the codec, starting with whatever the handshake read ahead.
            let parts = link.into_parts();
            let (read_half, write_half) = parts.io.into_split();
            let ahead = std::io::Cursor::new(parts.read_buf.to_vec());
            let stream = FrameReader {
                io: ahead.chain(BufReader::with_capacity(64 << 10, read_half)),
                buf: Vec::new(),
                max: self.limits.max_frame,
            };
            let (tx, q) = mpsc::unbounded_channel();
            queues.push(Some(tx));
            writers.push(tokio::spawn(write_loop(
                write_half,
                q,
                tag,
                self.limits.heartbeat,
                progress.clone(),
                r as u32,
            )));
            tokio::spawn(read_loop(
                stream,
                tag,
                self.limits.peer_timeout,
                r as u32,
                deliver.clone(),
                last_iteration.clone(),
                events.clone(),
            ));
        }
        tokio::spawn(refuse_latecomers(
            self.listener,
            self.identity,
            self.world.size,
            self.limits.max_frame,
        ));
        (
            Peers {
                rank: self.world.rank,
                tag,
                queues: RwLock::new(queues),
                writers: std::sync::Mutex::new(writers),
                max_frame: self.limits.max_frame,
                events: events.clone(),
                last_iteration,
            },
            rx,
        )
    }
}

/// The ranks without a connection yet, e.g. `1, 3`.
fn missing(links: &[Option<Link>]) -> String {
    let ranks: Vec<String> = links
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| l.is_none())
        .map(|(r, _)| r.to_string())
        .collect();
    ranks.join(", ")
}

/// Reads and checks the first frame of a connection.
async fn read_hello(
    link: &mut Link,
    identity: &JobIdentity,
    world: u32,
) -> std::result::Result<(u32, u16), String> {
    match timeout(HELLO_TIMEOUT, link.next()).await {
        Err(_) => Err(format!("no hello within {} s", HELLO_TIMEOUT.as_secs())),
        Ok(None) => Err("closed before saying hello".into()),
        Ok(Some(Err(e))) => Err(format!("unreadable frame: {e}")),
        Ok(Some(Ok(bytes))) => wire::decode(identity.tag, &bytes)
            .and_then(|frame| identity.check_hello(&frame, world))
            .map_err(|e: WireError| e.to_string()),
    }
}

/// Accepts and refuses every connection after the mesh is complete, logging why.
async fn refuse_latecomers(
    listener: TcpListener,
    identity: JobIdentity,
    world: u32,
    max_frame: usize,
) {
    let identity = Arc::new(identity);
    while let Ok((stream, from)) = listener.accept().await {
        let identity = identity.clone();
        tokio::spawn(async move {
            let mut link = Framed::new(stream, wire::codec(max_frame));
            log_refusal(from, read_hello(&mut link, &identity, world).await);
        });
    }
}

/// Logs why a connection that came after the mesh was complete is refused, given its hello:
/// a rank's (connected already) or what was wrong with it.
fn log_refusal(from: SocketAddr, hello: std::result::Result<(u32, u16), String>) {
    let why = match hello {
        Ok((r, _)) => format!("rank {r} is already connected"),
        Err(why) => why,
    };
    tracing::warn!("refused a connection from {from}: {why}");
}
