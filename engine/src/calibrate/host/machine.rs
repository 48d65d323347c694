//! What the machine itself says: its memory, its caches, how many threads a step computes on,
//! and how much of its processors' time a hypervisor took.

/// The compute threads candle's CPU math uses in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComputeThreads {
    /// Threads per process.
    pub threads: usize,
    /// Whether `RAYON_NUM_THREADS` set it (else it was set to 1 here, as the process runtime
    /// runs one compute thread per process).
    pub from_env: bool,
}

/// Fixes the compute threads of this process before any tensor math: `RAYON_NUM_THREADS` when
/// it is set to a positive number, else 1 (what one process of the process runtime computes
/// on), set in the environment so candle's thread pools and matrix products use it.
///
/// Call it at start-up, before other threads exist: it may change the process environment.
pub fn compute_threads() -> ComputeThreads {
    let set = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0);
    match set {
        Some(threads) => ComputeThreads {
            threads,
            from_env: true,
        },
        None => {
            std::env::set_var("RAYON_NUM_THREADS", "1");
            ComputeThreads {
                threads: 1,
                from_env: false,
            }
        }
    }
}

/// The machine's memory in GiB (`MemTotal` of `/proc/meminfo`); `None` where there is no such
/// file (not Linux) or it does not say.
pub fn machine_memory_gib() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total_gib(&text)
}

/// `MemTotal` of a `/proc/meminfo` text, in GiB.
fn mem_total_gib(meminfo: &str) -> Option<f64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let kib: f64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(kib / (1u64 << 20) as f64),
        Some(_) => None,
    }
}

/// The machine's processor time so far, in clock ticks, from the `cpu` line of `/proc/stat`:
/// all of it, and what a hypervisor took for other guests (steal). On a virtual machine the
/// share stolen can move from nothing to half within minutes, and a step, a message or a whole
/// job then takes that much longer: two readings around a measurement say how much of it the
/// machine did not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTime {
    /// Ticks given to any use: user, nice, system, idle, I/O wait, interrupts and steal.
    pub total: u64,
    /// Ticks the hypervisor took.
    pub stolen: u64,
}

impl CpuTime {
    /// This machine's reading now; `None` where there is no `/proc/stat` (not Linux) or it
    /// does not parse.
    pub fn now() -> Option<CpuTime> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        Self::parse(&text)
    }

    /// The reading of a `/proc/stat` text: its aggregate `cpu` line's first eight fields (guest
    /// time is already inside user time, so it is not added again).
    pub fn parse(stat: &str) -> Option<CpuTime> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // Kernels before 2.6.11 have no steal field: nothing was stolen that they could say.
        let stolen = fields.get(7).copied().unwrap_or(0);
        (fields.len() >= 4).then(|| CpuTime {
            total: fields.iter().sum(),
            stolen,
        })
    }

    /// The share of the processors' time between `earlier` and this reading that the
    /// hypervisor took; `None` when no tick passed.
    pub fn stolen_share_since(&self, earlier: &CpuTime) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let stolen = self.stolen.checked_sub(earlier.stolen)?;
        (total > 0).then(|| stolen as f64 / total as f64)
    }

    /// The share of the processors' time between this reading and now that the hypervisor
    /// took: what to ask after a measurement that began with [`CpuTime::now`]. `None` where the
    /// system does not say or no tick passed.
    pub fn stolen_share_until_now(&self) -> Option<f64> {
        CpuTime::now()?.stolen_share_since(self)
    }
}

/// The size of the largest cache of this machine's first CPU in bytes (its last level, from
/// `/sys/devices/system/cpu/cpu0/cache/index*/size`); `None` where the system does not say.
pub fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|entry| {
        let text = std::fs::read_to_string(entry.ok()?.path().join("size")).ok()?;
        cache_size_bytes(&text)
    })
    .max()
}

/// A cache size as sysfs writes it (`32768K`, `32M`, `512`), in bytes.
fn cache_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    Some(n * scale)
}

/// A buffer twice the size of the last-level cache (64 MiB where the system does not say),
/// written over to empty the caches before an operation is timed: in a job, a worker's step runs
/// between two server clocks and two messages, so their data is no longer cached then.
pub struct CacheSweep {
    lines: Vec<u8>,
}

impl CacheSweep {
    /// A sweep sized for this machine.
    pub fn for_this_machine() -> CacheSweep {
        let bytes = last_level_cache_bytes().unwrap_or(32 << 20) * 2;
        CacheSweep {
            lines: vec![0; usize::try_from(bytes).unwrap_or(64 << 20)],
        }
    }

    /// Writes one byte per cache line of the buffer, evicting what the caches held.
    pub fn sweep(&mut self) {
        for line in self.lines.iter_mut().step_by(64) {
            *line = line.wrapping_add(1);
        }
        std::hint::black_box(&mut self.lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stolen_time_is_the_steal_field_of_the_cpu_line() {
        let before = "cpu  100 5 20 800 10 0 5 60 7 0\ncpu0 50 2 10 400 5 0 2 30 3 0\n";
        let after = "cpu  140 5 30 850 10 0 5 160 9 0\ncpu0 70 2 15 425 5 0 2 80 4 0\n";
        let (a, b) = (
            CpuTime::parse(before).unwrap(),
            CpuTime::parse(after).unwrap(),
        );
        // Guest time (the ninth field) is inside user time: 1000 ticks, not 1007.
        assert_eq!(
            a,
            CpuTime {
                total: 1000,
                stolen: 60
            }
        );
        // 40 user + 10 system + 50 idle + 100 stolen passed: half of it stolen.
        assert_eq!(b.stolen_share_since(&a), Some(0.5));
        // No tick between two readings, or readings out of order: no share.
        assert_eq!(a.stolen_share_since(&a), None);
        assert_eq!(a.stolen_share_since(&b), None);
        // An old kernel's line without steal; a line that is not numbers.
        assert_eq!(
            CpuTime::parse("cpu  1 2 3 4\n"),
            Some(CpuTime {
                total: 10,
                stolen: 0
            })
        );
        assert_eq!(CpuTime::parse("cpu  1 x 3 4\n"), None);
        assert_eq!(CpuTime::parse("intr 5\n"), None);
    }

    #[test]
    fn mem_total_is_read_in_gib() {
        let text = "MemTotal:       16777216 kB\nMemFree:  1 kB\n";
        assert_eq!(mem_total_gib(text), Some(16.0));
        assert_eq!(mem_total_gib("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_gib("MemTotal: lots\n"), None);
        assert_eq!(mem_total_gib("MemTotal: 1024 MB\n"), None);
    }

    #[test]
    fn cache_sizes_are_read_in_bytes() {
        assert_eq!(cache_size_bytes("32768K\n"), Some(32 << 20));
        assert_eq!(cache_size_bytes("2M"), Some(2 << 20));
        assert_eq!(cache_size_bytes("512"), Some(512));
        assert_eq!(cache_size_bytes("lots"), None);
        assert_eq!(cache_size_bytes("12Q"), None);
    }
}
