//! The synthetic spot price generator: a mean-reverting (Ornstein–Uhlenbeck) price around a
//! fraction of the on-demand price, sticky between changes, with occasional bumps (toward the
//! on-demand price) and spikes (above it), so that bids near the market are evicted often and
//! bids at the on-demand price now and then.
//!
//! The 2016 AWS traces the thesis used are not available here; this stands in for them. The
//! same parameters and seed give the same trace (ChaCha8).

use super::error::MarketError;
use super::market::{InstanceType, PriceTrace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The generator's parameters; recorded in the market file it writes (`[generator]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeneratorParams {
    /// Seed of the random stream (each type draws from its own stream derived from it).
    pub seed: u64,
    /// Length of the trace, days.
    pub days: f64,
    /// Time between possible price changes, s (EC2 moved prices every few minutes in 2016).
    pub step_s: f64,
    /// Long-run mean of the spot price, as a fraction of the on-demand price.
    pub mean_fraction: f64,
    /// Mean reversion rate θ, per hour.
    pub reversion_per_h: f64,
    /// Volatility, fraction of the on-demand price per √hour.
    pub volatility: f64,
    /// Probability that the price moves at a step (else it holds: prices are sticky).
    pub move_probability: f64,
    /// Bumps per day: the price jumps to `bump_fraction` of on-demand for a while.
    pub bumps_per_day: f64,
    /// Range of a bump's level, fractions of on-demand (below 1: no eviction of on-demand bids).
    pub bump_fraction: [f64; 2],
    /// Mean length of a bump, minutes (exponential).
    pub bump_minutes: f64,
    /// Spikes per day: the price jumps above on-demand, evicting even on-demand bids.
    pub spikes_per_day: f64,
    /// Range of a spike's level, fractions of on-demand (above 1).
    pub spike_fraction: [f64; 2],
    /// Mean length of a spike, minutes (exponential).
    pub spike_minutes: f64,
    /// Lowest price, fraction of on-demand.
    pub floor_fraction: f64,
}

impl Default for GeneratorParams {
    fn default() -> Self {
        GeneratorParams {
            seed: 1,
            days: 28.0,
            step_s: 300.0,
            mean_fraction: 0.25,
            reversion_per_h: 1.0,
            volatility: 0.04,
            move_probability: 0.5,
            bumps_per_day: 4.0,
            bump_fraction: [0.4, 0.9],
            bump_minutes: 20.0,
            spikes_per_day: 6.0,
            spike_fraction: [1.1, 4.0],
            spike_minutes: 30.0,
            floor_fraction: 0.1,
        }
    }
}

/// Three 2016 us-east-1 Linux types like those of the thesis (Cluster-A's c4.2xlarge,
/// Cluster-B's c4.xlarge) and one more family: on-demand prices of the time, $/h.
pub fn default_types() -> Vec<InstanceType> {
    [
        ("c4.xlarge", 4, 0.209),
        ("c4.2xlarge", 8, 0.419),
        ("m4.xlarge", 4, 0.239),
    ]
    .iter()
    .map(|&(name, vcpus, on_demand)| InstanceType {
        name: name.into(),
        vcpus,
        on_demand,
    })
    .collect()
}

impl GeneratorParams {
    /// Checks every parameter's range; the field at fault and why.
    pub fn check(&self) -> Result<(), MarketError> {
        let bad = |field: &str, reason: &str| {
            Err(MarketError::Setting {
                field: format!("generator.{field}"),
                reason: reason.into(),
            })
        };
        let pos = |x: f64| x.is_finite() && x > 0.0;
        let nonneg = |x: f64| x.is_finite() && x >= 0.0;
        let range = |r: [f64; 2]| pos(r[0]) && r[1].is_finite() && r[1] >= r[0];
        if !pos(self.days) {
            return bad("days", "must be a number > 0");
        }
        if !pos(self.step_s) {
            return bad("step_s", "must be a number > 0");
        }
        if !pos(self.mean_fraction) {
            return bad("mean_fraction", "must be a number > 0");
        }
        if !nonneg(self.reversion_per_h) || !nonneg(self.volatility) {
            return bad("reversion_per_h", "reversion and volatility must be ≥ 0");
        }
        if !(0.0..=1.0).contains(&self.move_probability) {
            return bad("move_probability", "must be in [0, 1]");
        }
        if !nonneg(self.bumps_per_day) || !nonneg(self.spikes_per_day) {
            return bad("spikes_per_day", "bump and spike rates must be ≥ 0");
        }
        if !range(self.bump_fraction) || !range(self.spike_fraction) {
            return bad(
                "spike_fraction",
                "bump and spike ranges must be [low, high], 0 < low ≤ high",
            );
        }
        if !pos(self.bump_minutes) || !pos(self.spike_minutes) {
            return bad("spike_minutes", "bump and spike lengths must be > 0");
        }
        if !nonneg(self.floor_fraction) {
            return bad("floor_fraction", "must be ≥ 0");
        }
        if self.days * 86_400.0 / self.step_s > 1e8 {
            return bad(
                "step_s",
                "more than 10⁸ steps: use a longer step or fewer days",
            );
        }
        Ok(())
    }

    /// One trace per type of `types`; points only where the price (rounded to $0.0001)
    /// changes.
    pub fn generate(&self, types: &[InstanceType]) -> Result<Vec<PriceTrace>, MarketError> {
        self.check()?;
        types
            .iter()
            .enumerate()
            .map(|(i, t)| self.one(t.on_demand, i as u64))
            .collect()
    }

    fn one(&self, on_demand: f64, stream: u64) -> Result<PriceTrace, MarketError> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream);
        let dt_h = self.step_s / 3600.0;
        let steps = (self.days * 86_400.0 / self.step_s).ceil() as u64;
        let round = |p: f64| (p * 1e4).round() / 1e4;
        let mut x = self.mean_fraction;
        // An excursion (bump or spike): its level and end time.
        let mut excursion: Option<(f64, f64)> = None;
        let mut points: Vec<(f64, f64)> = Vec::new();
        for s in 0..steps {
            let t = s as f64 * self.step_s;
            if excursion.is_some_and(|(_, end)| t >= end) {
                excursion = None;
            }
            if excursion.is_none() {
                let u: f64 = rng.gen();
                let p_spike = self.spikes_per_day * self.step_s / 86_400.0;
                let p_bump = self.bumps_per_day * self.step_s / 86_400.0;
                let (kind, minutes) = if u < p_spike {
                    (Some(self.spike_fraction), self.spike_minutes)
                } else if u < p_spike + p_bump {
                    (Some(self.bump_fraction), self.bump_minutes)
                } else {
                    (None, 0.0)
                };
                if let Some([lo, hi]) = kind {
                    let level = lo + (hi - lo) * rng.gen::<f64>();
                    let length = -minutes * 60.0 * (1.0 - rng.gen::<f64>()).ln();
                    excursion = Some((level, t + length.max(self.step_s)));
                }
            }
            if rng.gen::<f64>() < self.move_probability {
                // Ornstein–Uhlenbeck step with a Box–Muller normal draw.
                let (u1, u2): (f64, f64) = (1.0 - rng.gen::<f64>(), rng.gen());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                x += self.reversion_per_h * (self.mean_fraction - x) * dt_h
                    + self.volatility * dt_h.sqrt() * z;
                x = x.max(self.floor_fraction);
            }
            let fraction = excursion.map_or(x, |(level, _)| level);
            let price = round(fraction * on_demand);
            if points.last().is_none_or(|&(_, p)| p != price) {
                points.push((t, price));
            }
        }
        PriceTrace::new(points)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
        let p = GeneratorParams {
            days: 2.0,
            ..GeneratorParams::default()
        };
        let types = default_types();
        let a = p.generate(&types).unwrap();
        let b = p.generate(&types).unwrap();
        assert_eq!(a, b);
        let c = GeneratorParams { seed: 2, ..p }.generate(&types).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn prices_revert_around_the_mean_and_spikes_pass_on_demand() {
        let p = GeneratorParams {
            days: 14.0,
            ..GeneratorParams::default()
        };
        let types = default_types();
        for (t, tr) in types.iter().zip(p.generate(&types).unwrap()) {
            // Time-weighted: sample the step function every step.
            let n = (14.0 * 86_400.0 / p.step_s) as usize;
            let samples: Vec<f64> = (0..n)
                .map(|i| tr.price_at(i as f64 * p.step_s) / t.on_demand)
                .collect();
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[n / 2];
            assert!(
                (0.15..0.35).contains(&median),
                "{}: median {median}",
                t.name
            );
            let above = samples.iter().filter(|&&f| f > 1.0).count();
            assert!(above > 0, "{}: never above on-demand", t.name);
        }
    }

    #[test]
    fn out_of_range_parameters_are_refused() {
        let bad = GeneratorParams {
            move_probability: 2.0,
            ..GeneratorParams::default()
        };
        assert!(matches!(
            bad.generate(&default_types()),
            Err(MarketError::Setting { .. })
        ));
    }
}
