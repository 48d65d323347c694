//! What the machine itself says: its memory, its caches, and how many threads a step computes
//! on.

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
