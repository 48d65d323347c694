//! `[strategy.sven]`: the pipeline mode, the alltoall, the placement and the cost constants of
//! embedding lookups, each with its default and checked with an error naming the key.

use crate::placement::{alpha_from_capacity, Sharding};
use crate::schedule::Mode;
use concord_engine::prelude::*;
use serde::Deserialize;

/// Which alltoall moves lookups and their gradients.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AlltoallKind {
    /// Sven's: every rank scatters at its own arrival; early splits are staged (§6.1.1).
    #[default]
    Async,
    /// NCCL's: device-only and blocking; host-tier lookups first copied to the device.
    Blocking,
}

/// Which rows of the tables live in device memory.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementKind {
    /// The top-α most accessed rows, counted over a warm-up (§6.1.3).
    #[default]
    Hot,
    /// A uniformly random α fraction of the rows (the thesis's baseline).
    Random,
    /// Every row on the device (GPU-only embeddings).
    Device,
    /// Every row in host memory.
    Host,
    /// A device tier of α of the rows, admitting a row on a miss and evicting the lowest
    /// importance score w ← (1 − β)·w + β·(p·k + n·l) (§6.1.3).
    Importance,
    /// The same device tier evicting the least recently used row.
    Lru,
    /// The same device tier evicting a random row.
    EvictRandom,
}

/// `[strategy.sven]` as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SvenOptions {
    /// `sequential`, `input-offload` ("1-stage") or `four-stage`.
    pub pipeline: Mode,
    /// `async` (Sven) or `blocking` (NCCL-style).
    pub alltoall: AlltoallKind,
    /// `column` (Sven's), `row` or `table` sharding of the tables over the ranks.
    pub sharding: Sharding,
    /// `hot`, `random`, `device` or `host`.
    pub placement: PlacementKind,
    /// Fraction of the rows on the device tier, in (0, 1]; default 0.1 unless capacities are
    /// given.
    pub alpha: Option<f64>,
    /// Device memory for embeddings per rank, MiB (with `host_mib`: α = m_G / (m_G + m_H), and
    /// a shard larger than both tiers is an error).
    pub device_mib: Option<f64>,
    /// Host memory for embeddings per rank, MiB.
    pub host_mib: Option<f64>,
    /// Iterations whose accesses are counted before the hot rows move to the device.
    pub warmup_iters: u64,
    /// Seconds to look up or update one row slice in device memory (c_dev).
    pub device_row_ns: f64,
    /// Host-tier row access cost as a multiple of `device_row_ns` (the thesis: 5–10×).
    pub host_row_factor: f64,
    /// Device memory copy bandwidth for the staging buffer, GB/s.
    pub copy_gbs: f64,
    /// Zipf exponent of the feature ids drawn in throughput mode (a real run takes its data's).
    pub zipf: f64,
    /// Importance scores' decay β, in (0, 1] (`placement = "importance"`).
    pub importance_beta: f64,
    /// Importance weight k of a click.
    pub importance_k: f64,
    /// Importance weight l of a non-click.
    pub importance_l: f64,
}

impl Default for SvenOptions {
    fn default() -> Self {
        SvenOptions {
            pipeline: Mode::FourStage,
            alltoall: AlltoallKind::Async,
            sharding: Sharding::Column,
            placement: PlacementKind::Hot,
            alpha: None,
            device_mib: None,
            host_mib: None,
            warmup_iters: 5,
            device_row_ns: 2.0,
            host_row_factor: 8.0,
            copy_gbs: 500.0,
            zipf: 1.1,
            importance_beta: crate::placement::DEFAULT_BETA,
            importance_k: crate::placement::DEFAULT_K,
            importance_l: crate::placement::DEFAULT_L,
        }
    }
}

/// The options checked, with α resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The options as written.
    pub opts: SvenOptions,
    /// Fraction of rows on the device tier.
    pub alpha: f64,
    /// Per-rank tier capacities in bytes, when given.
    pub capacities: Option<(u64, u64)>,
}

impl SvenOptions {
    /// Checks every value, naming `strategy.<name>.<key>` on error.
    pub fn resolve(self, name: &str) -> Result<Resolved> {
        let key = |k: &str| format!("strategy.{name}.{k}");
        let positive = |k: &str, v: f64| -> Result<()> {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(EngineError::config(key(k), v, "must be finite and > 0"))
            }
        };
        positive("device_row_ns", self.device_row_ns)?;
        positive("copy_gbs", self.copy_gbs)?;
        positive("zipf", self.zipf)?;
        if !(self.host_row_factor.is_finite() && self.host_row_factor >= 1.0) {
            return Err(EngineError::config(
                key("host_row_factor"),
                self.host_row_factor,
                "must be finite and >= 1 (host memory is not faster than the device's)",
            ));
        }
        let capacities = match (self.device_mib, self.host_mib) {
            (None, None) => None,
            (Some(d), Some(h)) => {
                for (k, v) in [("device_mib", d), ("host_mib", h)] {
                    if !(v.is_finite() && v >= 0.0) {
                        return Err(EngineError::config(key(k), v, "must be finite and >= 0"));
                    }
                }
                let mib = |v: f64| (v * 1024.0 * 1024.0) as u64;
                Some((mib(d), mib(h)))
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(EngineError::config(
                    key("device_mib"),
                    "(one of two)",
                    "give both device_mib and host_mib, or neither",
                ))
            }
        };
        let alpha = match (self.alpha, capacities) {
            (Some(_), Some(_)) => {
                return Err(EngineError::config(
                    key("alpha"),
                    "(set)",
                    "α is either given or taken from device_mib / host_mib, not both",
                ))
            }
            (Some(a), None) => a,
            (None, Some((d, h))) => alpha_from_capacity(d, h),
            (None, None) => 0.1,
        };
        if !(alpha.is_finite() && alpha > 0.0 && alpha <= 1.0) {
            return Err(EngineError::config(
                key("alpha"),
                alpha,
                "the device tier's share of the rows must be in (0, 1]",
            ));
        }
        crate::placement::Importance::new(
            self.importance_beta,
            self.importance_k,
            self.importance_l,
        )
        .map_err(|e| {
            EngineError::config(key("importance_beta"), self.importance_beta, e.to_string())
        })?;
        if self.placement == PlacementKind::Hot && self.warmup_iters == 0 {
            return Err(EngineError::config(
                key("warmup_iters"),
                0,
                "hot placement counts accesses over at least one warm-up iteration",
            ));
        }
        Ok(Resolved {
            opts: self,
            alpha,
            capacities,
        })
    }
}

impl Resolved {
    /// Seconds of one device-tier row access.
    pub fn device_row_s(&self) -> f64 {
        self.opts.device_row_ns * 1e-9
    }

    /// Seconds of one host-tier row access (before its PCIe transfer).
    pub fn host_row_s(&self) -> f64 {
        self.device_row_s() * self.opts.host_row_factor
    }

    /// Device memory copy bandwidth, bytes per second.
    pub fn copy_bytes_per_s(&self) -> f64 {
        self.opts.copy_gbs * 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Resolved> {
        let v: toml::Value = toml::from_str(s).unwrap();
        let o: SvenOptions = v
            .try_into()
            .map_err(|e| EngineError::Composition(format!("{e}")))?;
        o.resolve("sven")
    }

    #[test]
    fn alpha_outside_zero_one_is_an_error_naming_the_key() {
        for bad in ["alpha = 0.0", "alpha = 1.5", "alpha = -0.1", "alpha = nan"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("strategy.sven.alpha"), "{bad}: {e}");
        }
        assert_eq!(parse("alpha = 1.0").unwrap().alpha, 1.0);
        assert_eq!(parse("").unwrap().alpha, 0.1);
    }

    #[test]
    fn alpha_comes_from_the_capacities() {
        let r = parse("device_mib = 1.0\nhost_mib = 3.0").unwrap();
        assert!((r.alpha - 0.25).abs() < 1e-12);
        assert!(parse("device_mib = 1.0").is_err());
        assert!(parse("alpha = 0.2\ndevice_mib = 1.0\nhost_mib = 3.0").is_err());
        assert!(parse("device_mib = 0.0\nhost_mib = 0.0").is_err());
    }

    #[test]
    fn unknown_keys_and_bad_costs_are_errors() {
        assert!(parse("pipline = \"sequential\"").is_err());
        assert!(parse("host_row_factor = 0.5")
            .unwrap_err()
            .to_string()
            .contains("host_row_factor"));
        assert!(parse("warmup_iters = 0").is_err());
        assert!(parse("warmup_iters = 0\nplacement = \"random\"").is_ok());
    }
}
