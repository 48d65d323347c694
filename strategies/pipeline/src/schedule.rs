//! The static schedules: the list of operations each worker runs, in order (thesis §5.3.2).
//!
//! Every operation blocks until its input (activations or a gradient) has arrived, so a
//! worker's list is all the coordination there is: no scheduler runs while training.
//!
//! - **1F1B-RR** ([`one_f_one_b`]): minibatches go round-robin over a stage's replicas by id;
//!   a replica admits `warmup` of its minibatches, then strictly alternates a backward pass
//!   with a forward pass. `warmup = ⌈Σ_{t≥s} r_t / r_s⌉` (NOAM at the input stage; `S − s` in a
//!   straight pipeline), capped by the pipeline depth. Depth 1 is model parallelism: one
//!   minibatch in flight.
//! - **GPipe** ([`gpipe`]): rounds of `m` minibatches; every forward pass of a round, then its
//!   backward passes in reverse, then a flush that applies the round's accumulated gradient.
//!
//! A replicated stage averages its replicas' gradients before an update ([`Op::Sync`], one
//! per round of `r_s` consecutive minibatches, the replicas in lock-step); a replica with no
//! minibatch in the last, partial round still joins its average.
//!
//! A schedule covers a run of consecutive minibatch ids: the whole run, or the stretch between
//! two checkpoints (a run resumed from one starts its pipeline afresh at the checkpoint's first
//! minibatch). Rounds count from the run's first minibatch, so each round still holds one
//! minibatch per replica.

use std::ops::Range;

/// One operation of a worker's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The forward pass of a minibatch.
    Forward(u64),
    /// The backward pass of a minibatch (on the replica that ran its forward pass).
    Backward(u64),
    /// Average the replicas' gradients of a round and apply them (replicated 1F1B stages).
    Sync(u64),
    /// Apply a GPipe round's accumulated gradients (averaged over the replicas).
    Flush(u64),
}

/// The minibatches of `minibatches` that replica `replica` of a stage with `replicas`
/// replicas runs: round-robin on the id.
pub fn own_minibatches(minibatches: Range<u64>, replicas: u32, replica: u32) -> Vec<u64> {
    let r = replicas.max(1) as u64;
    minibatches.filter(|b| b % r == replica as u64).collect()
}

/// The warm-up of every stage of a pipeline with `replicas` per stage when the input stage
/// keeps `depth` minibatches in flight per replica (NOAM by default): the input stage admits
/// `depth`; stage `s` admits `⌈Σ_{t≥s} r_t / r_s⌉` of its own (`S − s` in a straight
/// pipeline), but never more than the input stage's window of `depth · r_0` minibatches holds
/// for each of its replicas, so no stage waits on a minibatch the input stage has not admitted.
pub fn warmups(replicas: &[u32], depth: u32) -> Vec<u32> {
    let depth = depth.max(1);
    let window = depth * replicas.first().copied().unwrap_or(1).max(1);
    (0..replicas.len())
        .map(|s| {
            if s == 0 {
                return depth;
            }
            let r = replicas[s].max(1);
            let downstream: u32 = replicas[s..].iter().sum();
            downstream.div_ceil(r).min(window / r).max(1)
        })
        .collect()
}

/// PipeDream's default number of minibatches in flight per input-stage replica: NOAM, and one
/// more when a replicated input stage has stages after it, since it waits for its slowest
/// replica at every round's average (VGG-16 "8-4-1" on 4×4: 179 ms per minibatch at NOAM,
/// 123 ms at NOAM + 1; the closed-form prediction is 111 ms).
pub fn default_depth(replicas: &[u32]) -> u32 {
    let barrier = replicas.len() > 1 && replicas.first().is_some_and(|&r| r > 1);
    noam(replicas) + u32::from(barrier)
}

/// The number of input-stage minibatches in flight that keep every stage busy (NOAM).
pub fn noam(replicas: &[u32]) -> u32 {
    let total: u32 = replicas.iter().sum();
    total.div_ceil(replicas.first().copied().unwrap_or(1).max(1))
}

/// The round of `width` consecutive minibatches that minibatch `b` of a run of `minibatches`
/// falls in, counted from the run's first minibatch.
pub fn round_of(b: u64, width: u64, minibatches: &Range<u64>) -> u64 {
    (b - minibatches.start) / width.max(1)
}

/// The minibatches of round `round` of `width` in a run of `minibatches` (the last round may
/// be partial).
pub fn round_minibatches(round: u64, width: u64, minibatches: &Range<u64>) -> Range<u64> {
    let start = minibatches.start + round * width.max(1);
    start..(start + width.max(1)).min(minibatches.end)
}

/// The 1F1B-RR schedule of one replica: `own` minibatches (ascending) of the run's
/// `minibatches`, `warmup` admitted before the first backward pass; with `replicas > 1` a
/// [`Op::Sync`] after every backward pass, and one more for the last round when it is partial
/// and this replica has no minibatch in it.
pub fn one_f_one_b(own: &[u64], warmup: u32, replicas: u32, minibatches: &Range<u64>) -> Vec<Op> {
    let r = replicas as u64;
    let w = (warmup.max(1) as usize).min(own.len());
    let mut ops: Vec<Op> = own[..w].iter().map(|&b| Op::Forward(b)).collect();
    for (k, &b) in own.iter().enumerate() {
        ops.push(Op::Backward(b));
        if replicas > 1 {
            ops.push(Op::Sync(round_of(b, r, minibatches)));
        }
        if let Some(&next) = own.get(k + w) {
            ops.push(Op::Forward(next));
        }
    }
    if replicas > 1 {
        let rounds = (minibatches.end - minibatches.start).div_ceil(r);
        let synced = own
            .last()
            .map(|&b| round_of(b, r, minibatches) + 1)
            .unwrap_or(0);
        for round in synced..rounds {
            ops.push(Op::Sync(round));
        }
    }
    ops
}

/// The GPipe schedule of one replica: for each round of `width` minibatches of the run's
/// `minibatches`, the forward passes of its own minibatches in the round, their backward passes
/// in reverse, then the flush.
pub fn gpipe(own: &[u64], width: u64, minibatches: &Range<u64>) -> Vec<Op> {
    let m = width.max(1);
    let mut ops = Vec::new();
    for round in 0..(minibatches.end - minibatches.start).div_ceil(m) {
        let mine: Vec<u64> = own
            .iter()
            .copied()
            .filter(|&b| round_of(b, m, minibatches) == round)
            .collect();
        ops.extend(mine.iter().map(|&b| Op::Forward(b)));
        ops.extend(mine.iter().rev().map(|&b| Op::Backward(b)));
        ops.push(Op::Flush(round));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use Op::{Backward as B, Forward as F, Sync as S};

    #[test]
    fn a_straight_pipeline_matches_the_thesis_figure() {
        // 4 stages, minibatches 0-based: stage 1 runs F0 F1 F2 F3 B0 F4 B1 F5 …
        let w = warmups(&[1, 1, 1, 1], 4);
        assert_eq!(w, vec![4, 3, 2, 1]);
        let own = own_minibatches(0..6, 1, 0);
        assert_eq!(
            one_f_one_b(&own, w[0], 1, &(0..6)),
            vec![
                F(0),
                F(1),
                F(2),
                F(3),
                B(0),
                F(4),
                B(1),
                F(5),
                B(2),
                B(3),
                B(4),
                B(5)
            ]
        );
        assert_eq!(
            one_f_one_b(&own, w[1], 1, &(0..6))[..6],
            [F(0), F(1), F(2), B(0), F(3), B(1)]
        );
        assert_eq!(
            one_f_one_b(&own, w[3], 1, &(0..6))[..4],
            [F(0), B(0), F(1), B(1)]
        );
    }

    #[test]
    fn noam_follows_the_input_stage_replication() {
        assert_eq!(noam(&[1, 1, 1, 1]), 4);
        assert_eq!(noam(&[12, 1]), 2);
        assert_eq!(noam(&[3, 1]), 2);
        assert_eq!(noam(&[2, 1, 1]), 2);
        assert_eq!(warmups(&[2, 1, 1], 2), vec![2, 2, 1]);
        // Depth 1 is model parallelism.
        assert_eq!(warmups(&[1, 1, 1, 1], 1), vec![1, 1, 1, 1]);
        // A deeper pipeline admits more at the input stage only (thesis Fig. 5.18).
        assert_eq!(warmups(&[1, 1, 1, 1], 7), vec![7, 3, 2, 1]);
        // A stage replicated beyond the input window gets what the window holds.
        assert_eq!(warmups(&[2, 13, 1], noam(&[2, 13, 1])), vec![8, 1, 1]);
    }

    #[test]
    fn replicas_split_minibatches_round_robin_and_sync_every_round() {
        assert_eq!(own_minibatches(0..7, 3, 1), vec![1, 4]);
        // 7 minibatches over 3 replicas: rounds {0,1,2} {3,4,5} {6}; replica 1 has nothing
        // in the last round and still joins its average.
        let ops = one_f_one_b(&[1, 4], 2, 3, &(0..7));
        assert_eq!(ops, vec![F(1), F(4), B(1), S(0), B(4), S(1), S(2)]);
        let ops = one_f_one_b(&[0, 3, 6], 2, 3, &(0..7));
        assert_eq!(
            ops,
            vec![F(0), F(3), B(0), S(0), F(6), B(3), S(1), B(6), S(2)]
        );
    }

    #[test]
    fn gpipe_runs_rounds_forward_then_backward_in_reverse_then_flushes() {
        let ops = gpipe(&[0, 1, 2, 3, 4], 2, &(0..5));
        assert_eq!(
            ops,
            vec![
                F(0),
                F(1),
                B(1),
                B(0),
                Op::Flush(0),
                F(2),
                F(3),
                B(3),
                B(2),
                Op::Flush(1),
                F(4),
                B(4),
                Op::Flush(2)
            ]
        );
    }

    #[test]
    fn every_minibatch_is_forwarded_and_backwarded_once_in_that_order() {
        for (reps, w) in [(1u32, 4u32), (3, 2), (2, 7)] {
            for j in 0..reps {
                let own = own_minibatches(0..23, reps, j);
                let ops = one_f_one_b(&own, w, reps, &(0..23));
                for &b in &own {
                    let f = ops.iter().position(|o| *o == F(b));
                    let bw = ops.iter().position(|o| *o == B(b));
                    assert!(f.is_some() && bw.is_some() && f < bw, "{reps} {j} {b}");
                }
                assert_eq!(ops.iter().filter(|o| matches!(o, F(_))).count(), own.len());
            }
        }
    }

    #[test]
    fn a_run_from_a_checkpoint_counts_rounds_from_its_first_minibatch() {
        // Minibatches 5..12 over 3 replicas: rounds {5,6,7} {8,9,10} {11}; replica 1 runs 7, 10
        // and still joins the last round's average.
        let run = 5..12;
        assert_eq!(own_minibatches(run.clone(), 3, 2), vec![5, 8, 11]);
        assert_eq!(own_minibatches(run.clone(), 3, 1), vec![7, 10]);
        let ops = one_f_one_b(&[7, 10], 2, 3, &run);
        assert_eq!(ops, vec![F(7), F(10), B(7), S(0), B(10), S(1), S(2)]);
        let ops = one_f_one_b(&[5, 8, 11], 2, 3, &run);
        assert_eq!(
            ops,
            vec![F(5), F(8), B(5), S(0), F(11), B(8), S(1), B(11), S(2)]
        );
        assert_eq!(round_minibatches(1, 3, &run), 8..11);
        assert_eq!(round_minibatches(2, 3, &run), 11..12);
        let ops = gpipe(&[3, 4, 5], 2, &(3..6));
        assert_eq!(
            ops,
            vec![
                F(3),
                F(4),
                B(4),
                B(3),
                Op::Flush(0),
                F(5),
                B(5),
                Op::Flush(1)
            ]
        );
    }
}
