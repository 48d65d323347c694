//! The RNA controller: stateless with respect to training progress; it only reacts to readiness.

use crate::options::Resolved;
use crate::protocol::{self, Activate, Round, RoundDone, WorkerStats};
use concord_engine::data::mix_seed;
use concord_engine::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;

/// Picks `q` distinct ranks of `0..p` uniformly at random (the probes of one round).
pub fn sample_probes(p: usize, q: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    rand::seq::index::sample(rng, p, q.min(p)).into_vec()
}

/// What the controller does with a probe reply for the round it is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyOutcome {
    /// This reply triggers the round; the worker is the initiator.
    Trigger(u32),
    /// Counted, but the round waits for more (wait-for-all).
    Wait,
    /// A reply for another round (expired probe) or a second reply: ignored.
    Ignore,
}

/// The per-round probe state: which round is open and who replied.
#[derive(Clone, Debug)]
pub struct ProbeRound {
    round: u64,
    need: usize,
    replied: Vec<u32>,
    triggered: bool,
}

impl ProbeRound {
    /// Round `round`, triggered by the first reply (`need = 1`) or once `need` members replied.
    pub fn new(round: u64, need: usize) -> ProbeRound {
        ProbeRound {
            round,
            need: need.max(1),
            replied: Vec::new(),
            triggered: false,
        }
    }

    /// Feeds a reply from `worker` tagged `round`. Late replies (an expired probe of an earlier
    /// round) never trigger; neither does anything after the trigger.
    pub fn on_reply(&mut self, worker: u32, round: u64) -> ReplyOutcome {
        if round != self.round || self.triggered || self.replied.contains(&worker) {
            return ReplyOutcome::Ignore;
        }
        self.replied.push(worker);
        if self.replied.len() >= self.need {
            self.triggered = true;
            // The first reply accepted makes its sender the initiator.
            ReplyOutcome::Trigger(self.replied[0])
        } else {
            ReplyOutcome::Wait
        }
    }
}

/// The controller of a flat RNA group (all workers).
pub struct RnaController {
    workers: u32,
    rounds: Range<u64>,
    seed: u64,
    opts: Resolved,
    /// The rounds before `rounds` (from a checkpoint when the job resumes).
    before: ControllerState,
}

/// What the controller carries across a checkpoint: where its probe sampling stands, and what
/// the rounds so far measured, so a resumed run's figures cover every round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ControllerState {
    /// The probe sampler's position in its ChaCha stream.
    rng_word_pos: u128,
    /// Probe-to-trigger latency of every round.
    latencies: Vec<f64>,
    /// Σw of every round.
    weights: Vec<f64>,
    /// Each worker's statistics over the rounds so far.
    stats: BTreeMap<u32, WorkerStats>,
}

impl RnaController {
    /// The controller of `job` under `opts`: its workers, the rounds of this stretch of the job
    /// and its seed (continuing from `job`'s checkpoint when it resumes).
    pub fn new(opts: Resolved, job: &Job) -> Result<RnaController> {
        Ok(RnaController {
            workers: job.config.workers,
            rounds: job.clocks(),
            seed: job.config.seed,
            opts,
            before: job.resumed_state(RoleId::Coordinator, "RNA controller state")?,
        })
    }
}

/// Each worker's statistics over the rounds before (`before`, from a checkpoint) and the later
/// ones (`later`, as the workers reported them), by worker.
pub(crate) fn merged_stats(
    mut before: BTreeMap<u32, WorkerStats>,
    later: Vec<WorkerStats>,
) -> BTreeMap<u32, WorkerStats> {
    for s in later {
        merge_stats(before.entry(s.worker).or_default(), s);
    }
    before
}

/// Adds a worker's statistics over later rounds to those over the rounds before them.
fn merge_stats(before: &mut WorkerStats, later: WorkerStats) {
    if before.staleness.len() < later.staleness.len() {
        before.staleness.resize(later.staleness.len(), 0);
    }
    for (b, l) in before.staleness.iter_mut().zip(&later.staleness) {
        *b += l;
    }
    before.dropped += later.dropped;
    before.digests.extend(later.digests);
    // The step time is the worker's mean over all its steps; the rest is who it is.
    before.mean_step_s = later.mean_step_s;
    before.group = later.group;
    before.worker = later.worker;
    before.evaluated = later.evaluated;
}

/// Takes workers' end-of-run statistics until the engine's shutdown (unless it came already),
/// handing every other message to `other` (RNA-H's profiles still on their way).
pub(crate) async fn gather_until_shutdown(
    ctx: &mut RoleContext,
    mut shutdown: bool,
    stats: &mut Vec<WorkerStats>,
    mut other: impl FnMut(&Envelope) -> Result<()> + Send,
) -> Result<()> {
    while !shutdown {
        let env = ctx.recv().await?;
        shutdown = matches!(env.msg, Message::Shutdown);
        match env
            .msg
            .decode_custom::<WorkerStats>(protocol::WORKER_STATS)?
        {
            Some(s) => stats.push(s),
            None => other(&env)?,
        }
    }
    Ok(())
}

/// Probe-to-trigger latency figures: median, mean and standard deviation.
pub(crate) fn trigger_figures(latencies: &mut [f64]) -> Vec<(String, f64)> {
    let n = latencies.len().max(1) as f64;
    let mean = latencies.iter().sum::<f64>() / n;
    let sd = (latencies.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / n).sqrt();
    vec![
        ("rna.trigger_median_s".into(), median(latencies)),
        ("rna.trigger_mean_s".into(), mean),
        ("rna.trigger_sd_s".into(), sd),
    ]
}

/// Share of stale gradients among those used, and gradients dropped past the bound.
pub(crate) fn staleness_figures(stats: &[WorkerStats]) -> Vec<(String, f64)> {
    let used: u64 = stats.iter().flat_map(|s| s.staleness.iter()).sum();
    let stale: u64 = stats.iter().flat_map(|s| s.staleness.iter().skip(1)).sum();
    let dropped: u64 = stats.iter().map(|s| s.dropped).sum();
    vec![
        ("rna.stale_share".into(), stale as f64 / used.max(1) as f64),
        ("rna.dropped".into(), dropped as f64),
    ]
}

/// The worker whose model the run evaluates (`rna.evaluated_worker`), if one reported it.
pub(crate) fn evaluated_worker_figure(stats: &[WorkerStats]) -> Option<(String, f64)> {
    let worker = stats.iter().find(|s| s.evaluated)?.worker;
    Some(("rna.evaluated_worker".into(), worker as f64))
}

/// Rounds after which some of these replicas differ from the first.
pub(crate) fn mismatched_rounds(stats: &[&WorkerStats]) -> usize {
    let rounds = stats.iter().map(|s| s.digests.len()).max().unwrap_or(0);
    (0..rounds)
        .filter(|&k| {
            let first = stats.first().and_then(|s| s.digests.get(k));
            stats.iter().any(|s| s.digests.get(k) != first)
        })
        .count()
}

/// The median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

#[async_trait]
impl Coordinator for RnaController {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(self.seed, 0x524e_4121));
        rng.set_word_pos(self.before.rng_word_pos);
        let p = self.workers as usize;
        let mut latencies = std::mem::take(&mut self.before.latencies);
        let mut weights = std::mem::take(&mut self.before.weights);
        let mut stats: Vec<WorkerStats> = Vec::new();
        let mut report = CoordinatorReport::default();
        let mut shutdown = false;
        'rounds: for k in self.rounds.clone() {
            let probes = if self.opts.wait_for_all {
                (0..p).collect()
            } else {
                sample_probes(p, self.opts.q, &mut rng)
            };
            let t0 = ctx.now();
            let probe = Message::custom(protocol::PROBE, &Round { group: 0, round: k })?;
            for &r in &probes {
                ctx.send(RoleId::Worker(r as u32), probe.clone());
            }
            let mut state = ProbeRound::new(
                k,
                probes.len().min(if self.opts.wait_for_all { p } else { 1 }),
            );
            let initiator = loop {
                let env = ctx.recv().await?;
                if matches!(env.msg, Message::Shutdown) {
                    shutdown = true;
                    break 'rounds;
                }
                if let (Some(r), RoleId::Worker(w)) = (
                    env.msg.decode_custom::<Round>(protocol::PROBE_REPLY)?,
                    env.from,
                ) {
                    if let ReplyOutcome::Trigger(i) = state.on_reply(w, r.round) {
                        break i;
                    }
                } else if let Some(s) = env
                    .msg
                    .decode_custom::<WorkerStats>(protocol::WORKER_STATS)?
                {
                    stats.push(s);
                }
            };
            latencies.push(ctx.now() - t0);
            let activate = Message::custom(
                protocol::ACTIVATE,
                &Activate {
                    round: Round { group: 0, round: k },
                    initiator,
                },
            )?;
            for w in 0..self.workers {
                ctx.send(RoleId::Worker(w), activate.clone());
            }
            loop {
                let env = ctx.recv().await?;
                if matches!(env.msg, Message::Shutdown) {
                    shutdown = true;
                    break 'rounds;
                }
                if let Some(d) = env.msg.decode_custom::<RoundDone>(protocol::ROUND_DONE)? {
                    if d.round.round == k {
                        weights.push(d.weight);
                        break;
                    }
                } else if let Some(s) = env
                    .msg
                    .decode_custom::<WorkerStats>(protocol::WORKER_STATS)?
                {
                    stats.push(s);
                }
            }
        }
        // After the last round, gather the workers' end-of-run statistics until shut down.
        gather_until_shutdown(ctx, shutdown, &mut stats, |_| Ok(())).await?;
        let merged = merged_stats(std::mem::take(&mut self.before.stats), stats);
        let stats: Vec<WorkerStats> = merged.values().cloned().collect();
        let figures = &mut report.figures;
        // On a copy: the figures sort it, and the state keeps the rounds in order.
        figures.extend(trigger_figures(&mut latencies.clone()));
        figures.push((
            "rna.contributors_share".into(),
            weights.iter().sum::<f64>() / (weights.len().max(1) as f64 * p as f64),
        ));
        figures.extend(staleness_figures(&stats));
        figures.extend(evaluated_worker_figure(&stats));
        // Rounds after which some replica differs from another (flat RNA keeps them identical).
        let all: Vec<&WorkerStats> = stats.iter().collect();
        let rounds = stats.iter().map(|s| s.digests.len()).max().unwrap_or(0);
        figures.push((
            "rna.replica_mismatch_rounds".into(),
            mismatched_rounds(&all) as f64,
        ));
        figures.push(("rna.checked_rounds".into(), rounds as f64));
        report.state = Some(RoleState::encode(&ControllerState {
            rng_word_pos: rng.get_word_pos(),
            latencies,
            weights,
            stats: merged,
        })?);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R8 (vi): an expired probe (a reply for an earlier round) never triggers, nor does a reply
    /// after the trigger; the first accepted reply is the initiator.
    #[test]
    fn expired_probes_never_trigger() {
        let mut r = ProbeRound::new(5, 1);
        assert_eq!(
            r.on_reply(3, 4),
            ReplyOutcome::Ignore,
            "late reply of round 4"
        );
        assert_eq!(
            r.on_reply(3, 6),
            ReplyOutcome::Ignore,
            "a round not yet probed"
        );
        assert_eq!(r.on_reply(2, 5), ReplyOutcome::Trigger(2));
        assert_eq!(
            r.on_reply(7, 5),
            ReplyOutcome::Ignore,
            "the other probe expired"
        );
        // Wait-for-all: every member must reply; duplicates do not count twice.
        let mut all = ProbeRound::new(0, 3);
        assert_eq!(all.on_reply(1, 0), ReplyOutcome::Wait);
        assert_eq!(all.on_reply(1, 0), ReplyOutcome::Ignore);
        assert_eq!(all.on_reply(0, 0), ReplyOutcome::Wait);
        assert_eq!(all.on_reply(2, 0), ReplyOutcome::Trigger(1));
    }

    #[test]
    fn probes_are_distinct_and_uniform() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut counts = [0u32; 8];
        for _ in 0..8000 {
            let s = sample_probes(8, 2, &mut rng);
            assert_eq!(s.len(), 2);
            assert_ne!(s[0], s[1]);
            for r in s {
                counts[r] += 1;
            }
        }
        // Each rank is probed with probability 2/8: 2000 ± 4·sd (sd ≈ 38.7).
        for c in counts {
            assert!((c as f64 - 2000.0).abs() < 4.0 * 38.7, "{counts:?}");
        }
        assert_eq!(sample_probes(3, 5, &mut rng).len(), 3);
    }
}
