//! The best straight pipeline: exactly `stages` unreplicated stages on workers `0..stages`,
//! the slowest stage or boundary as fast as it can be, every stage within the workers' memory.
//! The configuration the thesis compares with model parallelism ("pipelining alone",
//! Fig. 5.13a) and the one its GNMT runs use.

use super::costs::{evaluate_with, warmup, Costs};
use super::{noam, PipelinePlan, PlanError, PlanOptions, Profile, StagePlan, Topology};

/// The straight pipeline of `stages` stages (at most the profile's layers and the topology's
/// workers) with the smallest predicted time per minibatch whose every stage fits
/// `options.memory_bytes` under PipeDream (stage `k` keeping its 1F1B warm-up depth of
/// minibatches in flight and their stashed weights, as the run does; model parallelism, which
/// runs the same cut, keeps less, and GPipe's own need is checked when its run starts);
/// `options.sync` prices it.
/// [`PlanError::DoesNotFit`] when no cut fits.
pub fn straight(
    profile: &Profile,
    topology: &Topology,
    stages: usize,
    options: &PlanOptions,
) -> Result<PipelinePlan, PlanError> {
    topology.validate()?;
    let costs =
        Costs::with_sync(profile, options.sync)?.with_optimizer_slots(options.optimizer_slots);
    let n = costs.layers();
    let s = stages.min(n).min(topology.workers() as usize);
    if s == 0 {
        return Err(PlanError::NoStages);
    }
    // Stage k of s on layers i..j: what it needs with its warm-up depth in flight.
    let need = |k: usize, i: usize, j: usize| costs.memory(i, j, warmup((s - k) as u32, 1, i == 0));
    let cap = options.memory_bytes.map_or(f64::INFINITY, |b| b as f64);
    let time = |k: usize, i: usize, j: usize| {
        if need(k, i, j) > cap {
            return f64::INFINITY;
        }
        let t = costs.compute(i, j);
        if k == 0 {
            t
        } else {
            let link = topology.link_bandwidth(k as u32 - 1, k as u32);
            t.max(costs.boundary(i, link))
        }
    };
    let Some(cuts) = best_cuts(n, s, time) else {
        let smallest = best_cuts(n, s, need).map_or(u64::MAX, |(m, _)| m.ceil() as u64);
        return Err(PlanError::DoesNotFit {
            memory_bytes: options.memory_bytes.unwrap_or(u64::MAX),
            smallest_need: smallest,
        });
    };
    let stages: Vec<StagePlan> = cuts
        .1
        .windows(2)
        .map(|w| StagePlan {
            layers: w[0]..w[1],
            replicas: 1,
        })
        .collect();
    Ok(PipelinePlan {
        noam: noam(&stages),
        predicted_s: Some(evaluate_with(&costs, topology, &stages)),
        stages,
    })
}

/// The cut of layers `0..n` into `s` consecutive non-empty stages whose largest
/// `cost(stage, first layer, end)` is least, with that cost: the cut points `0, …, n`. `None`
/// when every cut has an infinite cost.
fn best_cuts(
    n: usize,
    s: usize,
    cost: impl Fn(usize, usize, usize) -> f64,
) -> Option<(f64, Vec<usize>)> {
    // best[k][j]: the least largest cost of layers 0..j cut into k + 1 stages; from[k][j]:
    // where the last of them starts.
    let mut best = vec![vec![f64::INFINITY; n + 1]; s];
    let mut from = vec![vec![0usize; n + 1]; s];
    for (j, first) in best[0].iter_mut().enumerate().skip(1) {
        *first = cost(0, 0, j);
    }
    for k in 1..s {
        for j in (k + 1)..=n {
            for i in k..j {
                let t = best[k - 1][i].max(cost(k, i, j));
                if t < best[k][j] {
                    best[k][j] = t;
                    from[k][j] = i;
                }
            }
        }
    }
    let total = best[s - 1][n];
    if !total.is_finite() {
        return None;
    }
    let mut cuts = vec![n];
    let mut j = n;
    for k in (1..s).rev() {
        j = from[k][j];
        cuts.push(j);
    }
    cuts.push(0);
    cuts.reverse();
    Some((total, cuts))
}

#[cfg(test)]
mod tests {
    use super::super::{stage_memory_bytes, LayerProfile, Sync};
    use super::*;

    #[test]
    fn the_straight_plan_balances_the_stages_and_matches_evaluate() {
        let l = |c| LayerProfile {
            compute_s: c,
            activation_bytes: 0,
            kept_bytes: 0,
            weight_bytes: 0,
        };
        let profile = Profile {
            layers: vec![l(1.0), l(2.0), l(3.0), l(1.0), l(1.0), l(2.0)],
            batch: 8,
        };
        let topo = Topology::flat(3, 1e9);
        let p = straight(&profile, &topo, 3, &unlimited()).expect("plan");
        assert_eq!(p.stages.len(), 3);
        assert!(p.stages.iter().all(|s| s.replicas == 1));
        // 1+2 | 3 | 1+1+2: the slowest stage takes 4.
        assert_eq!(p.predicted_s, Some(4.0));
        assert_eq!(p.noam, 3);
        // Every straight plan of three stages, by brute force: none is faster.
        let mut fastest = f64::INFINITY;
        for a in 1..6 {
            for b in (a + 1)..6 {
                let st = [0..a, a..b, b..6].map(|layers| StagePlan {
                    layers,
                    replicas: 1,
                });
                fastest = fastest.min(super::super::evaluate(&profile, &topo, &st));
            }
        }
        assert_eq!(p.predicted_s, Some(fastest));
    }

    fn unlimited() -> PlanOptions {
        PlanOptions {
            search: super::super::Search::Flat,
            memory_bytes: None,
            max_stages: None,
            sync: Sync::Thesis,
            optimizer_slots: 0,
        }
    }

    #[test]
    fn the_straight_plan_keeps_every_stage_within_memory() {
        // Equal compute; the first layers keep the most activations, and the first stage keeps
        // three minibatches in flight, the second two, the last one.
        let l = |kept| LayerProfile {
            compute_s: 1.0,
            activation_bytes: 0,
            kept_bytes: kept,
            weight_bytes: 0,
        };
        let profile = Profile {
            layers: vec![l(40), l(40), l(10), l(10), l(10), l(10)],
            batch: 8,
        };
        let topo = Topology::flat(3, 1e9);
        // Unlimited: two layers a stage; the first stage needs 3 × 80.
        let free = straight(&profile, &topo, 3, &unlimited()).expect("plan");
        let cuts: Vec<_> = free.stages.iter().map(|s| s.layers.clone()).collect();
        assert_eq!(cuts, [0..2, 2..4, 4..6]);
        assert_eq!(stage_memory_bytes(&profile, &free.stages, 0), [240, 40, 20]);
        // Within 150 bytes the first stage holds one layer, and the plan is the fastest that
        // fits: 1 | 2 | 3 layers (the last stage's three minibatch-seconds bound it).
        let limited = PlanOptions {
            memory_bytes: Some(150),
            ..unlimited()
        };
        let fit = straight(&profile, &topo, 3, &limited).expect("plan");
        let cuts: Vec<_> = fit.stages.iter().map(|s| s.layers.clone()).collect();
        assert_eq!(cuts[0], 0..1);
        assert!(stage_memory_bytes(&profile, &fit.stages, 0)
            .iter()
            .all(|&m| m <= 150));
        assert_eq!(fit.predicted_s, Some(3.0));
        // Below what any cut needs: the error says the least that would do.
        let tight = PlanOptions {
            memory_bytes: Some(100),
            ..unlimited()
        };
        match straight(&profile, &topo, 3, &tight) {
            Err(PlanError::DoesNotFit {
                memory_bytes,
                smallest_need,
            }) => {
                assert_eq!(memory_bytes, 100);
                // One layer of 40 kept × 3 in flight is the least the first stage can need.
                assert_eq!(smallest_need, 120);
            }
            other => panic!("{other:?}"),
        }
    }
}
