//! The FlexRR worker's helpee side: offers of this worker's work to its helpers and their
//! bookkeeping (Algorithm 1, spec §4.1.5).
//!
//! A helper's progress report that shows it ahead by more than the trigger earns it an offer cut
//! from the tail of the clock's remaining work; each `begun-helping` earns a follow-up while more
//! help is needed. An offer goes Offered → Accepted → Done, or, when the worker's kept work is
//! done first, Offered → Cancelling → Cancelled (the range comes back) unless the helper began it
//! meanwhile.

use super::FlexWorker;
use crate::protocol::RrMsg;
use concord_engine::prelude::*;
use std::collections::BTreeSet;

/// Where an offer this worker made stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OfferState {
    /// Sent; the helper has not said it began.
    Offered,
    /// Cancelled by us; waiting for the helper's acknowledgement (or its `begun-helping`).
    Cancelling,
    /// The helper began it: it is the helper's for good.
    Accepted,
    /// The helper finished it and its updates are at the servers.
    Done,
    /// Cancelled before the helper began; we process it ourselves.
    Cancelled,
}

/// An offer of a range of this worker's current clock to a helper.
#[derive(Clone, Copy, Debug)]
pub(super) struct Offer {
    helper: WorkerId,
    start: u32,
    end: u32,
    timer: f64,
    state: OfferState,
}

/// A helper's latest progress report.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct ReportSeen {
    pub(super) iter: u64,
    pub(super) frac: f64,
    pub(super) timer: f64,
}

impl FlexWorker {
    /// Algorithm 1: how far ahead of this worker the reporting helper is, in iterations.
    fn progress_difference(&self, now: f64, rep: ReportSeen) -> Option<f64> {
        let mine = self.clock as f64 + self.frac_done();
        let avg = self.avg_iter_s.or_else(|| {
            let f = self.frac_done();
            (f > 0.0).then(|| (now - self.it.start_s) / f)
        })?;
        (avg > 0.0).then(|| rep.iter as f64 + rep.frac - mine + (now - rep.timer) / avg)
    }

    /// A helper's progress report: offers it work when it is ahead by more than the trigger
    /// (the initial offer, once per clock and helper).
    pub(super) fn on_report(
        &mut self,
        ctx: &mut RoleContext,
        from: WorkerId,
        rep: ReportSeen,
    ) -> Result<()> {
        self.reports.insert(from, rep);
        if !self.opts().reassignment || !self.it.offering || self.it.initial_to.contains(&from) {
            return Ok(());
        }
        if !self.r.groups.helpers(self.id).contains(&from) {
            return Err(EngineError::protocol(
                ctx.id(),
                format!("progress report from worker {from}, which is not one of my helpers"),
            ));
        }
        let ahead = self.progress_difference(ctx.now(), rep);
        if ahead.is_some_and(|d| d > self.opts().trigger) {
            let initial = self.opts().initial;
            if self.offer(ctx, from, initial, false)? {
                self.it.initial_to.insert(from);
            }
        }
        Ok(())
    }

    /// Offers `helper` the given fraction of this clock's work, cut from the tail of what is
    /// left (never below the front cursor, keeping one unit, and only inside the replicated
    /// tail). Returns whether an offer went out.
    fn offer(
        &mut self,
        ctx: &mut RoleContext,
        helper: WorkerId,
        fraction: f64,
        follow_up: bool,
    ) -> Result<bool> {
        let pays = self.units_that_pay(ctx);
        let n = self.r.units_of(self.id, fraction).max(pays);
        let low = (self.it.next + 1).max(self.r.replicated_from(self.id));
        let end = self.it.tail;
        let start = end.saturating_sub(n).max(low);
        if start >= end || end - start < pays {
            return Ok(false);
        }
        self.it.tail = start;
        let id = self.next_id;
        self.next_id += 1;
        let timer = ctx.now();
        self.it.offers.insert(
            id,
            Offer {
                helper,
                start,
                end,
                timer,
                state: OfferState::Offered,
            },
        );
        self.stats.offers += 1;
        if follow_up {
            self.stats.follow_ups += 1;
        }
        let msg = RrMsg::DoThis {
            id,
            iter: self.clock,
            start,
            end,
            timer,
        };
        self.send_rr(ctx, RoleId::Worker(helper), &msg)?;
        Ok(true)
    }

    /// The fewest units an offer must hold for help to pay: the units this worker would process
    /// itself in the time the reassignment's messages take on its link (do-this, the helper's
    /// acknowledged flush and help-completed: four one-way latencies). With the thesis's
    /// multi-second iterations this is one unit and its sizes stand; where units take
    /// microseconds and messages tens of them, help that would only add waiting is not offered.
    fn units_that_pay(&self, ctx: &RoleContext) -> u32 {
        let messages_s = 4e-6 * ctx.device().latency_us;
        let unit_s = if self.it.processed > 0 {
            (ctx.now() - self.it.start_s) / f64::from(self.it.processed)
        } else {
            match self.avg_iter_s {
                Some(avg) => avg / f64::from(self.it.units.max(1)),
                None => return 1,
            }
        };
        if unit_s <= 0.0 {
            return 1;
        }
        ((messages_s / unit_s).ceil() as u32).max(1)
    }

    /// "More help is needed" (spec §4.1.5 [C]): at least two follow-ups' worth of work left, and
    /// the helper still ahead by half the trigger.
    fn more_help_needed(&self, now: f64, helper: WorkerId) -> bool {
        let follow = self.r.units_of(self.id, self.opts().follow_up);
        let left = self.it.tail.saturating_sub(self.it.next);
        left >= 2 * follow
            && self
                .reports
                .get(&helper)
                .and_then(|&rep| self.progress_difference(now, rep))
                .is_some_and(|d| d > 0.5 * self.opts().trigger)
    }

    /// A helper began offer `id`: the range is its for good; a follow-up goes out while more
    /// help is needed.
    pub(super) fn on_begun(
        &mut self,
        ctx: &mut RoleContext,
        from: WorkerId,
        id: u64,
    ) -> Result<()> {
        let me = ctx.id();
        let offer = self
            .it
            .offers
            .get_mut(&id)
            .filter(|o| o.helper == from)
            .ok_or_else(|| {
                EngineError::protocol(me, format!("worker {from} began unknown offer {id}"))
            })?;
        let was = offer.state;
        match was {
            OfferState::Offered | OfferState::Cancelling => offer.state = OfferState::Accepted,
            _ => {
                return Err(EngineError::protocol(
                    me,
                    format!("worker {from} began offer {id} in state {was:?}: units would be processed twice"),
                ))
            }
        }
        self.it.accepted += offer.end - offer.start;
        self.stats.accepted += 1;
        if was == OfferState::Offered && self.it.offering && self.more_help_needed(ctx.now(), from)
        {
            let follow = self.opts().follow_up;
            self.offer(ctx, from, follow, true)?;
        }
        Ok(())
    }

    /// A helper finished offer `id`, its updates at the servers.
    pub(super) fn on_completed(&mut self, me: RoleId, from: WorkerId, id: u64) -> Result<()> {
        match self.it.offers.get_mut(&id) {
            Some(o) if o.helper == from && o.state == OfferState::Accepted => {
                o.state = OfferState::Done;
                Ok(())
            }
            other => Err(EngineError::protocol(
                me,
                format!(
                    "worker {from} completed offer {id}, which is {:?}",
                    other.map(|o| o.state)
                ),
            )),
        }
    }

    /// A helper acknowledged our cancel: the offers it had not begun come back to us.
    pub(super) fn on_cancel_ack(&mut self, from: WorkerId, timer: f64) {
        for o in self.it.offers.values_mut() {
            if o.helper == from && o.state == OfferState::Cancelling && o.timer <= timer {
                o.state = OfferState::Cancelled;
                self.it.reclaimed.push((o.start, o.end));
                self.stats.cancelled += 1;
            }
        }
    }

    /// Cancels the offers nobody began (their helpers acknowledge, or say they began).
    pub(super) fn cancel_unbegun(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let now = ctx.now();
        let mut cancel_to = BTreeSet::new();
        for o in self.it.offers.values_mut() {
            if o.state == OfferState::Offered {
                o.state = OfferState::Cancelling;
                cancel_to.insert(o.helper);
            }
        }
        for h in cancel_to {
            self.send_rr(ctx, RoleId::Worker(h), &RrMsg::CancelHelp { timer: now })?;
        }
        Ok(())
    }

    /// Whether any offer of this clock is in `state`.
    pub(super) fn any_offer(&self, state: OfferState) -> bool {
        self.it.offers.values().any(|o| o.state == state)
    }
}
