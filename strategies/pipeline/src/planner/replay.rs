//! The runtime's schedule replayed on the planner's cost model: a small discrete-event run of
//! every worker's 1F1B-RR operation list ([`crate::schedule`]) with the profile's compute times,
//! the boundaries' transfers through the ports the engine's network charges (a device's port
//! on its machine's bus, the machine's NIC between machines; cut-through, each direction on its
//! own, first in, first out), and every replicated stage's lock-step ring average, hop by hop
//! through the same ports in time order with the rest. It predicts what the thesis's closed
//! form ([`super::evaluate`]) cannot: the stalls of a stage whose replicas wait for each other at every round's average
//! while the stages around it run at another width (VGG-16 "6-5-5" on 4×4 runs at twice its
//! closed-form time). [`super::plan`] still searches by the closed form, as the thesis does;
//! the replay reports what the chosen configuration will do.

use super::costs::Costs;
use super::{Profile, StagePlan, Sync, Topology};
use crate::schedule::{self, Op};
use concord_engine::transport::cut_through;
use std::collections::HashMap;

/// Minibatches replayed: enough for the steady state to dominate the warm-up and the drain.
const MINIBATCHES: u64 = 240;

/// The forward pass's share of a layer's training step (the backward pass takes the rest), as
/// the runtime charges it.
const FORWARD_SHARE: f64 = 1.0 / 3.0;

/// One replica's place in the replay.
struct Replica {
    stage: usize,
    ops: Vec<Op>,
    next: usize,
    free: f64,
}

/// What the replay does next.
#[derive(Clone, Copy)]
enum Next {
    /// Worker `.0`'s next operation, starting at `.1`.
    Op(usize, f64),
    /// Member `.1` of stage `.0`'s ring sends its next step.
    Hop(usize, u32),
}

/// A replicated stage's lock-step ring average in progress: 2(m − 1) steps, member k sending a
/// 1/m share of the stage's weights to member k + 1 at each, a step once the step before has
/// reached it from member k − 1 (as the engine's ring runs); every hop goes through the ports
/// in time order with the pipeline's own transfers.
struct Ring {
    /// The worker of member 0.
    first: u32,
    /// Bytes of each hop.
    chunk: u64,
    /// When the ring started (every member's first step).
    start: f64,
    /// Per member: the steps it has sent.
    sent: Vec<u32>,
    /// Per member: when each step from its left neighbour arrived.
    received: Vec<Vec<f64>>,
}

impl Ring {
    fn start(first: u32, members: u32, chunk: u64, start: f64) -> Ring {
        Ring {
            first,
            chunk,
            start,
            sent: vec![0; members as usize],
            received: vec![Vec::new(); members as usize],
        }
    }

    fn members(&self) -> u32 {
        self.sent.len() as u32
    }

    fn steps(&self) -> u32 {
        2 * (self.members() - 1)
    }

    /// When member `k` sends its next step: at the start, then once the step before has arrived
    /// from its left neighbour; `None` while it waits, or when it has sent every step.
    fn sends_at(&self, k: u32) -> Option<f64> {
        let step = self.sent[k as usize];
        if step >= self.steps() {
            return None;
        }
        if step == 0 {
            return Some(self.start);
        }
        self.received[k as usize].get(step as usize - 1).copied()
    }

    /// Records member `k`'s next step, arriving at `arrives`: the member that received it, when
    /// that was its last step (it is done).
    fn hop(&mut self, k: u32, arrives: f64) -> Option<u32> {
        self.sent[k as usize] += 1;
        let to = (k + 1) % self.members();
        let got = &mut self.received[to as usize];
        got.push(arrives);
        (got.len() as u32 == self.steps()).then_some(to)
    }

    /// Whether every member has received every step.
    fn is_done(&self) -> bool {
        self.received.iter().all(|r| r.len() as u32 == self.steps())
    }
}

/// The steady-state time per minibatch of `stages` laid out on workers `0..` of `topology` in
/// order, under PipeDream's 1F1B-RR schedule with `depth` minibatches in flight per input-stage
/// replica, seconds; `None` when the stages are not a plan of `profile`.
pub fn replay(
    profile: &Profile,
    topology: &Topology,
    stages: &[StagePlan],
    depth: u32,
) -> Option<f64> {
    super::validate_stages(profile, stages).ok()?;
    let replicas: Vec<u32> = stages.iter().map(|s| s.replicas).collect();
    let warmup = schedule::warmups(&replicas, depth);
    // Minibatches in flight at once, which the drain finishes with nothing behind them: the
    // run is long enough that a steady stretch lies between the warm-up and the drain.
    let in_flight = u64::from(depth.max(1)) * u64::from(replicas[0]);
    let run = 0..(MINIBATCHES * u64::from(*replicas.last()?)).max(4 * in_flight);
    let mut first = Vec::with_capacity(stages.len());
    let mut workers = Vec::new();
    for (s, st) in stages.iter().enumerate() {
        first.push(workers.len() as u32);
        for r in 0..st.replicas {
            let own = schedule::own_minibatches(run.clone(), st.replicas, r);
            workers.push(Replica {
                stage: s,
                ops: schedule::one_f_one_b(&own, warmup[s], st.replicas, &run),
                next: 0,
                free: 0.0,
            });
        }
    }
    // The stages' compute and weights, from the sums the closed form uses.
    let costs = Costs::with_sync(profile, Sync::Ring).ok()?;
    let compute: Vec<f64> = stages
        .iter()
        .map(|s| costs.compute(s.layers.start, s.layers.end))
        .collect();
    let weights: Vec<u64> = stages
        .iter()
        .map(|s| costs.weights(s.layers.start, s.layers.end) as u64)
        .collect();
    let boundary: Vec<u64> = stages
        .iter()
        .map(|s| profile.layers[s.layers.end - 1].activation_bytes)
        .collect();
    let route = |s: usize, b: u64| first[s] + (b % u64::from(replicas[s])) as u32;
    let n = run.end as usize;
    let mut acts = vec![vec![f64::NAN; n]; stages.len()];
    let mut grads = vec![vec![f64::NAN; n]; stages.len()];
    // When each port is free again: a device's port for links inside a machine, the machine's
    // NIC for links between machines (shared by its devices), each direction on its own.
    let mut egress: HashMap<(usize, u32), f64> = HashMap::new();
    let mut ingress: HashMap<(usize, u32), f64> = HashMap::new();
    let mut done = vec![f64::NAN; n];
    let last = stages.len() - 1;
    // Each stage's average in progress, if one is.
    let mut rings: Vec<Option<Ring>> = (0..stages.len()).map(|_| None).collect();
    loop {
        // What can send earliest: a worker's next operation, or a member's next step of a ring.
        let mut pick: Option<(f64, Next)> = None;
        let mut consider = |sends_at: f64, next: Next| {
            if pick.is_none_or(|(t, _)| sends_at < t) {
                pick = Some((sends_at, next));
            }
        };
        for (s, ring) in rings.iter().enumerate() {
            if let Some(ring) = ring {
                for k in 0..ring.members() {
                    if let Some(at) = ring.sends_at(k) {
                        consider(at, Next::Hop(s, k));
                    }
                }
            }
        }
        for (w, rep) in workers.iter().enumerate() {
            let Some(&op) = rep.ops.get(rep.next) else {
                continue;
            };
            let s = rep.stage;
            let ready = match op {
                Op::Forward(b) if s > 0 => acts[s][b as usize],
                Op::Backward(b) if s < last => grads[s][b as usize],
                Op::Sync(round) | Op::Flush(round) => {
                    let lo = first[s] as usize;
                    let group = &workers[lo..lo + replicas[s] as usize];
                    let all_there = group.iter().all(|g| {
                        matches!(g.ops.get(g.next), Some(Op::Sync(r) | Op::Flush(r)) if *r == round)
                    });
                    if rings[s].is_none() && all_there {
                        group.iter().map(|g| g.free).fold(0.0, f64::max)
                    } else {
                        f64::NAN
                    }
                }
                _ => rep.free,
            };
            if ready.is_nan() {
                continue;
            }
            let start = ready.max(rep.free);
            // Operations are taken in the order their transfers leave (a pass's at its end, an
            // average's first step at its start), so each port serves its transfers in time
            // order, first in, first out, as the engine's network does.
            let sends_at = match op {
                Op::Forward(_) => start + compute[s] * FORWARD_SHARE,
                Op::Backward(_) => start + compute[s] * (1.0 - FORWARD_SHARE),
                Op::Sync(_) | Op::Flush(_) => start,
            };
            consider(sends_at, Next::Op(w, start));
        }
        let Some((_, next)) = pick else { break };
        let mut send = |from: u32, to: u32, at: f64, bytes: u64| -> f64 {
            let level = topology.link_level(from, to);
            let (out, inn) = (topology.port(from, level), topology.port(to, level));
            let time = bytes as f64 / topology.link_bandwidth(from, to);
            let out_free = egress.get(&out).copied().unwrap_or(0.0);
            let in_free = ingress.get(&inn).copied().unwrap_or(0.0);
            let (_, out_end, in_end) = cut_through(out_free, in_free, at, time, time);
            egress.insert(out, out_end);
            ingress.insert(inn, in_end);
            in_end
        };
        let (w, start) = match next {
            Next::Hop(s, k) => {
                let Some(ring) = rings[s].as_mut() else {
                    continue;
                };
                let Some(at) = ring.sends_at(k) else { continue };
                let (from, to) = (ring.first + k, ring.first + (k + 1) % ring.members());
                let arrives = send(from, to, at, ring.chunk);
                if let Some(finished) = ring.hop(k, arrives) {
                    // The member that received the last step is done with the average.
                    let member = &mut workers[(ring.first + finished) as usize];
                    member.free = arrives;
                    member.next += 1;
                    if ring.is_done() {
                        rings[s] = None;
                    }
                }
                continue;
            }
            Next::Op(w, start) => (w, start),
        };
        let s = workers[w].stage;
        let op = workers[w].ops[workers[w].next];
        let w32 = w as u32;
        match op {
            Op::Forward(b) => {
                let end = start + compute[s] * FORWARD_SHARE;
                if s < last {
                    let to = route(s + 1, b);
                    acts[s + 1][b as usize] = send(w32, to, end, boundary[s]);
                }
                workers[w].free = end;
                workers[w].next += 1;
            }
            Op::Backward(b) => {
                let end = start + compute[s] * (1.0 - FORWARD_SHARE);
                if s > 0 {
                    let to = route(s - 1, b);
                    grads[s - 1][b as usize] = send(w32, to, end, boundary[s - 1]);
                } else {
                    done[b as usize] = end;
                }
                workers[w].free = end;
                workers[w].next += 1;
            }
            Op::Sync(_) | Op::Flush(_) => {
                let (lo, m) = (first[s], replicas[s]);
                if m < 2 {
                    workers[w].free = start;
                    workers[w].next += 1;
                } else {
                    rings[s] = Some(Ring::start(lo, m, weights[s] / u64::from(m), start));
                }
            }
        }
    }
    if workers.iter().any(|r| r.next < r.ops.len()) {
        // A schedule that cannot finish (it never does for a valid plan).
        return None;
    }
    // The steady rate between the end of the warm-up and the start of the drain (the last
    // minibatches in flight, which finish with nothing behind them), from when every minibatch
    // up to each point has finished (replicas finish theirs out of order).
    let finished = |upto: usize| done[..=upto].iter().copied().fold(0.0, f64::max);
    let (from, to) = (n / 5, n - 1 - (n / 10).max(in_flight as usize));
    Some((finished(to) - finished(from)) / (to - from) as f64)
}

#[cfg(test)]
mod tests {
    use super::super::LayerProfile;
    use super::*;

    fn layer(compute_s: f64) -> LayerProfile {
        LayerProfile {
            compute_s,
            activation_bytes: 0,
            kept_bytes: 0,
            weight_bytes: 0,
        }
    }

    fn stage(layers: std::ops::Range<usize>, replicas: u32) -> StagePlan {
        StagePlan { layers, replicas }
    }

    #[test]
    fn a_balanced_straight_pipeline_runs_at_its_slowest_stage() {
        let p = Profile {
            layers: vec![layer(3.0), layer(3.0), layer(3.0)],
            batch: 1,
        };
        let t = Topology::flat(3, f64::INFINITY);
        let stages = [stage(0..1, 1), stage(1..2, 1), stage(2..3, 1)];
        let got = replay(&p, &t, &stages, 3).unwrap();
        assert!((got - 3.0).abs() < 1e-9, "{got}");
        // Model parallelism: one minibatch in flight, every stage in turn.
        let got = replay(&p, &t, &stages, 1).unwrap();
        assert!((got - 9.0).abs() < 1e-9, "{got}");
    }

    #[test]
    fn a_depth_deeper_than_the_default_run_still_has_a_steady_state() {
        // 3 s and 1 s stages, 500 minibatches in flight on each of 3 input replicas: far more
        // than the 240 a replay runs by default. The run grows to hold a steady stretch between
        // the warm-up and the drain, which runs at the one output stage's pace (1 s a minibatch;
        // the replicated stage's 3 s over 3 replicas is as fast; the window's ends fall where
        // replicas finish out of order: within 1 %).
        let p = Profile {
            layers: vec![layer(3.0), layer(1.0)],
            batch: 1,
        };
        let t = Topology::flat(4, f64::INFINITY);
        let got = replay(&p, &t, &[stage(0..1, 3), stage(1..2, 1)], 500).unwrap();
        assert!((got - 1.0).abs() < 0.01, "{got}");
    }

    #[test]
    fn transfers_and_averages_take_their_time() {
        let p = Profile {
            layers: vec![
                LayerProfile {
                    compute_s: 3.0,
                    activation_bytes: 2,
                    kept_bytes: 2,
                    weight_bytes: 10,
                },
                layer(1.5),
            ],
            batch: 1,
        };
        // A transfer of 2 bytes at 1 byte/s each way: with 4 minibatches in flight the stages
        // overlap it with compute; with NOAM (2) its round trip shows.
        let t = Topology::flat(3, 1.0);
        let straight = [stage(0..1, 1), stage(1..2, 1)];
        let deep = replay(&p, &t, &straight, 4).unwrap();
        assert!((deep - 3.0).abs() < 1e-9, "{deep}");
        let noam = replay(&p, &t, &straight, 2).unwrap();
        assert!(noam > 4.0, "{noam}");
        // Two replicas of the first stage, activations free: each minibatch of a round takes
        // 3 s on its replica, then the ring average of 10 bytes, 2·(1/2)·10 / 1 = 10 s, for 2
        // minibatches (the measured window ends within a round: 1 % either way).
        let replicated = [stage(0..1, 2), stage(1..2, 1)];
        let mut free = p.clone();
        free.layers[0].activation_bytes = 0;
        let alone = replay(&free, &t, &replicated, 3).unwrap();
        assert!((alone / 6.5 - 1.0).abs() < 0.01, "{alone}");
        // With them, the ring's hops take their turn on the replicas' ports behind activations
        // and gradients sent before them: slower, by at most a round's transfers (two
        // minibatches, 2 s each way) per two minibatches.
        let shared = replay(&p, &t, &replicated, 3).unwrap();
        assert!(
            shared > alone * 1.01 && shared < (13.0 + 4.0) / 2.0 * 1.01,
            "{shared}"
        );
    }

    #[test]
    fn a_ring_alone_takes_its_steps_one_after_another() {
        // Three replicas of a 1-layer stage on three devices of one flat level at 1 byte/s,
        // 30 bytes of weights: 4 steps of 10-byte hops, each 10 s, every member sending to the
        // next at once: 40 s a round of 3 minibatches, plus 3 s of compute.
        let p = Profile {
            layers: vec![LayerProfile {
                compute_s: 3.0,
                activation_bytes: 0,
                kept_bytes: 0,
                weight_bytes: 30,
            }],
            batch: 1,
        };
        let t = Topology::flat(3, 1.0);
        let got = replay(&p, &t, &[stage(0..1, 3)], 1).unwrap();
        assert!((got / (43.0 / 3.0) - 1.0).abs() < 0.01, "{got}");
    }
}
