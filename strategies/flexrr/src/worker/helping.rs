//! The FlexRR worker's helper side: offers received from helpees (Algorithm 2, spec §4.1.5)
//! and the help given.
//!
//! An offer is helped now (it is for an earlier clock, or this worker's own work is done),
//! saved for the end of the current clock, or discarded (cancelled, or from a later clock).
//! Helping processes the range, flushes its deltas to the servers, acknowledged, and only then
//! reports it completed, so a clock's version holds every update of that clock.

use super::{add_into, FlexWorker};
use crate::protocol::{Processed, RrMsg};
use concord_engine::prelude::*;

/// An offer received from a helpee.
#[derive(Clone, Copy, Debug)]
pub(super) struct Request {
    pub(super) from: WorkerId,
    pub(super) id: u64,
    pub(super) iter: u64,
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) timer: f64,
}

impl FlexWorker {
    /// A helpee cancelled its offers up to `timer`: drops those not begun and acknowledges.
    pub(super) fn on_cancel(
        &mut self,
        ctx: &mut RoleContext,
        from: WorkerId,
        timer: f64,
    ) -> Result<()> {
        let last = self.last_cancel.entry(from).or_insert(f64::NEG_INFINITY);
        *last = last.max(timer);
        let before = self.saved.len() + self.help_queue.len();
        self.saved.retain(|r| !(r.from == from && r.timer <= timer));
        self.help_queue
            .retain(|r| !(r.from == from && r.timer <= timer));
        self.stats.discarded += (before - self.saved.len() - self.help_queue.len()) as u64;
        self.send_rr(ctx, RoleId::Worker(from), &RrMsg::CancelAck { timer })
    }

    /// Whether the helpee cancelled this offer before we began it.
    fn cancelled(&self, r: &Request) -> bool {
        self.last_cancel.get(&r.from).is_some_and(|&t| r.timer <= t)
    }

    /// Algorithm 2: help now, save for the end of this clock, or discard.
    pub(super) fn on_request(&mut self, r: Request) {
        if self.cancelled(&r) || r.iter > self.clock {
            self.stats.discarded += 1;
        } else if r.iter < self.clock || self.it.own_done {
            self.help_queue.push_back(r);
        } else {
            self.saved.push(r);
        }
    }

    /// Serves the help that is due, unless already helping (help is never nested).
    pub(super) async fn drain_help(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if self.helping {
            return Ok(());
        }
        self.helping = true;
        while let Some(r) = self.help_queue.pop_front() {
            if self.cancelled(&r) {
                self.stats.discarded += 1;
                continue;
            }
            self.help(ctx, r).await?;
        }
        self.helping = false;
        Ok(())
    }

    /// Processes a helpee's range, flushes its deltas to the servers (acknowledged), and reports
    /// it completed.
    async fn help(&mut self, ctx: &mut RoleContext, r: Request) -> Result<()> {
        let owner_units = self.r.units.get(r.from as usize).copied().unwrap_or(0);
        if r.start >= r.end || r.end > owner_units || r.start < self.r.replicated_from(r.from) {
            return Err(EngineError::protocol(
                ctx.id(),
                format!(
                    "worker {} offered units {}..{} of its clock {}, outside the {} units it has or the replicated tail",
                    r.from, r.start, r.end, r.iter, owner_units
                ),
            ));
        }
        self.send_rr(
            ctx,
            RoleId::Worker(r.from),
            &RrMsg::BegunHelping { id: r.id },
        )?;
        self.stats.processed.push(Processed {
            owner: r.from,
            clock: r.iter,
            start: r.start,
            end: r.end,
        });
        self.stats.help_units += u64::from(r.end - r.start);
        let at = self.frac_done().min(1.0);
        let span = IterSpan {
            from: at,
            to: at,
            nominal_iter_s: self.nominal_iter_s(ctx),
        };
        let mut delta = self.real().then(|| self.job.layout.zeros());
        for unit in r.start..r.end {
            if let (Some(d), Some(acc)) = (
                self.process_unit(ctx, r.from, r.iter, unit, span).await?,
                delta.as_mut(),
            ) {
                add_into(acc, &d);
            }
            if self.check_due() {
                self.poll(ctx)?;
            }
        }
        self.flush(ctx, r.iter, r.from, false, delta).await?;
        self.send_rr(
            ctx,
            RoleId::Worker(r.from),
            &RrMsg::HelpCompleted { id: r.id },
        )
    }
}
