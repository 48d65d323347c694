//! The offline "bin-partitioned" split (Fela §IV-A): profile each layer's threshold batch (the
//! smallest batch that reaches near its peak throughput on the device), put the thresholds in
//! bins of a fixed width (16 in the paper), and cut the model wherever the bin changes.
//!
//! The paper profiles the layers on the GPU once and caches the thresholds; here they are read
//! off the device model the run charges by, so the split follows the cluster config.

use concord_engine::cluster::DeviceProfile;
use concord_engine::cost::LayerCost;

/// Throughput within this factor of the asymptote counts as saturated.
const NEAR_PEAK: f64 = 1.1;
/// The largest batch profiled.
const MAX_BATCH: u64 = 1 << 20;

/// The threshold batch of one layer on `device`: the smallest power of two whose per-sample
/// time is within 10 % of the per-sample time at a very large batch.
pub fn threshold_batch(device: &DeviceProfile, layer: &LayerCost) -> u64 {
    let flops = 3.0 * layer.forward_flops();
    let per_sample =
        |b: u64| device.step_seconds(std::slice::from_ref(layer), flops, b as f64) / b as f64;
    let floor = per_sample(MAX_BATCH);
    let mut b = 1;
    while b < MAX_BATCH && per_sample(b) > NEAR_PEAK * floor {
        b *= 2;
    }
    b
}

/// The stage indices where sub-models start (after the first), from per-layer thresholds in
/// layer order: a cut wherever `threshold / bin_width` changes.
pub fn bin_boundaries(thresholds: &[u64], bin_width: u64) -> Vec<usize> {
    let bin = |t: u64| t / bin_width.max(1);
    thresholds
        .windows(2)
        .enumerate()
        .filter(|(_, w)| bin(w[0]) != bin(w[1]))
        .map(|(i, _)| i + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_where_the_bin_changes() {
        // VGG19-like thresholds (Fig. 5): 16 for the early convolutions, 64 for the late ones,
        // 2048 for the FC layers: three sub-models.
        let mut t = vec![16; 8];
        t.extend(vec![64; 8]);
        t.extend(vec![2048; 3]);
        assert_eq!(bin_boundaries(&t, 16), vec![8, 16]);
        // Thresholds within one bin do not cut.
        assert_eq!(bin_boundaries(&[16, 17, 31], 16), Vec::<usize>::new());
    }

    #[test]
    fn fc_layers_saturate_later_than_convolutions() {
        let mut device = DeviceProfile::builtins()["k40c"].clone();
        device.half_saturation_batch = 2.0;
        device.matmul_half_saturation_batch = Some(256.0);
        let conv = LayerCost {
            conv_flops: 1e9,
            ..LayerCost::default()
        };
        let fc = LayerCost {
            matmul_flops: 1e8,
            ..LayerCost::default()
        };
        let (tc, tf) = (
            threshold_batch(&device, &conv),
            threshold_batch(&device, &fc),
        );
        assert!(tc <= 32 && tf >= 2048, "conv {tc}, fc {tf}");
    }
}
