//! AD-PSGD (Lian et al., the thesis's §5.5.3 baseline): asynchronous decentralized SGD.
//!
//! Each worker, per local step: computes a gradient on a snapshot of its own parameters, averages
//! its parameters with a random peer's (`x_i = x_j = (x_i + x_j)/2`, atomically), then applies its
//! own gradient with the configured learning rate. Workers never wait for a group.
//!
//! Atomicity without deadlock follows the original's bipartite graph: even-numbered workers are
//! *active*, odd-numbered ones *passive*. An active worker starts every averaging, always with a
//! uniformly random passive peer, and waits for the answer; nobody ever asks an active worker, so
//! its parameters cannot change while its request is in flight. A passive worker never starts
//! one: it answers requests while it computes (its parameters, then it averages at once, in one
//! event) and applies its own gradients. Each averaging therefore leaves both replicas equal and
//! keeps the sum of all replicas unchanged, which a request crossing another would not.

use concord_engine::collective::LocalModel;
use concord_engine::data::mix_seed;
use concord_engine::model::Replica;
use concord_engine::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// Worker → coordinator: all local steps done (it keeps answering peers).
pub const DONE: &str = "ad-psgd.done";
/// Coordinator → workers: everyone is done; stop answering.
pub const STOP: &str = "ad-psgd.stop";

/// Marks AD-PSGD's averaging operations among collective op ids.
const OP_TAG: u64 = 0xAD << 56;

/// What an AD-PSGD worker carries across a checkpoint: its own replica (replicas differ until
/// averaged), with its optimizer state and update count, and where its peer sampler stands.
#[derive(serde::Serialize, serde::Deserialize)]
struct AdPsgdState {
    model: ModelState,
    updates: u64,
    rng_word_pos: u128,
}

/// An AD-PSGD worker.
pub struct AdPsgdWorker {
    id: WorkerId,
    job: Arc<Job>,
    replica: Option<Replica>,
    model: LocalModel,
    elems: u64,
    /// Element count of each parameter tensor (unflattening a peer's model).
    sizes: Vec<usize>,
    /// The peer sampler's position in its ChaCha stream when the worker starts.
    rng_word_pos: u128,
}

impl AdPsgdWorker {
    /// Worker `id` of `job` (continuing from its checkpoint when the job resumes).
    pub fn new(job: Arc<Job>, id: WorkerId) -> Result<AdPsgdWorker> {
        let sizes: Vec<usize> = job.layout.params().iter().map(|p| p.elems()).collect();
        let replica = job.replica(RoleId::Worker(id))?;
        let mut model = LocalModel::new(&job);
        let mut rng_word_pos = 0;
        if let Some(cp) = job.resumed(RoleId::Worker(id)) {
            let state: AdPsgdState = cp.decode_state(RoleId::Worker(id), "AD-PSGD worker state")?;
            model.restore(&job.layout, &state.model, state.updates)?;
            rng_word_pos = state.rng_word_pos;
        }
        // The parameters stay in the replica's tensors, on its device, between steps.
        if let Some(replica) = &replica {
            model.keep_on(replica)?;
        }
        Ok(AdPsgdWorker {
            id,
            replica,
            model,
            job,
            elems: sizes.iter().map(|&n| n as u64).sum(),
            sizes,
            rng_word_pos,
        })
    }

    /// The parameters, flat, as a peer receives them (read back from the replica's device when
    /// they live there); `None` in throughput mode.
    fn own_values(&mut self) -> Result<Option<Vec<f32>>> {
        Ok(self
            .model
            .values()?
            .map(|v| v.into_iter().flatten().collect()))
    }

    /// `own` as a message payload.
    fn payload(&self, own: &Option<Vec<f32>>) -> Payload {
        match own {
            Some(v) => Payload::Real(v.clone()),
            None => Payload::Virtual { elems: self.elems },
        }
    }

    /// `x ← (x + other) / 2`, `own` being `x` as sent.
    fn average_with(&mut self, own: Option<Vec<f32>>, other: &Payload, now: f64) -> Result<()> {
        let (Some(mine), Some(o)) = (own, other.values()) else {
            return Ok(());
        };
        if o.len() != mine.len() {
            return Err(EngineError::protocol(
                RoleId::Worker(self.id),
                format!("a peer's model of {} elements, not {}", o.len(), mine.len()),
            ));
        }
        let mut offset = 0;
        let mut out = Vec::with_capacity(self.sizes.len());
        for &n in &self.sizes {
            let range = offset..offset + n;
            out.push(
                mine[range.clone()]
                    .iter()
                    .zip(&o[range])
                    .map(|(a, b)| 0.5 * (a + b))
                    .collect(),
            );
            offset += n;
        }
        self.model.set_params(out, now)
    }

    /// Answers a peer's averaging request, or reports anything else as unexpected.
    fn serve(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        match env.msg {
            Message::Collective {
                op, step: 0, data, ..
            } if op & OP_TAG == OP_TAG && !is_active(self.id) => {
                let own = self.own_values()?;
                ctx.send(
                    env.from,
                    Message::Collective {
                        op,
                        part: 0,
                        step: 1,
                        data: self.payload(&own),
                    },
                );
                self.average_with(own, &data, ctx.now())?;
                Ok(())
            }
            other => Err(EngineError::protocol(
                ctx.id(),
                format!("unexpected message from {}: {other:?}", env.from),
            )),
        }
    }

    /// The active side of one averaging: sends the parameters to `peer`, waits for its answer
    /// and averages. Returns the bytes sent. Anything else arriving meanwhile is served (an
    /// active worker is never asked, so that is an error, not a change to the parameters).
    async fn average_with_peer(
        &mut self,
        ctx: &mut RoleContext,
        peer: u32,
        step: u64,
    ) -> Result<u64> {
        let op = OP_TAG | ((self.id as u64) << 32) | step;
        // An active worker is never asked meanwhile, so these stay its values until the answer.
        let own = self.own_values()?;
        let request = Message::Collective {
            op,
            part: 0,
            step: 0,
            data: self.payload(&own),
        };
        let bytes_sent = request.wire_bytes();
        ctx.send(RoleId::Worker(peer), request);
        loop {
            let env = ctx.recv().await?;
            match &env.msg {
                Message::Collective {
                    op: o,
                    step: 1,
                    data,
                    ..
                } if *o == op => {
                    let data = data.clone();
                    self.average_with(own, &data, ctx.now())?;
                    return Ok(bytes_sent);
                }
                _ => self.serve(ctx, env)?,
            }
        }
    }
}

/// Whether worker `id` is active: it starts the averagings (the even-numbered half of the
/// original's bipartite graph).
pub fn is_active(id: WorkerId) -> bool {
    id.is_multiple_of(2)
}

/// The peer an active worker averages with this step, uniformly among the passive workers;
/// `None` for a passive worker, which only answers.
pub fn passive_peer(id: WorkerId, workers: u32, rng: &mut impl Rng) -> Option<WorkerId> {
    if !is_active(id) || workers < 2 {
        return None;
    }
    let passive = workers / 2;
    Some(2 * rng.gen_range(0..passive) + 1)
}

#[async_trait]
impl Worker for AdPsgdWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let job = self.job.clone();
        hold_replica(ctx, &job).await?;
        hold_optimizer_state(ctx, &job).await?;
        let (n, b) = (job.config.workers as u64, job.config.batch);
        let apply_flops = job.config.optimizer.flops_per_elem() * self.elems as f64;
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(job.config.seed, 0xAD00 + self.id as u64));
        rng.set_word_pos(self.rng_word_pos);
        let mut records = Vec::new();
        for step in job.clocks() {
            ctx.set_iter(step);
            let start = ctx.now();
            let work = Work::training_step(job.model.training_flops_per_sample(), b as f64);
            let at = StepAt {
                clock: step,
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
            // Its own gradient is applied where the step left it: only models cross the wire.
            let ((loss, grads), ready_at) = train_step_on_device(
                ctx,
                &job,
                self.replica.as_ref(),
                params,
                at,
                work,
                Charge::Deferred,
            )
            .await?;
            while let Some(env) = ctx.recv_until(ready_at).await? {
                self.serve(ctx, env)?;
            }
            let compute_end = ctx.now();
            let bytes_sent = match passive_peer(self.id, job.config.workers, &mut rng) {
                Some(peer) => self.average_with_peer(ctx, peer, step).await?,
                None => 0,
            };
            let averaged = ctx.now();
            match grads {
                Some(g) => self.model.apply(&g, 1.0, averaged)?,
                None => self.model.bump(averaged)?,
            }
            ctx.charge_modeled(ctx.device().work_seconds(apply_flops))
                .await;
            let tally = ClockTally {
                samples: b,
                compute_s: compute_end - start,
                wait_s: 0.0,
                comm_s: averaged - compute_end,
                loss,
                version_read: step as i64 - 1,
                bytes_sent,
            };
            records.push(close_clock(ctx, &job, step, start, tally));
        }
        ctx.send(RoleId::Coordinator, Message::custom(DONE, &self.id)?);
        loop {
            let env = ctx.recv().await?;
            if env.msg.decode_custom::<u32>(STOP)?.is_some() {
                break;
            }
            self.serve(ctx, env)?;
        }
        let model = self.model.report(&job.layout)?;
        let state = RoleState::encode(&AdPsgdState {
            model: model.values_only(),
            updates: self.model.updates(),
            rng_word_pos: rng.get_word_pos(),
        })?;
        Ok(WorkerReport {
            state: Some(state),
            iterations: records,
            model: (self.id == 0).then_some(model),
        })
    }
}

/// AD-PSGD's coordinator: tells the workers to stop answering once every one is done.
pub struct AdPsgdCoordinator {
    workers: u32,
}

impl AdPsgdCoordinator {
    /// For `workers` workers.
    pub fn new(workers: u32) -> AdPsgdCoordinator {
        AdPsgdCoordinator { workers }
    }
}

#[async_trait]
impl Coordinator for AdPsgdCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let mut done = 0;
        loop {
            let env = ctx.recv().await?;
            if matches!(env.msg, Message::Shutdown) {
                return Ok(CoordinatorReport::default());
            }
            if env.msg.decode_custom::<u32>(DONE)?.is_some() {
                done += 1;
                if done == self.workers {
                    let stop = Message::custom(STOP, &0u32)?;
                    for w in 0..self.workers {
                        ctx.send(RoleId::Worker(w), stop.clone());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Active workers pick only passive peers, every one of them, never themselves; passive
    /// workers pick none.
    #[test]
    fn active_workers_pair_with_every_passive_worker_and_only_those() {
        for workers in [2u32, 3, 5, 8] {
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            for id in 0..workers {
                let picks: Vec<_> = (0..200)
                    .map(|_| passive_peer(id, workers, &mut rng))
                    .collect();
                if id % 2 == 1 {
                    assert!(picks.iter().all(Option::is_none), "{id} of {workers}");
                    continue;
                }
                let mut seen: Vec<u32> = picks.into_iter().map(|p| p.unwrap()).collect();
                seen.sort_unstable();
                seen.dedup();
                let passive: Vec<u32> = (0..workers).filter(|w| w % 2 == 1).collect();
                assert_eq!(seen, passive, "{id} of {workers}");
            }
        }
    }
}
