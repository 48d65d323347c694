//! RNA-H's controller on the coordinator role: flat RNA while the workers profile their steps,
//! then the groups, each with its own stateless probe controller; groups never wait for each
//! other.

use super::groups::form_groups;
use crate::controller::{
    evaluated_worker_figure, gather_until_shutdown, merged_stats, mismatched_rounds, sample_probes,
    staleness_figures, trigger_figures, ProbeRound, ReplyOutcome,
};
use crate::options::{GroupSource, Resolved};
use crate::protocol::{self, Activate, Groups, Profile, Round, RoundDone, WorkerStats};
use concord_engine::data::mix_seed;
use concord_engine::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;

/// Groups just formed from the profiles, with their probe states.
type Formed = (Vec<Vec<u32>>, Vec<GroupState>);

/// One group's probe state on the controller.
struct GroupState {
    members: Vec<u32>,
    rng: ChaCha8Rng,
    round: u64,
    probe: ProbeRound,
    probed_at: f64,
    running: bool,
    done: bool,
}

/// The controller of RNA-H: forms the groups, then runs one stateless RNA probe controller per
/// group, multiplexed on the coordinator role (groups never wait for each other).
pub struct HierController {
    workers: u32,
    /// The rounds every group runs in this stretch of the job (all of them, unless it is cut by
    /// checkpoints).
    rounds: Range<u64>,
    seed: u64,
    opts: Resolved,
    /// Where the groups stood at the checkpoint this stretch continues from (the start of the
    /// job otherwise).
    before: HierState,
}

/// What RNA-H's controller carries across a checkpoint: the groups (or the warm-up still
/// profiling, with the profiles in so far), where each group's probe sampling stands, and what
/// the rounds so far measured, so a resumed run's figures cover every round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct HierState {
    /// The groups, once formed (or given); `None` while the warm-up runs as flat RNA.
    groups: Option<Vec<Vec<u32>>>,
    /// Each worker's profiled mean step time, once reported.
    times: Vec<Option<f64>>,
    /// The round the groups took over at.
    warmup_rounds: u64,
    /// Each group's probe sampler's position in its ChaCha stream.
    rng_word_pos: Vec<u128>,
    /// Probe-to-trigger latency of every round.
    latencies: Vec<f64>,
    /// Each round's share of its group that contributed.
    shares: Vec<f64>,
    /// Each worker's statistics over the rounds so far.
    stats: BTreeMap<u32, WorkerStats>,
}

impl HierController {
    /// The controller of `job` under `opts`: its workers, the rounds every group runs in this
    /// stretch of the job and its seed (continuing from `job`'s checkpoint when it resumes).
    pub fn new(opts: Resolved, job: &Job) -> Result<HierController> {
        Ok(HierController {
            workers: job.config.workers,
            rounds: job.clocks(),
            seed: job.config.seed,
            opts,
            before: job.resumed_state(RoleId::Coordinator, "RNA-H controller state")?,
        })
    }

    /// Probe states of `groups`, all at round `round`; `epoch` picks the random streams (0 for
    /// the first groups: group 0 then probes exactly as the flat controller).
    fn states(&self, groups: &[Vec<u32>], round: u64, epoch: u64) -> Vec<GroupState> {
        groups
            .iter()
            .enumerate()
            .map(|(i, m)| GroupState {
                members: m.clone(),
                rng: ChaCha8Rng::seed_from_u64(mix_seed(
                    self.seed,
                    0x524e_4121 ^ ((i as u64) << 32) ^ (epoch << 48),
                )),
                round,
                probe: ProbeRound::new(round, 1),
                probed_at: 0.0,
                running: false,
                done: round >= self.rounds.end,
            })
            .collect()
    }

    /// Forms the groups from the profiles once every worker has reported, tells the workers
    /// they take over at round `next`, and gives their fresh probe states; `None` while a
    /// profile is missing.
    fn form(
        &self,
        ctx: &mut RoleContext,
        split_ratio: f64,
        times: &[Option<f64>],
        next: u64,
    ) -> Result<Option<Formed>> {
        let Some(t) = times.iter().copied().collect::<Option<Vec<f64>>>() else {
            return Ok(None);
        };
        let groups = form_groups(&t, split_ratio);
        let msg = Message::custom(
            protocol::GROUPS,
            &Groups {
                groups: groups.clone(),
                start_round: next,
            },
        )?;
        for w in 0..self.workers {
            ctx.send(RoleId::Worker(w), msg.clone());
        }
        let states = self.states(&groups, next, 1);
        Ok(Some((groups, states)))
    }

    /// Probes the members of group `gid` for its current round (all of them with
    /// `wait_for_all`, else `q` sampled).
    fn probe(&self, ctx: &mut RoleContext, gid: u32, g: &mut GroupState) -> Result<()> {
        let n = g.members.len();
        let ranks: Vec<usize> = if self.opts.wait_for_all {
            (0..n).collect()
        } else {
            sample_probes(n, self.opts.q.min(n), &mut g.rng)
        };
        let need = if self.opts.wait_for_all { n } else { 1 };
        g.probe = ProbeRound::new(g.round, need.min(ranks.len()));
        g.probed_at = ctx.now();
        g.running = false;
        let msg = Message::custom(
            protocol::PROBE,
            &Round {
                group: gid,
                round: g.round,
            },
        )?;
        for r in ranks {
            ctx.send(RoleId::Worker(g.members[r]), msg.clone());
        }
        Ok(())
    }
}

#[async_trait]
impl Coordinator for HierController {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let mut report = CoordinatorReport::default();
        let mut stats: Vec<WorkerStats> = Vec::new();
        let mut shutdown = false;
        let source = self
            .opts
            .hierarchy
            .as_ref()
            .map(|h| h.groups.clone())
            .ok_or_else(|| {
                EngineError::protocol(
                    ctx.id(),
                    "hierarchical controller without hierarchy options",
                )
            })?;
        let profiled = matches!(source, GroupSource::Profiled { .. });
        let before = std::mem::take(&mut self.before);
        let mut times = before.times;
        times.resize(self.workers as usize, None);
        let mut warmup_rounds = before.warmup_rounds;
        let mut latencies = before.latencies;
        let mut shares = before.shares;
        // Profiled groups: flat RNA (one group of every worker) until every worker has reported
        // its profile, then the groups take over at the next round.
        let (mut groups, mut warmup) = match (before.groups, source) {
            (Some(g), _) | (None, GroupSource::Explicit(g)) => (g, None),
            (None, GroupSource::Profiled { split_ratio, .. }) => {
                (vec![(0..self.workers).collect()], Some(split_ratio))
            }
        };
        // Group 0 of the warm-up (or of given groups) draws the flat controller's stream: one
        // group probes as flat RNA; groups formed from profiles draw streams of their own.
        let epoch = u64::from(profiled && warmup.is_none());
        let mut states = self.states(&groups, self.rounds.start, epoch);
        for (g, &pos) in states.iter_mut().zip(&before.rng_word_pos) {
            g.rng.set_word_pos(pos);
        }
        // A stretch after a checkpoint that cut the warm-up once every profile was in: the
        // groups take over at its first round.
        if let Some(ratio) = warmup {
            if let Some(formed) = self.form(ctx, ratio, &times, self.rounds.start)? {
                (groups, states) = formed;
                warmup = None;
                warmup_rounds = self.rounds.start;
            }
        }
        for (i, g) in states.iter_mut().enumerate() {
            if !g.done {
                self.probe(ctx, i as u32, g)?;
            }
        }
        while !shutdown && states.iter().any(|g| !g.done) {
            let env = ctx.recv().await?;
            if matches!(env.msg, Message::Shutdown) {
                shutdown = true;
            } else if record_profile(&env, &mut times)? {
                // Kept for the groups' formation.
            } else if let (Some(r), RoleId::Worker(w)) = (
                env.msg.decode_custom::<Round>(protocol::PROBE_REPLY)?,
                env.from,
            ) {
                let Some(g) = states.get_mut(r.group as usize) else {
                    continue;
                };
                if g.done || g.running || !g.members.contains(&w) {
                    continue;
                }
                if let ReplyOutcome::Trigger(initiator) = g.probe.on_reply(w, r.round) {
                    latencies.push(ctx.now() - g.probed_at);
                    g.running = true;
                    let msg = Message::custom(
                        protocol::ACTIVATE,
                        &Activate {
                            round: Round {
                                group: r.group,
                                round: g.round,
                            },
                            initiator,
                        },
                    )?;
                    for &m in &g.members {
                        ctx.send(RoleId::Worker(m), msg.clone());
                    }
                }
            } else if let Some(d) = env.msg.decode_custom::<RoundDone>(protocol::ROUND_DONE)? {
                let gid = d.round.group;
                let Some(g) = states.get_mut(gid as usize) else {
                    continue;
                };
                if !g.running || d.round.round != g.round {
                    continue;
                }
                shares.push(d.weight / g.members.len() as f64);
                g.round += 1;
                g.running = false;
                let next = g.round;
                if next >= self.rounds.end {
                    g.done = true;
                    continue;
                }
                if let Some(ratio) = warmup {
                    if let Some(formed) = self.form(ctx, ratio, &times, next)? {
                        (groups, states) = formed;
                        warmup = None;
                        warmup_rounds = next;
                        for (i, g) in states.iter_mut().enumerate() {
                            self.probe(ctx, i as u32, g)?;
                        }
                        continue;
                    }
                }
                self.probe(ctx, gid, g)?;
            } else if let Some(s) = env
                .msg
                .decode_custom::<WorkerStats>(protocol::WORKER_STATS)?
            {
                stats.push(s);
            }
        }
        // After the last round: the workers' statistics, and profiles still on their way (a
        // stretch cut by a checkpoint may end before every worker's reached the controller).
        gather_until_shutdown(ctx, shutdown, &mut stats, |env| {
            record_profile(env, &mut times).map(drop)
        })
        .await?;
        let merged = merged_stats(before.stats, stats);
        let stats: Vec<WorkerStats> = merged.values().cloned().collect();
        let figures = &mut report.figures;
        // On a copy: the figures sort it, and the state keeps the rounds in order.
        figures.extend(trigger_figures(&mut latencies.clone()));
        figures.push((
            "rna.contributors_share".into(),
            shares.iter().sum::<f64>() / shares.len().max(1) as f64,
        ));
        figures.extend(staleness_figures(&stats));
        figures.extend(evaluated_worker_figure(&stats));
        figures.push(("rna.groups".into(), groups.len() as f64));
        figures.push(("rna.warmup_rounds".into(), warmup_rounds as f64));
        figures.push((
            "rna.first_group_size".into(),
            groups.first().map_or(0, Vec::len) as f64,
        ));
        // Replicas agree within a group after every round (and its averaging).
        let mismatched: usize = (0..groups.len() as u32)
            .map(|g| {
                let of: Vec<&WorkerStats> = stats.iter().filter(|s| s.group == g).collect();
                mismatched_rounds(&of)
            })
            .sum();
        figures.push(("rna.replica_mismatch_rounds".into(), mismatched as f64));
        report.state = Some(RoleState::encode(&HierState {
            groups: warmup.is_none().then_some(groups),
            times,
            warmup_rounds,
            rng_word_pos: states.iter().map(|g| g.rng.get_word_pos()).collect(),
            latencies,
            shares,
            stats: merged,
        })?);
        Ok(report)
    }
}

/// Records a worker's profile if `env` is one; whether it was.
fn record_profile(env: &Envelope, times: &mut [Option<f64>]) -> Result<bool> {
    let (Some(p), RoleId::Worker(w)) = (
        env.msg.decode_custom::<Profile>(protocol::PROFILE)?,
        env.from,
    ) else {
        return Ok(false);
    };
    if let Some(t) = times.get_mut(w as usize) {
        *t = Some(p.mean_step_s);
    }
    Ok(true)
}
