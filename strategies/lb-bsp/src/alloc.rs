//! Batch-size allocation: the CPU rule (`x_i ∝ v̂_i`, optionally water-filled with communication
//! time) and the GPU rule (linear time model on `[x^s_i, x^o_i]`), both solved as one water-filling
//! problem and rounded to integers that sum to the global batch exactly.
//!
//! Every worker is a *lane* whose predicted batch-processing time is `slope·x + offset` for
//! `lo ≤ x ≤ hi`. Minimizing the slowest lane's time subject to `Σ x = X` (paper Eq. 3) is
//! solved by finding the common finishing time `T` with `Σ clamp((T − offset)/slope, lo, hi) = X`
//! (bisection; the sum is monotone in `T`), then rounding with largest remainders.

use concord_engine::cluster::DeviceProfile;
use concord_engine::model::StageFacts;

/// One worker's predicted time model: `t(x) = slope·x + offset` on `lo ≤ x ≤ hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lane {
    /// Seconds per sample (`1/v` on CPU, `m_i` on GPU).
    pub slope: f64,
    /// Seconds that do not scale with the batch (`b_i + t^m_i`; 0 for the plain CPU rule).
    pub offset: f64,
    /// Smallest batch allowed (`min_batch` or the saturation point `x^s`).
    pub lo: u64,
    /// Largest batch allowed (the global batch, or the out-of-memory point `x^o`).
    pub hi: u64,
}

/// Which bound had to be relaxed because the constraints could not all hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relaxed {
    /// `Σ lo > X`: the lower bounds (saturation points) were dropped to `min_batch`.
    Lower,
    /// `Σ hi < X`: the upper bounds (out-of-memory points) were lifted to `X`; some worker may
    /// run out of memory.
    Upper,
}

/// The result of one allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// Integer batch per worker; sums to the global batch.
    pub batches: Vec<u64>,
    /// The real-valued solution before rounding.
    pub real: Vec<f64>,
    /// Predicted common finishing time `T` (seconds) of the real solution.
    pub time: f64,
    /// Which bound was relaxed, if the problem was infeasible as posed.
    pub relaxed: Option<Relaxed>,
}

fn lane_x(l: &Lane, t: f64) -> f64 {
    ((t - l.offset) / l.slope).clamp(l.lo as f64, l.hi as f64)
}

/// Water-fills `total` samples over `lanes`: equal predicted time where the bounds allow.
///
/// Infeasible bounds are relaxed (lower bounds to `min_batch`, or upper bounds to `total`) and the
/// relaxation is reported. Lanes with a non-positive or non-finite slope are treated as the
/// mean valid slope (a worker with no usable prediction is assumed average).
pub fn water_fill(lanes: &[Lane], total: u64, min_batch: u64) -> Allocation {
    let n = lanes.len();
    if n == 0 {
        return Allocation {
            batches: Vec::new(),
            real: Vec::new(),
            time: 0.0,
            relaxed: None,
        };
    }
    let valid: Vec<f64> = lanes
        .iter()
        .map(|l| l.slope)
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    let fallback = if valid.is_empty() {
        1.0
    } else {
        valid.iter().sum::<f64>() / valid.len() as f64
    };
    let mut lanes: Vec<Lane> = lanes
        .iter()
        .map(|l| Lane {
            slope: if l.slope.is_finite() && l.slope > 0.0 {
                l.slope
            } else {
                fallback
            },
            offset: if l.offset.is_finite() { l.offset } else { 0.0 },
            lo: l.lo.min(total),
            hi: l.hi.min(total).max(l.lo.min(total)),
        })
        .collect();
    let mut relaxed = None;
    if lanes.iter().map(|l| l.lo).sum::<u64>() > total {
        relaxed = Some(Relaxed::Lower);
        let lo = min_batch.min(total / n as u64);
        for l in &mut lanes {
            l.lo = lo;
        }
    }
    if lanes.iter().map(|l| l.hi).sum::<u64>() < total {
        relaxed = Some(Relaxed::Upper);
        for l in &mut lanes {
            l.hi = total;
        }
    }
    let sum_at = |t: f64| lanes.iter().map(|l| lane_x(l, t)).sum::<f64>();
    let mut a = lanes
        .iter()
        .map(|l| l.offset + l.slope * l.lo as f64)
        .fold(f64::INFINITY, f64::min);
    let mut b = lanes
        .iter()
        .map(|l| l.offset + l.slope * l.hi as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    let target = total as f64;
    for _ in 0..200 {
        let mid = 0.5 * (a + b);
        if mid <= a || mid >= b {
            break;
        }
        if sum_at(mid) < target {
            a = mid;
        } else {
            b = mid;
        }
    }
    let time = b;
    let real: Vec<f64> = lanes.iter().map(|l| lane_x(l, time)).collect();
    let lo: Vec<u64> = lanes.iter().map(|l| l.lo).collect();
    let hi: Vec<u64> = lanes.iter().map(|l| l.hi).collect();
    let batches = round_to_total(&real, &lo, &hi, total);
    Allocation {
        batches,
        real,
        time,
        relaxed,
    }
}

/// Rounds real shares to integers within `[lo_i, hi_i]` that sum to `total` exactly.
///
/// Largest-remainder rounding: take floors, then give the missing samples one at a time to the
/// workers furthest below their real share (ties to the lower index), or take surplus samples
/// from those furthest above it. When `Σ real = total` and every share is within its bounds, each
/// integer is within 1 of its share. Requires `Σ lo ≤ total ≤ Σ hi` to reach `total`.
pub fn round_to_total(real: &[f64], lo: &[u64], hi: &[u64], total: u64) -> Vec<u64> {
    let mut x: Vec<u64> = real
        .iter()
        .zip(lo.iter().zip(hi))
        .map(|(&y, (&l, &h))| {
            let f = if y.is_finite() && y > 0.0 {
                y.floor() as u64
            } else {
                0
            };
            f.clamp(l, h.max(l))
        })
        .collect();
    let deficit = |x: &[u64], i: usize| real[i] - x[i] as f64;
    let mut sum: u64 = x.iter().sum();
    while sum < total {
        let pick = (0..x.len()).filter(|&i| x[i] < hi[i]).max_by(|&i, &j| {
            deficit(&x, i)
                .total_cmp(&deficit(&x, j))
                .then_with(|| j.cmp(&i))
        });
        match pick {
            Some(i) => {
                x[i] += 1;
                sum += 1;
            }
            None => break,
        }
    }
    while sum > total {
        let pick = (0..x.len()).filter(|&i| x[i] > lo[i]).min_by(|&i, &j| {
            deficit(&x, i)
                .total_cmp(&deficit(&x, j))
                .then_with(|| j.cmp(&i))
        });
        match pick {
            Some(i) => {
                x[i] -= 1;
                sum -= 1;
            }
            None => break,
        }
    }
    x
}

/// The CPU rule (B1.2): `x_i ∝ v̂_i` when `comm` is `None`; with communication times, the
/// water-filling generalization `x_i = v̂_i (T* − t^m_i)`. Every worker gets at least
/// `min_batch`; a worker clamped at the floor is taken out and the rest re-solved.
pub fn cpu_rule(speeds: &[f64], comm: Option<&[f64]>, total: u64, min_batch: u64) -> Allocation {
    let lanes: Vec<Lane> = speeds
        .iter()
        .enumerate()
        .map(|(i, &v)| Lane {
            slope: 1.0 / v,
            offset: comm.and_then(|c| c.get(i).copied()).unwrap_or(0.0),
            lo: min_batch,
            hi: total,
        })
        .collect();
    water_fill(&lanes, total, min_batch)
}

/// One worker's profiled GPU time model (B1.4): `t^p = slope·x + offset` for
/// `saturation ≤ x ≤ oom`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuProfile {
    /// `m_i`: seconds per sample.
    pub slope: f64,
    /// `b_i`: seconds per batch that do not scale with it.
    pub offset: f64,
    /// `x^s_i`: the minimum saturation point.
    pub saturation: u64,
    /// `x^o_i`: the out-of-memory point (the largest batch that fits).
    pub oom: u64,
}

impl GpuProfile {
    /// "Profiles" a device from the engine's cost model, as the paper's offline profiling would
    /// measure it.
    ///
    /// The engine charges `t(x) = F·(x + x½)/P` (`F` FLOPs per sample, `P` sustained FLOP/s,
    /// `x½` the half-saturation batch), so `m = F/P` and `b = F·x½/P` exactly. Throughput is
    /// `x/(x + x½)` of the saturated one, so the saturation point for fraction `s` is
    /// `x^s = x½·s/(1 − s)` (at least `min_batch`). The out-of-memory point is what the resident
    /// memory ledger allows: `(budget − parameters − gradients) / Σ kept activation bytes per
    /// sample`.
    pub fn from_device(
        device: &DeviceProfile,
        flops_per_sample: f64,
        stages: &[StageFacts],
        param_bytes: u64,
        saturation: f64,
        min_batch: u64,
    ) -> GpuProfile {
        let peak = device.peak_tflops * 1e12 * device.efficiency;
        let slope = flops_per_sample / peak;
        let offset = slope * device.half_saturation_batch;
        let sat = device.half_saturation_batch * saturation / (1.0 - saturation);
        let act: u64 = stages.iter().map(|s| s.kept_bytes).sum();
        let free = device.memory_bytes().saturating_sub(2 * param_bytes);
        let oom = free.checked_div(act).unwrap_or(u64::MAX);
        GpuProfile {
            slope,
            offset,
            saturation: ((sat - 1e-9).ceil().max(0.0) as u64).max(min_batch),
            oom: oom.max(min_batch),
        }
    }
}

/// The GPU rule (B1.4): water-filling on `T` with
/// `x_i(T) = clamp((T − b_i − t^m_i)/m_i, x^s_i, x^o_i)` and `Σ x_i = X`; infeasible bounds are
/// relaxed and reported in [`Allocation::relaxed`].
pub fn gpu_rule(profiles: &[GpuProfile], comm: &[f64], total: u64, min_batch: u64) -> Allocation {
    let lanes: Vec<Lane> = profiles
        .iter()
        .enumerate()
        .map(|(i, p)| Lane {
            slope: p.slope,
            offset: p.offset + comm.get(i).copied().unwrap_or(0.0),
            lo: p.saturation,
            hi: p.oom,
        })
        .collect();
    water_fill(&lanes, total, min_batch)
}
