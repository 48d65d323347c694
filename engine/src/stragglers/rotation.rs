//! LB-BSP's network variation: a worker's NIC bandwidth rotates through fixed factors.

use super::{Effect, Probe, Straggler};

/// Bandwidth factor `factors[⌊t / period_s⌋ mod len]`; compute untouched.
#[derive(Debug)]
pub(super) struct BandwidthRotation {
    pub(super) period_s: f64,
    pub(super) factors: Vec<f64>,
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
    use super::super::{RoleKind, StragglerConfig};
    use super::*;

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
