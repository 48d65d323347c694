//! The FlexRR worker's per-clock loop: read the parameters, process own units front to back
//! (checking the inbox and serving due help as it goes), report progress to the helpees at the
//! checkpoint, take back the offers nobody began, wait for the helpers, flush and clock; and the
//! processing of one unit, own or a helpee's.

use super::offers::OfferState;
use super::{add_into, FlexWorker, Iteration};
use crate::protocol::{Processed, RrMsg};
use concord_engine::prelude::*;

impl FlexWorker {
    /// Processes one unit of `owner`'s clock `clock`; returns its delta (real models).
    pub(super) async fn process_unit(
        &mut self,
        ctx: &mut RoleContext,
        owner: WorkerId,
        clock: Clock,
        unit: u32,
        span: IterSpan,
    ) -> Result<Option<Vec<Vec<f32>>>> {
        let at = StepAt {
            clock,
            stream_offset: self.r.stream_offset(owner, clock, unit),
            batch: self.r.unit_batch,
        };
        let work = self.unit_work();
        let replica = self.replica.as_ref();
        let charge = Charge::Span(span);
        let ((loss, grads), _) = train_step(
            ctx,
            &self.job,
            replica,
            ParamSource::Host(&self.params),
            at,
            work,
            charge,
        )
        .await?;
        // The modeled cost of the message checks that fall in this unit.
        let per_unit_checks = f64::from(self.it.checks) / f64::from(self.it.units.max(1));
        let poll = per_unit_checks * self.opts().check_cost_s;
        if poll > 0.0 {
            ctx.sleep(poll).await;
        }
        if owner == self.id && clock == self.clock && loss.is_finite() {
            self.it.loss_sum += loss;
            self.it.loss_units += 1;
        }
        let Some(grads) = grads else {
            return Ok(None);
        };
        let (lr, wd) = (self.r.lr, self.r.weight_decay);
        let delta: Vec<Vec<f32>> = grads
            .iter()
            .zip(&self.params)
            .map(|(g, p)| g.iter().zip(p).map(|(g, p)| -lr * (g + wd * p)).collect())
            .collect();
        if self.opts().read_my_writes {
            add_into(&mut self.params, &delta);
        }
        Ok(Some(delta))
    }

    /// Processes own unit `unit` of the current clock, adding its delta to `delta`.
    async fn own_unit(
        &mut self,
        ctx: &mut RoleContext,
        unit: u32,
        delta: &mut [Vec<f32>],
    ) -> Result<()> {
        let units = f64::from(self.it.units);
        let span = IterSpan {
            from: f64::from(self.it.processed) / units,
            to: f64::from(self.it.processed + 1) / units,
            nominal_iter_s: self.nominal_iter_s(ctx),
        };
        if let Some(d) = self
            .process_unit(ctx, self.id, self.clock, unit, span)
            .await?
        {
            add_into(delta, &d);
        }
        self.it.processed += 1;
        self.maybe_report(ctx)?;
        if self.check_due() {
            self.poll(ctx)?;
            self.drain_help(ctx).await?;
        }
        Ok(())
    }

    /// Sends the progress report to every helpee once the checkpoint is passed.
    fn maybe_report(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if self.it.report_sent || self.frac_done() < self.opts().report_at {
            return Ok(());
        }
        self.it.report_sent = true;
        if !self.opts().reassignment {
            return Ok(());
        }
        let msg = RrMsg::ProgressReport {
            iter: self.clock,
            frac: self.frac_done(),
            timer: ctx.now(),
        };
        for h in self.r.groups.helpees(self.id).to_vec() {
            self.send_rr(ctx, RoleId::Worker(h), &msg)?;
        }
        Ok(())
    }

    /// One clock: read, own work with reassignment, reclaim, wait for helpers, flush, clock.
    pub(super) async fn run_clock(
        &mut self,
        ctx: &mut RoleContext,
        clock: Clock,
    ) -> Result<IterRecord> {
        self.clock = clock;
        ctx.set_iter(clock);
        let start = ctx.now();
        let compute_before = ctx.stats().compute_s;
        let bytes_before = self.bytes_sent;
        let units = self.r.units[self.id as usize];
        self.it = Iteration {
            start_s: start,
            units,
            tail: units,
            offering: self.opts().reassignment,
            ..Iteration::default()
        };
        self.it.checks = self.clock_checks(ctx);
        self.stats.checks += u64::from(self.it.checks);
        let (version_read, last_served) = self.read(ctx, clock).await?;
        let read_done = ctx.now();
        self.it.start_s = read_done;

        // Own work, front to back, until the cursors meet.
        let mut delta = if self.real() {
            self.job.layout.zeros()
        } else {
            Vec::new()
        };
        while self.it.next < self.it.tail {
            let unit = self.it.next;
            self.it.next += 1;
            self.own_unit(ctx, unit, &mut delta).await?;
        }
        let kept = self.it.next;
        self.stats.processed.push(Processed {
            owner: self.id,
            clock,
            start: 0,
            end: kept,
        });
        self.it.offering = false;
        self.it.own_done = true;

        // Cancel the offers nobody began; process them once their helpers acknowledge.
        self.cancel_unbegun(ctx)?;
        while self.any_offer(OfferState::Cancelling) {
            self.wait_one(ctx).await?;
        }
        for (s, e) in std::mem::take(&mut self.it.reclaimed) {
            self.stats.processed.push(Processed {
                owner: self.id,
                clock,
                start: s,
                end: e,
            });
            for unit in s..e {
                self.own_unit(ctx, unit, &mut delta).await?;
            }
        }
        // Wait for every accepted range (the slack bound depends on it), helping meanwhile.
        while self.any_offer(OfferState::Accepted) {
            self.wait_one(ctx).await?;
        }
        self.flush(ctx, clock, self.id, true, self.real().then_some(delta))
            .await?;
        let end = ctx.now();
        self.avg_iter_s = Some(match self.avg_iter_s {
            Some(avg) => 0.5 * avg + 0.5 * (end - start),
            None => end - start,
        });
        let compute_s = ctx.stats().compute_s - compute_before;
        self.last_compute_s = Some(compute_s);
        let (wait_s, comm_s) = read_wait_and_transfer(start, last_served, read_done);
        let tally = ClockTally {
            samples: u64::from(units) * self.r.unit_batch,
            compute_s,
            // The read as every worker counts it: the wait for the version SSP asks for, then
            // the transfer.
            wait_s,
            comm_s,
            loss: if self.it.loss_units > 0 {
                self.it.loss_sum / f64::from(self.it.loss_units)
            } else {
                f64::NAN
            },
            version_read,
            bytes_sent: self.bytes_sent - bytes_before,
        };
        let record = close_clock(ctx, &self.job, clock, start, tally);
        // Clocked: saved requests for this clock are now for an earlier one, served at once.
        self.clock = clock + 1;
        let saved = std::mem::take(&mut self.saved);
        self.help_queue.extend(saved);
        self.drain_help(ctx).await?;
        Ok(record)
    }
}
