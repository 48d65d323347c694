//! What `optimizer.lr` means under FlexRR: the same as under the engine's strategies.
//!
//! The engine's rule: one clock moves the model by `lr` times the mean gradient of the clock's
//! global batch (BSP averages the workers' gradients; SSP and ASP servers scale each worker's
//! push by `1 / workers`). FlexRR's workers apply a delta for every work unit they process and
//! the servers add every delta up, so each unit steps by `lr / units`, `units` being every
//! worker's units of one clock: a clock's deltas then sum to `lr` times the mean of its units'
//! gradients. The same config therefore trains under FlexRR and under BSP, and BSP RR without
//! read-my-writes is exactly the engine's BSP (both tested).

/// The step of one unit's delta: `lr` shared out over the `units_per_clock` units of one clock.
pub fn unit_rate(lr: f64, units_per_clock: u64) -> f32 {
    (lr / units_per_clock.max(1) as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_of_unit_steps_adds_up_to_the_configured_rate() {
        // 16 workers × 100 units: 1600 steps of lr / 1600.
        let step = unit_rate(8.0, 1600);
        assert_eq!(step, 0.005);
        assert!((f64::from(step) * 1600.0 - 8.0).abs() < 1e-6);
        // A run without units is not divided by zero.
        assert_eq!(unit_rate(0.5, 0), 0.5);
    }
}
