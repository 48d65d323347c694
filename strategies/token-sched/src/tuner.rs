//! Runtime configuration tuning (Fela §IV-B): run each candidate configuration for a few
//! iterations, keep the fastest. Phase 1 tries every weight vector with CTD off; phase 2 keeps
//! the best weights and tries CTD subsets of N/2, N/4, …, 1 workers. The best of all 13 cases
//! (for N = 8, M = 3) then runs for the rest of training.

use crate::options::Case;
use crate::plan::{subset_sizes, weight_cases};
use std::collections::VecDeque;

/// Which configuration each iteration runs, and what each case measured (kept in a checkpoint:
/// a resumed run goes on tuning where it stopped).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Tuner {
    workers: u32,
    iters_per_case: u64,
    queue: VecDeque<Case>,
    phase: Phase,
    /// (case, per-iteration seconds measured) in the order run.
    results: Vec<(Case, Vec<f64>)>,
    fixed: Option<Case>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Phase {
    Weights,
    Subsets,
    Done,
}

impl Tuner {
    /// A tuner over the cases of `levels` sub-models on `workers` workers that `feasible` admits
    /// (a weight vector must divide the job's level-1 tokens), `iters_per_case` iterations each;
    /// with `fixed`, no tuning: that case throughout.
    pub fn new(
        levels: usize,
        workers: u32,
        iters_per_case: u64,
        fixed: Option<Case>,
        feasible: impl Fn(&[u32]) -> bool,
    ) -> Tuner {
        let queue = match &fixed {
            Some(_) => VecDeque::new(),
            None => weight_cases(levels, workers)
                .into_iter()
                .filter(|weights| feasible(weights))
                .map(|weights| Case {
                    weights,
                    subset: workers,
                })
                .collect(),
        };
        Tuner {
            workers,
            iters_per_case: iters_per_case.max(1),
            queue,
            phase: if fixed.is_some() {
                Phase::Done
            } else {
                Phase::Weights
            },
            results: Vec::new(),
            fixed,
        }
    }

    /// The case the next iteration runs.
    pub fn current(&self) -> Case {
        if let Some(c) = self.queue.front() {
            return c.clone();
        }
        self.fixed.clone().unwrap_or_else(|| self.best())
    }

    /// Whether the tuner is still trying cases.
    pub fn tuning(&self) -> bool {
        self.phase != Phase::Done
    }

    /// Records the iteration that just ran in `seconds`, moving on when its case has run enough.
    pub fn record(&mut self, seconds: f64) {
        if self.phase == Phase::Done {
            return;
        }
        let case = self.current();
        match self.results.last_mut() {
            Some((c, times)) if *c == case && (times.len() as u64) < self.iters_per_case => {
                times.push(seconds)
            }
            _ => self.results.push((case, vec![seconds])),
        }
        let ran = self.results.last().map_or(0, |r| r.1.len() as u64);
        if ran < self.iters_per_case {
            return;
        }
        self.queue.pop_front();
        if !self.queue.is_empty() {
            return;
        }
        match self.phase {
            Phase::Weights => {
                let best = self.best();
                self.queue = subset_sizes(self.workers)
                    .into_iter()
                    .map(|subset| Case {
                        weights: best.weights.clone(),
                        subset,
                    })
                    .collect();
                self.phase = if self.queue.is_empty() {
                    Phase::Done
                } else {
                    Phase::Subsets
                };
            }
            Phase::Subsets | Phase::Done => self.phase = Phase::Done,
        }
        if self.phase == Phase::Done {
            self.fixed = Some(self.best());
        }
    }

    /// The fastest case measured so far (mean seconds per iteration; the first on a tie).
    pub fn best(&self) -> Case {
        self.results
            .iter()
            .filter(|(_, t)| !t.is_empty())
            .min_by(|a, b| mean(&a.1).total_cmp(&mean(&b.1)))
            .map(|(c, _)| c.clone())
            .or_else(|| self.queue.front().cloned())
            .unwrap_or(Case {
                weights: vec![1],
                subset: self.workers,
            })
    }

    /// Every case run, with its mean seconds per iteration.
    pub fn results(&self) -> Vec<(Case, f64)> {
        self.results
            .iter()
            .map(|(c, t)| (c.clone(), mean(t)))
            .collect()
    }
}

fn mean(t: &[f64]) -> f64 {
    t.iter().sum::<f64>() / t.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_two_keeps_the_best_weights_and_the_winner_stays() {
        let mut t = Tuner::new(3, 8, 2, None, |_| true);
        // Phase 1: ten weight cases; case {1, 1, 4} (index 2) is the fastest.
        for k in 0..10 {
            let c = t.current();
            assert_eq!(c.subset, 8);
            let secs = if c.weights == vec![1, 1, 4] {
                1.0
            } else {
                2.0 + k as f64
            };
            t.record(secs);
            t.record(secs);
        }
        // Phase 2: subsets 4, 2, 1 with {1, 1, 4}; subset 1 is faster still.
        for s in [4, 2, 1] {
            let c = t.current();
            assert_eq!((c.weights.clone(), c.subset), (vec![1, 1, 4], s));
            let secs = if s == 1 { 0.5 } else { 1.5 };
            t.record(secs);
            t.record(secs);
        }
        assert!(!t.tuning());
        assert_eq!(
            t.current(),
            Case {
                weights: vec![1, 1, 4],
                subset: 1
            }
        );
        assert_eq!(t.results().len(), 13);
    }

    #[test]
    fn only_feasible_weights_are_tried() {
        // Five workers with five level-1 tokens: weights 2 and 4 do not divide them, so only
        // {1, 1, 1} is tried; no CTD subset follows (N/2 = 2 does not divide 5 workers).
        let mut t = Tuner::new(3, 5, 1, None, |w| w.iter().all(|&x| 5 % x == 0));
        assert_eq!(t.current().weights, vec![1, 1, 1]);
        t.record(1.0);
        assert!(!t.tuning());
        assert_eq!(t.current().weights, vec![1, 1, 1]);
        assert_eq!(t.results().len(), 1);
    }
}
