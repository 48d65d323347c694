//! RNA-H: the hierarchical mode (Yang thesis §5.2, spec §2.1.4).
//!
//! Randomized probing hides transient stragglers but not a *persistent* speed gap: in flat RNA
//! the slow workers mostly contribute null or stale gradients and drift. RNA-H therefore
//!
//! 1. **forms groups from profiled speeds** ([`form_groups`]): the job starts as flat RNA (the
//!    warm-up); every worker times its first `profile_steps` local steps and reports the mean;
//!    once all have reported, the controller splits the workers into slow (mean above the set's
//!    mean v) and fast while ζ = slowest − fastest exceeds `split_ratio` · v, recursively, and
//!    the groups take over at the next round (formation happens once, spec §2.1.4 [CHOICE]).
//!    Explicit `groups` skip the warm-up;
//! 2. runs **RNA inside each group**: one probe state machine per group on the controller (q
//!    probes among the group's members, activation of the group only, ring over the group
//!    subset, learning-rate rule with the group's size);
//! 3. **averages the groups' models asynchronously through a parameter server**
//!    ([`AveragingServer`], server 0): every `sync_period` rounds of a group, that round's
//!    initiator pushes the group's parameters; the server keeps each group's latest copy and
//!    answers with their mean over the groups that have pushed so far; the initiator broadcasts
//!    it to its group (binomial tree), whose members overwrite their parameters (optimizer state
//!    kept). There is no barrier across groups: each group is one "node" of a classic PS.
//!    With `merge = "delta"` the server instead keeps one global model and adds to it each
//!    group's change since it last answered that group (the thesis's other phrasing, "each group
//!    can be regarded as a node in the traditional PS"); the group's first push carries the
//!    model it started from. Averaging N groups counts each group's step 1/N, so groups then
//!    scale their learning rate by their own size; a delta enters whole, so they scale by the
//!    job's worker count (the thesis's γ_k = Σw · γ with the per-worker γ).
//!
//! Every message is serializable (custom JSON bodies or [`Message::Collective`] payloads).

use crate::controller::{
    evaluated_worker_figure, gather_until_shutdown, mismatched_rounds, sample_probes,
    staleness_figures, trigger_figures, ProbeRound, ReplyOutcome,
};
use crate::options::{GroupSource, Merge, Resolved};
use crate::protocol::{self, Activate, Groups, Profile, Round, RoundDone, WorkerStats};
use concord_engine::data::mix_seed;
use concord_engine::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Forms groups from per-worker mean step times (index = worker id), the thesis's recursive
/// rule with a configurable factor: a set splits into slow (time > v) and fast (the rest) while
/// ζ > `split_ratio` · v, ζ being the slowest minus the fastest time and v their mean.
/// `split_ratio = 1` is the literal thesis rule. Groups come fastest first, members ascending.
pub fn form_groups(times: &[f64], split_ratio: f64) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    split_rec(
        (0..times.len() as u32).collect(),
        times,
        split_ratio,
        &mut out,
    );
    out
}

fn split_rec(members: Vec<u32>, times: &[f64], ratio: f64, out: &mut Vec<Vec<u32>>) {
    if members.len() < 2 {
        if !members.is_empty() {
            out.push(members);
        }
        return;
    }
    let t = |w: &u32| times[*w as usize];
    let max = members.iter().map(t).fold(f64::NEG_INFINITY, f64::max);
    let min = members.iter().map(t).fold(f64::INFINITY, f64::min);
    let v = members.iter().map(t).sum::<f64>() / members.len() as f64;
    if max - min > ratio * v {
        let (slow, fast): (Vec<u32>, Vec<u32>) = members.iter().partition(|w| t(w) > v);
        if !slow.is_empty() && !fast.is_empty() {
            split_rec(fast, times, ratio, out);
            split_rec(slow, times, ratio, out);
            return;
        }
    }
    out.push(members);
}

/// Tag bit of the collective operations of the PS averaging (ring rounds use the round id).
pub const SYNC_OP: u64 = 1 << 62;

/// The collective operation id of group `group`'s averaging after round `round`.
pub fn sync_op(group: u32, round: u64) -> u64 {
    SYNC_OP | (u64::from(group) << 40) | (round & ((1 << 40) - 1))
}

/// Whether `op` is an averaging operation.
pub fn is_sync_op(op: u64) -> bool {
    op & SYNC_OP != 0
}

/// The group of an averaging operation.
pub fn sync_group(op: u64) -> u32 {
    ((op & !SYNC_OP) >> 40) as u32
}

/// Parent and children of `rank` in the binomial broadcast tree rooted at `root` over `p` ranks
/// (the tree of [`concord_engine::collective::broadcast`]; children in sending order).
pub fn tree(rank: usize, root: usize, p: usize) -> (Option<usize>, Vec<usize>) {
    let rel = (rank + p - root) % p;
    let mut mask = 1usize;
    let mut parent = None;
    while mask < p {
        if rel & mask != 0 {
            parent = Some((rel - mask + root) % p);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let mut children = Vec::new();
    while mask > 0 {
        if rel + mask < p {
            children.push((rel + mask + root) % p);
        }
        mask >>= 1;
    }
    (parent, children)
}

/// The mean of the groups' latest models, in group-id order (deterministic). One group gives its
/// model back bit for bit.
pub fn average(latest: &BTreeMap<u32, Payload>) -> Result<Payload> {
    let mut it = latest.values();
    let Some(first) = it.next() else {
        return Ok(Payload::Virtual { elems: 0 });
    };
    let Payload::Real(first) = first else {
        return Ok(first.clone());
    };
    let mut sum = first.clone();
    for p in it {
        match p {
            Payload::Real(v) if v.len() == sum.len() => {
                for (s, x) in sum.iter_mut().zip(v) {
                    *s += x;
                }
            }
            _ => {
                return Err(EngineError::protocol(
                    RoleId::Server(0),
                    "groups pushed models of different sizes",
                ))
            }
        }
    }
    if latest.len() > 1 {
        let n = latest.len() as f32;
        for s in &mut sum {
            *s /= n;
        }
    }
    Ok(Payload::Real(sum))
}

/// `part` of a group's first push under [`Merge::Delta`]: the payload is its parameters followed
/// by the model the group started from (the server's baseline for that group).
pub const PUSH_WITH_BASE: u32 = 1;

/// The global model after adding a group's change: `global + (pushed − base)`, element-wise.
pub fn add_delta(global: &[f32], pushed: &[f32], base: &[f32]) -> Vec<f32> {
    global
        .iter()
        .zip(pushed)
        .zip(base)
        .map(|((x, p), b)| x + (p - b))
        .collect()
}

/// The central parameter server of RNA-H (server 0; other servers stay idle).
#[derive(Debug, Default)]
pub struct AveragingServer {
    merge: Merge,
    /// Each group's latest pushed parameters ([`Merge::Average`]).
    latest: BTreeMap<u32, Payload>,
    /// The global model ([`Merge::Delta`]).
    global: Option<Vec<f32>>,
    /// What the server last answered each group: the base of its next change ([`Merge::Delta`]).
    answered: BTreeMap<u32, Vec<f32>>,
}

impl AveragingServer {
    /// A server with no group model yet, merging pushes by `merge`.
    pub fn new(merge: Merge) -> AveragingServer {
        AveragingServer {
            merge,
            ..AveragingServer::default()
        }
    }

    /// The model to answer group `group`'s push `data` (`part` as sent) with; a malformed push is
    /// described in the error.
    pub fn merge_push(
        &mut self,
        group: u32,
        part: u32,
        data: Payload,
    ) -> std::result::Result<Payload, String> {
        match self.merge {
            Merge::Average => {
                self.latest.insert(group, data);
                average(&self.latest).map_err(|e| e.to_string())
            }
            Merge::Delta => {
                let Payload::Real(values) = data else {
                    return Ok(data);
                };
                let (pushed, base) = if part == PUSH_WITH_BASE {
                    let n = values.len() / 2;
                    (values[..n].to_vec(), values[n..].to_vec())
                } else {
                    let base = self.answered.get(&group).cloned().ok_or_else(|| {
                        format!("group {group}'s first push came without its base model")
                    })?;
                    (values, base)
                };
                let size = self.global.as_ref().map_or(base.len(), Vec::len);
                if pushed.len() != base.len() || base.len() != size {
                    return Err(format!(
                        "group {group} pushed a model of {} elements with a base of {} (model: {size})",
                        pushed.len(),
                        base.len()
                    ));
                }
                let global = self.global.get_or_insert_with(|| base.clone());
                let next = add_delta(global, &pushed, &base);
                *global = next.clone();
                self.answered.insert(group, next.clone());
                Ok(Payload::Real(next))
            }
        }
    }
}

#[async_trait]
impl ServerHandler for AveragingServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        match env.msg {
            Message::Collective { op, part, data, .. } if is_sync_op(op) => {
                let elems = data.elems() as f64;
                let mean = self
                    .merge_push(sync_group(op), part, data)
                    .map_err(|e| EngineError::protocol(ctx.id(), e))?;
                // Summation only: one add per element per group (averaging), or two (subtract
                // the base, add to the global model).
                let adds = match self.merge {
                    Merge::Average => self.latest.len() as f64,
                    Merge::Delta => 2.0,
                };
                let secs = ctx.device().work_seconds(elems * adds);
                ctx.sleep(secs).await;
                ctx.send(
                    env.from,
                    Message::Collective {
                        op,
                        part: 0,
                        step: 0,
                        data: mean,
                    },
                );
                Ok(())
            }
            Message::Collective { .. } | Message::Custom(_) => Err(unexpected(ctx, &env)),
            _ => Ok(()),
        }
    }

    fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
        Ok(ServerReport::default())
    }
}

#[async_trait]
impl Server for AveragingServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The mixed-groups profile (A ≈ 51 ms, B ≈ 101 ms per step) splits into {A}, {B} at the
    /// default ratio 0.5 but not under the literal thesis rule ζ > v.
    #[test]
    fn groups_from_speeds() {
        let t = [0.050, 0.052, 0.049, 0.053, 0.100, 0.103, 0.099, 0.101];
        assert_eq!(
            form_groups(&t, 0.5),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        assert_eq!(form_groups(&t, 1.0), vec![(0..8).collect::<Vec<u32>>()]);
        // Interleaved ids: groups keep ascending ids, fastest group first.
        let t = [0.4, 0.1, 0.4, 0.1];
        assert_eq!(form_groups(&t, 1.0), vec![vec![1, 3], vec![0, 2]]);
        // Recursion: 1, 2 and 9 units: {9} splits off, then {1} from {2} (ζ = 1 > 0.5 · 1.5).
        assert_eq!(
            form_groups(&[9.0, 1.0, 2.0], 0.5),
            vec![vec![1], vec![2], vec![0]]
        );
        // Equal speeds never split; one worker is one group.
        assert_eq!(form_groups(&[1.0; 4], 0.01), vec![vec![0, 1, 2, 3]]);
        assert_eq!(form_groups(&[1.0], 0.5), vec![vec![0]]);
    }

    /// `merge = "delta"`: each group's change since the server last answered it enters the
    /// global model whole, from any group in any order; nothing is averaged away.
    #[test]
    fn delta_merge_adds_each_groups_change_to_the_global_model() {
        let real = |v: &[f32]| Payload::Real(v.to_vec());
        let with_base = |p: &[f32], b: &[f32]| real(&[p, b].concat());
        let mut s = AveragingServer::new(Merge::Delta);
        // Both groups start from [1, 1]. Group 0 moved to [2, 0]: the global model is its model.
        let a = s.merge_push(0, PUSH_WITH_BASE, with_base(&[2.0, 0.0], &[1.0, 1.0]));
        assert_eq!(a, Ok(real(&[2.0, 0.0])));
        // Group 1 moved by [0, 3] from the same start: both changes, whole.
        let b = s.merge_push(1, PUSH_WITH_BASE, with_base(&[1.0, 4.0], &[1.0, 1.0]));
        assert_eq!(b, Ok(real(&[2.0, 3.0])));
        // Group 0's next push is measured from what it was answered, [2, 0]: +[1, 1].
        let c = s.merge_push(0, 0, real(&[3.0, 1.0]));
        assert_eq!(c, Ok(real(&[3.0, 4.0])));
        // A group that was never answered must send its base; sizes must agree.
        let err = s.merge_push(2, 0, real(&[1.0, 1.0])).unwrap_err();
        assert!(err.contains("group 2") && err.contains("base"), "{err}");
        let err = s
            .merge_push(1, PUSH_WITH_BASE, with_base(&[1.0], &[1.0]))
            .unwrap_err();
        assert!(err.contains("elements"), "{err}");
        // Averaging instead: the mean of the latest models, [2, 0] and [1, 4].
        let mut avg = AveragingServer::new(Merge::Average);
        avg.merge_push(0, 0, real(&[2.0, 0.0])).unwrap();
        assert_eq!(
            avg.merge_push(1, 0, real(&[1.0, 4.0])),
            Ok(real(&[1.5, 2.0]))
        );
    }

    #[test]
    fn sync_ops_and_tree() {
        let op = sync_op(3, 17);
        assert!(is_sync_op(op) && !is_sync_op(17));
        assert_eq!(sync_group(op), 3);
        // Every non-root rank has exactly one parent, and is the child of that parent.
        for p in 1..9 {
            for root in 0..p {
                for r in 0..p {
                    let (parent, _) = tree(r, root, p);
                    assert_eq!(parent.is_none(), r == root);
                    if let Some(q) = parent {
                        assert!(tree(q, root, p).1.contains(&r));
                    }
                }
            }
        }
    }

    #[test]
    fn averaging_is_exact_for_one_group() {
        let mut m = BTreeMap::new();
        m.insert(1, Payload::Real(vec![-0.0, 1.5, 3.0]));
        let Payload::Real(one) = average(&m).unwrap() else {
            panic!("real")
        };
        assert_eq!(
            one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [-0.0f32, 1.5, 3.0]
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        );
        m.insert(0, Payload::Real(vec![1.0, 0.5, 1.0]));
        assert_eq!(average(&m).unwrap(), Payload::Real(vec![0.5, 1.0, 2.0]));
        m.insert(2, Payload::Real(vec![1.0]));
        assert!(average(&m).is_err());
    }
}
