//! Membership that changes while a job trains: machines that join late, machines warned of an
//! eviction, machines that fail.
//!
//! A job's `[[membership]]` entries form a trace of cloud events (a spot market's grants and
//! evictions, a scheduler's revocations). The engine resolves the trace against the cluster at
//! the door (unknown machines, a deadline before its warning, events for machines that are not
//! there are named errors), then drives it while the job runs:
//! - a machine whose first event is `add` is absent at the start: its roles (workers, servers)
//!   exist but start only when it joins;
//! - every event reaches the coordinator as a [`Message::Membership`](crate::message::Message)
//!   control message at its time (the provider's notice; it costs nothing on the wire);
//! - at a `fail`, and at the deadline of a `warn`, the machine goes: its roles stop where they
//!   are, messages to them are dropped, and the run keeps what their workers recorded.
//!
//! ```toml
//! [[membership]]
//! at_s = 30.0
//! event = "add"
//! labels = { tier = "transient" }   # or machines = [4, 5, 6]
//!
//! [[membership]]
//! at_s = 300.0
//! event = "warn"
//! machines = [4, 5]
//! deadline_s = 420.0                # the eviction itself
//! ```

use crate::cluster::Cluster;
use crate::error::{EngineError, Result};
use crate::ids::MachineId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What happens to the machines of a membership entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The machines join (they are absent until then).
    Add,
    /// The machines will be evicted at `deadline_s`; the coordinator is told now.
    Warn,
    /// The machines fail now, without warning.
    Fail,
}

/// One entry of the `[[membership]]` trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipEntry {
    /// Run time of the event, seconds (virtual in `sim`).
    pub at_s: f64,
    /// What happens.
    pub event: EventKind,
    /// The machines, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<MachineId>,
    /// Or every machine whose labels include all of these (e.g. `{ tier = "transient" }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// For `warn`: when the machines are evicted, seconds of run time (after `at_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
}

impl MembershipEntry {
    /// An entry for `machines` by index, without a deadline (set `deadline_s` for a warning).
    pub fn on_machines(at_s: f64, event: EventKind, machines: &[MachineId]) -> MembershipEntry {
        MembershipEntry {
            at_s,
            event,
            machines: machines.to_vec(),
            labels: BTreeMap::new(),
            deadline_s: None,
        }
    }
}

/// A membership change as the coordinator hears of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MembershipEvent {
    /// The machines have joined; their roles are running.
    Added {
        /// The machines.
        machines: Vec<MachineId>,
    },
    /// The machines will be evicted at `deadline_s`.
    Warned {
        /// The machines.
        machines: Vec<MachineId>,
        /// Run time of the eviction.
        deadline_s: f64,
    },
    /// The machines were evicted at the deadline of an earlier warning; their roles are gone.
    Evicted {
        /// The machines.
        machines: Vec<MachineId>,
    },
    /// The machines failed without warning; their roles are gone.
    Failed {
        /// The machines.
        machines: Vec<MachineId>,
    },
}

impl MembershipEvent {
    /// The machines the event is about.
    pub fn machines(&self) -> &[MachineId] {
        match self {
            MembershipEvent::Added { machines }
            | MembershipEvent::Warned { machines, .. }
            | MembershipEvent::Evicted { machines }
            | MembershipEvent::Failed { machines } => machines,
        }
    }

    /// Whether the machines' roles stop at this event.
    pub fn removes(&self) -> bool {
        matches!(
            self,
            MembershipEvent::Evicted { .. } | MembershipEvent::Failed { .. }
        )
    }
}

/// A membership event at its run time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimedEvent {
    /// Run time, seconds.
    pub at_s: f64,
    /// The event.
    pub event: MembershipEvent,
}

/// The job's membership trace, resolved against its cluster: which machines are absent at the
/// start, and every event in time order (evictions at their deadlines included).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MembershipPlan {
    /// Machines absent at the start (their first event is `add`).
    pub absent_at_start: BTreeSet<MachineId>,
    /// Events in time order (ties: in trace order, an eviction after the events of its instant).
    pub events: Vec<TimedEvent>,
}

/// Where a machine stands while the trace is replayed for validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    Absent,
    Present,
    Warned,
    Gone,
}

impl MembershipPlan {
    /// Resolves `entries` against `cluster`; every error names the entry (`membership[i]`) and
    /// what is wrong with it.
    pub fn resolve(entries: &[MembershipEntry], cluster: &Cluster) -> Result<MembershipPlan> {
        if entries.is_empty() {
            return Ok(MembershipPlan::default());
        }
        let n = cluster.machines.len() as MachineId;
        // Each entry's machines, checked.
        let mut selected = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let key = |field: &str| format!("membership[{i}].{field}");
            if !(e.at_s.is_finite() && e.at_s >= 0.0) {
                return Err(EngineError::config(
                    key("at_s"),
                    e.at_s,
                    "must be a non-negative number of seconds",
                ));
            }
            match (e.event, e.deadline_s) {
                (EventKind::Warn, None) => {
                    return Err(EngineError::config(
                        key("deadline_s"),
                        "unset",
                        "a warning needs the eviction's deadline_s",
                    ))
                }
                (EventKind::Warn, Some(d)) if !(d.is_finite() && d > e.at_s) => {
                    return Err(EngineError::config(
                        key("deadline_s"),
                        d,
                        format!(
                            "the eviction must come after its warning (at_s = {}): a deadline in \
                             the past is not a warning",
                            e.at_s
                        ),
                    ))
                }
                (EventKind::Add | EventKind::Fail, Some(d)) => {
                    return Err(EngineError::config(
                        key("deadline_s"),
                        d,
                        "only a `warn` has a deadline",
                    ))
                }
                _ => {}
            }
            let machines: BTreeSet<MachineId> =
                match (e.machines.is_empty(), e.labels.is_empty()) {
                    (false, true) => {
                        for &m in &e.machines {
                            if m >= n {
                                return Err(EngineError::config(
                                    key("machines"),
                                    m,
                                    format!("unknown machine: the cluster has machines 0..{n}"),
                                ));
                            }
                        }
                        e.machines.iter().copied().collect()
                    }
                    (true, false) => {
                        let found: BTreeSet<MachineId> = cluster
                            .machines
                            .iter()
                            .filter(|m| e.labels.iter().all(|(k, v)| m.labels.get(k) == Some(v)))
                            .map(|m| m.id)
                            .collect();
                        if found.is_empty() {
                            return Err(EngineError::config(
                                key("labels"),
                                format!("{:?}", e.labels),
                                "no machine of the cluster has these labels",
                            ));
                        }
                        found
                    }
                    _ => return Err(EngineError::config(
                        format!("membership[{i}]"),
                        "machines and labels",
                        "name the machines either by index (`machines`) or by `labels`, exactly \
                         one of the two",
                    )),
                };
            if machines.contains(&0) {
                return Err(EngineError::config(
                    key("machines"),
                    0,
                    "machine 0 hosts the coordinator and stays for the whole job",
                ));
            }
            selected.push(machines);
        }
        // Replay in time order to find who is absent at the start and to check each event
        // against where its machines stand.
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by(|&a, &b| entries[a].at_s.total_cmp(&entries[b].at_s));
        let mut absent_at_start = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for &i in &order {
            for &m in &selected[i] {
                if seen.insert(m) && entries[i].event == EventKind::Add {
                    absent_at_start.insert(m);
                }
            }
        }
        let mut standing: BTreeMap<MachineId, Standing> = (0..n)
            .map(|m| {
                let s = if absent_at_start.contains(&m) {
                    Standing::Absent
                } else {
                    Standing::Present
                };
                (m, s)
            })
            .collect();
        // Timed items: (time, rank within the instant, trace index or eviction, machines).
        let mut items: Vec<(f64, usize, Option<usize>, BTreeSet<MachineId>)> = order
            .iter()
            .map(|&i| (entries[i].at_s, 0, Some(i), selected[i].clone()))
            .collect();
        let mut events = Vec::new();
        let mut k = 0;
        while k < items.len() {
            items[k..].sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (at_s, _, index, machines) = items[k].clone();
            k += 1;
            let list: Vec<MachineId> = machines.iter().copied().collect();
            let Some(i) = index else {
                // An eviction at a warning's deadline: machines that failed meanwhile are gone.
                let still: Vec<MachineId> = list
                    .into_iter()
                    .filter(|m| standing[m] == Standing::Warned)
                    .collect();
                for m in &still {
                    standing.insert(*m, Standing::Gone);
                }
                if !still.is_empty() {
                    events.push(TimedEvent {
                        at_s,
                        event: MembershipEvent::Evicted { machines: still },
                    });
                }
                continue;
            };
            let e = &entries[i];
            for &m in &list {
                let s = standing[&m];
                let ok = match e.event {
                    EventKind::Add => s == Standing::Absent,
                    EventKind::Warn => s == Standing::Present,
                    EventKind::Fail => matches!(s, Standing::Present | Standing::Warned),
                };
                if !ok {
                    let why = match (e.event, s) {
                        (EventKind::Add, Standing::Gone) => {
                            "a machine that left does not come back (describe a new machine)"
                        }
                        (EventKind::Add, _) => "the machine is already in the job",
                        (_, Standing::Absent) => "the machine has not joined yet",
                        (_, Standing::Gone) => "the machine has already left",
                        (EventKind::Warn, Standing::Warned) => "the machine was already warned",
                        _ => "the event does not apply to the machine",
                    };
                    return Err(EngineError::config(
                        format!("membership[{i}]"),
                        format!("{:?} of machine {m} at {} s", e.event, e.at_s),
                        why,
                    ));
                }
            }
            let event = match e.event {
                EventKind::Add => {
                    for m in &list {
                        standing.insert(*m, Standing::Present);
                    }
                    MembershipEvent::Added { machines: list }
                }
                EventKind::Warn => {
                    let deadline_s = e.deadline_s.unwrap_or(at_s);
                    for m in &list {
                        standing.insert(*m, Standing::Warned);
                    }
                    items.push((deadline_s, 1, None, machines));
                    MembershipEvent::Warned {
                        machines: list,
                        deadline_s,
                    }
                }
                EventKind::Fail => {
                    for m in &list {
                        standing.insert(*m, Standing::Gone);
                    }
                    MembershipEvent::Failed { machines: list }
                }
            };
            events.push(TimedEvent { at_s, event });
        }
        Ok(MembershipPlan {
            absent_at_start,
            events,
        })
    }

    /// Whether the job's membership changes at all.
    pub fn is_static(&self) -> bool {
        self.events.is_empty()
    }

    /// Whether machine `m` is in the job at the start.
    pub fn present_at_start(&self, m: MachineId) -> bool {
        !self.absent_at_start.contains(&m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterConfig, MachineGroup};

    fn cluster() -> Cluster {
        let group = |count, tier: &str| MachineGroup {
            device: "cpu".into(),
            count,
            slots: 1,
            labels: BTreeMap::from([("tier".to_string(), tier.to_string())]),
        };
        let cfg = ClusterConfig {
            machines: vec![group(2, "reliable"), group(3, "transient")],
            ..ClusterConfig::default()
        };
        Cluster::resolve(&cfg, 5, 1).expect("cluster")
    }

    fn entry(at_s: f64, event: EventKind, machines: &[u32]) -> MembershipEntry {
        MembershipEntry::on_machines(at_s, event, machines)
    }

    #[test]
    fn machines_added_later_are_absent_at_the_start_and_a_warning_ends_in_an_eviction() {
        let mut warn = entry(50.0, EventKind::Warn, &[]);
        warn.labels = BTreeMap::from([("tier".to_string(), "transient".to_string())]);
        warn.deadline_s = Some(60.0);
        let plan = MembershipPlan::resolve(
            &[
                warn,
                entry(10.0, EventKind::Add, &[3, 4]),
                entry(55.0, EventKind::Fail, &[2]),
            ],
            &cluster(),
        )
        .expect("valid");
        assert_eq!(plan.absent_at_start, BTreeSet::from([3, 4]));
        let kinds: Vec<(f64, &MembershipEvent)> =
            plan.events.iter().map(|e| (e.at_s, &e.event)).collect();
        assert_eq!(
            kinds,
            vec![
                (
                    10.0,
                    &MembershipEvent::Added {
                        machines: vec![3, 4]
                    }
                ),
                (
                    50.0,
                    &MembershipEvent::Warned {
                        machines: vec![2, 3, 4],
                        deadline_s: 60.0
                    }
                ),
                (55.0, &MembershipEvent::Failed { machines: vec![2] }),
                // Machine 2 failed before the deadline: only 3 and 4 are evicted then.
                (
                    60.0,
                    &MembershipEvent::Evicted {
                        machines: vec![3, 4]
                    }
                ),
            ]
        );
    }

    #[test]
    fn bad_traces_are_named() {
        let c = cluster();
        let err = |entries: &[MembershipEntry]| {
            MembershipPlan::resolve(entries, &c)
                .expect_err("invalid")
                .to_string()
        };
        let e = err(&[entry(1.0, EventKind::Fail, &[9])]);
        assert!(
            e.contains("membership[0].machines") && e.contains("unknown machine"),
            "{e}"
        );
        let mut past = entry(5.0, EventKind::Warn, &[2]);
        past.deadline_s = Some(4.0);
        let e = err(&[past]);
        assert!(
            e.contains("membership[0].deadline_s") && e.contains("after its warning"),
            "{e}"
        );
        let e = err(&[entry(5.0, EventKind::Warn, &[2])]);
        assert!(e.contains("needs the eviction's deadline_s"), "{e}");
        let e = err(&[entry(1.0, EventKind::Fail, &[0])]);
        assert!(e.contains("coordinator"), "{e}");
        let e = err(&[
            entry(1.0, EventKind::Fail, &[2]),
            entry(2.0, EventKind::Fail, &[2]),
        ]);
        assert!(
            e.contains("membership[1]") && e.contains("already left"),
            "{e}"
        );
        let e = err(&[
            entry(1.0, EventKind::Add, &[2]),
            entry(2.0, EventKind::Add, &[2]),
        ]);
        assert!(
            e.contains("membership[1]") && e.contains("already in the job"),
            "{e}"
        );
        let mut none = entry(1.0, EventKind::Fail, &[]);
        none.labels = BTreeMap::from([("tier".to_string(), "spot".to_string())]);
        let e = err(&[none]);
        assert!(
            e.contains("membership[0].labels") && e.contains("no machine"),
            "{e}"
        );
        let e = err(&[entry(f64::NAN, EventKind::Fail, &[2])]);
        assert!(e.contains("membership[0].at_s"), "{e}");
    }
}
