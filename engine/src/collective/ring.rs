//! Ring allreduce: reduce-scatter then allgather around the group, one bucket after another.

use super::{chunk_bounds, piece, Group};
use crate::context::RoleContext;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::message::Message;
use crate::payload::Payload;
use crate::transport::Envelope;
use std::collections::BTreeMap;

/// One member's side of a ring allreduce (sum) of a fused buffer, as a state machine.
///
/// The buffer is cut into buckets (tensor fusion, see [`super::Fusion`]); each bucket is reduced by
/// the classic ring: in P−1 reduce-scatter steps member r sends chunk (r − s) mod P to its right
/// neighbour and adds the chunk it receives from its left, so after them it holds the complete
/// sum of chunk (r + 1) mod P; P−1 allgather steps then pass the complete chunks around. Every
/// member sends 2(P−1) chunks of ≈ n/P elements per bucket: 2(P−1)/P of the buffer.
///
/// Chunk c is summed in the fixed order x_c + x_{c+1} + … + x_{c−1} (ring order starting at
/// rank c): deterministic, identical on every member, independent of arrival times.
///
/// Drive it with [`RingAllreduce::start`], then feed it every envelope for which
/// [`RingAllreduce::wants`] holds until [`RingAllreduce::is_done`]; or use [`allreduce_sum`].
#[derive(Debug)]
pub struct RingAllreduce {
    group: Group,
    rank: usize,
    op: u64,
    buf: Payload,
    buckets: Vec<(usize, usize)>,
    bucket: usize,
    /// The next step whose chunk this member expects from its left neighbour.
    step: u32,
    early: BTreeMap<(u32, u32), Payload>,
    started_at: f64,
    bytes_sent: u64,
}

impl RingAllreduce {
    /// Starts the allreduce of `buf` (cut into `buckets`, contiguous `[start, end)` ranges covering
    /// it in order; empty means one bucket) as `ctx`'s role in `group`, under operation id `op`,
    /// which every member must use for this operation and no other in flight between them.
    pub fn start(
        ctx: &RoleContext,
        group: &Group,
        op: u64,
        buf: Payload,
        buckets: &[(usize, usize)],
    ) -> Result<RingAllreduce> {
        let rank = group.require_rank(ctx.id())?;
        let n = buf.elems() as usize;
        let buckets = if buckets.is_empty() {
            vec![(0, n)]
        } else {
            buckets.to_vec()
        };
        let mut expect = 0;
        for &(s, e) in &buckets {
            if s != expect || e < s {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("allreduce buckets {buckets:?} do not tile a buffer of {n} elements"),
                ));
            }
            expect = e;
        }
        if expect != n {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("allreduce buckets {buckets:?} do not tile a buffer of {n} elements"),
            ));
        }
        let mut r = RingAllreduce {
            group: group.clone(),
            rank,
            op,
            buf,
            buckets,
            bucket: 0,
            step: 0,
            early: BTreeMap::new(),
            started_at: ctx.now(),
            bytes_sent: 0,
        };
        r.begin_bucket(ctx);
        Ok(r)
    }

    fn p(&self) -> usize {
        self.group.size()
    }

    fn steps(&self) -> u32 {
        2 * (self.p() as u32 - 1)
    }

    fn left(&self) -> RoleId {
        self.group.member(self.rank + self.p() - 1)
    }

    fn right(&self) -> RoleId {
        self.group.member(self.rank + 1)
    }

    /// Chunk this member sends at `step`.
    fn send_chunk(&self, step: u32) -> usize {
        let (p, r, s) = (self.p(), self.rank, step as usize);
        if s < p - 1 {
            (r + p - s % p) % p
        } else {
            (r + 1 + p - (s - (p - 1)) % p) % p
        }
    }

    /// Chunk this member receives at `step`.
    fn recv_chunk(&self, step: u32) -> usize {
        let (p, r, s) = (self.p(), self.rank, step as usize);
        if s < p - 1 {
            (r + 2 * p - s - 1) % p
        } else {
            (r + p - (s - (p - 1)) % p) % p
        }
    }

    fn chunk_range(&self, chunk: usize) -> (usize, usize) {
        let (bs, be) = self.buckets[self.bucket];
        let (s, e) = chunk_bounds(be - bs, self.p(), chunk);
        (bs + s, bs + e)
    }

    fn send_step(&mut self, ctx: &RoleContext, step: u32) {
        let (s, e) = self.chunk_range(self.send_chunk(step));
        let msg = Message::Collective {
            op: self.op,
            part: self.bucket as u32,
            step,
            data: piece(&self.buf, s, e),
        };
        self.bytes_sent += msg.wire_bytes();
        ctx.send(self.right(), msg);
    }

    /// Skips finished (or trivial) buckets and sends the first hop of the next one.
    fn begin_bucket(&mut self, ctx: &RoleContext) {
        while self.bucket < self.buckets.len() {
            self.step = 0;
            if self.p() > 1 {
                self.send_step(ctx, 0);
                return;
            }
            self.bucket += 1;
        }
    }

    /// Whether every bucket is reduced.
    pub fn is_done(&self) -> bool {
        self.bucket >= self.buckets.len()
    }

    /// Whether `env` is a hop of this allreduce (from the left neighbour, this op).
    pub fn wants(&self, env: &Envelope) -> bool {
        env.from == self.left()
            && matches!(&env.msg, Message::Collective { op, .. } if *op == self.op)
    }

    /// Bytes this member has put on the wire for the operation so far.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Run time at which the operation started.
    pub fn started_at(&self) -> f64 {
        self.started_at
    }

    /// Consumes a hop (see [`RingAllreduce::wants`]): reduces or stores the chunk and sends the next.
    pub fn on_message(&mut self, ctx: &RoleContext, env: Envelope) -> Result<()> {
        let Message::Collective {
            part, step, data, ..
        } = env.msg
        else {
            return Err(EngineError::protocol(
                ctx.id(),
                "a non-collective message was fed to a ring allreduce",
            ));
        };
        if (part as usize) < self.bucket
            || (part as usize == self.bucket && step < self.step)
            || step >= self.steps()
            || self.early.contains_key(&(part, step))
        {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "allreduce {}: unexpected hop (bucket {part}, step {step}) from {}",
                    self.op, env.from
                ),
            ));
        }
        self.early.insert((part, step), data);
        while let Some(data) = self.early.remove(&(self.bucket as u32, self.step)) {
            self.absorb(ctx, data)?;
            if self.is_done() {
                break;
            }
        }
        Ok(())
    }

    fn absorb(&mut self, ctx: &RoleContext, data: Payload) -> Result<()> {
        let step = self.step;
        let (s, e) = self.chunk_range(self.recv_chunk(step));
        if data.elems() as usize != e - s {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "allreduce {}: chunk of {} elements where {} were expected",
                    self.op,
                    data.elems(),
                    e - s
                ),
            ));
        }
        let reducing = (step as usize) < self.p() - 1;
        if let (Payload::Real(buf), Payload::Real(inc)) = (&mut self.buf, &data) {
            let dst = &mut buf[s..e];
            if reducing {
                for (d, x) in dst.iter_mut().zip(inc) {
                    *d += *x;
                }
            } else {
                dst.copy_from_slice(inc);
            }
        }
        self.step += 1;
        if self.step < self.steps() {
            self.send_step(ctx, self.step);
        } else {
            self.bucket += 1;
            self.begin_bucket(ctx);
        }
        Ok(())
    }

    /// The reduced buffer (call once [`RingAllreduce::is_done`]).
    pub fn into_result(self) -> Payload {
        self.buf
    }
}

/// Sums `buf` over `group` in place with a ring allreduce (see [`RingAllreduce`]), cut into
/// `buckets` (empty: one bucket), keeping other messages for later receives. Returns the bytes
/// this member sent.
pub async fn allreduce_sum(
    ctx: &mut RoleContext,
    group: &Group,
    op: u64,
    buf: &mut Payload,
    buckets: &[(usize, usize)],
) -> Result<u64> {
    let taken = std::mem::replace(buf, Payload::Virtual { elems: 0 });
    let mut ring = RingAllreduce::start(ctx, group, op, taken, buckets)?;
    while !ring.is_done() {
        let env = ctx.recv_matching(|e| ring.wants(e)).await?;
        ring.on_message(ctx, env)?;
    }
    let bytes = ring.bytes_sent();
    *buf = ring.into_result();
    Ok(bytes)
}
