//! The compute-balanced pipeline split of the MP baseline: the model's layers cut into N
//! contiguous stages so that the slowest stage is as fast as it can be (the bubble of a GPipe
//! pipeline is paced by its slowest stage).
//!
//! Each layer is costed alone on the workers' device at the micro-batch size, so a calibrated
//! device's per-layer model and the FLOP model's saturation at small batches both shape the
//! split. Layer costs are close to additive on both models, so the sum over a stage is its cost.

use concord_engine::cluster::DeviceProfile;
use concord_engine::cost::LayerCost;
use concord_engine::model::StageFacts;

/// Seconds of one training step (forward and backward) of each layer alone on `device` at
/// `batch` samples.
pub fn layer_seconds(
    device: &DeviceProfile,
    facts: &[StageFacts],
    sheet: &[LayerCost],
    batch: u64,
) -> Vec<f64> {
    facts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let layer = sheet.get(i..i + 1).unwrap_or(&[]);
            device.step_seconds(layer, 3.0 * f.forward_flops, batch as f64)
        })
        .collect()
}

/// Cuts `costs` (one per layer, in order) into `parts` contiguous non-empty runs so that the
/// largest run's sum is as small as possible; returns where runs 2, 3, … start. Ties keep the
/// earliest cut. `parts` must lie in `1..=costs.len()`.
pub fn balanced_cuts(costs: &[f64], parts: usize) -> Vec<usize> {
    let n = costs.len();
    if parts <= 1 || n == 0 {
        return Vec::new();
    }
    let parts = parts.min(n);
    let mut prefix = vec![0.0; n + 1];
    for (i, c) in costs.iter().enumerate() {
        prefix[i + 1] = prefix[i] + c;
    }
    // best[k][i]: the smallest largest-run sum of layers 0..i cut into k + 1 runs; from[k][i]:
    // where its last run starts.
    let mut best = vec![vec![f64::INFINITY; n + 1]; parts];
    let mut from = vec![vec![0usize; n + 1]; parts];
    best[0][1..].copy_from_slice(&prefix[1..]);
    for k in 1..parts {
        for i in (k + 1)..=n {
            for j in k..i {
                let v = best[k - 1][j].max(prefix[i] - prefix[j]);
                if v < best[k][i] {
                    best[k][i] = v;
                    from[k][i] = j;
                }
            }
        }
    }
    let mut cuts = Vec::with_capacity(parts - 1);
    let mut end = n;
    for k in (1..parts).rev() {
        end = from[k][end];
        cuts.push(end);
    }
    cuts.reverse();
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_run(costs: &[f64], cuts: &[usize]) -> f64 {
        let mut bounds = vec![0];
        bounds.extend_from_slice(cuts);
        bounds.push(costs.len());
        bounds
            .windows(2)
            .map(|w| costs[w[0]..w[1]].iter().sum::<f64>())
            .fold(0.0, f64::max)
    }

    #[test]
    fn equal_layers_split_evenly() {
        assert_eq!(balanced_cuts(&[1.0; 8], 4), vec![2, 4, 6]);
        assert_eq!(balanced_cuts(&[1.0; 3], 3), vec![1, 2]);
        assert_eq!(balanced_cuts(&[1.0; 5], 1), Vec::<usize>::new());
    }

    #[test]
    fn a_heavy_layer_gets_a_stage_of_its_own() {
        let costs = [1.0, 1.0, 10.0, 1.0, 1.0];
        let cuts = balanced_cuts(&costs, 3);
        assert_eq!(max_run(&costs, &cuts), 10.0, "{cuts:?}");
        assert!(cuts.contains(&2) && cuts.contains(&3), "{cuts:?}");
    }

    #[test]
    fn no_split_beats_the_chosen_one() {
        // Every way to cut 7 layers into 3 runs.
        let costs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0];
        let chosen = max_run(&costs, &balanced_cuts(&costs, 3));
        for a in 1..costs.len() {
            for b in a + 1..costs.len() {
                assert!(
                    chosen <= max_run(&costs, &[a, b]),
                    "[{a}, {b}] beats {chosen}"
                );
            }
        }
    }
}
