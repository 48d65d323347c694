//! The communication lane's task in flight: its start (after a copy that must precede it), its
//! sends, and its progress to completion (with the staging copy of an asynchronous alltoall).

use super::comm::Collectives;
use super::{due, SvenWorker, TICK_S};
use crate::options::AlltoallKind;
use crate::protocol::OpKind;
use crate::schedule::{Kind, Task};
use crate::shards;
use concord_engine::prelude::*;

/// The communication task in flight.
pub(super) struct ActiveComm {
    pub(super) task: Task,
    pub(super) op: u64,
    pub(super) started: f64,
    /// Before this time the lane is busy with a copy that precedes the exchange (the blocking
    /// alltoall's host-to-device copy of host-tier lookups).
    pub(super) send_at: f64,
    pub(super) sent: bool,
    /// Set once the collective completed: the lane is free from this time (after the staging
    /// copy of an asynchronous alltoall).
    pub(super) done_at: Option<f64>,
}

impl SvenWorker {
    /// Starts communication task `task`.
    pub(super) fn start_comm(
        &mut self,
        ctx: &mut RoleContext,
        cols: &mut Collectives,
        task: Task,
    ) -> Result<ActiveComm> {
        let b = task.batch;
        let Some(first) = OpKind::first_of(task.kind) else {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("{} is not a communication task", task.kind.label()),
            ));
        };
        if !self.batches.contains_key(&b) {
            self.load_batch(b)?;
        }
        let now = ctx.now();
        let mut send_at = now;
        if task.kind == Kind::FwdA2a && self.opts.opts.alltoall == AlltoallKind::Blocking {
            // NCCL moves device memory only: host-tier lookups are first copied to the device.
            let host = self.batch(b)?.lookups.host_elems;
            send_at += host as f64 * 4.0 / ctx.device().host_link_bytes_per_s();
        }
        if task.kind == Kind::Input {
            self.batch(b)?.started.get_or_insert(now);
        }
        let mut active = ActiveComm {
            task,
            op: first.op(b),
            started: now,
            send_at,
            sent: false,
            done_at: None,
        };
        if due(now, send_at) {
            self.send_comm(ctx, cols, &mut active)?;
        }
        Ok(active)
    }

    /// The sends of the active communication task (its arrival at the collective).
    pub(super) fn send_comm(
        &mut self,
        ctx: &mut RoleContext,
        cols: &mut Collectives,
        active: &mut ActiveComm,
    ) -> Result<()> {
        let b = active.task.batch;
        let n = self.ranks;
        let kind = self.opts.opts.alltoall;
        let (op_kind, _) = OpKind::parse(active.op).unwrap_or((OpKind::Fwd, b));
        active.sent = true;
        match op_kind {
            OpKind::Allreduce => {
                let buf = self
                    .batch(b)?
                    .dense_sum
                    .take()
                    .unwrap_or(Payload::Virtual { elems: 0 });
                cols.start_ring(ctx, &self.group, active.op, buf)
            }
            OpKind::InputLengths => {
                let splits = vec![
                    Payload::Virtual {
                        elems: self.tables() as u64
                    };
                    n
                ];
                cols.arrive(ctx, &self.group, kind, active.op, splits)
            }
            OpKind::InputIndices => {
                // Each rank's own samples' ids (int64), to every rank whose shards look them up.
                let elems = (self.per * self.tables() * 2) as u64;
                cols.arrive(
                    ctx,
                    &self.group,
                    kind,
                    active.op,
                    vec![Payload::Virtual { elems }; n],
                )
            }
            OpKind::Fwd => {
                let splits = self.batch(b)?.fwd_splits.take().unwrap_or_default();
                cols.arrive(ctx, &self.group, kind, active.op, splits)
            }
            OpKind::Bwd => {
                let splits = self.batch(b)?.bwd_splits.take().unwrap_or_default();
                cols.arrive(ctx, &self.group, kind, active.op, splits)
            }
        }
    }

    /// Progresses the active communication task; `true` once it is finished.
    pub(super) fn progress_comm(
        &mut self,
        ctx: &mut RoleContext,
        cols: &mut Collectives,
        active: &mut ActiveComm,
    ) -> Result<bool> {
        let now = ctx.now();
        if !active.sent {
            if !due(now, active.send_at) {
                return Ok(false);
            }
            self.send_comm(ctx, cols, active)?;
        }
        if let Some(done_at) = active.done_at {
            return Ok(due(now, done_at));
        }
        let b = active.task.batch;
        let (op_kind, _) = OpKind::parse(active.op).unwrap_or((OpKind::Fwd, b));
        match op_kind {
            OpKind::Allreduce => {
                if !cols.ring_done(active.op) {
                    return Ok(false);
                }
                let (sum, bytes) = cols
                    .take_ring(active.op)
                    .unwrap_or((Payload::Virtual { elems: 0 }, 0));
                let st = self.batch(b)?;
                st.dense_sum = Some(sum);
                st.bytes_sent += bytes;
                active.done_at = Some(now);
            }
            _ => {
                if !cols.exchange_done(active.op) {
                    return Ok(false);
                }
                let (parts, staged) = cols.take_exchange(active.op).unwrap_or_default();
                let op_bytes: u64 = parts.iter().map(Payload::bytes).sum();
                self.stats.staging(op_bytes, staged);
                let copy = staged as f64 / self.opts.copy_bytes_per_s();
                let width = self.spec.width();
                let st = self.batches.get_mut(&b).ok_or_else(|| {
                    EngineError::protocol(ctx.id(), format!("batch {b} is not loaded"))
                })?;
                match op_kind {
                    OpKind::InputLengths => {
                        // The indices follow the lengths on the same lane.
                        active.op = OpKind::InputIndices.op(b);
                        active.sent = false;
                        active.send_at = now + copy;
                        return Ok(false);
                    }
                    OpKind::Fwd => {
                        if parts.iter().all(|p| p.values().is_some()) {
                            let splits: Vec<Vec<f32>> = parts
                                .iter()
                                .map(|p| p.values().map(<[f32]>::to_vec).unwrap_or_default())
                                .collect();
                            st.emb = Some(shards::assemble(&self.plan, &splits, self.per, width));
                        }
                    }
                    OpKind::Bwd => st.grads_from = Some(parts),
                    OpKind::InputIndices | OpKind::Allreduce => {}
                }
                active.done_at = Some(now + copy);
                return Ok(copy < TICK_S);
            }
        }
        Ok(true)
    }
}
