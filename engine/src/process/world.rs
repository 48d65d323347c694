//! This process's place in a multi-process job (`--runtime process`), read from the environment
//! its launcher set: torchrun and the Kubernetes training operators (and `concord launch`), Slurm's
//! `srun`, or Open MPI's `mpirun`. Every process learns its rank, the world size, its rank among
//! the processes of its host, where rank 0's rendezvous listener is, and an identity for the job,
//! or a typed error naming the variable at fault.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// The rendezvous port used when the launcher names none (torchrun's default).
const DEFAULT_PORT: u16 = 29500;

/// Which launcher the world was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// torchrun, the Kubernetes training operators and `concord launch` (`RANK`, `WORLD_SIZE`).
    Torchrun,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`).
    Slurm,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`).
    OpenMpi,
}

impl Launcher {
    /// The launcher's short name, as messages and logs show it.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "slurm",
            Launcher::OpenMpi => "openmpi",
        }
    }

    /// The variables holding this process's rank and the world size, in that order.
    fn rank_and_size_vars(self) -> (&'static str, &'static str) {
        match self {
            Launcher::Torchrun => ("RANK", "WORLD_SIZE"),
            Launcher::Slurm => ("SLURM_PROCID", "SLURM_NTASKS"),
            Launcher::OpenMpi => ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        }
    }

    /// The variable holding this process's rank among the job's processes on its host.
    fn local_rank_var(self) -> &'static str {
        match self {
            Launcher::Torchrun => "LOCAL_RANK",
            Launcher::Slurm => "SLURM_LOCALID",
            Launcher::OpenMpi => "OMPI_COMM_WORLD_LOCAL_RANK",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// This process's place in a multi-process job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct World {
    /// This process's rank, below `size`; rank 0 hosts the rendezvous.
    pub rank: u32,
    /// How many processes the job has (at least 1).
    pub size: u32,
    /// This process's rank among the job's processes on its host (torchrun's `LOCAL_RANK`,
    /// Slurm's `SLURM_LOCALID`, Open MPI's `OMPI_COMM_WORLD_LOCAL_RANK`; 0 when the launcher sets
    /// none, as the Kubernetes operators, which run one process per pod): it picks the host's GPUs
    /// this process's workers use.
    pub local_rank: u32,
    /// Host name or IP of rank 0's rendezvous listener.
    pub master_host: String,
    /// Port of rank 0's rendezvous listener.
    pub master_port: u16,
    /// Identifies the job, so that processes of different jobs never join one another.
    pub job_id: String,
    /// Which launcher the world was read from.
    pub launcher: Launcher,
}

/// Why the world could not be read from the environment.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum WorldError {
    /// None of the launchers' variable sets is present.
    #[error(
        "no launcher environment found: expected RANK and WORLD_SIZE (torchrun, Kubernetes \
         training operators), SLURM_PROCID and SLURM_NTASKS (Slurm srun) or OMPI_COMM_WORLD_RANK \
         and OMPI_COMM_WORLD_SIZE (Open MPI mpirun); for a one-machine try, run \
         `concord launch --nproc N`"
    )]
    NoLauncher,
    /// A variable the launcher's environment needs is not set.
    #[error("{launcher} environment is incomplete: {var} is not set{hint}")]
    Missing {
        /// The launcher whose environment is incomplete.
        launcher: Launcher,
        /// The variable that is not set.
        var: &'static str,
        /// How to set it, where that is not obvious (empty otherwise).
        hint: &'static str,
    },
    /// A Slurm job names no host for the rendezvous.
    #[error("slurm environment names no rendezvous host: neither MASTER_ADDR nor SLURM_JOB_NODELIST is set")]
    NoSlurmHost,
    /// A variable that must hold a whole number does not.
    #[error("{var}={value:?} is not a whole number")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The world size is zero.
    #[error("{var}=0: a job needs at least one process")]
    EmptyWorld {
        /// The world-size variable.
        var: &'static str,
    },
    /// The rank is not below the world size.
    #[error("{rank_var}={rank} is not below {size_var}={size}")]
    RankOutOfRange {
        /// The rank variable.
        rank_var: &'static str,
        /// The rank.
        rank: u32,
        /// The world-size variable.
        size_var: &'static str,
        /// The world size.
        size: u32,
    },
    /// A port number is outside 1..=65535.
    #[error("{var}={value} is not a port in 1..=65535")]
    BadPort {
        /// The port variable.
        var: &'static str,
        /// Its value.
        value: u64,
    },
    /// The rendezvous host is empty.
    #[error("{var} is empty; it must name the host of rank 0")]
    EmptyHost {
        /// The host variable.
        var: &'static str,
    },
    /// A Slurm node list names no host first.
    #[error("SLURM_JOB_NODELIST={input:?} names no host first")]
    EmptyNodeList {
        /// The node list.
        input: String,
    },
    /// A Slurm node list has an unclosed, nested or unmatched bracket.
    #[error("SLURM_JOB_NODELIST={input:?} has an unclosed or unmatched bracket")]
    UnbalancedBracket {
        /// The node list.
        input: String,
    },
    /// A bracket of a Slurm node list does not start with a number.
    #[error("SLURM_JOB_NODELIST={input:?} has an empty or non-numeric range")]
    EmptyRange {
        /// The node list.
        input: String,
    },
}

impl World {
    /// Reads the world from the process environment.
    pub fn from_env() -> Result<World, WorldError> {
        World::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the world from `lookup` (a variable's value, or None), so tests need no real env.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<World, WorldError> {
        let launcher = detect(&lookup)?;
        let (rank_var, size_var) = launcher.rank_and_size_vars();
        let rank: u32 = number(rank_var, &require(&lookup, launcher, rank_var, "")?)?;
        let size: u32 = number(size_var, &require(&lookup, launcher, size_var, "")?)?;
        if size == 0 {
            return Err(WorldError::EmptyWorld { var: size_var });
        }
        if rank >= size {
            return Err(WorldError::RankOutOfRange {
                rank_var,
                rank,
                size_var,
                size,
            });
        }
        let (master_host, master_port) = match launcher {
            Launcher::Torchrun => (
                host(
                    "MASTER_ADDR",
                    require(&lookup, launcher, "MASTER_ADDR", "")?,
                )?,
                port(
                    "MASTER_PORT",
                    &require(&lookup, launcher, "MASTER_PORT", "")?,
                )?,
            ),
            Launcher::Slurm => slurm_master(&lookup)?,
            Launcher::OpenMpi => {
                let hint = " (mpirun forwards it to every process with `-x MASTER_ADDR`)";
                let addr = require(&lookup, launcher, "MASTER_ADDR", hint)?;
                (host("MASTER_ADDR", addr)?, port_or(&lookup, DEFAULT_PORT)?)
            }
        };
        let local_var = launcher.local_rank_var();
        let local_rank = lookup(local_var).map_or(Ok(0), |v| number(local_var, &v))?;
        let job_id =
            job_id(&lookup, launcher).unwrap_or_else(|| format!("{master_host}:{master_port}"));
        Ok(World {
            rank,
            size,
            local_rank,
            master_host,
            master_port,
            job_id,
            launcher,
        })
    }
}

/// The launcher whose rank or size variable is set, first match in precedence order.
fn detect(lookup: &impl Fn(&str) -> Option<String>) -> Result<Launcher, WorldError> {
    [Launcher::Torchrun, Launcher::Slurm, Launcher::OpenMpi]
        .into_iter()
        .find(|l| {
            let (rank, size) = l.rank_and_size_vars();
            lookup(rank).is_some() || lookup(size).is_some()
        })
        .ok_or(WorldError::NoLauncher)
}

/// The value of `var`, or the error naming it as missing from `launcher`'s environment.
fn require(
    lookup: &impl Fn(&str) -> Option<String>,
    launcher: Launcher,
    var: &'static str,
    hint: &'static str,
) -> Result<String, WorldError> {
    lookup(var).ok_or(WorldError::Missing {
        launcher,
        var,
        hint,
    })
}

/// `value` of `var` as a whole number of type `T` (surrounding blanks allowed).
fn number<T: FromStr>(var: &'static str, value: &str) -> Result<T, WorldError> {
    value.trim().parse().map_err(|_| WorldError::NotANumber {
        var,
        value: value.to_string(),
    })
}

/// `value` of `var` as a port in 1..=65535.
fn port(var: &'static str, value: &str) -> Result<u16, WorldError> {
    let n: u64 = number(var, value)?;
    u16::try_from(n)
        .ok()
        .filter(|&p| p != 0)
        .ok_or(WorldError::BadPort { var, value: n })
}

/// `MASTER_PORT` if set, else `default`.
fn port_or(lookup: &impl Fn(&str) -> Option<String>, default: u16) -> Result<u16, WorldError> {
    lookup("MASTER_PORT").map_or(Ok(default), |v| port("MASTER_PORT", &v))
}

/// `value` of `var` as a host name, which must not be blank.
fn host(var: &'static str, value: String) -> Result<String, WorldError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(WorldError::EmptyHost { var });
    }
    Ok(trimmed.to_string())
}

/// A Slurm job's rendezvous host and port: `MASTER_ADDR` or the first node, and `MASTER_PORT` or
/// a port derived from the job id, so that concurrent jobs sharing a node do not collide.
fn slurm_master(lookup: &impl Fn(&str) -> Option<String>) -> Result<(String, u16), WorldError> {
    let master_host = match (lookup("MASTER_ADDR"), lookup("SLURM_JOB_NODELIST")) {
        (Some(addr), _) => host("MASTER_ADDR", addr)?,
        (None, Some(list)) => first_slurm_host(&list)?,
        (None, None) => return Err(WorldError::NoSlurmHost),
    };
    let offset = lookup("SLURM_JOB_ID")
        .and_then(|id| id.trim().parse::<u64>().ok())
        .map_or(0, |id| id % 1000);
    // `offset` is below 1000, so the sum stays well inside u16.
    let default = DEFAULT_PORT + offset as u16;
    Ok((master_host, port_or(lookup, default)?))
}

/// The job's identity from `CONCORD_JOB_ID` or the launcher's own job variable, if either is set.
fn job_id(lookup: &impl Fn(&str) -> Option<String>, launcher: Launcher) -> Option<String> {
    let get = |var: &str| {
        lookup(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    get("CONCORD_JOB_ID").or_else(|| match launcher {
        Launcher::Torchrun => get("TORCHELASTIC_RUN_ID"),
        Launcher::Slurm => get("SLURM_JOB_ID").map(|job| match get("SLURM_STEP_ID") {
            Some(step) => format!("{job}.{step}"),
            None => job,
        }),
        Launcher::OpenMpi => get("OMPI_MCA_ess_base_jobid"),
    })
}

/// The first host name of a Slurm node list (`SLURM_JOB_NODELIST`), e.g. `node[01-04,07],gpu5`
/// → `node01`; `a-b[3],c` → `a-b3`; `host` → `host`; `n[009-011]` → `n009` (zero padding kept).
pub fn first_slurm_host(nodelist: &str) -> Result<String, WorldError> {
    let input = || nodelist.to_string();
    let list = nodelist.trim();
    // Check the brackets of the whole list, then cut its first top-level entry.
    let mut open = false;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' if !open => open = true,
            ']' if open => open = false,
            '[' | ']' => return Err(WorldError::UnbalancedBracket { input: input() }),
            ',' if !open && end == list.len() => end = i,
            _ => {}
        }
    }
    if open {
        return Err(WorldError::UnbalancedBracket { input: input() });
    }
    let entry = &list[..end];
    if entry.is_empty() {
        return Err(WorldError::EmptyNodeList { input: input() });
    }
    // Keep the text outside brackets; replace each bracket by the first number of its first range.
    let mut host = String::new();
    let mut rest = entry;
    while let Some(start) = rest.find('[') {
        host.push_str(&rest[..start]);
        // Brackets were checked above, so a `]` follows every `[`.
        let close = start + rest[start..].find(']').unwrap_or(rest.len() - start);
        let inner = &rest[start + 1..close];
        let first = inner.split([',', '-']).next().unwrap_or_default();
        if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
            return Err(WorldError::EmptyRange { input: input() });
        }
        host.push_str(first);
        rest = rest.get(close + 1..).unwrap_or_default();
    }
    host.push_str(rest);
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use Launcher::{OpenMpi, Slurm, Torchrun};

    const TORCHRUN: &str = "RANK=2 WORLD_SIZE=4 MASTER_ADDR=10.0.0.1 MASTER_PORT=1234";
    const SLURM: &str = "SLURM_PROCID=1 SLURM_NTASKS=8 SLURM_JOB_NODELIST=gpu[07-09],cpu1";
    const OMPI: &str = "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=3 MASTER_ADDR=head";

    /// Reads the world from `base` then `edits`: blank-separated `VAR=value` sets, `-VAR` unsets.
    fn world(base: &str, edits: &str) -> Result<World, WorldError> {
        let mut env = HashMap::new();
        for word in base.split_whitespace().chain(edits.split_whitespace()) {
            match word.strip_prefix('-') {
                Some(var) => env.remove(var),
                None => word
                    .split_once('=')
                    .and_then(|(k, v)| env.insert(k, v.to_string())),
            };
        }
        World::from_lookup(|k| env.get(k).cloned())
    }

    fn ok(base: &str, edits: &str) -> World {
        world(base, edits).unwrap_or_else(|e| panic!("{base} {edits}: {e}"))
    }

    fn miss(launcher: Launcher, var: &'static str) -> WorldError {
        WorldError::Missing {
            launcher,
            var,
            hint: "",
        }
    }

    fn nan(var: &'static str, value: &str) -> WorldError {
        WorldError::NotANumber {
            var,
            value: value.into(),
        }
    }

    #[test]
    fn each_launcher_happy_path() {
        let (host, job) = ("10.0.0.1".to_string(), "run7".to_string());
        let expected = World {
            rank: 2,
            size: 4,
            local_rank: 0,
            master_host: host,
            master_port: 1234,
            job_id: job,
            launcher: Torchrun,
        };
        assert_eq!(ok(TORCHRUN, "TORCHELASTIC_RUN_ID=run7"), expected);
        let w = ok(SLURM, "SLURM_JOB_ID=123456 SLURM_STEP_ID=2");
        assert_eq!(
            (w.rank, w.size, w.launcher, w.master_host.as_str()),
            (1, 8, Slurm, "gpu07")
        );
        assert_eq!(
            (w.master_port, w.job_id.as_str()),
            (29500 + 456, "123456.2")
        );
        let w = ok(OMPI, "OMPI_MCA_ess_base_jobid=42");
        assert_eq!(
            (w.rank, w.size, w.launcher, w.master_host.as_str()),
            (0, 3, OpenMpi, "head")
        );
        assert_eq!((w.master_port, w.job_id.as_str()), (29500, "42"));
        assert_eq!(ok(OMPI, "MASTER_PORT=777").master_port, 777);
        let names = [Torchrun, Slurm, OpenMpi].map(Launcher::name);
        assert_eq!(names, ["torchrun", "slurm", "openmpi"]);
    }

    #[test]
    fn each_launcher_names_the_local_rank_or_leaves_it_zero() {
        assert_eq!(ok(TORCHRUN, "LOCAL_RANK=3").local_rank, 3);
        assert_eq!(ok(SLURM, "SLURM_LOCALID=5").local_rank, 5);
        assert_eq!(ok(OMPI, "OMPI_COMM_WORLD_LOCAL_RANK=1").local_rank, 1);
        // One process per pod (the Kubernetes operators) sets no local rank.
        assert_eq!(ok(TORCHRUN, "").local_rank, 0);
        // Another launcher's variable is not this one's.
        assert_eq!(ok(SLURM, "LOCAL_RANK=2").local_rank, 0);
        assert_eq!(
            world(TORCHRUN, "LOCAL_RANK=two"),
            Err(nan("LOCAL_RANK", "two"))
        );
        assert_eq!(
            world(SLURM, "SLURM_LOCALID=-1"),
            Err(nan("SLURM_LOCALID", "-1"))
        );
    }

    #[test]
    fn slurm_master_vars_override_node_list_and_default_port() {
        let w = ok(SLURM, "MASTER_ADDR=login MASTER_PORT=4000 SLURM_JOB_ID=77");
        assert_eq!(
            (w.master_host.as_str(), w.master_port, w.job_id.as_str()),
            ("login", 4000, "77")
        );
        assert_eq!(
            world(SLURM, "-SLURM_JOB_NODELIST"),
            Err(WorldError::NoSlurmHost)
        );
        let port = |id| ok(SLURM, &format!("SLURM_JOB_ID={id}")).master_port;
        assert_eq!(
            [port("5"), port("1999"), port("3000"), port("job-x")],
            [29505, 30499, 29500, 29500]
        );
        assert_eq!(ok(SLURM, "").master_port, 29500);
    }

    #[test]
    fn precedence_is_torchrun_then_slurm_then_openmpi() {
        assert_eq!(
            ok(&format!("{TORCHRUN} {SLURM} {OMPI}"), "").launcher,
            Torchrun
        );
        assert_eq!(ok(&format!("{SLURM} {OMPI}"), "").launcher, Slurm);
    }

    #[test]
    fn missing_variables_are_named_without_falling_through() {
        let both = format!("{TORCHRUN} {SLURM}");
        let cases = [
            (both.as_str(), "-WORLD_SIZE", miss(Torchrun, "WORLD_SIZE")),
            (&both, "-RANK", miss(Torchrun, "RANK")),
            (TORCHRUN, "-MASTER_ADDR", miss(Torchrun, "MASTER_ADDR")),
            (TORCHRUN, "-MASTER_PORT", miss(Torchrun, "MASTER_PORT")),
            (SLURM, "-SLURM_PROCID", miss(Slurm, "SLURM_PROCID")),
            (SLURM, "-SLURM_NTASKS", miss(Slurm, "SLURM_NTASKS")),
            (
                OMPI,
                "-OMPI_COMM_WORLD_RANK",
                miss(OpenMpi, "OMPI_COMM_WORLD_RANK"),
            ),
        ];
        for (base, edits, expected) in cases {
            assert_eq!(world(base, edits), Err(expected), "{base} {edits}");
        }
        let msg = world(TORCHRUN, "-MASTER_ADDR").unwrap_err().to_string();
        assert_eq!(
            msg,
            "torchrun environment is incomplete: MASTER_ADDR is not set"
        );
        let err = world(OMPI, "-MASTER_ADDR").unwrap_err();
        assert!(matches!(
            err,
            WorldError::Missing {
                launcher: OpenMpi,
                var: "MASTER_ADDR",
                ..
            }
        ));
        assert!(err.to_string().contains("-x MASTER_ADDR"), "{err}");
    }

    #[test]
    fn no_launcher_names_every_variable_set() {
        let err = world("MASTER_ADDR=x LOCAL_RANK=0", "").unwrap_err();
        assert_eq!(err, WorldError::NoLauncher);
        let msg = err.to_string();
        let named = [
            "RANK",
            "WORLD_SIZE",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "OMPI_COMM_WORLD_RANK",
        ];
        for var in named
            .iter()
            .chain(&["OMPI_COMM_WORLD_SIZE", "concord launch --nproc N"])
        {
            assert!(msg.contains(var), "{var} not in {msg}");
        }
    }

    #[test]
    fn malformed_values_name_variable_and_value() {
        let bad_port = |value| WorldError::BadPort {
            var: "MASTER_PORT",
            value,
        };
        let no_host = || WorldError::EmptyHost { var: "MASTER_ADDR" };
        let (size_var, big) = ("WORLD_SIZE", "4294967296");
        let cases = [
            (TORCHRUN, "RANK=two", nan("RANK", "two")),
            (TORCHRUN, "WORLD_SIZE=-4", nan(size_var, "-4")),
            (TORCHRUN, "WORLD_SIZE=4294967296", nan(size_var, big)),
            (TORCHRUN, "MASTER_PORT=http", nan("MASTER_PORT", "http")),
            (SLURM, "SLURM_NTASKS=", nan("SLURM_NTASKS", "")),
            (
                OMPI,
                "OMPI_COMM_WORLD_RANK=x",
                nan("OMPI_COMM_WORLD_RANK", "x"),
            ),
            (
                TORCHRUN,
                "RANK=0 WORLD_SIZE=0",
                WorldError::EmptyWorld { var: size_var },
            ),
            (TORCHRUN, "MASTER_PORT=0", bad_port(0)),
            (TORCHRUN, "MASTER_PORT=65536", bad_port(65536)),
            (SLURM, "MASTER_PORT=70000", bad_port(70000)),
            (TORCHRUN, "MASTER_ADDR=", no_host()),
            (SLURM, "MASTER_ADDR=", no_host()),
            (OMPI, "MASTER_ADDR=", no_host()),
            (
                SLURM,
                "SLURM_JOB_NODELIST=,",
                WorldError::EmptyNodeList { input: ",".into() },
            ),
        ];
        for (base, edits, expected) in cases {
            assert_eq!(world(base, edits), Err(expected), "{base} {edits}");
        }
        let msg = world(SLURM, "SLURM_PROCID=x1").unwrap_err().to_string();
        assert_eq!(msg, "SLURM_PROCID=\"x1\" is not a whole number");
        let (rank_var, size_var) = ("SLURM_PROCID", "SLURM_NTASKS");
        let err = world(SLURM, "SLURM_PROCID=8").unwrap_err();
        assert_eq!(
            err,
            WorldError::RankOutOfRange {
                rank_var,
                rank: 8,
                size_var,
                size: 8
            }
        );
        assert_eq!(
            err.to_string(),
            "SLURM_PROCID=8 is not below SLURM_NTASKS=8"
        );
        let edges = [
            ok(TORCHRUN, "RANK=3").rank,
            ok(TORCHRUN, "MASTER_PORT=65535").master_port.into(),
        ];
        assert_eq!(edges, [3, 65535]);
        let padded = ok(TORCHRUN, "");
        let spaced = World::from_lookup(|k| {
            let env = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"].into_iter();
            let values = ["2", "4", "10.0.0.1", "1234"].into_iter();
            env.zip(values)
                .find(|(var, _)| *var == k)
                .map(|(_, v)| format!(" {v}\n"))
        });
        assert_eq!(spaced, Ok(padded), "blanks around values are ignored");
    }

    #[test]
    fn job_id_precedence() {
        let all =
            "CONCORD_JOB_ID=mine TORCHELASTIC_RUN_ID=t SLURM_JOB_ID=9 OMPI_MCA_ess_base_jobid=o";
        for base in [TORCHRUN, SLURM, OMPI] {
            assert_eq!(ok(base, all).job_id, "mine", "{base}");
        }
        let cases = [
            (TORCHRUN, "", "10.0.0.1:1234"),
            (TORCHRUN, "CONCORD_JOB_ID=", "10.0.0.1:1234"),
            (TORCHRUN, "SLURM_JOB_ID=9", "10.0.0.1:1234"),
            (SLURM, "", "gpu07:29500"),
            (SLURM, "SLURM_JOB_ID=9", "9"),
            (OMPI, "SLURM_JOB_ID=9", "head:29500"),
        ];
        for (base, edits, job_id) in cases {
            assert_eq!(ok(base, edits).job_id, job_id, "{base} {edits}");
        }
    }

    #[test]
    fn first_slurm_host_cases() {
        let cases = [
            ("node[01-04,07],gpu5", "node01"),
            ("a-b[3],c", "a-b3"),
            ("host", "host"),
            ("n[009-011]", "n009"),
            ("gpu5,node[01-04]", "gpu5"),
            ("n[7,3-4]-ib", "n7-ib"),
            ("rack[2-3]-n[05-06]", "rack2-n05"),
            (" host1 ", "host1"),
        ];
        for (list, host) in cases {
            assert_eq!(first_slurm_host(list), Ok(host.to_string()), "{list}");
        }
    }

    #[test]
    fn first_slurm_host_errors_name_the_input() {
        type Make = fn(String) -> WorldError;
        let empty: Make = |input| WorldError::EmptyNodeList { input };
        let bracket: Make = |input| WorldError::UnbalancedBracket { input };
        let range: Make = |input| WorldError::EmptyRange { input };
        let cases = [
            (empty, ["", "  ", ",a"].as_slice()),
            (
                bracket,
                &["node[01-04", "a,b[1", "n[1[2]]", "n[1[2]", "n]1", "n[1]]"],
            ),
            (range, &["node[]", "n[-3]", "n[,1]", "n[a-b]"]),
        ];
        for (make, lists) in cases {
            for list in lists {
                assert_eq!(
                    first_slurm_host(list),
                    Err(make(list.to_string())),
                    "{list}"
                );
            }
        }
        let msg = first_slurm_host("node[01-04").unwrap_err().to_string();
        assert_eq!(
            msg,
            "SLURM_JOB_NODELIST=\"node[01-04\" has an unclosed or unmatched bracket"
        );
    }
}
