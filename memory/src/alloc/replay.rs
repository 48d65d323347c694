//! Replay experiments: one iteration's allocations through an allocator, and the β sensitivity
//! of pool sizing under fluctuating request sizes (Dymem's D1, D3 and D6).
//!
//! An [`AllocTrace`] is what a memory-managed training step asks of the device allocator, in
//! order: a block for each tensor when it becomes resident, and its return when the tensor is
//! released or moved to the host. [`replay`] plays it through any [`DeviceAllocator`];
//! [`beta_failure_rate`] sizes a pool from a clean iteration and counts how often jittered
//! iterations run out of it.

use super::{AllocError, AllocStats, Block, DeviceAllocator, Mobility, PoolSizer};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use thiserror::Error;

/// One step of an allocation trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum AllocEvent {
    /// Tensor `id` becomes resident: a block of `bytes` for a tensor of `mobility`.
    Alloc {
        /// The tensor, unique among the live ones.
        id: u64,
        /// Its size.
        bytes: u64,
        /// How it lives and moves (what GTBM places by).
        mobility: Mobility,
    },
    /// Tensor `id` is released or leaves the device: its block is returned.
    Free {
        /// A live tensor.
        id: u64,
    },
}

/// A malformed allocation trace.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TraceError {
    /// An allocation names a tensor that is already live.
    #[error("event {event}: tensor {id} is allocated while it is still live")]
    AlreadyLive {
        /// Index of the event in the trace.
        event: usize,
        /// The tensor.
        id: u64,
    },
    /// A free names a tensor that is not live.
    #[error("event {event}: tensor {id} is freed but is not live")]
    NotLive {
        /// Index of the event in the trace.
        event: usize,
        /// The tensor.
        id: u64,
    },
}

/// A well-formed allocation trace: every free names a live tensor and no live tensor is
/// allocated again (an id may be reused after its free). Tensors still live at the end are
/// allowed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AllocTrace {
    events: Vec<AllocEvent>,
}

impl AllocTrace {
    /// Checks `events` and wraps them.
    pub fn new(events: Vec<AllocEvent>) -> Result<Self, TraceError> {
        let mut live = HashSet::new();
        for (event, e) in events.iter().enumerate() {
            match *e {
                AllocEvent::Alloc { id, .. } => {
                    if !live.insert(id) {
                        return Err(TraceError::AlreadyLive { event, id });
                    }
                }
                AllocEvent::Free { id } => {
                    if !live.remove(&id) {
                        return Err(TraceError::NotLive { event, id });
                    }
                }
            }
        }
        Ok(Self { events })
    }

    /// The events, in order.
    pub fn events(&self) -> &[AllocEvent] {
        &self.events
    }

    /// Number of allocations.
    pub fn allocations(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, AllocEvent::Alloc { .. }))
            .count()
    }

    /// The sum of all allocation sizes: a capacity under which neither allocator of this module
    /// can run out (neither grows by more than a request's bytes per request).
    pub fn total_bytes(&self) -> u64 {
        self.events
            .iter()
            .map(|e| match *e {
                AllocEvent::Alloc { bytes, .. } => bytes,
                AllocEvent::Free { .. } => 0,
            })
            .fold(0, u64::saturating_add)
    }

    /// The same trace with every request's size scaled by its own factor drawn uniformly from
    /// `[1 − jitter, 1 + jitter]` (rounded to whole bytes): the fluctuation between iterations
    /// pool sizing must absorb. Fails unless `0 ≤ jitter < 1`.
    pub fn jittered(&self, jitter: f64, rng: &mut impl Rng) -> Result<Self, ExperimentError> {
        if !(0.0..1.0).contains(&jitter) {
            return Err(ExperimentError::Jitter { jitter });
        }
        let events = self
            .events
            .iter()
            .map(|e| match *e {
                AllocEvent::Alloc {
                    id,
                    bytes,
                    mobility,
                } => {
                    let factor = rng.gen_range(1.0 - jitter..=1.0 + jitter);
                    AllocEvent::Alloc {
                        id,
                        bytes: (bytes as f64 * factor).round() as u64,
                        mobility,
                    }
                }
                free => free,
            })
            .collect();
        Ok(Self { events })
    }
}

/// Builds a well-formed trace with fresh ids.
#[derive(Clone, Debug, Default)]
pub struct TraceBuilder {
    events: Vec<AllocEvent>,
    live: HashSet<u64>,
    next: u64,
}

impl TraceBuilder {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an allocation; returns the new tensor's id.
    pub fn alloc(&mut self, bytes: u64, mobility: Mobility) -> u64 {
        let id = self.next;
        self.next += 1;
        self.live.insert(id);
        self.events.push(AllocEvent::Alloc {
            id,
            bytes,
            mobility,
        });
        id
    }

    /// Appends the free of live tensor `id`.
    pub fn free(&mut self, id: u64) -> Result<(), TraceError> {
        if !self.live.remove(&id) {
            return Err(TraceError::NotLive {
                event: self.events.len(),
                id,
            });
        }
        self.events.push(AllocEvent::Free { id });
        Ok(())
    }

    /// The trace built so far.
    pub fn build(self) -> AllocTrace {
        AllocTrace {
            events: self.events,
        }
    }
}

/// A request a replay could not place.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("event {event} (tensor {id}): {source}")]
pub struct ReplayError {
    /// Index of the allocation in the trace.
    pub event: usize,
    /// The tensor.
    pub id: u64,
    /// What the allocator said.
    #[source]
    pub source: AllocError,
}

/// Memory after one event of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Bytes held by live blocks.
    pub used: u64,
    /// Bytes the allocator spans, holes included.
    pub footprint: u64,
}

/// What a replay measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayStats {
    /// The allocator's name.
    pub allocator: &'static str,
    /// The largest footprint during the replay: the memory the iteration needs with this
    /// allocator.
    pub high_water: u64,
    /// The largest sum of live block sizes during the replay: what any allocator needs at least.
    pub peak_used: u64,
    /// Mean over the allocations of U_f for the request's size, measured just before placing it.
    /// 0 for a trace without allocations.
    pub mean_fragmentation: f64,
    /// Used bytes and footprint after each event (memory over time).
    pub series: Vec<Sample>,
    /// The allocator at the end.
    pub end: AllocStats,
}

/// Plays `trace` through `alloc` as it stands (reset it first for a fresh iteration). Fails at
/// the first request the allocator cannot place.
pub fn replay(
    trace: &AllocTrace,
    alloc: &mut dyn DeviceAllocator,
) -> Result<ReplayStats, ReplayError> {
    let mut live: HashMap<u64, Block> = HashMap::new();
    let mut series = Vec::with_capacity(trace.events.len());
    let (mut high_water, mut peak_used) = (alloc.stats().footprint, alloc.stats().used);
    let (mut uf_sum, mut allocs) = (0.0, 0usize);
    for (event, e) in trace.events.iter().enumerate() {
        match *e {
            AllocEvent::Alloc {
                id,
                bytes,
                mobility,
            } => {
                uf_sum += alloc.fragmentation(bytes);
                allocs += 1;
                let block = alloc.alloc(bytes, mobility).map_err(|source| ReplayError {
                    event,
                    id,
                    source,
                })?;
                live.insert(id, block);
            }
            AllocEvent::Free { id } => {
                // A well-formed trace only frees live tensors.
                if let Some(block) = live.remove(&id) {
                    alloc.free(block);
                }
            }
        }
        let s = alloc.stats();
        high_water = high_water.max(s.footprint);
        peak_used = peak_used.max(s.used);
        series.push(Sample {
            used: s.used,
            footprint: s.footprint,
        });
    }
    Ok(ReplayStats {
        allocator: alloc.name(),
        high_water,
        peak_used,
        mean_fragmentation: if allocs == 0 {
            0.0
        } else {
            uf_sum / allocs as f64
        },
        series,
        end: alloc.stats(),
    })
}

/// Why a β experiment could not run.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ExperimentError {
    /// The jitter is not in `[0, 1)`.
    #[error("request-size jitter {jitter} is not in [0, 1)")]
    Jitter {
        /// The jitter given.
        jitter: f64,
    },
    /// No iterations were asked for, so there is no rate.
    #[error("a failure rate needs at least one iteration")]
    NoIterations,
    /// The clean first iteration failed even in a pool as large as the whole trace.
    #[error("the clean first iteration failed: {0}")]
    CleanRun(#[source] ReplayError),
}

/// What a β experiment measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BetaOutcome {
    /// The reserve β.
    pub beta: u64,
    /// The clean first iteration's high-water mark.
    pub first_high_water: u64,
    /// Iterations that ran out of memory at least once, over all iterations.
    pub failure_rate: f64,
    /// Iterations run.
    pub iterations: u32,
    /// Out-of-memory runs, restarts included.
    pub out_of_memory: u64,
    /// The pool's capacity at the end (first high-water + β, plus β per out-of-memory run).
    pub final_capacity: u64,
}

/// Restarts of one iteration at most, each with a pool grown by β, before it is given up.
pub const MAX_RESTARTS: u32 = 64;

/// Dymem's β sensitivity (Table 4.2): runs `trace` once in a pool large enough for anything
/// ([`AllocTrace::total_bytes`]), sizes the pool at its high-water mark plus `beta`
/// ([`PoolSizer`]), then runs `iterations` iterations of the trace with request sizes jittered
/// by `jitter` (see [`AllocTrace::jittered`]; a ChaCha8 stream from `seed`, so the same seed
/// gives the same result). An iteration that runs out of memory counts as a failure and is
/// restarted with the pool grown by β (up to [`MAX_RESTARTS`] times; not at all when β is 0), and
/// the pool keeps its growth for the next iterations.
pub fn beta_experiment(
    trace: &AllocTrace,
    alloc: &mut dyn DeviceAllocator,
    beta: u64,
    jitter: f64,
    iterations: u32,
    seed: u64,
) -> Result<BetaOutcome, ExperimentError> {
    if !(0.0..1.0).contains(&jitter) {
        return Err(ExperimentError::Jitter { jitter });
    }
    if iterations == 0 {
        return Err(ExperimentError::NoIterations);
    }
    alloc.reset(trace.total_bytes());
    let first = replay(trace, alloc).map_err(ExperimentError::CleanRun)?;
    let mut pool = PoolSizer::from_first_iteration(first.high_water, beta);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut failed = 0u32;
    for _ in 0..iterations {
        let run = trace.jittered(jitter, &mut rng)?;
        let mut restarts = 0;
        loop {
            alloc.reset(pool.capacity());
            if replay(&run, alloc).is_ok() {
                break;
            }
            if restarts == 0 {
                failed += 1;
            }
            pool.record_failure();
            if beta == 0 || restarts == MAX_RESTARTS {
                break;
            }
            restarts += 1;
        }
    }
    Ok(BetaOutcome {
        beta,
        first_high_water: first.high_water,
        failure_rate: f64::from(failed) / f64::from(iterations),
        iterations,
        out_of_memory: pool.failures(),
        final_capacity: pool.capacity(),
    })
}

/// The failure rate of [`beta_experiment`]: iterations that ran out of memory over iterations.
pub fn beta_failure_rate(
    trace: &AllocTrace,
    alloc: &mut dyn DeviceAllocator,
    beta: u64,
    jitter: f64,
    iterations: u32,
    seed: u64,
) -> Result<f64, ExperimentError> {
    beta_experiment(trace, alloc, beta, jitter, iterations, seed).map(|o| o.failure_rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{BestFit, Gtbm};
    use Mobility::{Movable, Reclaimed, Temporary};

    fn both() -> [Box<dyn DeviceAllocator>; 2] {
        [Box::new(BestFit::new(0)), Box::new(Gtbm::new(0))]
    }

    fn run(trace: &AllocTrace, alloc: &mut dyn DeviceAllocator) -> ReplayStats {
        alloc.reset(trace.total_bytes());
        replay(trace, alloc).unwrap()
    }

    /// A forward pass through up to 10 branches whose outputs wait for a join: each branch
    /// computes a short-lived (Movable) intermediate of growing size, then emits an output that
    /// stays live until the join (Temporary), larger than any intermediate.
    fn branches_waiting_for_a_join(branches: u64) -> AllocTrace {
        let mut t = TraceBuilder::new();
        let mut waiting = Vec::new();
        for k in 0..branches {
            let m = t.alloc(100 + 5 * k, Movable);
            waiting.push(t.alloc(150, Temporary));
            t.free(m).unwrap();
        }
        let join = t.alloc(50, Movable);
        for w in waiting.into_iter().rev() {
            t.free(w).unwrap();
        }
        t.free(join).unwrap();
        t.build()
    }

    /// A step with all three kinds: a chain of Movable feature maps of uneven sizes, every third
    /// one forking a Temporary that lives to the end, then a stack of Reclaimed outputs.
    fn mixed_step() -> AllocTrace {
        let mut t = TraceBuilder::new();
        let (mut prev, mut forks) = (None, Vec::new());
        for k in 0..12u64 {
            let m = t.alloc(100 + (k * 37) % 60, Movable);
            if k % 3 == 0 {
                forks.push(t.alloc(80, Temporary));
            }
            if let Some(p) = prev.replace(m) {
                t.free(p).unwrap();
            }
        }
        let small: Vec<_> = [30, 20, 10]
            .iter()
            .map(|&b| t.alloc(b, Reclaimed))
            .collect();
        for id in small
            .into_iter()
            .rev()
            .chain(forks.into_iter().rev())
            .chain(prev)
        {
            t.free(id).unwrap();
        }
        t.build()
    }

    /// Each tensor is freed right after the next one is allocated.
    fn chain(sizes: &[u64]) -> AllocTrace {
        let mut t = TraceBuilder::new();
        let mut prev = None;
        for &s in sizes {
            let id = t.alloc(s, Movable);
            if let Some(p) = prev.replace(id) {
                t.free(p).unwrap();
            }
        }
        if let Some(p) = prev {
            t.free(p).unwrap();
        }
        t.build()
    }

    #[test]
    fn long_lived_temporaries_split_best_fit_but_not_gtbm() {
        let trace = branches_waiting_for_a_join(6);
        let [mut bf, mut g] = both();
        let (bf, g) = (run(&trace, bf.as_mut()), run(&trace, g.as_mut()));
        assert_eq!(bf.peak_used, g.peak_used);
        assert!(
            g.high_water < bf.high_water,
            "gtbm {} vs best-fit {}",
            g.high_water,
            bf.high_water
        );
        assert!(g.mean_fragmentation < bf.mean_fragmentation);
        // Both end with nothing live and nothing spanned.
        assert_eq!((bf.end.used, bf.end.footprint), (0, 0));
        assert_eq!((g.end.used, g.end.footprint), (0, 0));
    }

    #[test]
    fn on_a_chain_both_allocators_need_the_same_footprint() {
        let trace = chain(&[100, 300, 200, 50, 400, 120, 80, 500, 10]);
        let [mut bf, mut g] = both();
        let (bf, g) = (run(&trace, bf.as_mut()), run(&trace, g.as_mut()));
        assert_eq!(bf.high_water, g.high_water);
        assert_eq!(bf.series, g.series);
        assert!(bf.high_water >= bf.peak_used);
    }

    /// Capacity 1000: 100 then 200 bytes into an empty pool (U_f 0 each); free the first; 150
    /// meets a 100-byte hole and 700 bytes of room: U_f = 100 / 800.
    #[test]
    fn replay_records_memory_over_time_and_the_mean_fragmentation() {
        let mut t = TraceBuilder::new();
        let a = t.alloc(100, Movable);
        t.alloc(200, Movable);
        t.free(a).unwrap();
        t.alloc(150, Reclaimed);
        let trace = t.build();
        let mut bf = BestFit::new(1000);
        let s = replay(&trace, &mut bf).unwrap();
        assert!((s.mean_fragmentation - 0.125 / 3.0).abs() < 1e-12);
        let used: Vec<_> = s.series.iter().map(|x| x.used).collect();
        let footprint: Vec<_> = s.series.iter().map(|x| x.footprint).collect();
        assert_eq!(used, vec![100, 300, 200, 350]);
        assert_eq!(footprint, vec![100, 300, 300, 450]);
        assert_eq!(
            (s.high_water, s.peak_used, s.allocator),
            (450, 350, "best-fit")
        );
    }

    #[test]
    fn replay_names_the_event_and_tensor_that_ran_out() {
        let mut t = TraceBuilder::new();
        t.alloc(600, Movable);
        let b = t.alloc(500, Temporary);
        let trace = t.build();
        let e = replay(&trace, &mut Gtbm::new(1000)).unwrap_err();
        assert_eq!(
            (e.event, e.id, e.source.bytes, e.source.capacity),
            (1, b, 500, 1000)
        );
        assert!(e.to_string().contains("event 1"), "{e}");
    }

    #[test]
    fn malformed_traces_are_refused_where_they_go_wrong() {
        let a = |id| AllocEvent::Alloc {
            id,
            bytes: 1,
            mobility: Movable,
        };
        let f = |id| AllocEvent::Free { id };
        assert_eq!(
            AllocTrace::new(vec![a(1), a(1)]),
            Err(TraceError::AlreadyLive { event: 1, id: 1 })
        );
        assert_eq!(
            AllocTrace::new(vec![a(1), f(1), f(1)]),
            Err(TraceError::NotLive { event: 2, id: 1 })
        );
        assert_eq!(
            AllocTrace::new(vec![a(1), f(1), a(1)])
                .unwrap()
                .allocations(),
            2
        );
        let mut b = TraceBuilder::new();
        assert_eq!(b.free(7), Err(TraceError::NotLive { event: 0, id: 7 }));
    }

    #[test]
    fn jitter_scales_each_request_within_its_bounds_and_follows_the_seed() {
        let trace = branches_waiting_for_a_join(8);
        let draw = |seed| {
            trace
                .jittered(0.2, &mut ChaCha8Rng::seed_from_u64(seed))
                .unwrap()
        };
        let j = draw(3);
        assert_eq!(j, draw(3));
        assert_ne!(j, draw(4));
        for (orig, new) in trace.events().iter().zip(j.events()) {
            match (orig, new) {
                (AllocEvent::Alloc { bytes: b0, .. }, AllocEvent::Alloc { bytes: b1, .. }) => {
                    let (lo, hi) = (*b0 as f64 * 0.8, *b0 as f64 * 1.2);
                    assert!(
                        (lo.floor() as u64..=hi.ceil() as u64).contains(b1),
                        "{b0} -> {b1}"
                    );
                }
                (a, b) => assert_eq!(a, b),
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(trace.jittered(1.0, &mut rng).is_err());
        assert!(trace.jittered(-0.1, &mut rng).is_err());
    }

    #[test]
    fn failure_rate_falls_with_beta_and_vanishes_past_the_worst_case() {
        let trace = mixed_step();
        let jitter = 0.1;
        // No jittered iteration can need more than every request at its largest.
        let worst: u64 = trace
            .events()
            .iter()
            .map(|e| match *e {
                AllocEvent::Alloc { bytes, .. } => (bytes as f64 * (1.0 + jitter)).ceil() as u64,
                AllocEvent::Free { .. } => 0,
            })
            .sum();
        for mut alloc in both() {
            let a = alloc.as_mut();
            let first = run(&trace, a).high_water;
            let rate = |a: &mut dyn DeviceAllocator, beta| {
                beta_failure_rate(&trace, a, beta, jitter, 200, 11).unwrap()
            };
            let (r0, r_small, r_large) = (rate(a, 0), rate(a, first / 50), rate(a, worst - first));
            assert!(
                r0 > 0.0,
                "{}: jitter must make some iterations fail",
                a.name()
            );
            assert!(r_small <= r0, "{}: {r_small} > {r0}", a.name());
            assert_eq!(r_large, 0.0, "{}", a.name());
            assert_eq!(rate(a, first / 50), r_small, "same seed, same rate");
        }
    }

    #[test]
    fn beta_experiment_grows_the_pool_by_beta_per_out_of_memory_run() {
        let trace = branches_waiting_for_a_join(10);
        let mut g = Gtbm::new(0);
        let o = beta_experiment(&trace, &mut g, 7, 0.1, 100, 5).unwrap();
        assert!(o.out_of_memory > 0);
        assert_eq!(
            o.final_capacity,
            o.first_high_water + 7 * (1 + o.out_of_memory)
        );
        assert!(o.out_of_memory >= (o.failure_rate * 100.0).round() as u64);
        let no_jitter = beta_experiment(&trace, &mut g, 0, 0.0, 10, 5).unwrap();
        assert_eq!((no_jitter.failure_rate, no_jitter.out_of_memory), (0.0, 0));
        assert_eq!(
            beta_experiment(&trace, &mut g, 0, 0.1, 0, 5),
            Err(ExperimentError::NoIterations)
        );
        assert!(matches!(
            beta_experiment(&trace, &mut g, 0, 1.5, 10, 5),
            Err(ExperimentError::Jitter { .. })
        ));
    }
}
