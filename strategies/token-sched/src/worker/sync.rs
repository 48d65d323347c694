//! The synchronization side of a Fela worker: each sub-model's gradient sum over the workers
//! that keep it (a ring allreduce started when the token server says its backward passes are
//! done, overlapping the others'), the iteration's update once all are summed, and taking over a
//! sub-model's values when the worker joins the CTD subset.

use super::FelaWorker;
use crate::protocol::Sync;
use concord_engine::collective::{Group, RingAllreduce};
use concord_engine::prelude::*;
use concord_engine::submodel::math::host_flat;

impl FelaWorker {
    /// Sub-model `level`'s parameters and optimizer state from a member of the CTD subset this
    /// worker joins.
    pub(super) fn take_params(
        &mut self,
        ctx: &RoleContext,
        level: usize,
        payloads: Vec<Payload>,
    ) -> Result<()> {
        let range = self.opts.submodels.params(level);
        if let Some(Payload::Real(packed)) = payloads.first() {
            if !self.model.import(range, packed, ctx.now())? {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "sub-model {} handed over with {} values, not its size",
                        level + 1,
                        packed.len()
                    ),
                ));
            }
        }
        if !self.stale.remove(&level) {
            self.early_params.insert(level);
        }
        Ok(())
    }

    /// Starts the ring of every sub-model the token server released whose parameters this
    /// worker has.
    pub(super) fn start_syncs(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let ready: Vec<Sync> = {
            let (ready, wait): (Vec<Sync>, Vec<Sync>) = std::mem::take(&mut self.pending_syncs)
                .into_iter()
                .partition(|s| !self.stale.contains(&s.level) || !s.members.contains(&self.id));
            self.pending_syncs = wait;
            ready
        };
        for s in ready {
            if !s.members.contains(&self.id) {
                self.reduced.insert(s.level, None);
                continue;
            }
            let range = self.opts.submodels.params(s.level);
            let buf = match self.grads[s.level].take() {
                Some(g) => Payload::Real(host_flat(&g)?),
                None if self.model.is_real() => Payload::Real(vec![0.0; self.elems(range)]),
                None => Payload::Virtual {
                    elems: self.opts.submodels.param_bytes(s.level) / 4,
                },
            };
            let group = Group::new(s.members.iter().map(|&w| RoleId::Worker(w)).collect())?;
            let op = s.iter * 64 + s.level as u64;
            let ring = RingAllreduce::start(ctx, &group, op, buf, &[])?;
            self.rings.insert(s.level, ring);
            let hops = std::mem::take(&mut self.early_hops);
            for env in hops {
                if let Some(r) = self.rings.get_mut(&s.level).filter(|r| r.wants(&env)) {
                    r.on_message(ctx, env)?;
                } else {
                    self.early_hops.push(env);
                }
            }
            self.finish_rings();
        }
        Ok(())
    }

    pub(super) fn finish_rings(&mut self) {
        let done: Vec<usize> = self
            .rings
            .iter()
            .filter(|(_, r)| r.is_done())
            .map(|(l, _)| *l)
            .collect();
        for l in done {
            if let Some(r) = self.rings.remove(&l) {
                self.stats.sync_bytes += r.bytes_sent();
                self.bytes_sent += r.bytes_sent();
                self.reduced.insert(l, Some(r.into_result()));
            }
        }
    }

    /// Applies the iteration's update once every sub-model is summed.
    pub(super) fn apply(&mut self, ctx: &RoleContext) -> Result<()> {
        let mut reduced = std::mem::take(&mut self.reduced);
        if self.model.is_real() {
            let params = self.job.layout.params();
            let mut grads: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.elems()]).collect();
            for level in 0..self.levels() {
                if let Some(Some(Payload::Real(flat))) = reduced.remove(&level) {
                    let mut at = 0;
                    for g in &mut grads[self.opts.submodels.params(level)] {
                        let n = g.len();
                        g.copy_from_slice(&flat[at..at + n]);
                        at += n;
                    }
                }
            }
            self.model.apply(&grads, 1.0, ctx.now())?;
        } else {
            self.model.bump(ctx.now())?;
        }
        Ok(())
    }

    /// Elements of the parameter tensors `range` (layout order).
    fn elems(&self, range: std::ops::Range<usize>) -> usize {
        self.job.layout.params()[range]
            .iter()
            .map(|p| p.elems())
            .sum()
    }
}
