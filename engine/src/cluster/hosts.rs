//! Machines of the cluster that run on one computer and share its processors.
//!
//! A job started by `concord launch --nproc N` on one computer, or several processes per node
//! under torchrun, runs several of the cluster's machines on one host. Their roles' work then
//! takes turns on the host's cores: while two workers step on a 2-core host, a parameter server's
//! update waits for a core. `sim` charges a role's work on its own processor unless the cluster
//! names such a host (`[cluster.hosts.NAME] processors = P, machines = [...]`): then the modeled
//! work of every role on the host's machines (steps, updates, a message's handling at either end,
//! and where the device has a `loopback_share` each end's copying of a transfer between two of
//! them) runs on whichever of its `P` processors finishes it first, in the free time around the
//! work booked there before it.

use crate::error::{EngineError, Result};
use crate::ids::MachineId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A host in the cluster config: how many processors it has and which machines run on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Processors (cores) the host's machines share.
    pub processors: u32,
    /// The machines on the host, by index; absent: every machine of the cluster (one computer
    /// running the whole job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machines: Option<Vec<MachineId>>,
}

/// A resolved host: its name and processors (which machines are on it, the cluster's
/// `host_of` says).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Host {
    /// The name it has in the config.
    pub name: String,
    /// Processors its machines share.
    pub processors: u32,
}

/// Resolves `[cluster.hosts]` over a cluster of `machines` machines: the hosts, and per machine
/// the index of its host (`None` where it has its processors to itself). Refuses a host without
/// processors, a machine the cluster does not have, and a machine on two hosts, by key.
pub fn resolve_hosts(
    hosts: &BTreeMap<String, HostConfig>,
    machines: MachineId,
) -> Result<(Vec<Host>, Vec<Option<usize>>)> {
    let mut host_of: Vec<Option<usize>> = vec![None; machines as usize];
    let mut resolved = Vec::with_capacity(hosts.len());
    for (name, cfg) in hosts {
        let key = format!("cluster.hosts.{name}");
        if cfg.processors == 0 {
            return Err(EngineError::config(
                format!("{key}.processors"),
                0,
                "a host needs at least one processor",
            ));
        }
        let listed = cfg
            .machines
            .clone()
            .unwrap_or_else(|| (0..machines).collect());
        for (i, &m) in listed.iter().enumerate() {
            let Some(slot) = host_of.get_mut(m as usize) else {
                return Err(EngineError::config(
                    format!("{key}.machines[{i}]"),
                    m,
                    format!("unknown machine: the cluster has machines 0..{machines}"),
                ));
            };
            if let Some(other) = *slot {
                let other: &Host = &resolved[other];
                return Err(EngineError::config(
                    format!("{key}.machines[{i}]"),
                    m,
                    format!("machine {m} is already on host \"{}\"", other.name),
                ));
            }
            *slot = Some(resolved.len());
        }
        resolved.push(Host {
            name: name.clone(),
            processors: cfg.processors,
        });
    }
    Ok((resolved, host_of))
}

/// What each processor of each shared host is busy with, run-time seconds: the processors a
/// run's modeled work takes turns on. A message's handling at its receiver is booked when it is
/// sent, ahead of the run's clock; work asked for later runs in the processor's free time around
/// what is booked, as a thread is preempted by short ones that wake meanwhile. Hosts are keyed by
/// name, so that a checkpoint restores them by what the config calls them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessorClocks {
    busy: BTreeMap<String, Vec<Vec<(f64, f64)>>>,
}

impl ProcessorClocks {
    /// How much later than `at + seconds` the `seconds` of work ready at `at` is done on one of
    /// `host`'s processors: the one that finishes it first (the lowest index among equals, so the
    /// choice is the same in every run), in its free time from `at` on. Intervals that ended by
    /// `now`, the run's clock, are forgotten: no work is asked for before it.
    pub fn run(&mut self, host: &Host, now: f64, at: f64, seconds: f64) -> f64 {
        let processors = self
            .busy
            .entry(host.name.clone())
            .or_insert_with(|| vec![Vec::new(); host.processors as usize]);
        for intervals in processors.iter_mut() {
            intervals.retain(|&(_, end)| end > now);
        }
        let Some((best, pieces)) = processors
            .iter()
            .map(|intervals| free_time(intervals, at, seconds))
            .enumerate()
            .min_by(|a, b| done(&a.1).total_cmp(&done(&b.1)))
        else {
            return 0.0;
        };
        // Work that runs at once in one piece waits for nothing: exactly 0, so that a run whose
        // work never waits gives the bits of one without the host.
        let waited = match pieces.as_slice() {
            [(start, _)] if *start == at => 0.0,
            _ => (done(&pieces) - at - seconds).max(0.0),
        };
        book(&mut processors[best], pieces);
        waited
    }

    /// Whether no host's processor has run any work.
    pub fn is_empty(&self) -> bool {
        self.busy.is_empty()
    }
}

/// The stretches of a processor busy over `intervals` (sorted, disjoint) that `seconds` of work
/// ready at `at` runs in: its free time from `at` on, until the work is done.
fn free_time(intervals: &[(f64, f64)], at: f64, seconds: f64) -> Vec<(f64, f64)> {
    let mut pieces = Vec::new();
    let (mut t, mut left) = (at, seconds);
    for &(busy_from, busy_to) in intervals {
        if busy_to <= t {
            continue;
        }
        if busy_from > t {
            if busy_from - t >= left {
                break;
            }
            pieces.push((t, busy_from));
            left -= busy_from - t;
        }
        t = busy_to;
    }
    pieces.push((t, t + left));
    pieces
}

/// When work that runs in `pieces` is done.
fn done(pieces: &[(f64, f64)]) -> f64 {
    pieces.last().map_or(0.0, |&(_, end)| end)
}

/// Adds `pieces` to a processor's busy `intervals`, kept sorted, touching ones joined.
fn book(intervals: &mut Vec<(f64, f64)>, pieces: Vec<(f64, f64)>) {
    intervals.extend(pieces);
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut joined: Vec<(f64, f64)> = Vec::with_capacity(intervals.len());
    for &(from, to) in intervals.iter() {
        match joined.last_mut() {
            Some(last) if last.1 >= from => last.1 = last.1.max(to),
            _ => joined.push((from, to)),
        }
    }
    *intervals = joined;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(processors: u32) -> Host {
        Host {
            name: "box".into(),
            processors,
        }
    }

    #[test]
    fn work_takes_the_first_free_processor_and_waits_when_all_are_busy() {
        let h = host(2);
        let mut clocks = ProcessorClocks::default();
        assert_eq!(clocks.run(&h, 0.0, 0.0, 1.0), 0.0);
        assert_eq!(clocks.run(&h, 0.0, 0.0, 3.0), 0.0);
        // Both busy: the next waits for the first to come free (at 1.0).
        assert_eq!(clocks.run(&h, 0.5, 0.5, 1.0), 0.5);
        // ... and the one after it for the second (at 2.0 now, the other at 3.0).
        assert_eq!(clocks.run(&h, 1.0, 1.0, 1.0), 1.0);
        // Work ready after every processor is free starts when it is ready.
        assert_eq!(clocks.run(&h, 10.0, 10.0, 0.5), 0.0);
        assert!(!clocks.is_empty());
    }

    #[test]
    fn one_processor_runs_its_machines_work_in_turn() {
        let h = host(1);
        let mut clocks = ProcessorClocks::default();
        let waits: Vec<f64> = (0..4).map(|_| clocks.run(&h, 0.0, 0.0, 0.25)).collect();
        assert_eq!(waits, vec![0.0, 0.25, 0.5, 0.75]);
    }

    #[test]
    fn work_asked_for_later_runs_in_the_free_time_around_work_booked_ahead() {
        let h = host(1);
        let mut clocks = ProcessorClocks::default();
        // A message's handling booked at 5.0, while the clock reads 0.
        assert_eq!(clocks.run(&h, 0.0, 5.0, 1.0), 0.0);
        // Work ready now that fits before it runs at once...
        assert_eq!(clocks.run(&h, 0.0, 0.0, 2.0), 0.0);
        // ... work that fits in the time left (2.0 to 5.0) starts at its ready time...
        assert_eq!(clocks.run(&h, 0.0, 2.5, 2.5), 0.0);
        // ... and work that does not runs around the booked handling: ready at 3.0 for 1.0, it
        // waits for the processor until 6.0 (the work above holds it to 5.0, the handling to 6.0).
        assert_eq!(clocks.run(&h, 0.0, 3.0, 1.0), 3.0);
        // Work split by a booking: ready at 8.0 for 2.0, around a booking at 9.0 to 9.5, done at
        // 10.5, half a second late.
        assert_eq!(clocks.run(&h, 0.0, 9.0, 0.5), 0.0);
        assert_eq!(clocks.run(&h, 0.0, 8.0, 2.0), 0.5);
        assert_eq!(
            clocks.busy["box"][0],
            vec![(0.0, 2.0), (2.5, 7.0), (8.0, 10.5)]
        );
        // Intervals that ended by the clock are forgotten and never block again.
        assert_eq!(clocks.run(&h, 11.0, 11.0, 1.0), 0.0);
        assert_eq!(clocks.busy["box"][0], vec![(11.0, 12.0)]);
    }

    #[test]
    fn hosts_resolve_to_their_machines_and_bad_ones_are_named() {
        let mut hosts = BTreeMap::new();
        hosts.insert(
            "a".to_string(),
            HostConfig {
                processors: 2,
                machines: Some(vec![2, 0]),
            },
        );
        let (resolved, host_of) = resolve_hosts(&hosts, 3).unwrap();
        assert_eq!(resolved[0].name, "a");
        assert_eq!(resolved[0].processors, 2);
        assert_eq!(host_of, vec![Some(0), None, Some(0)]);

        // Every machine when none are listed.
        let all = BTreeMap::from([(
            "laptop".to_string(),
            HostConfig {
                processors: 8,
                machines: None,
            },
        )]);
        let (_, host_of) = resolve_hosts(&all, 2).unwrap();
        assert_eq!(host_of, vec![Some(0), Some(0)]);

        let err =
            |hosts: &BTreeMap<String, HostConfig>| resolve_hosts(hosts, 3).unwrap_err().to_string();
        let mut zero = hosts.clone();
        zero.get_mut("a").unwrap().processors = 0;
        assert!(
            err(&zero).contains("cluster.hosts.a.processors"),
            "{}",
            err(&zero)
        );
        let mut beyond = hosts.clone();
        beyond.get_mut("a").unwrap().machines = Some(vec![0, 7]);
        let e = err(&beyond);
        assert!(
            e.contains("cluster.hosts.a.machines[1]") && e.contains("0..3"),
            "{e}"
        );
        let mut twice = hosts.clone();
        twice.insert(
            "b".into(),
            HostConfig {
                processors: 1,
                machines: Some(vec![1, 2]),
            },
        );
        let e = err(&twice);
        assert!(
            e.contains("cluster.hosts.b.machines[1]") && e.contains("already on host \"a\""),
            "{e}"
        );
    }
}
