//! Role outputs as they cross to rank 0, and every rank's outputs merged into one launch's.

use super::super::launch::{Launched, RoleOutput};
use crate::contract::{CoordinatorReport, ServerReport, WorkerReport};
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::metrics::TraceEvent;
use crate::output::FolderGate;
use crate::process::wire::{ProcessOutputs, RemoteOutput};
use crate::resume::NetworkState;
use crate::trace::{timeline_file, write_chrome_trace};
use crate::transport::LinkTraffic;
use std::collections::BTreeMap;
use std::path::Path;

/// A finished local role's output as it crosses to rank 0 (a failed one was reported already).
pub(super) fn remote<T>(out: RoleOutput<T>) -> Option<RemoteOutput<T>> {
    Some(RemoteOutput {
        role: out.role,
        report: out.result.ok()?,
        stats: out.stats,
        trace: out.trace,
        peak_memory: out.peak_memory,
        end_s: out.end_s,
        stragglers: out.stragglers,
    })
}

/// A role output as the one-process launch returns it.
fn local<T>(out: RemoteOutput<T>) -> RoleOutput<T> {
    RoleOutput {
        role: out.role,
        result: Ok(out.report),
        stats: out.stats,
        trace: out.trace,
        peak_memory: out.peak_memory,
        end_s: out.end_s,
        stragglers: out.stragglers,
        left: false,
    }
}

/// Every process's outputs as one launch's: roles in order, traffic summed.
pub(super) fn gather(all: Vec<ProcessOutputs>) -> Result<Launched> {
    let mut workers: Vec<RoleOutput<WorkerReport>> = Vec::new();
    let mut servers: Vec<RoleOutput<ServerReport>> = Vec::new();
    let mut coordinator: Option<RoleOutput<CoordinatorReport>> = None;
    let mut traffic: BTreeMap<(RoleId, RoleId), LinkTraffic> = BTreeMap::new();
    for p in all {
        workers.extend(p.workers.into_iter().map(local));
        servers.extend(p.servers.into_iter().map(local));
        if let Some(c) = p.coordinator {
            coordinator = Some(local(c));
        }
        for (pair, t) in p.traffic {
            let link = traffic.entry(pair).or_default();
            link.messages += t.messages;
            link.bytes += t.bytes;
        }
    }
    workers.sort_by_key(|o| o.role);
    servers.sort_by_key(|o| o.role);
    let coordinator = coordinator.ok_or_else(|| EngineError::Process {
        rank: 0,
        reason: "no process returned the coordinator's output".into(),
    })?;
    Ok(Launched {
        workers,
        servers,
        coordinator,
        traffic,
        network: NetworkState::default(),
    })
}

/// Writes the timelines the other processes sent for a stretch starting at `first_clock` into
/// `dir`, under the names this process's roles stream theirs to, and drops them from `launched`:
/// every role's timeline of every stretch lands in its own file, as in `sim`.
pub(super) fn write_timelines(
    launched: &mut Launched,
    dir: &Path,
    first_clock: u64,
    gate: &FolderGate,
) -> Result<()> {
    for out in &mut launched.workers {
        write_timeline(dir, first_clock, out.role, &mut out.trace, gate)?;
    }
    for out in &mut launched.servers {
        write_timeline(dir, first_clock, out.role, &mut out.trace, gate)?;
    }
    let coordinator = &mut launched.coordinator;
    write_timeline(
        dir,
        first_clock,
        coordinator.role,
        &mut coordinator.trace,
        gate,
    )
}

/// Writes `role`'s timeline, if it came in memory, and takes it, through the run folder's `gate`.
fn write_timeline(
    dir: &Path,
    first_clock: u64,
    role: RoleId,
    trace: &mut Option<Vec<TraceEvent>>,
    gate: &FolderGate,
) -> Result<()> {
    match trace.take() {
        Some(events) => {
            let path = dir.join(timeline_file(role, first_clock));
            gate.write(&path, || write_chrome_trace(&path, &role.label(), &events))
        }
        None => Ok(()),
    }
}
