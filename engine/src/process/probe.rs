//! The latency and bandwidth one role sees to a role of another process on this machine, through
//! the process runtime's own transport: two ranks of a mesh (each on a runtime of its own, as two
//! processes would be) bounce a message; half the median round trip of a small one is what `sim`
//! should charge as the link's latency, the time a large one adds is what the transport's bytes
//! cost (encoding, the socket and decoding, not the socket alone), and the time a burst of small
//! ones adds per message is what handling one costs a role (the LogP model's overhead), to
//! predict `--runtime process` here.
//!
//! A role of a job mostly receives a message it has waited for: a server parked through a
//! worker's step, a worker through the servers' clock. On a virtual machine a processor left idle
//! for longer than its hypervisor polls is halted, and waking it adds tens of microseconds to the
//! message that ends the wait; [`role_latency_parked`] times that case.

use super::mesh::{Limits, Mesh};
use super::wire::{Frame, JobIdentity, Padding};
use super::{Launcher, World};
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::message::Message;
use crate::payload::Payload;
use crate::transport::Envelope;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Round trips before the timed ones.
const WARM_UP: usize = 200;

/// Attempts at the probe: a port found free can be taken (by the echo rank's own listener, say)
/// before rank 0 listens on it, so a failed attempt is retried on a fresh port.
const ATTEMPTS: usize = 3;

/// Half the median round trip, in seconds, of `round_trips` small messages between two ranks of
/// a mesh on loopback.
pub fn role_latency(round_trips: usize) -> Result<f64> {
    probe(round_trips, 0, 1, Pattern::Bounce)
}

/// The mean seconds one small message takes to reach a role that has waited `parked` for it, as
/// a job's roles wait a training step or a server's clock for their next message: the sender
/// keeps its processor busy for `parked` before each of `round_trips` round trips (as a worker's
/// step does), and the answer comes back to a sender that waited only for it, so the message's
/// time is the round trip less one message to a role waiting no longer (`latency_s`, one way).
///
/// The mean, not the median: `sim` charges every message the same latency, and a job's
/// throughput is the sum of its messages' times, the slow wake-ups included. The slowest 1 % of
/// round trips are left out: a hypervisor descheduling the whole machine is its steal, not the
/// link's.
pub fn role_latency_parked(round_trips: usize, parked: Duration, latency_s: f64) -> Result<f64> {
    let mut trips = attempt(|| round_trips_of(round_trips, 0, 1, Pattern::Bounce, parked))?;
    trips.sort_by(f64::total_cmp);
    trips.truncate(trips.len() - trips.len() / 100);
    if trips.is_empty() {
        return Err(no_round_trip());
    }
    let mean = trips.iter().sum::<f64>() / trips.len() as f64;
    Ok((mean - latency_s).max(latency_s))
}

/// Bits per second one role moves to a role of another process through the transport: a message
/// carrying `bytes` of tensor values each way, its median round trip less the small message's
/// (`latency_s`, one way), `round_trips` times.
pub fn role_bandwidth(bytes: u64, round_trips: usize, latency_s: f64) -> Result<f64> {
    let one_way = probe(round_trips, bytes, 1, Pattern::Bounce)?;
    let per_transfer = (one_way - latency_s).max(f64::MIN_POSITIVE);
    Ok(bytes as f64 * 8.0 / per_transfer)
}

/// Bits per second each role moves to the other when two roles of different processes send each
/// other a message carrying `bytes` of tensor values at the same time, as a ring allreduce's step
/// and a clock's pushes to servers on both machines do: the median time of such an exchange less
/// one small message's (`latency_s`), `exchanges` times. On one host both directions take the
/// same cores' time, so this can be well below [`role_bandwidth`].
pub fn role_exchange_bandwidth(bytes: u64, exchanges: usize, latency_s: f64) -> Result<f64> {
    let exchange = 2.0 * probe(exchanges, bytes, 1, Pattern::Exchange)?;
    let per_transfer = (exchange - latency_s).max(f64::MIN_POSITIVE);
    Ok(bytes as f64 * 8.0 / per_transfer)
}

/// Seconds a role spends handling one small message at the busier end of a stream of them:
/// `burst` messages (at least 2) sent back to back and one answer to the last, `round_trips`
/// times; the median round trip less a lone message's (`latency_s` each way), over the
/// `burst - 1` messages that queued behind the first. It is the LogP model's per-message
/// overhead, which `sim` charges each message between machines at both ends (`message_us`).
pub fn role_message_overhead(burst: usize, round_trips: usize, latency_s: f64) -> Result<f64> {
    let burst = burst.max(2);
    let round_trip = 2.0 * probe(round_trips, 0, burst, Pattern::Bounce)?;
    Ok(((round_trip - 2.0 * latency_s) / (burst - 1) as f64).max(0.0))
}

/// How the answering rank answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// It sends the last message of every burst back once it has arrived.
    Bounce,
    /// It sends a message of its own as rank 0 sends one: its first at once, the next as each of
    /// rank 0's arrives, so that the two ranks' messages cross.
    Exchange,
}

/// Half the median round trip, in seconds, of `round_trips` bursts of `burst` messages of `bytes`
/// of tensor values each, answered as `pattern` says.
fn probe(round_trips: usize, bytes: u64, burst: usize, pattern: Pattern) -> Result<f64> {
    let mut trips = attempt(|| round_trips_of(round_trips, bytes, burst, pattern, Duration::ZERO))?;
    trips.sort_by(f64::total_cmp);
    let median = trips
        .get(trips.len() / 2)
        .copied()
        .ok_or_else(no_round_trip)?;
    Ok(median / 2.0)
}

/// The error of a probe that timed no round trip.
fn no_round_trip() -> EngineError {
    EngineError::Process {
        rank: 0,
        reason: "the latency probe timed no round trip".into(),
    }
}

/// `probe` up to [`ATTEMPTS`] times, until one attempt succeeds.
fn attempt<T>(mut probe: impl FnMut() -> Result<T>) -> Result<T> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        match probe() {
            Ok(out) => return Ok(out),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| EngineError::Process {
        rank: 0,
        reason: "the latency probe made no attempt".into(),
    }))
}

/// The seconds of each timed round trip (after the warm-up) of one attempt on a port free now:
/// `round_trips` bursts of `burst` messages of `bytes` of tensor values, answered as `pattern`
/// says, the sender busy for `parked` before each burst.
fn round_trips_of(
    round_trips: usize,
    bytes: u64,
    burst: usize,
    pattern: Pattern,
    parked: Duration,
) -> Result<Vec<f64>> {
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| EngineError::Process {
            rank: 0,
            reason: format!("no free port for the latency probe: {e}"),
        })?
        .port();
    let world = move |rank| World {
        rank,
        size: 2,
        local_rank: rank,
        master_host: "127.0.0.1".into(),
        master_port: port,
        job_id: "latency-probe".into(),
        launcher: Launcher::Torchrun,
    };
    // Large messages and bursts need fewer warm-up trips: their first few fill the buffers too.
    let warm_up = if bytes == 0 && burst == 1 {
        WARM_UP
    } else {
        WARM_UP / 20
    };
    // Waiting roles are what a parked probe times: its warm-up needs no more than a few trips.
    let warm_up = if parked.is_zero() {
        warm_up
    } else {
        warm_up.min(10)
    };
    let shape = Shape {
        bytes,
        burst,
        pattern,
        parked,
    };
    let echo = std::thread::spawn(move || bounce(world(1), None, shape));
    let timed = bounce(world(0), Some(warm_up + round_trips), shape);
    let _ = echo.join();
    let mut trips = timed?;
    trips.drain(..warm_up.min(trips.len()));
    Ok(trips)
}

/// What one probe sends, and how.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Bytes of tensor values per message (0: a small control message).
    bytes: u64,
    /// Messages sent back to back per round trip.
    burst: usize,
    /// How the answering rank answers.
    pattern: Pattern,
    /// How long the sender keeps its processor busy before each burst, the answering rank
    /// waiting meanwhile.
    parked: Duration,
}

/// One side of the probe: rank 0 sends `trips` bursts of the shape's messages (a pull when
/// `bytes` is 0, else a collective hop carrying `bytes` of values), each burst back to back after
/// the shape's busy wait, and times each round trip to the answer; rank 1 answers as the shape's
/// `pattern` says until rank 0 says bye.
fn bounce(world: World, trips: Option<usize>, shape: Shape) -> Result<Vec<f64>> {
    let Shape {
        bytes,
        burst,
        pattern,
        parked,
    } = shape;
    let burst = burst.max(1);
    // The runtime of a job's process holding one worker, as the probe's one role is.
    let rt = super::runtime(1)?;
    rt.block_on(async move {
        let limits = Limits {
            connect_timeout: Duration::from_secs(30),
            peer_timeout: Duration::from_secs(30),
            heartbeat: Duration::from_secs(1),
            max_frame: (bytes as usize).saturating_mul(2).max(1 << 20),
        };
        let identity = JobIdentity::new(&world.job_id, "", "");
        let mesh = Mesh::connect(&world, identity, limits).await?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Envelope>();
        let (peers, mut events) = mesh.start(
            Arc::new(move |env| {
                let _ = tx.send(env);
            }),
            Arc::new(AtomicU64::new(0)),
        );
        let me = RoleId::Worker(world.rank);
        let other = RoleId::Worker(1 - world.rank);
        let values = vec![0.5f32; (bytes / 4) as usize];
        let ping = |clock: u64| Frame::Deliver {
            from: me,
            to: other,
            sent_at: 0.0,
            msg: if bytes == 0 {
                Message::Pull {
                    clock,
                    min_version: None,
                }
            } else {
                Message::Collective {
                    op: clock,
                    part: 0,
                    step: 0,
                    data: Payload::Real(values.clone()),
                }
            },
            pad: Padding(0),
        };
        let mut times = Vec::new();
        match trips {
            Some(n) => {
                for i in 0..n {
                    let frames: Vec<Frame> =
                        (0..burst).map(|k| ping((i * burst + k) as u64)).collect();
                    busy_for(parked);
                    let t = Instant::now();
                    for frame in frames {
                        peers.send_owned(1, frame);
                    }
                    if rx.recv().await.is_none() {
                        break;
                    }
                    times.push(t.elapsed().as_secs_f64());
                }
            }
            None => {
                let mut received = 0usize;
                if pattern == Pattern::Exchange {
                    peers.send_owned(0, ping(0));
                }
                loop {
                    tokio::select! {
                        got = rx.recv() => match got {
                            Some(env) => {
                                received += 1;
                                if !received.is_multiple_of(burst) {
                                    continue;
                                }
                                if pattern == Pattern::Exchange {
                                    // A message of its own, crossing rank 0's next.
                                    peers.send_owned(0, ping(received as u64));
                                    continue;
                                }
                                // The same message back, as received (no copy of its values).
                                peers.send_owned(0, Frame::Deliver {
                                    from: me,
                                    to: other,
                                    sent_at: 0.0,
                                    msg: env.msg,
                                    pad: Padding(0),
                                });
                            }
                            None => break,
                        },
                        event = events.recv() => match event {
                            Some(super::mesh::Event::Frame { frame: Frame::Bye, .. }) | None => break,
                            Some(_) => {}
                        },
                    }
                }
            }
        }
        peers.close().await;
        Ok(times)
    })
}

/// Keeps this thread's processor busy for `span`, as a training step does (a sleep would leave
/// it idle, and idle processors are what wake up slowly).
fn busy_for(span: Duration) {
    let start = Instant::now();
    while start.elapsed() < span {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_message_costs_more_than_a_small_one_and_gives_a_finite_bandwidth() {
        let latency = role_latency(50).unwrap();
        let one_way = probe(10, 4 << 20, 1, Pattern::Bounce).unwrap();
        assert!(one_way > latency, "{one_way} s vs {latency} s");
        let gbps = role_bandwidth(4 << 20, 10, latency).unwrap() / 1e9;
        // A burst's messages queue behind each other: a finite, non-negative cost each, below
        // a lone message's round trip.
        let overhead = role_message_overhead(16, 20, latency).unwrap();
        assert!(
            overhead.is_finite() && overhead < 2.0 * latency + 1e-3,
            "{overhead}"
        );
        // Bounded by memory copies: no loopback transport moves a terabit per second.
        assert!(gbps.is_finite() && gbps > 0.0 && gbps < 1000.0, "{gbps}");
    }

    #[test]
    fn a_parked_roles_message_is_timed_without_the_senders_busy_wait() {
        let latency = role_latency(50).unwrap();
        let busy = Duration::from_millis(5);
        let parked = role_latency_parked(20, busy, latency).unwrap();
        // The sender's busy wait comes before the clock starts: it is not in the message's time.
        assert!(
            parked.is_finite() && parked < 0.8 * busy.as_secs_f64(),
            "{parked} s"
        );
    }

    #[test]
    fn crossing_messages_give_a_finite_bandwidth_each_way() {
        let latency = role_latency(50).unwrap();
        let gbps = role_exchange_bandwidth(4 << 20, 10, latency).unwrap() / 1e9;
        assert!(gbps.is_finite() && gbps > 0.0 && gbps < 1000.0, "{gbps}");
    }
}
