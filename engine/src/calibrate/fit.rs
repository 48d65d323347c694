//! Fitting a precision mode's [`LayerRates`] to measured step times: a bounded Nelder–Mead
//! search over the logarithms of the rates, minimising the squared log ratios of predicted to
//! measured times (relative error, so a 3 ms step weighs as much as a 300 ms one).
//!
//! Nelder–Mead rather than a least-squares crate: the model is a maximum of two sums (host
//! dispatch against device time), not differentiable everywhere, and it has eight parameters; a
//! derivative-free search with restarts from a few starting points is small and robust.

use crate::cost::LayerCost;
use crate::layer_model::LayerRates;

/// One measured step, or one measured layer of a step, with the per-layer facts it ran.
#[derive(Clone, Debug)]
pub struct Sample<'a> {
    /// The per-layer cost facts: a whole model's, or the one layer measured.
    pub layers: &'a [LayerCost],
    /// Samples per step.
    pub batch: f64,
    /// Measured seconds.
    pub seconds: f64,
    /// Whether the time is a whole training step (which pays the host's per-step cost) rather
    /// than one layer's forward and backward passes (which do not).
    pub whole_step: bool,
}

impl Sample<'_> {
    /// What `rates` predict for this sample, seconds.
    pub fn predicted(&self, rates: &LayerRates) -> f64 {
        if self.whole_step {
            rates.step_seconds(self.layers, self.batch)
        } else {
            rates.layer_seconds(self.layers, self.batch)
        }
    }
}

/// Bounds the fit keeps the rates within: above, the device's spec-sheet figures for the mode;
/// below, the slowest rates the kind of device can plausibly have (a GPU's floors sit far above
/// a single CPU core's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Peak matrix-product rate of the mode, TFLOP/s (bounds 1 × 1 convolutions and matrix
    /// products; spatial convolutions may reach 2.25 × it, Winograd's arithmetic saving).
    pub peak_tflops: f64,
    /// Spec memory bandwidth, TB/s.
    pub memory_tbps: f64,
    /// Lowest arithmetic rate the fit may choose, TFLOP/s.
    pub min_tflops: f64,
    /// Lowest memory bandwidth the fit may choose, TB/s.
    pub min_memory_tbps: f64,
}

impl Limits {
    /// A GPU's limits: its spec-sheet peak and bandwidth, with floors of 10 GFLOP/s and 10 GB/s.
    pub fn gpu(peak_tflops: f64, memory_tbps: f64) -> Limits {
        Limits {
            peak_tflops,
            memory_tbps,
            min_tflops: 0.01,
            min_memory_tbps: 0.01,
        }
    }

    /// A CPU's limits: at most 2 TFLOP/s and 1 TB/s (a many-core socket), at least 10 MFLOP/s
    /// and 10 MB/s (one slow core, or one thread's share of small operations).
    pub fn cpu() -> Limits {
        Limits {
            peak_tflops: 2.0,
            memory_tbps: 1.0,
            min_tflops: 1e-5,
            min_memory_tbps: 1e-5,
        }
    }
}

/// Winograd F(2×2, 3×3) does 2.25 × fewer multiplies than a direct 3 × 3 convolution.
const WINOGRAD_GAIN: f64 = 2.25;

/// Parameters the search varies: 3 × 3 stride-1 convolution, other spatial convolution, matrix
/// product (1 × 1 convolutions and fc share it: the measurements cannot tell them apart), half
/// batch, bandwidth, kernel µs, dispatch µs, step µs.
const DIMS: usize = 8;

/// The smallest step time the search varies over (it works on logarithms); a held step time
/// sits here and is reported as zero.
const STEP_US_FLOOR: f64 = 1e-2;

/// The search box. Without a whole-step sample nothing measures the host's per-step cost, so
/// it is held at its floor.
fn bounds(limits: &Limits, whole_steps: bool) -> [(f64, f64); DIMS] {
    let step = if whole_steps {
        (STEP_US_FLOOR, 1e6)
    } else {
        (STEP_US_FLOOR, STEP_US_FLOOR)
    };
    [
        (limits.min_tflops, WINOGRAD_GAIN * limits.peak_tflops),
        (limits.min_tflops, limits.peak_tflops),
        (limits.min_tflops, limits.peak_tflops),
        (1e-3, 1e3),
        (limits.min_memory_tbps, limits.memory_tbps),
        (1e-3, 1e3),
        (1e-2, 1e3),
        step,
    ]
}

/// The rates a search point stands for.
fn rates(x: &[f64; DIMS]) -> LayerRates {
    let e = x.map(f64::exp);
    LayerRates::from_vec([e[1], e[0], e[2], e[2], e[3], e[4], e[5], e[6], e[7]])
}

/// `rates` with the convolution kinds no sample has rated by the nearest kind that is: a
/// search cannot see a rate no FLOP is charged by, and left at its start it would be arbitrary.
/// 3 × 3 stride-1 convolutions take the other convolutions' rate, those take the 3 × 3 rate
/// (without Winograd's gain above the peak), and either takes the matrix-product rate when no
/// sample has convolutions at all.
fn fill_unmeasured(mut rates: LayerRates, samples: &[Sample<'_>], limits: &Limits) -> LayerRates {
    let has = |kind: fn(&LayerCost) -> f64| {
        samples
            .iter()
            .any(|s| s.layers.iter().any(|l| kind(l) > 0.0))
    };
    let (conv3x3, conv) = (has(|l| l.conv3x3_flops), has(|l| l.conv_flops));
    match (conv3x3, conv) {
        (true, true) => {}
        (false, true) => rates.conv3x3_tflops = rates.conv_tflops,
        (true, false) => rates.conv_tflops = rates.conv3x3_tflops.min(limits.peak_tflops),
        (false, false) => {
            rates.conv3x3_tflops = rates.matmul_tflops;
            rates.conv_tflops = rates.matmul_tflops;
        }
    }
    rates
}

/// Sum of squared log ratios of predicted to measured step times.
pub fn loss(rates: &LayerRates, samples: &[Sample<'_>]) -> f64 {
    samples
        .iter()
        .map(|s| (s.predicted(rates) / s.seconds).ln().powi(2))
        .sum()
}

/// The rates that best explain `samples` within `limits`.
pub fn fit(samples: &[Sample<'_>], limits: &Limits) -> LayerRates {
    let whole_steps = samples.iter().any(|s| s.whole_step);
    let b = bounds(limits, whole_steps);
    let lo = b.map(|(l, _)| l.ln());
    let hi = b.map(|(_, h)| h.ln());
    let f = |x: &[f64; DIMS]| loss(&rates(x), samples);
    let mut best: Option<([f64; DIMS], f64)> = None;
    let starts = [1.0, 8.0, 32.0]
        .into_iter()
        .flat_map(|half| [0.01, 5.0].map(|kernel| (half, kernel)))
        .flat_map(|(half, kernel)| [0.1, 1000.0].map(|step| (half, kernel, step)));
    for (half, kernel, step) in starts {
        {
            let start = [
                limits.peak_tflops * 0.5,
                limits.peak_tflops * 0.5,
                limits.peak_tflops * 0.5,
                half,
                limits.memory_tbps * 0.5,
                kernel,
                30.0,
                step,
            ]
            .map(f64::ln);
            let (mut x, mut fx) = nelder_mead(&f, start, &lo, &hi);
            // Restart from the optimum: a collapsed simplex can stall short of it.
            for _ in 1..4 {
                (x, fx) = nelder_mead(&f, x, &lo, &hi);
            }
            if best.is_none_or(|(_, fb)| fx < fb) {
                best = Some((x, fx));
            }
        }
    }
    let (x, _) = best.expect("at least one start");
    let mut fitted = fill_unmeasured(rates(&x), samples, limits);
    if !whole_steps {
        fitted.step_us = 0.0;
    }
    fitted
}

/// Minimises `f` from `start` inside the box `[lo, hi]` (points are clamped into it).
fn nelder_mead(
    f: &impl Fn(&[f64; DIMS]) -> f64,
    start: [f64; DIMS],
    lo: &[f64; DIMS],
    hi: &[f64; DIMS],
) -> ([f64; DIMS], f64) {
    let clamp = |mut x: [f64; DIMS]| {
        for i in 0..DIMS {
            x[i] = x[i].clamp(lo[i], hi[i]);
        }
        x
    };
    let mut simplex: Vec<([f64; DIMS], f64)> = Vec::with_capacity(DIMS + 1);
    let x0 = clamp(start);
    simplex.push((x0, f(&x0)));
    for i in 0..DIMS {
        let mut x = x0;
        let step = 0.5_f64.max(0.1 * (hi[i] - lo[i]));
        x[i] = if x[i] + step <= hi[i] {
            x[i] + step
        } else {
            x[i] - step
        };
        let x = clamp(x);
        simplex.push((x, f(&x)));
    }
    for _ in 0..5000 {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[DIMS].1);
        if (worst - best).abs() <= 1e-15 * (1.0 + best.abs()) {
            break;
        }
        let mut centroid = [0.0; DIMS];
        for (x, _) in &simplex[..DIMS] {
            for i in 0..DIMS {
                centroid[i] += x[i] / DIMS as f64;
            }
        }
        let along = |t: f64| {
            let mut y = [0.0; DIMS];
            for i in 0..DIMS {
                y[i] = centroid[i] + t * (simplex[DIMS].0[i] - centroid[i]);
            }
            clamp(y)
        };
        let xr = along(-1.0);
        let fr = f(&xr);
        if fr < simplex[0].1 {
            let xe = along(-2.0);
            let fe = f(&xe);
            simplex[DIMS] = if fe < fr { (xe, fe) } else { (xr, fr) };
        } else if fr < simplex[DIMS - 1].1 {
            simplex[DIMS] = (xr, fr);
        } else {
            let (xc, fc) = if fr < simplex[DIMS].1 {
                let xc = along(-0.5);
                (xc, f(&xc))
            } else {
                let xc = along(0.5);
                (xc, f(&xc))
            };
            if fc < simplex[DIMS].1.min(fr) {
                simplex[DIMS] = (xc, fc);
            } else {
                let x0 = simplex[0].0;
                for (x, fx) in simplex.iter_mut().skip(1) {
                    for i in 0..DIMS {
                        x[i] = x0[i] + 0.5 * (x[i] - x0[i]);
                    }
                    *fx = f(x);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0]
}
