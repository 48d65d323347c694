//! RNA-H's controller on the coordinator role: flat RNA while the workers profile their steps,
//! then the groups, each with its own stateless probe controller; groups never wait for each
//! other.

use super::groups::form_groups;
use crate::controller::{
    evaluated_worker_figure, gather_until_shutdown, mismatched_rounds, sample_probes,
    staleness_figures, trigger_figures, ProbeRound, ReplyOutcome,
};
use crate::options::{GroupSource, Resolved};
use crate::protocol::{self, Activate, Groups, Profile, Round, RoundDone, WorkerStats};
use concord_engine::data::mix_seed;
use concord_engine::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

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
    rounds: u64,
    seed: u64,
    opts: Resolved,
}

impl HierController {
    /// A controller for `workers` workers, `rounds` rounds per group.
    pub fn new(workers: u32, rounds: u64, seed: u64, opts: Resolved) -> HierController {
        HierController {
            workers,
            rounds,
            seed,
            opts,
        }
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
                done: round >= self.rounds,
            })
            .collect()
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
        // Profiled groups: flat RNA (one group of every worker) until every worker has reported
        // its profile, then the groups take over at the next round.
        let (mut groups, mut warmup) = match source {
            GroupSource::Explicit(g) => (g, None),
            GroupSource::Profiled { split_ratio, .. } => {
                (vec![(0..self.workers).collect()], Some(split_ratio))
            }
        };
        let mut times: Vec<Option<f64>> = vec![None; self.workers as usize];
        let mut warmup_rounds = 0;
        // Group 0 draws the flat controller's stream: one group probes as flat RNA.
        let mut states = self.states(&groups, 0, 0);
        for (i, g) in states.iter_mut().enumerate() {
            if !g.done {
                self.probe(ctx, i as u32, g)?;
            }
        }
        let mut latencies = Vec::new();
        let mut shares = Vec::new();
        while !shutdown && states.iter().any(|g| !g.done) {
            let env = ctx.recv().await?;
            if matches!(env.msg, Message::Shutdown) {
                shutdown = true;
            } else if let (Some(p), RoleId::Worker(w)) = (
                env.msg.decode_custom::<Profile>(protocol::PROFILE)?,
                env.from,
            ) {
                if let Some(t) = times.get_mut(w as usize) {
                    *t = Some(p.mean_step_s);
                }
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
                if next >= self.rounds {
                    g.done = true;
                    continue;
                }
                if let (Some(ratio), true) = (warmup, times.iter().all(Option::is_some)) {
                    let t: Vec<f64> = times.iter().map(|t| t.unwrap_or(0.0)).collect();
                    groups = form_groups(&t, ratio);
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
                    warmup = None;
                    warmup_rounds = next;
                    states = self.states(&groups, next, 1);
                    for (i, g) in states.iter_mut().enumerate() {
                        self.probe(ctx, i as u32, g)?;
                    }
                    continue;
                }
                self.probe(ctx, gid, g)?;
            } else if let Some(s) = env
                .msg
                .decode_custom::<WorkerStats>(protocol::WORKER_STATS)?
            {
                stats.push(s);
            }
        }
        gather_until_shutdown(ctx, shutdown, &mut stats).await?;
        let figures = &mut report.figures;
        figures.extend(trigger_figures(&mut latencies));
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
        Ok(report)
    }
}
