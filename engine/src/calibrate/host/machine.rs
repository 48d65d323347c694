//! What the machine itself says: its memory, and how many threads a step computes on.

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
}
