//! LB-BSP's network variation: a worker's NIC bandwidth rotates through fixed factors.

use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "bandwidth-rotation";

/// LB-BSP's GPU-cluster network variation: the workers' NIC bandwidth cycles through
/// `factors`, each held for `period_s` seconds (480 → 160 Mbit/s is `[1.0, 0.3333]`).
/// Worker-only; compute is untouched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandwidthRotationConfig {
    /// Workers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<u32>>,
    /// Seconds each factor is held (> 0).
    pub period_s: f64,
    /// Bandwidth multipliers in rotation order (each > 0, at least one).
    pub factors: Vec<f64>,
}

impl Pattern for BandwidthRotationConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        c.pos("period_s", self.period_s)?;
        if self.factors.is_empty() {
            return Err(c.err("factors", "[]", "at least one factor"));
        }
        for f in &self.factors {
            c.pos("factors", *f)?;
        }
        Ok(())
    }

    fn applies_to(&self, kind: RoleKind, index: u32, _machine: u32) -> bool {
        kind == RoleKind::Worker && in_filter(&self.workers, index)
    }

    fn build(
        &self,
        _seed: u64,
        _kind: RoleKind,
        _index: u32,
        _machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(BandwidthRotation {
            period_s: self.period_s,
            factors: self.factors.clone(),
        }))
    }
}

/// Bandwidth factor `factors[⌊t / period_s⌋ mod len]`; compute untouched.
#[derive(Debug)]
pub(crate) struct BandwidthRotation {
    pub(crate) period_s: f64,
    pub(crate) factors: Vec<f64>,
}

impl Straggler for BandwidthRotation {
    fn effect(&mut self, p: &Probe) -> Effect {
        let slot = (p.now.max(0.0) / self.period_s).floor() as usize % self.factors.len();
        Effect {
            bandwidth_factor: self.factors[slot],
            ..Effect::NONE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RoleKind, StragglerConfig};

    fn probe(now: f64) -> Probe {
        Probe {
            kind: RoleKind::Worker,
            index: 1,
            machine: 1,
            num_workers: 4,
            now,
            iter: 0,
            progress: 0.0,
            nominal_iter_s: 0.1,
        }
    }

    #[test]
    fn bandwidth_rotates_on_schedule_and_compute_is_untouched() {
        let cfg: StragglerConfig =
            toml::from_str("pattern = \"bandwidth-rotation\"\nworkers = [1]\nperiod_s = 2.0\nfactors = [1.0, 0.25]").unwrap();
        let mut s = cfg.build(7, RoleKind::Worker, 1, 1).unwrap();
        let at = |s: &mut Box<dyn Straggler>, t| s.effect(&probe(t));
        assert_eq!(at(&mut s, 0.0).bandwidth_factor, 1.0);
        assert_eq!(at(&mut s, 1.999).bandwidth_factor, 1.0);
        assert_eq!(at(&mut s, 2.0).bandwidth_factor, 0.25);
        assert_eq!(at(&mut s, 4.5).bandwidth_factor, 1.0);
        assert_eq!(at(&mut s, 7.0).compute_factor, 1.0);
        assert!(!cfg.applies_to(RoleKind::Worker, 0, 0));
        let bad: StragglerConfig =
            toml::from_str("pattern = \"bandwidth-rotation\"\nperiod_s = 1.0\nfactors = []")
                .unwrap();
        assert!(bad.validate().unwrap_err().to_string().contains("factors"));
    }
}
