//! The token server as the job's coordinator (Fela §III-C): hands out tokens on request, tells
//! dependency holders where to send outputs, starts each sub-model's synchronization once its
//! last backward pass is done, runs iterations under BSP and tunes the configuration at the
//! start of the run.

use crate::options::{Case, Resolved};
use crate::plan::TokenPlan;
use crate::protocol::{
    Assign, BackwardDone, Handover, Joining, PrepareSend, Request, Sync, Synced, WorkerStats,
};
use crate::server::{Counters, Ctd, Policies, TokenServer};
use crate::tuner::Tuner;
use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

/// What the token server carries across a checkpoint: the tuner where it stands, the case the
/// last iteration ran, and what the iterations so far counted and measured.
#[derive(Serialize, Deserialize)]
struct TokenServerState {
    tuner: Tuner,
    case: Case,
    past: Counters,
    iter_times: Vec<f64>,
    stats: WorkerStats,
}

/// The token server role.
pub struct TokenServerRole {
    opts: Resolved,
    workers: u32,
    /// The iteration after the last this role runs.
    iterations: u64,
    tuner: Tuner,
    server: TokenServer,
    case: Case,
    /// Counters of the configurations run before the current one.
    past: Counters,
    iter: u64,
    iter_start: f64,
    synced: u32,
    /// Workers waiting for a token of this iteration, in request order.
    parked: VecDeque<WorkerId>,
    /// Workers that asked for the next iteration's first token.
    early: Vec<WorkerId>,
    loss_sum: f64,
    stats: WorkerStats,
    /// Iteration seconds, for the summary's figures.
    iter_times: Vec<f64>,
    lock_hold_s: f64,
}

impl TokenServerRole {
    /// The token server of a job with `workers` workers running `iterations` (continuing from
    /// `job`'s checkpoint when it resumes).
    pub fn new(
        opts: Resolved,
        workers: u32,
        iterations: Range<u64>,
        lock_hold_s: f64,
        job: &Job,
    ) -> Result<TokenServerRole> {
        let feasible = |weights: &[u32]| {
            TokenPlan::new(opts.total_batch, workers, opts.threshold, weights, "").is_ok()
        };
        let state = match job.resumed(RoleId::Coordinator) {
            Some(cp) => cp.decode_state(RoleId::Coordinator, "Fela token server state")?,
            None => {
                let tuner = Tuner::new(
                    opts.submodels.len(),
                    workers,
                    opts.tune_iters,
                    opts.fixed.clone(),
                    feasible,
                );
                TokenServerState {
                    case: tuner.current(),
                    tuner,
                    past: Counters::default(),
                    iter_times: Vec::new(),
                    stats: WorkerStats::default(),
                }
            }
        };
        let server = build_server(&opts, workers, &state.case, lock_hold_s)?;
        Ok(TokenServerRole {
            opts,
            workers,
            iterations: iterations.end,
            tuner: state.tuner,
            server,
            case: state.case,
            past: state.past,
            iter: iterations.start,
            iter_start: 0.0,
            synced: 0,
            parked: VecDeque::new(),
            early: Vec::new(),
            loss_sum: 0.0,
            stats: state.stats,
            iter_times: state.iter_times,
            lock_hold_s,
        })
    }

    /// This role's state after its last iteration, for a checkpoint.
    fn state(&self) -> TokenServerState {
        let mut past = self.past.clone();
        merge(&mut past, self.server.counters());
        TokenServerState {
            tuner: self.tuner.clone(),
            case: self.case.clone(),
            past,
            iter_times: self.iter_times.clone(),
            stats: self.stats.clone(),
        }
    }

    fn members(&self, level: usize) -> Vec<WorkerId> {
        (0..self.workers)
            .filter(|&w| self.server.trains(w, level))
            .collect()
    }

    /// Gives `worker` a token if there is one; parks it otherwise.
    fn serve(&mut self, ctx: &mut RoleContext, worker: WorkerId) -> Result<()> {
        let Some(token) = self.server.pick(worker, ctx.now()) else {
            self.server.count_wait();
            self.parked.push_back(worker);
            return Ok(());
        };
        let holders = self.server.holders(&token);
        let mut by_holder: BTreeMap<WorkerId, Vec<u64>> = BTreeMap::new();
        for &(dep, h) in &holders {
            if h != worker {
                by_holder.entry(h).or_default().push(dep);
            }
        }
        for (h, tokens) in by_holder {
            let msg = PrepareSend {
                iter: self.iter,
                to: worker,
                tokens,
            };
            ctx.send(RoleId::Worker(h), Message::strategy(&msg)?);
        }
        ctx.send(
            RoleId::Worker(worker),
            Message::strategy(&Assign { token, holders })?,
        );
        Ok(())
    }

    /// Retries every parked worker, in the order they asked.
    fn serve_parked(&mut self, ctx: &mut RoleContext) -> Result<()> {
        let waiting: Vec<WorkerId> = self.parked.drain(..).collect();
        for w in waiting {
            self.serve(ctx, w)?;
        }
        Ok(())
    }

    fn sync(&mut self, ctx: &mut RoleContext, level: usize) -> Result<()> {
        let last = level + 1 == self.server.plan().levels();
        let loss = (last && self.loss_sum.is_finite() && self.loss_sum != 0.0)
            .then(|| self.loss_sum / self.opts.total_batch as f64);
        let msg = Sync {
            iter: self.iter,
            level,
            members: self.members(level),
            loss,
        };
        for w in 0..self.workers {
            ctx.send(RoleId::Worker(w), Message::strategy(&msg)?);
        }
        Ok(())
    }

    fn on_request(&mut self, ctx: &mut RoleContext, w: WorkerId, r: Request) -> Result<()> {
        if let Some(t) = r.completed {
            if r.iter != self.iter {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!(
                        "worker {w} finished token {t} of iteration {}, not {}",
                        r.iter, self.iter
                    ),
                ));
            }
            let created = self
                .server
                .complete(w, t)
                .map_err(|e| EngineError::protocol(ctx.id(), e))?;
            self.loss_sum += r.loss_sum.unwrap_or(0.0);
            let last = self.server.plan().levels() - 1;
            if self.server.plan().level_of(t) == last {
                if let Some(level) = self.server.backward_done(t) {
                    self.sync(ctx, level)?;
                }
            }
            if !created.is_empty() {
                self.serve_parked(ctx)?;
            }
        }
        if r.iter == self.iter + 1 {
            self.early.push(w);
            Ok(())
        } else {
            self.serve(ctx, w)
        }
    }

    fn on_synced(&mut self, ctx: &mut RoleContext) -> Result<()> {
        self.synced += 1;
        if self.synced < self.workers {
            return Ok(());
        }
        let took = ctx.now() - self.iter_start;
        self.iter_times.push(took);
        self.tuner.record(took);
        self.iter += 1;
        if self.iter >= self.iterations {
            return Ok(());
        }
        let next = self.tuner.current();
        if next != self.case {
            self.change_case(ctx, next)?;
        }
        self.start_iteration(ctx)?;
        let early = std::mem::take(&mut self.early);
        for w in early {
            self.serve(ctx, w)?;
        }
        Ok(())
    }

    fn start_iteration(&mut self, ctx: &mut RoleContext) -> Result<()> {
        self.server.start_iteration(self.iter);
        self.iter_start = ctx.now();
        self.synced = 0;
        self.loss_sum = 0.0;
        self.parked.clear();
        Ok(())
    }

    /// Moves to another configuration; workers joining the CTD subset get the sub-model's
    /// parameters from a member.
    fn change_case(&mut self, ctx: &mut RoleContext, case: Case) -> Result<()> {
        let level = self.opts.ctd_level;
        let old = self.members(level);
        let lock = self.lock_hold_s;
        let counters = self.server.counters().clone();
        merge(&mut self.past, &counters);
        self.server = build_server(&self.opts, self.workers, &case, lock)?;
        self.case = case;
        let joiners: Vec<WorkerId> = self
            .members(level)
            .into_iter()
            .filter(|w| !old.contains(w))
            .collect();
        if !joiners.is_empty() {
            for &j in &joiners {
                ctx.send(RoleId::Worker(j), Message::strategy(&Joining { level })?);
            }
            let msg = Handover { level, to: joiners };
            ctx.send(RoleId::Worker(old[0]), Message::strategy(&msg)?);
        }
        Ok(())
    }

    fn figures(&self) -> Vec<(String, f64)> {
        let mut c = self.past.clone();
        merge(&mut c, self.server.counters());
        let mut f = vec![
            ("fela.tokens".to_string(), c.assigned as f64),
            ("fela.locking_waits".to_string(), c.waits as f64),
            ("fela.steals".to_string(), c.steals as f64),
            ("fela.conflicts".to_string(), c.conflicts as f64),
            (
                "fela.remote_fetches".to_string(),
                self.stats.remote_fetches as f64,
            ),
            (
                "fela.remote_fetch_bytes".to_string(),
                self.stats.remote_fetch_bytes as f64,
            ),
            (
                "fela.local_fetches".to_string(),
                self.stats.local_fetches as f64,
            ),
            ("fela.sync_bytes".to_string(), self.stats.sync_bytes as f64),
            (
                "fela.submodels".to_string(),
                self.opts.submodels.len() as f64,
            ),
            (
                "fela.ctd_submodel".to_string(),
                (self.opts.ctd_level + 1) as f64,
            ),
            ("fela.ctd_size".to_string(), self.case.subset as f64),
        ];
        for (i, w) in self.case.weights.iter().enumerate() {
            f.push((format!("fela.weight.{}", i + 1), *w as f64));
        }
        for (i, b) in self.opts.boundaries.iter().enumerate() {
            f.push((format!("fela.boundary.{}", i + 1), *b as f64));
        }
        for (i, (case, secs)) in self.tuner.results().iter().enumerate() {
            let w: Vec<String> = case.weights.iter().map(u32::to_string).collect();
            f.push((
                format!("fela.case.{i}.w{}.s{}_s", w.join("-"), case.subset),
                *secs,
            ));
        }
        let times: Vec<f64> = self.tuner.results().iter().map(|(_, t)| *t).collect();
        if times.len() > 1 {
            let worst = times.iter().copied().fold(f64::MIN, f64::max);
            let best = times.iter().copied().fold(f64::MAX, f64::min);
            f.push(("fela.tuning_gap".to_string(), (worst - best) / worst));
        }
        let tuned = self.tuner.results().len() as u64 * self.opts.tune_iters;
        let after: Vec<f64> = self
            .iter_times
            .iter()
            .skip(tuned as usize)
            .copied()
            .collect();
        if !after.is_empty() {
            f.push((
                "fela.iter_s".to_string(),
                after.iter().sum::<f64>() / after.len() as f64,
            ));
        }
        for (w, n) in c.per_worker.iter().enumerate() {
            f.push((format!("fela.tokens.worker-{w}"), *n as f64));
        }
        f
    }
}

fn merge(into: &mut Counters, c: &Counters) {
    into.assigned += c.assigned;
    into.waits += c.waits;
    into.steals += c.steals;
    into.conflicts += c.conflicts;
    if into.per_worker.len() < c.per_worker.len() {
        into.per_worker.resize(c.per_worker.len(), 0);
    }
    for (a, b) in into.per_worker.iter_mut().zip(&c.per_worker) {
        *a += b;
    }
}

fn build_server(
    opts: &Resolved,
    workers: u32,
    case: &Case,
    lock_hold_s: f64,
) -> Result<TokenServer> {
    let plan = TokenPlan::new(
        opts.total_batch,
        workers,
        opts.threshold,
        &case.weights,
        "strategy.fela.weights",
    )?;
    let ctd = (case.subset < workers).then(|| Ctd {
        level: opts.ctd_level,
        members: (0..case.subset).collect(),
    });
    let policies = Policies {
        ads: opts.ads,
        hf: opts.hf,
        ctd,
    };
    Ok(TokenServer::new(plan, workers, policies, lock_hold_s))
}

#[async_trait]
impl Coordinator for TokenServerRole {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        // Resumed after the last iteration of a case, the move to the next happens now, as it
        // would have at that iteration's end (on a fresh start the tuner's case is the one built).
        let next = self.tuner.current();
        if next != self.case {
            self.change_case(ctx, next)?;
        }
        self.start_iteration(ctx)?;
        loop {
            let env = ctx.recv().await?;
            let RoleId::Worker(w) = env.from else {
                if matches!(env.msg, Message::Shutdown) {
                    return Ok(CoordinatorReport {
                        figures: self.figures(),
                        state: Some(RoleState::encode(&self.state())?),
                        ..CoordinatorReport::default()
                    });
                }
                continue;
            };
            if let Some(r) = env.msg.decode::<Request>()? {
                self.on_request(ctx, w, r)?;
            } else if let Some(b) = env.msg.decode::<BackwardDone>()? {
                if b.iter == self.iter {
                    if let Some(level) = self.server.backward_done(b.token) {
                        self.sync(ctx, level)?;
                    }
                }
            } else if env.msg.decode::<Synced>()?.is_some() {
                self.on_synced(ctx)?;
            } else if let Some(s) = env.msg.decode::<WorkerStats>()? {
                self.stats.remote_fetches += s.remote_fetches;
                self.stats.remote_fetch_bytes += s.remote_fetch_bytes;
                self.stats.local_fetches += s.local_fetches;
                self.stats.sync_bytes += s.sync_bytes;
            }
        }
    }
}
