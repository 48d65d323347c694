//! Loopback TCP between two threads: the bandwidth of one long stream, and the latency of
//! small messages (half the median round trip of a ping-pong), as roles in processes on this
//! machine would see each other.

use super::timing::median;
use super::HostError;
use crate::cluster::Duplex;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Instant;

/// Bytes of each write of the stream, and of the reader's buffer.
const CHUNK: usize = 1 << 20;
/// Bytes of a ping-pong message (a small control message: a pull, an acknowledgement).
pub const PING_BYTES: usize = 64;
/// Ping-pongs before the timed ones.
const PING_WARMUP: usize = 100;

/// What loopback TCP measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Loopback {
    /// Bytes streamed.
    pub stream_bytes: u64,
    /// Bandwidth a role sees, Gbit/s: the stream's, until a measurement through the process
    /// runtime's transport replaces it.
    pub gbps: f64,
    /// Bandwidth of the stream on a bare socket, Gbit/s.
    pub socket_gbps: f64,
    /// Round trips timed.
    pub round_trips: usize,
    /// Half the median round trip of a [`PING_BYTES`] message, µs.
    pub latency_us: f64,
    /// Bandwidth each way when two roles send each other a message at once, Gbit/s, where it was
    /// measured (through the process runtime's transport).
    pub exchange_gbps: Option<f64>,
}

impl Loopback {
    /// Whether the NIC `sim` charges for this loopback is full or half duplex: the one whose
    /// prediction of an exchange is the closer (full: `gbps` each way; half: `gbps / 2`), on a
    /// log scale. Full where no exchange was measured.
    pub fn duplex(&self) -> Duplex {
        match self.exchange_gbps {
            Some(each_way) if each_way * std::f64::consts::SQRT_2 < self.gbps => Duplex::Half,
            _ => Duplex::Full,
        }
    }

    /// How many times as long an exchange (two roles sending each other a message at once)
    /// takes as a lone message, where it was measured.
    pub fn exchange_slowdown(&self) -> Option<f64> {
        Some(self.gbps / self.exchange_gbps?)
    }

    /// The share of a processor each end of a transfer between two of a job's `processes` keeps
    /// busy (`loopback_share`), where they share this machine's `processors`: the share at which
    /// `sim`'s processors make an exchange (two transfers at once, four ends, taking turns on
    /// the processors) take as much longer than a lone transfer as it measured. At most one
    /// processor an end; at least what leaves an exchange as fast as a lone transfer. `None`
    /// where no exchange was measured, or for a job of one process (no host to share).
    pub fn share(&self, processes: u32, processors: u32) -> Option<f64> {
        if processes < 2 {
            return None;
        }
        let slower = self.exchange_slowdown()?;
        // Four ends on `processors`: the ends that do not find a processor free wait for one.
        let turns = f64::from(4u32.div_ceil(processors.max(1)));
        Some((slower / turns).clamp(1.0 / turns, 1.0))
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> HostError {
    move |source| HostError::Loopback { what, source }
}

/// Streams `stream_bytes` from one thread to another over a loopback TCP connection (the time
/// from the first write until the reader acknowledges the last byte), then times `round_trips`
/// ping-pongs of small messages on it (`TCP_NODELAY` on both ends, as a runtime's control
/// messages go).
pub fn loopback(stream_bytes: u64, round_trips: usize) -> Result<Loopback, HostError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("listen"))?;
    let addr = listener.local_addr().map_err(io("listen"))?;
    let peer = std::thread::spawn(move || -> Result<(), HostError> {
        let (stream, _) = listener.accept().map_err(io("accept"))?;
        serve_peer(stream, stream_bytes, PING_WARMUP + round_trips)
    });
    // On a failure here the receiving thread may wait for a peer that never comes: leave it.
    let (seconds, mut trips) = measure(addr, stream_bytes, round_trips)?;
    peer.join().unwrap_or_else(|_| {
        Err(HostError::Loopback {
            what: "run the receiving thread",
            source: std::io::Error::other("it panicked"),
        })
    })?;
    Ok(Loopback {
        stream_bytes,
        gbps: stream_bytes as f64 * 8.0 / seconds / 1e9,
        socket_gbps: stream_bytes as f64 * 8.0 / seconds / 1e9,
        round_trips: trips.len(),
        latency_us: median(&mut trips) / 2.0 * 1e6,
        exchange_gbps: None,
    })
}

/// The sending side: the stream's seconds and every timed round trip's seconds.
fn measure(
    addr: std::net::SocketAddr,
    stream_bytes: u64,
    round_trips: usize,
) -> Result<(f64, Vec<f64>), HostError> {
    let mut s = TcpStream::connect(addr).map_err(io("connect"))?;
    s.set_nodelay(true).map_err(io("set TCP_NODELAY"))?;
    let chunk = vec![0x5au8; CHUNK];
    let t0 = Instant::now();
    let mut left = stream_bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&chunk[..n]).map_err(io("stream"))?;
        left -= n as u64;
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)
        .map_err(io("read the acknowledgement"))?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut msg = [7u8; PING_BYTES];
    let mut trips = Vec::with_capacity(round_trips);
    for i in 0..PING_WARMUP + round_trips {
        let t = Instant::now();
        s.write_all(&msg).map_err(io("ping"))?;
        s.read_exact(&mut msg).map_err(io("read a pong"))?;
        if i >= PING_WARMUP {
            trips.push(t.elapsed().as_secs_f64());
        }
    }
    Ok((seconds, trips))
}

/// The receiving side: reads the stream, acknowledges it, then echoes `pings` messages.
fn serve_peer(mut s: TcpStream, stream_bytes: u64, pings: usize) -> Result<(), HostError> {
    s.set_nodelay(true).map_err(io("set TCP_NODELAY"))?;
    let mut buf = vec![0u8; CHUNK];
    let mut left = stream_bytes;
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let n = s.read(&mut buf[..want]).map_err(io("receive the stream"))?;
        if n == 0 {
            return Err(HostError::Loopback {
                what: "receive the stream",
                source: std::io::ErrorKind::UnexpectedEof.into(),
            });
        }
        left -= n as u64;
    }
    s.write_all(&[1]).map_err(io("acknowledge the stream"))?;
    let mut msg = [0u8; PING_BYTES];
    for _ in 0..pings {
        s.read_exact(&mut msg).map_err(io("read a ping"))?;
        s.write_all(&msg).map_err(io("pong"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(gbps: f64, exchange_gbps: Option<f64>) -> Loopback {
        Loopback {
            stream_bytes: 1 << 20,
            gbps,
            socket_gbps: gbps,
            round_trips: 1,
            latency_us: 10.0,
            exchange_gbps,
        }
    }

    #[test]
    fn the_share_makes_an_exchange_as_much_slower_as_measured() {
        // Each way at 6.5 of a lone 8.45 Gbit/s: an exchange takes 1.3 times a lone transfer,
        // so on two processors (the four ends in two turns) each end holds 0.65 of one.
        let share = measured(8.45, Some(6.5)).share(2, 2).unwrap();
        assert!((share - 0.65).abs() < 1e-12, "{share}");
        // On one processor, four turns.
        let share = measured(8.45, Some(6.5)).share(2, 1).unwrap();
        assert!((share - 0.325).abs() < 1e-12, "{share}");
        // Four processors or more take the ends at once: a whole processor an end.
        assert_eq!(measured(8.45, Some(6.5)).share(2, 4), Some(1.0));
        // No slower than a lone transfer: the least share that leaves it so; slower than the
        // ends taking turns on whole processors: one each.
        assert_eq!(measured(8.0, Some(9.0)).share(2, 2), Some(0.5));
        assert_eq!(measured(8.0, Some(3.0)).share(2, 2), Some(1.0));
        assert_eq!(measured(8.0, None).share(2, 2), None);
        // One process has no host to share.
        assert_eq!(measured(8.45, Some(6.5)).share(1, 2), None);
    }

    #[test]
    fn the_duplex_is_the_one_that_predicts_an_exchange_the_closer() {
        // Unmeasured, or each way about as fast as one way: full.
        assert_eq!(measured(20.0, None).duplex(), Duplex::Full);
        assert_eq!(measured(20.0, Some(19.0)).duplex(), Duplex::Full);
        // 15 Gbit/s each way is nearer 20 than 10 (on a log scale); 13 is nearer 10.
        assert_eq!(measured(20.0, Some(15.0)).duplex(), Duplex::Full);
        assert_eq!(measured(20.0, Some(13.0)).duplex(), Duplex::Half);
        assert_eq!(measured(20.0, Some(9.0)).duplex(), Duplex::Half);
    }
}
