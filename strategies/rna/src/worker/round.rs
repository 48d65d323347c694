//! The RNA worker's communication side: probe replies, the activation that takes the buffer's
//! contribution (possibly null) into the round's ring allreduce over the group, the update once
//! the ring is done, and the round's record and report to the controller.

use super::RnaWorker;
use crate::hier::is_sync_op;
use crate::protocol::{self, Activate, Round, RoundDone};
use concord_engine::collective::RingAllreduce;
use concord_engine::prelude::*;

/// The round in progress.
pub(super) struct ActiveRound {
    round: u64,
    initiator: u32,
    ring: RingAllreduce,
    started_at: f64,
    samples: u64,
    loss: f64,
    oldest: i64,
}

/// A round whose ring is done and applied, waiting for its model averaging (RNA-H) before it is
/// recorded.
pub(super) struct Finished {
    pub(super) round: u64,
    pub(super) initiator: u32,
    started_at: f64,
    samples: u64,
    loss: f64,
    oldest: i64,
    weight: f64,
    bytes_sent: u64,
}

impl RnaWorker {
    /// Answers the pending probe once the buffer holds a gradient its round would accept.
    pub(super) fn answer_probe(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if let Some(k) = self.pending_probe {
            if self.buffer.ready(k, self.opts.eta) {
                self.pending_probe = None;
                // A probe of the new groups' first round can come while the last warm-up round
                // is still running: answer it for the new group.
                let group = self.pending_groups.as_ref().map_or(self.group_id, |g| g.0);
                let body = Round { group, round: k };
                ctx.send(
                    RoleId::Coordinator,
                    Message::custom(protocol::PROBE_REPLY, &body)?,
                );
            }
        }
        Ok(())
    }

    /// External activation: contribute (possibly null) and join the ring of round `a.round`.
    pub(super) fn start_round(&mut self, ctx: &mut RoleContext, a: Activate) -> Result<()> {
        let k = a.round.round;
        if k != self.model.updates() {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "activated for round {k} at version {}",
                    self.model.updates()
                ),
            ));
        }
        if self.pending_probe.is_some_and(|p| p <= k) {
            self.pending_probe = None;
        }
        let c = self.buffer.take(k, self.opts.eta, self.opts.accumulate);
        self.stats.dropped += c.dropped;
        for &s in &c.staleness {
            let s = s as usize;
            if self.stats.staleness.len() <= s {
                self.stats.staleness.resize(s + 1, 0);
            }
            self.stats.staleness[s] += 1;
        }
        let oldest = c.staleness.iter().max().map_or(-1, |s| (k - s) as i64);
        let buf = match &c.grads {
            Some(g) => self.fusion.fuse(g, &[c.weight]),
            // A null contribution: zeros of the same shape (and w = 0).
            None if self.model.is_real() => {
                let zeros: Vec<Vec<f32>> = self.sizes.iter().map(|&n| vec![0.0; n]).collect();
                self.fusion.fuse(&zeros, &[0.0])
            }
            None => self.fusion.fuse_virtual(),
        };
        let ring = RingAllreduce::start(ctx, &self.group, k, buf, self.fusion.buckets())?;
        self.active = Some(ActiveRound {
            round: k,
            initiator: a.initiator,
            ring,
            started_at: ctx.now(),
            samples: c.samples,
            loss: c.loss,
            oldest,
        });
        // Hops the left neighbour sent before this worker was activated.
        let early = std::mem::take(&mut self.early);
        for env in early {
            self.on_collective(ctx, env)?;
        }
        self.complete_round_if_done(ctx)
    }

    /// A collective hop: the round's ring takes it, or it waits for its round (or averaging).
    pub(super) fn on_collective(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        if matches!(&env.msg, Message::Collective { op, .. } if is_sync_op(*op)) {
            self.sync_early.push(env);
            return Ok(());
        }
        match self.active.as_mut() {
            Some(a) if a.ring.wants(&env) => a.ring.on_message(ctx, env),
            _ => {
                self.early.push(env);
                Ok(())
            }
        }
    }

    /// Once the ring is done: applies the reduced gradient and records the round, or holds it
    /// for its model averaging (RNA-H).
    pub(super) fn complete_round_if_done(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if !self.active.as_ref().is_some_and(|a| a.ring.is_done()) {
            return Ok(());
        }
        let Some(a) = self.active.take() else {
            return Ok(());
        };
        let now = ctx.now();
        let bytes_sent = a.ring.bytes_sent();
        ctx.trace_span("allreduce", "comm", a.started_at, now);
        let sum = a.ring.into_result();
        let weight = self
            .model
            .apply_reduced(&self.fusion, sum, self.lr_workers(), now)?;
        let apply_s = ctx.device().work_seconds(
            self.job.config.optimizer.flops_per_elem() * (self.fusion.len() - 1) as f64,
        );
        self.apply_debt += apply_s;
        let done = Finished {
            round: a.round,
            initiator: a.initiator,
            started_at: a.started_at,
            samples: a.samples,
            loss: a.loss,
            oldest: a.oldest,
            weight,
            bytes_sent,
        };
        match &self.opts.hierarchy {
            Some(h) if self.averaging && (a.round + 1).is_multiple_of(h.sync_period) => {
                self.sync_pending = Some(done);
                Ok(())
            }
            _ => self.finish_round(ctx, done),
        }
    }

    /// Records a round (after its averaging, in RNA-H) and reports it to the controller.
    pub(super) fn finish_round(&mut self, ctx: &mut RoleContext, a: Finished) -> Result<()> {
        let now = ctx.now();
        if let Some(d) = self.model.digest()? {
            self.stats.digests.push(d);
        }
        if a.initiator == self.id {
            let body = RoundDone {
                round: Round {
                    group: self.group_id,
                    round: a.round,
                },
                weight: a.weight,
            };
            ctx.send(
                RoleId::Coordinator,
                Message::custom(protocol::ROUND_DONE, &body)?,
            );
        }
        let tally = ClockTally {
            samples: a.samples,
            compute_s: self.compute_since_round,
            wait_s: 0.0,
            comm_s: now - a.started_at,
            loss: a.loss,
            version_read: a.oldest,
            bytes_sent: a.bytes_sent + std::mem::take(&mut self.sync_bytes),
        };
        let record = close_clock(ctx, &self.job, a.round, self.round_start, tally);
        self.records.push(record);
        self.round_start = now;
        self.compute_since_round = 0.0;
        Ok(())
    }
}
