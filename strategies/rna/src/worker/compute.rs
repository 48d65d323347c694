//! The RNA worker's compute side: a local step on a snapshot of the latest parameters whenever
//! none is in flight (with `wait_for_all`, one per model version), charged without blocking the
//! communication side; a finished gradient goes into the buffer. Under RNA-H with profiled
//! groups, the first steps' mean time is reported to the controller.

use super::RnaWorker;
use crate::buffer::Entry;
use crate::options::GroupSource;
use crate::protocol::{self, Profile};
use concord_engine::prelude::*;

/// A gradient being computed: ready at `ready_at`.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct InFlight {
    pub(super) ready_at: f64,
    started_at: f64,
    entry: Entry,
}

impl RnaWorker {
    /// Starts the next local step on a snapshot of the latest parameters, if allowed.
    pub(super) async fn maybe_start_compute(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let version = self.model.updates();
        if self.computing.is_some()
            || (self.opts.wait_for_all && self.last_version == Some(version))
        {
            return Ok(());
        }
        let job = self.job.clone();
        let (n, b) = (job.config.workers as u64, job.config.batch);
        let step = self.local_steps;
        ctx.set_iter(step);
        let work = Work::training_step(job.model.training_flops_per_sample(), b as f64);
        let started_at = ctx.now();
        let at = StepAt {
            // A divergence names the round in progress, as the run's rows count iterations;
            // the local step (`set_iter` above) keys what straggler patterns inject.
            clock: job.clocks().start + self.records.len() as u64,
            // Local step j of worker i reads stream slice j·N + i: with one step per round this
            // is exactly the allreduce baseline's sampling.
            stream_offset: (step * n + self.id as u64) * b,
            batch: b,
        };
        // Host values only for a model whose replica keeps no tensors of its own (MF).
        let params = match self.model.params() {
            Some(values) => ParamSource::Host(values),
            None => ParamSource::Resident,
        };
        let ((loss, grads), ready_at) = train_step(
            ctx,
            &job,
            self.replica.as_ref(),
            params,
            at,
            work,
            Charge::Deferred,
        )
        .await?;
        self.local_steps += 1;
        self.last_version = Some(version);
        self.computing = Some(InFlight {
            ready_at,
            started_at,
            entry: Entry {
                grads,
                version,
                samples: b,
                loss: if loss.is_finite() { loss } else { 0.0 },
            },
        });
        Ok(())
    }

    /// The in-flight gradient is ready: write it (WriteOp) and answer a waiting probe.
    pub(super) fn finish_compute(&mut self, ctx: &mut RoleContext) -> Result<()> {
        if let Some(done) = self.computing.take() {
            let took = done.ready_at - done.started_at;
            self.compute_since_round += took;
            self.step_time_total += took;
            self.buffer.write(done.entry);
            self.profile(ctx, took)?;
            self.answer_probe(ctx)?;
        }
        Ok(())
    }

    /// RNA-H with profiled groups: reports the mean step time after the profiling warm-up.
    fn profile(&mut self, ctx: &mut RoleContext, took: f64) -> Result<()> {
        let Some(GroupSource::Profiled { profile_steps, .. }) =
            self.opts.hierarchy.as_ref().map(|h| &h.groups)
        else {
            return Ok(());
        };
        if self.profiled_steps >= *profile_steps {
            return Ok(());
        }
        self.profiled_steps += 1;
        self.profiled_s += took;
        if self.profiled_steps == *profile_steps {
            let body = Profile {
                mean_step_s: self.profiled_s / self.profiled_steps as f64,
            };
            ctx.send(
                RoleId::Coordinator,
                Message::custom(protocol::PROFILE, &body)?,
            );
        }
        Ok(())
    }
}
