//! One run clock for every process of a job. Each process reads its own monotonic clock, and the
//! processes start their roles a message's latency or more apart; times they exchange (when a
//! server served a worker's read, when a message left) would then compare readings of clocks
//! that differ by that much, and a worker's wait could come out longer than its whole clock.
//! So before its roles start, every follower sets its run clock by rank 0's, as NTP does: it asks
//! rank 0 for its clock a few times and takes the answer of the shortest round trip, which rank
//! 0 read closest to the middle of it. On one machine the error is a fraction of that round trip
//! (microseconds); across machines, what the link's asymmetry leaves.

use std::time::{Duration, Instant};

/// Round trips a follower makes to rank 0's clock.
pub(super) const PROBES: u32 = 16;

/// One round trip to rank 0's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct ClockSample {
    /// When the probe left this process.
    pub sent: Instant,
    /// When rank 0's answer arrived.
    pub received: Instant,
    /// Rank 0's run time in its answer, seconds.
    pub leader_s: f64,
}

/// The instant of this process's clock at which rank 0's run clock read `origin`, by the sample
/// of the shortest round trip (rank 0's reading taken as the middle of it); `None` without
/// samples.
pub(super) fn leader_start(samples: &[ClockSample], origin: f64) -> Option<Instant> {
    let best = samples
        .iter()
        .min_by_key(|s| s.received.saturating_duration_since(s.sent))?;
    let middle = best.sent + best.received.saturating_duration_since(best.sent) / 2;
    let since_origin = best.leader_s - origin;
    if since_origin >= 0.0 {
        middle.checked_sub(Duration::from_secs_f64(since_origin))
    } else {
        middle.checked_add(Duration::from_secs_f64(-since_origin))
    }
    .or(Some(middle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_sets_the_clock_at_its_middle() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let samples = [
            // A slow round trip, answered late: 1 ms out and back.
            ClockSample {
                sent: at(1000),
                received: at(2000),
                leader_s: 5.0019,
            },
            // The quick one: 20 µs, rank 0 reading 5.003 s at its middle (3010 µs here).
            ClockSample {
                sent: at(3000),
                received: at(3020),
                leader_s: 5.003,
            },
        ];
        // Rank 0's clock read 5.0 s at 3010 − 3000 µs here, at t0 + 10 µs; its origin 5.0 (a
        // resumed run's) maps to that instant.
        assert_eq!(leader_start(&samples, 5.0), Some(at(10)));
        // From origin 0, the clock started 5 s before that.
        let start = leader_start(&samples, 0.0);
        assert_eq!(
            start.map(|s| at(10).duration_since(s)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(leader_start(&[], 0.0), None);
    }
}
