//! The FlexRR worker's inbox: message checks during work, waits that serve peers, and the
//! dispatch of every message (acknowledgements, the coordinator's release, peers' reports,
//! offers, begun/completed notices, cancels) to the side that handles it.

use super::helping::Request;
use super::offers::ReportSeen;
use super::FlexWorker;
use crate::protocol::{RrMsg, UpdateAck};
use concord_engine::prelude::*;

impl FlexWorker {
    /// A message check: handles everything delivered (parameters excepted, which belong to a
    /// read in progress). Help that becomes due is queued; the caller serves it.
    pub(super) fn poll(&mut self, ctx: &mut RoleContext) -> Result<()> {
        self.stats.polls += 1;
        self.it.units_since_check = 0;
        while let Some(env) = ctx.try_recv_matching(not_params) {
            self.handle(ctx, env)?;
        }
        Ok(())
    }

    /// Whether a check is due after one more unit (every `⌈units / checks⌉` units; never in a
    /// clock without checks).
    pub(super) fn check_due(&mut self) -> bool {
        if self.it.checks == 0 {
            return false;
        }
        self.it.units_since_check += 1;
        let every = self.it.units.div_ceil(self.it.checks).max(1);
        self.it.units_since_check >= every
    }

    /// Checks this clock makes: the configured (or default) number, but no more than
    /// `max_check_share` of the previous clock's compute time pays for (the first clock: the
    /// undelayed estimate of its own units).
    pub(super) fn clock_checks(&self, ctx: &RoleContext) -> u32 {
        let o = self.opts();
        let wanted = self.r.checks(self.id);
        if o.check_cost_s <= 0.0 {
            return wanted;
        }
        let compute_s = self
            .last_compute_s
            .unwrap_or_else(|| self.nominal_iter_s(ctx));
        let affordable = (o.max_check_share * compute_s / o.check_cost_s).floor();
        if affordable >= f64::from(wanted) {
            wanted
        } else {
            affordable.max(0.0) as u32
        }
    }

    /// Waits for the next message (parameters excepted) and handles it, then serves any help
    /// that became due.
    pub(super) async fn wait_one(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let env = ctx.recv_matching(not_params).await?;
        self.handle(ctx, env)?;
        self.drain_help(ctx).await
    }

    /// Handles one message from a peer, a server or the coordinator.
    pub(super) fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let me = ctx.id();
        if env.msg.has_tag(UpdateAck::TAG) {
            self.count_rr(env.msg.wire_bytes());
            self.acks_pending = self.acks_pending.checked_sub(1).ok_or_else(|| {
                EngineError::protocol(me, "an update acknowledgement nobody asked for")
            })?;
            return Ok(());
        }
        let Some(msg) = RrMsg::decode(me, env.from, &env.msg)? else {
            return Err(EngineError::protocol(
                me,
                format!("unexpected message from {}: {:?}", env.from, env.msg),
            ));
        };
        if let (RoleId::Coordinator, RrMsg::Release) = (env.from, &msg) {
            self.released = true;
            return Ok(());
        }
        let RoleId::Worker(from) = env.from else {
            return Err(EngineError::protocol(
                me,
                format!("flexrr message from {}", env.from),
            ));
        };
        match msg {
            RrMsg::ProgressReport { iter, frac, timer } => {
                self.on_report(ctx, from, ReportSeen { iter, frac, timer })
            }
            RrMsg::DoThis {
                id,
                iter,
                start,
                end,
                timer,
            } => {
                self.on_request(Request {
                    from,
                    id,
                    iter,
                    start,
                    end,
                    timer,
                });
                Ok(())
            }
            RrMsg::BegunHelping { id } => self.on_begun(ctx, from, id),
            RrMsg::HelpCompleted { id } => self.on_completed(me, from, id),
            RrMsg::CancelHelp { timer } => self.on_cancel(ctx, from, timer),
            RrMsg::CancelAck { timer } => {
                self.on_cancel_ack(from, timer);
                Ok(())
            }
            other => Err(EngineError::protocol(
                me,
                format!("unexpected flexrr message from worker {from}: {other:?}"),
            )),
        }
    }
}

/// Everything but parameter values, which only a read in progress takes.
pub(super) fn not_params(env: &Envelope) -> bool {
    !matches!(env.msg, Message::Params { .. })
}
