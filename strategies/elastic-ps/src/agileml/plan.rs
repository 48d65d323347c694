//! What every AgileML role derives from the job alone, identically: the machines' tiers, the
//! partitions of the parameters and their homes, the global batch, and the state the job starts
//! in (stage, ActivePSs, the route, the data tree). Deriving it everywhere spares start-up
//! messages and keeps the roles in agreement by construction.

use super::ids::{MachineId, PartitionId};
use super::options::{AgileOptions, StageChoice};
use super::stage::{self, MachineInfo, Stage};
use super::tree::DataTree;
use concord_engine::prelude::*;
use std::collections::BTreeMap;
use std::ops::Range;

/// One partition: a run of whole parameter blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct PartSpec {
    /// Its blocks, in layout order.
    pub blocks: Range<usize>,
    /// Elements.
    pub elems: usize,
}

/// The start of the job, as every role derives it.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The options.
    pub options: AgileOptions,
    /// Whether each machine is transient.
    pub transient: Vec<bool>,
    /// Workers of each machine.
    pub workers_of: Vec<Vec<WorkerId>>,
    /// The partitions.
    pub parts: Vec<PartSpec>,
    /// Each partition's home: the server of a reliable machine (ParamServ in stage 1, BackupPS
    /// in stages 2 and 3).
    pub homes: Vec<ServerId>,
    /// Items (samples) of one clock: `batch × workers`, split over whoever works.
    pub total_items: u64,
    /// Machines in the job at the start.
    pub present: Vec<MachineId>,
    /// The stage at the start.
    pub stage: Stage,
    /// Server of each partition at the start.
    pub owners: Vec<ServerId>,
    /// The data tree at the start.
    pub tree: DataTree,
    /// Bytes of training data a worker's whole share stands for (for loading times).
    pub data_bytes: f64,
}

impl Plan {
    /// Derives the plan of `job` under `options`; errors name what in the config is wrong.
    pub fn new(job: &Job, options: &AgileOptions) -> Result<Plan> {
        options.validate()?;
        let cluster = &job.cluster;
        let machines = cluster.machines.len();
        // One server role per machine, server `m` on machine `m`: a machine's server plays
        // ParamServ, ActivePS or BackupPS as the stage and its tier need.
        let one_per_machine = cluster.server_machine.len() == machines
            && cluster
                .server_machine
                .iter()
                .enumerate()
                .all(|(s, &m)| s as MachineId == m);
        if !one_per_machine {
            return Err(not_one_server_per_machine(cluster));
        }
        let transient: Vec<bool> = cluster
            .machines
            .iter()
            .map(|m| m.label(&options.tier_label) == Some(options.transient.as_str()))
            .collect();
        if transient[0] {
            return Err(EngineError::config(
                "cluster.machines",
                "machine 0 transient",
                "machine 0 hosts the elasticity controller and must be reliable",
            ));
        }
        let mut workers_of = vec![Vec::new(); machines];
        for (w, &m) in cluster.worker_machine.iter().enumerate() {
            workers_of[m as usize].push(w as WorkerId);
        }
        let reliable: Vec<ServerId> = (0..machines as u32)
            .filter(|&m| !transient[m as usize])
            .collect();
        let blocks = job.layout.blocks();
        let wanted = if options.partitions > 0 {
            options.partitions as usize
        } else {
            (machines / 2).max(1)
        };
        let parts = cut_partitions(
            &blocks.iter().map(|b| b.len).collect::<Vec<_>>(),
            wanted.min(blocks.len()).max(1),
        );
        let homes: Vec<ServerId> = (0..parts.len())
            .map(|p| reliable[p % reliable.len()])
            .collect();
        let present: Vec<MachineId> = (0..machines as MachineId)
            .filter(|&m| job.membership.present_at_start(m))
            .collect();
        let infos: Vec<MachineInfo> = present
            .iter()
            .map(|&m| MachineInfo {
                id: m,
                transient: transient[m as usize],
                joined: 0.0,
            })
            .collect();
        let stage = choose_stage(options, &infos)?;
        let owners = owners_for(stage, options, &infos, &homes, &BTreeMap::new());
        // The data is cut over every worker in the job; in stage 3 over the transient workers
        // only (the reliable machines run no workers: their share is spread over the transient
        // workers, which preloaded it).
        let holders: Vec<WorkerId> = present
            .iter()
            .filter(|&&m| stage != Stage::Three || transient[m as usize])
            .flat_map(|&m| workers_of[m as usize].iter().copied())
            .collect();
        let total_items = job.config.batch * job.config.workers as u64;
        let tree = DataTree::new(total_items, &holders).map_err(|e| {
            EngineError::config("workers", holders.len(), format!("agileml data tree: {e}"))
        })?;
        let data_bytes = match (options.data_gb, &job.data) {
            (Some(gb), _) => gb * 1e9,
            (None, Some(data)) => (data.train.len() * data.train.sample_len() * 4) as f64,
            (None, None) => 0.0,
        };
        Ok(Plan {
            options: options.clone(),
            transient,
            workers_of,
            parts,
            homes,
            total_items,
            present,
            stage,
            owners,
            tree,
            data_bytes,
        })
    }

    /// Number of partitions.
    pub fn np(&self) -> usize {
        self.parts.len()
    }

    /// Server of machine `m` (one per machine, same index).
    pub fn server_of(&self, m: MachineId) -> ServerId {
        m
    }

    /// Machine of server `s`.
    pub fn machine_of_server(&self, s: ServerId) -> MachineId {
        s
    }

    /// Partitions whose home is server `s`.
    pub fn homed_at(&self, s: ServerId) -> Vec<PartitionId> {
        (0..self.np() as PartitionId)
            .filter(|&p| self.homes[p as usize] == s)
            .collect()
    }

    /// Seconds a worker takes to load `items` of every clock's items (that share of the data).
    pub fn load_seconds(&self, items: u64) -> f64 {
        let share = items as f64 / self.total_items.max(1) as f64;
        share * self.data_bytes * 8.0 / (self.options.load_gbps * 1e9)
    }
}

/// The stage for the machines in the job: fixed by the options, or chosen by their ratio.
pub fn choose_stage(options: &AgileOptions, machines: &[MachineInfo]) -> Result<Stage> {
    let transient = machines.iter().filter(|m| m.transient).count();
    let reliable = machines.len() - transient;
    let chosen = match options.stage {
        StageChoice::Auto => stage::stage_for(transient, reliable, options.thresholds())
            .map_err(|e| EngineError::config("cluster", "tiers", e.to_string()))?,
        StageChoice::One => Stage::One,
        StageChoice::Two => Stage::Two,
        StageChoice::Three => Stage::Three,
    };
    // Stages 2 and 3 need transient machines to run ActivePSs on: without any, stage 1.
    Ok(if transient == 0 { Stage::One } else { chosen })
}

/// Server of every partition in `stage`: homes in stage 1, ActivePSs on the longest-running
/// transient machines otherwise, moving as few partitions as possible from `current`.
pub fn owners_for(
    stage: Stage,
    options: &AgileOptions,
    machines: &[MachineInfo],
    homes: &[ServerId],
    current: &BTreeMap<PartitionId, MachineId>,
) -> Vec<ServerId> {
    if stage == Stage::One {
        return homes.to_vec();
    }
    let np = homes.len();
    let active_now: Vec<MachineId> = current.values().copied().collect();
    let mut actives = stage::active_ps_machines(machines, &active_now, np);
    if options.active_servers > 0 {
        actives.truncate(options.active_servers as usize);
    }
    if actives.is_empty() {
        return homes.to_vec();
    }
    let assigned = stage::assign_partitions(np, &actives, current);
    (0..np as PartitionId)
        .map(|p| assigned.get(&p).copied().unwrap_or(homes[p as usize]))
        .collect()
}

/// Cuts blocks of `lens` elements into `n` contiguous runs of about equal elements, each at
/// least one block.
fn cut_partitions(lens: &[usize], n: usize) -> Vec<PartSpec> {
    let total: usize = lens.iter().sum();
    let mut parts = Vec::with_capacity(n);
    let mut start = 0;
    let mut acc = 0usize;
    for k in 0..n {
        let left = n - k;
        let blocks_left = lens.len() - start;
        if left == 1 {
            let elems = lens[start..].iter().sum();
            parts.push(PartSpec {
                blocks: start..lens.len(),
                elems,
            });
            break;
        }
        let target = total * (k + 1) / n;
        let mut end = start + 1;
        let mut elems = lens[start];
        // Grow while the run stays at or below its share and enough blocks remain for the rest.
        while end < lens.len()
            && blocks_left - (end - start) > left - 1
            && acc + elems + lens[end] <= target
        {
            elems += lens[end];
            end += 1;
        }
        acc += elems;
        parts.push(PartSpec {
            blocks: start..end,
            elems,
        });
        start = end;
    }
    parts
}

/// The error for a cluster whose server roles are not one per machine, server `m` on machine
/// `m`: it names what breaks that (dedicated server machines, the server count, machines no
/// worker fills, or an explicit server placement).
fn not_one_server_per_machine(cluster: &concord_engine::cluster::Cluster) -> EngineError {
    const WHY: &str = "agileml runs one server role per machine (it serves, backs up or stands by \
                       as the stage needs)";
    let machines = cluster.machines.len();
    let servers = cluster.server_machine.len();
    let with_workers: std::collections::BTreeSet<MachineId> =
        cluster.worker_machine.iter().copied().collect();
    let idle: Vec<String> = (0..machines as MachineId)
        .filter(|m| !with_workers.contains(m))
        .map(|m| m.to_string())
        .collect();
    if cluster.machines.iter().any(|m| m.slots == 0) {
        EngineError::config(
            "cluster.dedicated_servers",
            true,
            format!("{WHY} on the workers' machines: no dedicated server machines"),
        )
    } else if servers != machines {
        EngineError::config(
            "servers",
            servers,
            format!("{WHY}: set servers = {machines}, one for each of the cluster's machines"),
        )
    } else if !idle.is_empty() {
        EngineError::config(
            "workers",
            cluster.worker_machine.len(),
            format!(
                "{WHY}, and each machine needs a worker: machines {} hold none (fill every \
                 machine's slots, or list fewer machines in `cluster.machines`)",
                idle.join(", ")
            ),
        )
    } else {
        EngineError::config(
            "servers",
            servers,
            format!("{WHY}: server `m` runs on machine `m` (leave out `cluster.server_machines`)"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_contiguous_runs_of_about_equal_size() {
        let parts = cut_partitions(&[4, 4, 4, 4, 4, 4, 4, 4], 4);
        let runs: Vec<Range<usize>> = parts.iter().map(|p| p.blocks.clone()).collect();
        assert_eq!(runs, vec![0..2, 2..4, 4..6, 6..8]);
        // Uneven blocks: every partition gets at least one, and all are covered once.
        let parts = cut_partitions(&[100, 1, 1, 1, 1], 3);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].blocks, 0..1);
        assert_eq!(parts.last().map(|p| p.blocks.end), Some(5));
        assert_eq!(parts.iter().map(|p| p.elems).sum::<usize>(), 104);
        for w in parts.windows(2) {
            assert_eq!(w[0].blocks.end, w[1].blocks.start);
            assert!(!w[1].blocks.is_empty());
        }
    }
}
