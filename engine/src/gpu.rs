//! GPUs: the candle device a role's tensor math runs on, and the checks that a job's GPUs exist
//! before any work starts.
//!
//! A device profile with `backend = "cuda"` puts the workers of its machines on GPUs: worker slot
//! `k` of a machine is GPU `k` of that machine. In one process (`sim` and `wall`) every machine is
//! this host, so slot `k` of any machine is this host's GPU `k`. In the process runtime each
//! process runs one machine, and the processes sharing a host take GPUs of their own
//! ([`ProcessHost`]). Servers and the coordinator apply updates on the host. Builds without the
//! `cuda` feature know no GPU: a config that asks for one is refused with the key that asked.

use crate::cluster::Cluster;
use crate::config::{CollectiveBackend, RunConfig, RuntimeKind};
use crate::error::{EngineError, Result};
use crate::ids::{MachineId, RoleId};
use candle_core::Device;

/// Whether this build can run tensor math on CUDA devices (the `cuda` feature).
pub const CUDA_BUILD: bool = cfg!(feature = "cuda");

/// Whether this build has NCCL collectives (the `nccl` feature).
pub const NCCL_BUILD: bool = cfg!(feature = "nccl");

/// The candle device for `gpu` (`None`: the CPU). Every role of the process on the same GPU
/// shares one device (one context and stream), made on first use.
pub fn tensor_device(gpu: Option<u32>) -> Result<Device> {
    match gpu {
        None => Ok(Device::Cpu),
        Some(ordinal) => cuda_device(ordinal),
    }
}

/// The candle device of GPU `ordinal`, shared by the process.
#[cfg(feature = "cuda")]
fn cuda_device(ordinal: u32) -> Result<Device> {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    static DEVICES: OnceLock<Mutex<BTreeMap<u32, Device>>> = OnceLock::new();
    let mut devices = DEVICES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devices.get(&ordinal) {
        return Ok(d.clone());
    }
    let device = Device::new_cuda(ordinal as usize).map_err(|e| EngineError::Gpu {
        what: format!("open GPU {ordinal}"),
        reason: e.to_string(),
    })?;
    devices.insert(ordinal, device.clone());
    Ok(device)
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(ordinal: u32) -> Result<Device> {
    Err(EngineError::Gpu {
        what: format!("open GPU {ordinal}"),
        reason: NO_CUDA.into(),
    })
}

/// Why a build without the feature cannot use a GPU, and what to do.
const NO_CUDA: &str = "this build has no `cuda` feature; build with `--features cuda` \
     (README, \"GPUs\": `cargo xtask cuda-env` sets up the build)";

/// Why a build without the `nccl` feature cannot run `collective = "nccl"`.
pub(crate) const NO_NCCL: &str = "this build has no `nccl` feature; build with `--features nccl`";

/// How many GPUs this process sees (after `CUDA_VISIBLE_DEVICES`); an error naming the cause when
/// the CUDA driver cannot be used at all (no driver, a stub library, no `cuda` feature).
pub fn visible_gpus() -> Result<usize> {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::CudaContext;
        let gpu_error = |e: &dyn std::fmt::Display| EngineError::Gpu {
            what: "count the visible GPUs".into(),
            reason: e.to_string(),
        };
        candle_core::cuda_backend::cudarc::driver::result::init().map_err(|e| gpu_error(&e))?;
        let n = CudaContext::device_count().map_err(|e| gpu_error(&e))?;
        Ok(n.max(0) as usize)
    }
    #[cfg(not(feature = "cuda"))]
    Err(EngineError::Gpu {
        what: "count the visible GPUs".into(),
        reason: NO_CUDA.into(),
    })
}

#[cfg(feature = "nccl")]
pub use crate::collective::nccl::{self_check as nccl_self_check, NcclCheck};

/// Where one process of a multi-process job (`--runtime process`) sits: the machine it runs and
/// the first GPU of its host its worker slots use (past those of the job's other processes on
/// the host, by `process.gpus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessHost {
    /// The machine this process runs (its rank).
    pub machine: MachineId,
    /// The GPU of its host that the machine's slot 0 runs on.
    pub first_gpu: u32,
}

/// The workers whose GPUs this process opens, each with its GPU: every worker on a CUDA machine
/// in one process; in the process runtime only those of `host`'s machine.
fn gpus_here(config: &RunConfig, cluster: &Cluster, host: Option<ProcessHost>) -> Vec<(u32, u32)> {
    (0..config.workers)
        .filter(|&w| host.is_none_or(|h| cluster.worker_machine[w as usize] == h.machine))
        .filter_map(|w| cluster.gpu_of(RoleId::Worker(w)).map(|g| (w, g)))
        .collect()
}

/// Checks that every GPU this process places a worker on exists and that the collective backend
/// can run: before any data is read or any role is built, so a bad config costs nothing. `host`
/// is this process's place in a multi-process job (`None`: the whole job runs here).
pub(crate) fn check_job(
    config: &RunConfig,
    cluster: &Cluster,
    host: Option<ProcessHost>,
) -> Result<()> {
    let on_gpu = gpus_here(config, cluster, host);
    if let Some(&(w, _)) = on_gpu.first() {
        let name = &cluster.machines[cluster.worker_machine[w as usize] as usize].device_name;
        let key = format!("cluster.devices.{name}.backend");
        if !CUDA_BUILD {
            return Err(EngineError::config(key, "\"cuda\"", NO_CUDA));
        }
        let visible = visible_gpus().map_err(|e| {
            EngineError::config(&key, "\"cuda\"", format!("no GPU can be used: {e}"))
        })?;
        if let Some(&(w, slot)) = on_gpu.iter().find(|(_, g)| *g as usize >= visible) {
            return Err(EngineError::config(
                key,
                "\"cuda\"",
                format!(
                    "worker {w} runs in slot {} of {}, so on GPU {slot}, but {visible} GPU{} \
                     visible (CUDA_VISIBLE_DEVICES={}); {}",
                    cluster.worker_slot[w as usize],
                    cluster.device_label(RoleId::Worker(w)),
                    if visible == 1 { " is" } else { "s are" },
                    std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into()),
                    match host {
                        Some(h) if h.first_gpu > 0 => format!(
                            "this process's slots start at GPU {}, past its host's other \
                             processes' (process.gpus = \"local-rank\"); where the launcher gives \
                             each process its own GPUs, set process.gpus = \"visible\"",
                            h.first_gpu
                        ),
                        _ => "lower that machine group's `slots` or the number of workers".into(),
                    },
                ),
            ));
        }
    }
    if config.collective == CollectiveBackend::Nccl {
        check_nccl(config, cluster)?;
    }
    Ok(())
}

/// NCCL needs the feature, then what [`check_nccl_members`] checks.
fn check_nccl(config: &RunConfig, cluster: &Cluster) -> Result<()> {
    if !NCCL_BUILD {
        return Err(EngineError::config("collective", "\"nccl\"", NO_NCCL));
    }
    check_nccl_members(config, cluster)
}

/// NCCL needs real time and every member on a GPU of its own. In one process (`wall`) every
/// machine is this host, so two workers in the same slot of different machines would share a GPU;
/// in the process runtime each process runs one machine, whose slots are GPUs of their own.
fn check_nccl_members(config: &RunConfig, cluster: &Cluster) -> Result<()> {
    let refuse = |reason: String| EngineError::config("collective", "\"nccl\"", reason);
    if config.runtime == RuntimeKind::Sim {
        return Err(refuse(
            "NCCL runs in real time: use `runtime = \"wall\"` or `\"process\"` (in `sim` the \
             ring's messages give the collective its virtual time)"
                .into(),
        ));
    }
    let one_host = config.runtime == RuntimeKind::Wall;
    let mut seen = std::collections::BTreeMap::new();
    for w in 0..config.workers {
        let role = RoleId::Worker(w);
        let Some(gpu) = cluster.gpu_of(role) else {
            return Err(refuse(format!(
                "worker {w} runs on {}, a CPU device: every NCCL member must be on CUDA \
                 (a device profile with `backend = \"cuda\"`)",
                cluster.device_label(role)
            )));
        };
        if !one_host {
            continue;
        }
        if let Some(other) = seen.insert(gpu, w) {
            return Err(refuse(format!(
                "workers {other} and {w} would share GPU {gpu} of this host; NCCL needs one \
                 GPU per member"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Backend, DeviceProfile, MachineGroup};
    use crate::process::GpuBinding;

    /// `workers` workers on machines of `slots` slots each, of a CUDA device (or the CPU).
    fn job(workers: u32, slots: u32, cuda: bool, runtime: RuntimeKind) -> (RunConfig, Cluster) {
        let mut config = RunConfig {
            workers,
            runtime,
            collective: CollectiveBackend::Nccl,
            ..RunConfig::default()
        };
        let backend = if cuda { Backend::Cuda } else { Backend::Cpu };
        let device = DeviceProfile {
            backend,
            ..DeviceProfile::builtins()["h100"].clone()
        };
        config.cluster.devices.insert("gpu".into(), device);
        config.cluster.machines = vec![MachineGroup {
            device: "gpu".into(),
            count: workers.div_ceil(slots),
            slots,
            labels: Default::default(),
        }];
        let cluster = Cluster::resolve(&config.cluster, workers, 1).expect("cluster");
        (config, cluster)
    }

    #[test]
    fn workers_on_a_cuda_machine_use_the_gpu_of_their_slot() {
        let (_, cluster) = job(4, 2, true, RuntimeKind::Wall);
        let gpus: Vec<_> = (0..4).map(|w| cluster.gpu_of(RoleId::Worker(w))).collect();
        assert_eq!(gpus, vec![Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(cluster.gpu_of(RoleId::Server(0)), None);
        let (_, cpu) = job(2, 2, false, RuntimeKind::Wall);
        assert_eq!(cpu.gpu_of(RoleId::Worker(1)), None);
    }

    #[test]
    fn nccl_refuses_a_cpu_member_a_shared_gpu_and_virtual_time() {
        let (config, cluster) = job(2, 2, false, RuntimeKind::Wall);
        let e = check_nccl_members(&config, &cluster)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`collective`") && e.contains("worker 0") && e.contains("CPU"),
            "{e}"
        );
        // Two machines of one slot each: both workers on this host's GPU 0.
        let (config, cluster) = job(2, 1, true, RuntimeKind::Wall);
        let e = check_nccl_members(&config, &cluster)
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers 0 and 1") && e.contains("GPU 0"), "{e}");
        let (config, cluster) = job(2, 2, true, RuntimeKind::Sim);
        let e = check_nccl_members(&config, &cluster)
            .unwrap_err()
            .to_string();
        assert!(e.contains("wall"), "{e}");
        let (config, cluster) = job(2, 2, true, RuntimeKind::Wall);
        assert!(check_nccl_members(&config, &cluster).is_ok());
    }

    #[test]
    fn nccl_across_processes_takes_each_machines_slots_as_its_own_gpus() {
        // One process per machine: both workers in slot 0, each on GPU 0 of its own host.
        let (config, cluster) = job(2, 1, true, RuntimeKind::Process);
        assert!(check_nccl_members(&config, &cluster).is_ok());
        // A CPU member is still refused.
        let (config, cluster) = job(2, 1, false, RuntimeKind::Process);
        let e = check_nccl_members(&config, &cluster)
            .unwrap_err()
            .to_string();
        assert!(e.contains("worker 0") && e.contains("CPU"), "{e}");
    }

    #[test]
    fn a_process_opens_only_its_machines_gpus_past_its_hosts_other_processes() {
        // 5 workers on machines of 2 slots: machine 1 runs workers 2 and 3, machine 2 worker 4.
        let (config, cluster) = job(5, 2, true, RuntimeKind::Process);
        let everything = gpus_here(&config, &cluster, None);
        assert_eq!(everything, vec![(0, 0), (1, 1), (2, 0), (3, 1), (4, 0)]);
        // The second process on its host (local rank 1 of machines of 2 slots) starts at GPU 2.
        let first = GpuBinding::LocalRank.first_gpu(1, cluster.machines[1].slots);
        assert_eq!(first, 2);
        let host = ProcessHost {
            machine: 1,
            first_gpu: first,
        };
        let cluster = cluster.with_first_gpu(first);
        assert_eq!(
            gpus_here(&config, &cluster, Some(host)),
            vec![(2, 2), (3, 3)]
        );
        // The last machine holds one worker but two slots: local rank 2 starts at GPU 4, not 2.
        let first = GpuBinding::LocalRank.first_gpu(2, cluster.machines[2].slots);
        let host = ProcessHost {
            machine: 2,
            first_gpu: first,
        };
        let cluster = cluster.with_first_gpu(first);
        assert_eq!(gpus_here(&config, &cluster, Some(host)), vec![(4, 4)]);
        // A launcher that gave each process its own GPUs: slots count from the first visible.
        assert_eq!(GpuBinding::Visible.first_gpu(2, 2), 0);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_cuda_opens_no_gpu() {
        let e = tensor_device(Some(0)).unwrap_err().to_string();
        assert!(e.contains("`cuda` feature"), "{e}");
        assert!(matches!(tensor_device(None), Ok(Device::Cpu)));
    }
}
