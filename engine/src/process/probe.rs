//! The latency one role sees to a role of another process on this machine, through the process
//! runtime's own transport: two ranks of a mesh (each on a runtime of its own, as two processes
//! would be) bounce a small message; half the median round trip is what `sim` should charge as
//! the link's latency to predict `--runtime process` here.

use super::mesh::{Limits, Mesh};
use super::wire::{Frame, JobIdentity, Padding};
use super::{Launcher, World};
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::message::Message;
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
    let mut last = None;
    for _ in 0..ATTEMPTS {
        match probe_once(round_trips) {
            Ok(latency) => return Ok(latency),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| EngineError::Process {
        rank: 0,
        reason: "the latency probe made no attempt".into(),
    }))
}

/// One attempt of [`role_latency`] on a port free now.
fn probe_once(round_trips: usize) -> Result<f64> {
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
        master_host: "127.0.0.1".into(),
        master_port: port,
        job_id: "latency-probe".into(),
        launcher: Launcher::Torchrun,
    };
    let echo = std::thread::spawn(move || bounce(world(1), None));
    let timed = bounce(world(0), Some(WARM_UP + round_trips));
    let _ = echo.join();
    let mut trips = timed?;
    trips.drain(..WARM_UP.min(trips.len()));
    trips.sort_by(f64::total_cmp);
    let median = trips
        .get(trips.len() / 2)
        .copied()
        .ok_or_else(|| EngineError::Process {
            rank: 0,
            reason: "the latency probe timed no round trip".into(),
        })?;
    Ok(median / 2.0)
}

/// One side of the probe: rank 0 sends `trips` messages one after another and times each round
/// trip; rank 1 sends every message back until rank 0 says bye.
fn bounce(world: World, trips: Option<usize>) -> Result<Vec<f64>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| EngineError::Io {
            path: "tokio runtime".into(),
            source,
        })?;
    rt.block_on(async move {
        let limits = Limits {
            connect_timeout: Duration::from_secs(30),
            peer_timeout: Duration::from_secs(30),
            heartbeat: Duration::from_secs(1),
            max_frame: 1 << 20,
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
        let ping = |clock| Frame::Deliver {
            from: me,
            to: other,
            sent_at: 0.0,
            msg: Message::Pull {
                clock,
                min_version: None,
            },
            pad: Padding(0),
        };
        let mut times = Vec::new();
        match trips {
            Some(n) => {
                for i in 0..n {
                    let t = Instant::now();
                    peers.send(1, &ping(i as u64));
                    if rx.recv().await.is_none() {
                        break;
                    }
                    times.push(t.elapsed().as_secs_f64());
                }
            }
            None => loop {
                tokio::select! {
                    got = rx.recv() => match got {
                        Some(env) => { peers.send(0, &ping(match env.msg { Message::Pull { clock, .. } => clock, _ => 0 })); }
                        None => break,
                    },
                    event = events.recv() => match event {
                        Some(super::mesh::Event::Frame { frame: Frame::Bye, .. }) | None => break,
                        Some(_) => {}
                    },
                }
            },
        }
        peers.close().await;
        Ok(times)
    })
}
