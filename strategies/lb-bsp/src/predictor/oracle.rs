//! The oracle predictor: the worker's true next speed, from its own straggler patterns.

use super::{Signals, SpeedPredictor};
use concord_engine::cluster::DeviceProfile;
use concord_engine::cost::LayerCost;
use concord_engine::prelude::*;
use concord_engine::stragglers::{Probe, RoleKind, StragglerSet};
use std::sync::Arc;

/// The true next speed, for tests and as an upper bound on what prediction can achieve.
///
/// It builds the worker's own [`StragglerSet`] from the run's straggler config with the run's
/// seed (exactly what the engine gives the worker) and, for clock `k+1`, probes it the way
/// [`concord_engine::context::RoleContext::compute`] does: `points` probes at progress `i/points`, the
/// compute factor averaged and the extra delay of the first probe added, on the nominal time of
/// `batch` samples on the worker's device. Patterns keyed by iteration (persistent, contention,
/// power-law, sleeps) are reproduced exactly; patterns keyed by run time (trace-like,
/// disrupted-machine) are probed at the decision time, an approximation.
pub struct Oracle {
    set: StragglerSet,
    device: DeviceProfile,
    sheet: Arc<[LayerCost]>,
    flops_per_sample: f64,
    batch: f64,
    index: u32,
    machine: u32,
    num_workers: u32,
    points: u32,
    ahead: u64,
    next_clock: u64,
}

impl std::fmt::Debug for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle")
            .field("index", &self.index)
            .field("next_clock", &self.next_clock)
            .finish()
    }
}

impl Oracle {
    /// An oracle for worker `index` on `machine`, whose speeds are measured at `batch` samples
    /// of a model with per-layer facts `sheet` (the job's) and `flops_per_sample`.
    /// `ahead` is how many clocks past the next one its predictions are used for (1 in the
    /// non-blocking mode, which sizes clock `k+2` after clock `k`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        set: StragglerSet,
        device: DeviceProfile,
        sheet: Arc<[LayerCost]>,
        flops_per_sample: f64,
        batch: f64,
        index: u32,
        machine: u32,
        num_workers: u32,
        points: u32,
        ahead: u64,
    ) -> Oracle {
        Oracle {
            ahead,
            set,
            device,
            sheet,
            flops_per_sample,
            batch,
            index,
            machine,
            num_workers,
            points: points.max(1),
            next_clock: 0,
        }
    }

    /// The speed the worker will have in `clock`, probed at run time `now`.
    pub fn speed_at(&mut self, clock: u64, now: f64) -> f64 {
        let nominal = self
            .device
            .step_seconds(&self.sheet, self.flops_per_sample, self.batch);
        let parts = if self.set.is_empty() { 1 } else { self.points };
        let mut t = 0.0;
        for i in 0..parts {
            let e = self.set.effect(&Probe {
                kind: RoleKind::Worker,
                index: self.index,
                machine: self.machine,
                num_workers: self.num_workers,
                now,
                iter: clock,
                progress: f64::from(i) / f64::from(parts),
                nominal_iter_s: nominal,
            });
            t += nominal / f64::from(parts) * e.compute_factor;
            if i == 0 {
                t += e.extra_delay_s;
            }
        }
        if t > 0.0 {
            self.batch / t
        } else {
            0.0
        }
    }
}

impl SpeedPredictor for Oracle {
    fn observe(&mut self, _speed: f64, _signals: Option<Signals>) {
        self.next_clock += 1;
    }
    fn predict(&mut self, _next: Option<Signals>, now: f64) -> f64 {
        self.speed_at(self.next_clock + self.ahead, now)
    }
    fn save(&self) -> Result<RoleState> {
        RoleState::encode(&(self.next_clock, self.set.save()))
    }
    fn restore(&mut self, state: &RoleState) -> Result<()> {
        let (next_clock, patterns): (u64, Vec<Option<serde_json::Value>>) = state.decode()?;
        self.set.restore(&patterns)?;
        self.next_clock = next_clock;
        Ok(())
    }
}
