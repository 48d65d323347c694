//! Helper groups (thesis §3.3.1): who may help whom.
//!
//! Each worker has `g` helpers: one on its own machine and the others on different machines, so a
//! helper can prefetch its helpees' input data and a machine-wide disruption does not take all of
//! a worker's help with it. The thesis gives the rule, not a formula (its example fits none);
//! this one (spec §4.1.2 \[C\], generalised to any placement) takes, for the worker in slot `i` of
//! machine `m`, the next worker on `m` (slot `i + 1`, cyclically) and the workers in slot `i` of
//! machines `m + 1, m + 2, …`. Helpee groups are the inverse relation; on a regular cluster they
//! also have `g` members, and a worker that helps a lot can itself shed work to its own helpers
//! (the "waterfall").

use std::collections::BTreeMap;

/// Helper and helpee groups of every worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperGroups {
    helpers: Vec<Vec<u32>>,
    helpees: Vec<Vec<u32>>,
}

impl HelperGroups {
    /// Groups of size `g` for workers placed on `worker_machine[w]`.
    pub fn new(worker_machine: &[u32], g: u32) -> HelperGroups {
        let n = worker_machine.len();
        let mut on: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (w, &m) in worker_machine.iter().enumerate() {
            on.entry(m).or_default().push(w as u32);
        }
        let machines: Vec<&Vec<u32>> = on.values().collect();
        let want = (g as usize).min(n.saturating_sub(1));
        let mut helpers = vec![Vec::new(); n];
        for (w, &m) in worker_machine.iter().enumerate() {
            let w = w as u32;
            let mi = on.keys().position(|&k| k == m).unwrap_or(0);
            let peers = machines[mi];
            let slot = peers.iter().position(|&p| p == w).unwrap_or(0);
            let mut group: Vec<u32> = Vec::with_capacity(want);
            let take = |c: u32, group: &mut Vec<u32>| {
                if group.len() < want && c != w && !group.contains(&c) {
                    group.push(c);
                }
            };
            if peers.len() > 1 {
                take(peers[(slot + 1) % peers.len()], &mut group);
            }
            for j in 1..machines.len() {
                let other = machines[(mi + j) % machines.len()];
                take(other[slot % other.len()], &mut group);
            }
            // Few machines: fill from the own machine, then from anyone, in order.
            for k in 2..peers.len() {
                take(peers[(slot + k) % peers.len()], &mut group);
            }
            for k in 1..n as u32 {
                take((w + k) % n as u32, &mut group);
            }
            helpers[w as usize] = group;
        }
        let mut helpees = vec![Vec::new(); n];
        for (w, hs) in helpers.iter().enumerate() {
            for &h in hs {
                helpees[h as usize].push(w as u32);
            }
        }
        HelperGroups { helpers, helpees }
    }

    /// Workers that may help `w` (it sends them work).
    pub fn helpers(&self, w: u32) -> &[u32] {
        &self.helpers[w as usize]
    }

    /// Workers `w` may help (it reports its progress to them).
    pub fn helpees(&self, w: u32) -> &[u32] {
        &self.helpees[w as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 workers on 4 machines of 4 slots (workers fill machines in order).
    fn sixteen_on_four() -> Vec<u32> {
        (0..16).map(|w| w / 4).collect()
    }

    #[test]
    fn one_helper_on_the_same_machine_the_others_on_distinct_machines() {
        let machine = sixteen_on_four();
        let g = HelperGroups::new(&machine, 4);
        for w in 0..16u32 {
            let hs = g.helpers(w);
            assert_eq!(hs.len(), 4, "worker {w}");
            assert!(!hs.contains(&w));
            assert_eq!(
                machine[hs[0] as usize], machine[w as usize],
                "same machine first"
            );
            let mut others: Vec<u32> = hs[1..].iter().map(|&h| machine[h as usize]).collect();
            assert!(others.iter().all(|&m| m != machine[w as usize]));
            others.sort();
            others.dedup();
            assert_eq!(others.len(), 3, "worker {w}: distinct other machines");
            // Symmetric construction: every worker also has g helpees.
            assert_eq!(g.helpees(w).len(), 4, "worker {w}");
        }
        assert_eq!(g.helpers(5), &[6, 9, 13, 1]);
    }

    #[test]
    fn helpee_groups_are_the_inverse_relation() {
        let g = HelperGroups::new(&sixteen_on_four(), 3);
        for w in 0..16u32 {
            for &h in g.helpers(w) {
                assert!(g.helpees(h).contains(&w));
            }
        }
    }

    #[test]
    fn small_and_degenerate_clusters() {
        // One machine: the next workers in order.
        let g = HelperGroups::new(&[0, 0, 0], 4);
        assert_eq!(g.helpers(0), &[1, 2]);
        assert_eq!(g.helpers(2), &[0, 1]);
        // One worker per machine: the next machines.
        let g = HelperGroups::new(&[0, 1, 2, 3, 4], 2);
        assert_eq!(g.helpers(4), &[0, 1]);
        // Group size 0: nobody helps (plain SSP).
        let g = HelperGroups::new(&[0, 1], 0);
        assert!(g.helpers(0).is_empty() && g.helpees(1).is_empty());
        // A lone worker has no helpers.
        assert!(HelperGroups::new(&[0], 4).helpers(0).is_empty());
    }
}
