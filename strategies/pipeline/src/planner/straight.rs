//! The best straight pipeline: exactly `stages` unreplicated stages on workers `0..stages`,
//! the slowest stage or boundary as fast as it can be. The configuration the thesis compares
//! with model parallelism ("pipelining alone", Fig. 5.13a) and the one its GNMT runs use.

use super::costs::{evaluate_with, Costs};
use super::{noam, PipelinePlan, PlanError, Profile, StagePlan, Sync, Topology};

/// The straight pipeline of `stages` stages (at most the profile's layers and the topology's
/// workers) with the smallest predicted time per minibatch.
pub fn straight(
    profile: &Profile,
    topology: &Topology,
    stages: usize,
    sync: Sync,
) -> Result<PipelinePlan, PlanError> {
    topology.validate()?;
    let costs = Costs::with_sync(profile, sync)?;
    let n = costs.layers();
    let s = stages.min(n).min(topology.workers() as usize);
    if s == 0 {
        return Err(PlanError::NoStages);
    }
    // best[k][j]: the slowest stage or boundary of layers 0..j cut into k + 1 stages on workers
    // 0..=k; from[k][j]: where the last of them starts.
    let mut best = vec![vec![f64::INFINITY; n + 1]; s];
    let mut from = vec![vec![0usize; n + 1]; s];
    for (j, first) in best[0].iter_mut().enumerate().skip(1) {
        *first = costs.compute(0, j);
    }
    for k in 1..s {
        let link = topology.link_bandwidth(k as u32 - 1, k as u32);
        for j in (k + 1)..=n {
            for i in k..j {
                let t = best[k - 1][i]
                    .max(costs.boundary(i, link))
                    .max(costs.compute(i, j));
                if t < best[k][j] {
                    best[k][j] = t;
                    from[k][j] = i;
                }
            }
        }
    }
    let mut cuts = vec![n];
    let mut j = n;
    for k in (1..s).rev() {
        j = from[k][j];
        cuts.push(j);
    }
    cuts.push(0);
    cuts.reverse();
    let stages: Vec<StagePlan> = cuts
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

#[cfg(test)]
mod tests {
    use super::super::LayerProfile;
    use super::*;

    #[test]
    fn the_straight_plan_balances_the_stages_and_matches_evaluate() {
        let l = |c| LayerProfile {
            compute_s: c,
            activation_bytes: 0,
            weight_bytes: 0,
        };
        let profile = Profile {
            layers: vec![l(1.0), l(2.0), l(3.0), l(1.0), l(1.0), l(2.0)],
            batch: 8,
        };
        let topo = Topology::flat(3, 1e9);
        let p = straight(&profile, &topo, 3, Sync::Thesis).expect("plan");
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
}
