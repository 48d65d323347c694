//! The cluster as the planner sees it: levels of components joined by links.

use super::{Level, PlanError, Topology};
use concord_engine::cluster::{Cluster, DeviceProfile};
use concord_engine::ids::RoleId;

/// Bandwidth between two devices of one machine, bytes per second: the machine's bus
/// (`bus_gbps`), or unbounded where the device sets none, as the transport then charges nothing
/// for messages between roles of one machine.
fn intra_bandwidth(device: &DeviceProfile) -> f64 {
    device.bus_bytes_per_s().unwrap_or(f64::INFINITY)
}

impl Topology {
    /// One level: `workers` devices joined by links of `bandwidth` bytes per second.
    pub fn flat(workers: u32, bandwidth: f64) -> Topology {
        Topology {
            levels: vec![Level {
                components: workers,
                bandwidth,
            }],
        }
    }

    /// Two levels: `machines` machines of `per_machine` devices each, devices of a machine joined
    /// at `intra` bytes per second and machines at `inter`.
    pub fn two_level(per_machine: u32, intra: f64, machines: u32, inter: f64) -> Topology {
        Topology {
            levels: vec![
                Level {
                    components: per_machine,
                    bandwidth: intra,
                },
                Level {
                    components: machines,
                    bandwidth: inter,
                },
            ],
        }
    }

    /// The topology of the first `workers` workers of `cluster`. When their machines are
    /// identical and each holds the same number k > 1 of them: two levels, (k devices, the
    /// machine's internal bandwidth) and (machines, NIC bandwidth). Otherwise one level of all
    /// workers at the slowest NIC among their machines (conservative where some share a
    /// machine).
    pub fn of_cluster(cluster: &Cluster, workers: u32) -> Topology {
        let workers = workers.min(cluster.worker_machine.len() as u32);
        let mut per_machine: Vec<(u32, u32)> = Vec::new();
        for w in 0..workers {
            let m = cluster.machine_of(RoleId::Worker(w));
            match per_machine.last_mut() {
                Some((last, n)) if *last == m => *n += 1,
                _ => per_machine.push((m, 1)),
            }
        }
        let device = |m: u32| &cluster.machines[m as usize].device;
        let nic = per_machine
            .iter()
            .map(|&(m, _)| device(m).nic_bytes_per_s())
            .fold(f64::INFINITY, f64::min);
        let k = per_machine.first().map_or(1, |&(_, n)| n);
        let identical = per_machine
            .iter()
            .all(|&(m, n)| n == k && device(m) == device(per_machine[0].0));
        if k > 1 && identical {
            let intra = intra_bandwidth(device(per_machine[0].0));
            Topology::two_level(k, intra, per_machine.len() as u32, nic)
        } else {
            Topology::flat(workers, nic)
        }
    }

    /// Workers in the topology: the product of its levels' components.
    pub fn workers(&self) -> u32 {
        self.levels.iter().map(|l| l.components).product()
    }

    /// Checks there is a worker and every bandwidth is positive (infinite is allowed).
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.levels.is_empty() || self.workers() == 0 {
            return Err(PlanError::NoWorkers);
        }
        for (i, l) in self.levels.iter().enumerate() {
            if l.bandwidth.is_nan() || l.bandwidth <= 0.0 {
                return Err(PlanError::Bandwidth {
                    level: i + 1,
                    bandwidth: l.bandwidth,
                });
            }
        }
        Ok(())
    }

    /// The level of the link joining workers `a` and `b`: the lowest level whose units hold
    /// both (0 when `a == b`, no link). Workers past the topology count as the top level's.
    pub(crate) fn link_level(&self, a: u32, b: u32) -> usize {
        if a == b {
            return 0;
        }
        let mut size: u64 = 1;
        for (k, l) in self.levels.iter().enumerate() {
            size *= u64::from(l.components.max(1));
            if u64::from(a) / size == u64::from(b) / size {
                return k + 1;
            }
        }
        self.levels.len()
    }

    /// The unit whose port carries worker `w`'s traffic over a link of `level`: the worker
    /// itself on level 1 (a device's port on its machine's bus), its machine on level 2 (the
    /// machine's NIC), and so on; `(level, index of the unit)`.
    pub(crate) fn port(&self, w: u32, level: usize) -> (usize, u32) {
        let size: u64 = self.levels[..level.saturating_sub(1).min(self.levels.len())]
            .iter()
            .map(|l| u64::from(l.components.max(1)))
            .product();
        (level, (u64::from(w) / size) as u32)
    }

    /// The slowest bandwidth among the links of levels `1..=level` (infinite for level 0).
    fn slowest_up_to(&self, level: usize) -> f64 {
        self.levels[..level]
            .iter()
            .map(|l| l.bandwidth)
            .fold(f64::INFINITY, f64::min)
    }

    /// Bandwidth of the link between workers `a` and `b`, bytes per second.
    pub fn link_bandwidth(&self, a: u32, b: u32) -> f64 {
        self.slowest_up_to(self.link_level(a.min(b), a.max(b)))
    }

    /// Bandwidth of the slowest link inside workers `lo..hi` (what a ring over them runs at);
    /// infinite for fewer than two workers.
    pub fn span_bandwidth(&self, lo: u32, hi: u32) -> f64 {
        if hi <= lo + 1 {
            return f64::INFINITY;
        }
        self.slowest_up_to(self.link_level(lo, hi - 1))
    }

    /// The ends `hi` in `first..=last` past which the slowest link inside workers `lo..hi`
    /// may get slower, in increasing order and always ending with `last` (empty when
    /// `first > last`): `lo + 1` (one worker, no link) and, for each level, the end of `lo`'s
    /// unit at that level. Every end up to one of these and past the one before has
    /// [`Topology::span_bandwidth`] of that end, so a search can price every end by these few.
    pub(crate) fn span_steps(&self, lo: u32, first: u32, last: u32) -> Vec<u32> {
        if first > last {
            return Vec::new();
        }
        let mut steps = Vec::with_capacity(self.levels.len() + 2);
        // One worker alone spans no link.
        if lo + 1 >= first && lo + 1 < last {
            steps.push(lo + 1);
        }
        let mut size: u64 = 1;
        for l in &self.levels {
            // The workers of `lo`'s unit at this level run up to (not including) `end`.
            size *= u64::from(l.components.max(1));
            let end = (u64::from(lo) / size + 1) * size;
            if end >= u64::from(first) && end < u64::from(last) {
                steps.push(end as u32);
            }
        }
        steps.push(last);
        steps.dedup();
        steps
    }

    /// Whether every link runs at the same bandwidth, so that where a stage lies does not
    /// change its cost.
    pub(crate) fn uniform(&self) -> bool {
        let spanned: Vec<f64> = self
            .levels
            .iter()
            .filter(|l| l.components > 1)
            .map(|l| l.bandwidth)
            .collect();
        spanned.windows(2).all(|w| w[0] == w[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_take_the_level_they_cross() {
        let t = Topology::two_level(4, 100.0, 3, 10.0);
        assert_eq!(t.workers(), 12);
        assert_eq!(t.link_bandwidth(0, 3), 100.0);
        assert_eq!(t.link_bandwidth(3, 4), 10.0);
        assert_eq!(t.span_bandwidth(4, 8), 100.0);
        assert_eq!(t.span_bandwidth(3, 5), 10.0);
        assert_eq!(t.span_bandwidth(5, 6), f64::INFINITY);
        assert!(!t.uniform());
        assert!(Topology::flat(5, 1.0).uniform());
    }

    #[test]
    fn span_steps_end_where_a_wider_span_crosses_a_slower_link() {
        let t = Topology::two_level(4, 100.0, 3, 10.0);
        // From worker 1: inside machine 0 up to an end of 4, then across machines.
        assert_eq!(t.span_steps(1, 3, 10), vec![4, 10]);
        assert_eq!(t.span_steps(1, 5, 10), vec![10]);
        assert_eq!(t.span_steps(1, 2, 4), vec![2, 4]);
        assert_eq!(t.span_steps(5, 7, 8), vec![8]);
        assert!(t.span_steps(1, 5, 4).is_empty());
        // Every end prices as the step that covers it.
        for lo in 0..12 {
            for first in lo + 1..=12 {
                for last in first..=12 {
                    let steps = t.span_steps(lo, first, last);
                    for hi in first..=last {
                        let step = *steps.iter().find(|&&s| s >= hi).expect("a step");
                        assert_eq!(t.span_bandwidth(lo, hi), t.span_bandwidth(lo, step));
                    }
                }
            }
        }
    }

    #[test]
    fn a_slow_lower_level_bounds_the_upper_one() {
        let t = Topology::two_level(2, 1.0, 2, 10.0);
        assert_eq!(t.link_bandwidth(1, 2), 1.0);
    }

    #[test]
    fn validate_names_the_bad_level() {
        let t = Topology::two_level(2, 0.0, 2, 10.0);
        assert_eq!(
            t.validate(),
            Err(PlanError::Bandwidth {
                level: 1,
                bandwidth: 0.0
            })
        );
        assert_eq!(Topology::flat(0, 1.0).validate(), Err(PlanError::NoWorkers));
        assert!(Topology::flat(3, f64::INFINITY).validate().is_ok());
    }
}
