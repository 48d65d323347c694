//! `[strategy.dlrm-async-ps]`: the servers' per-row cost and the throughput-mode id
//! distribution, each checked with an error naming the key.

use crate::options::SvenOptions;
use concord_engine::prelude::*;

/// `[strategy.dlrm-async-ps]` as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AsyncPsOptions {
    /// Nanoseconds a server spends to read or update one embedding row in host memory. The
    /// default is Sven's host-tier row cost, `device_row_ns × host_row_factor` of its defaults
    /// (2 ns × 8): the parameter servers keep their tables in host memory.
    pub row_ns: f64,
    /// Zipf exponent of the ids drawn in throughput mode (a real run takes its data's).
    pub zipf: f64,
}

impl Default for AsyncPsOptions {
    fn default() -> Self {
        let sven = SvenOptions::default();
        AsyncPsOptions {
            row_ns: sven.device_row_ns * sven.host_row_factor,
            zipf: sven.zipf,
        }
    }
}

impl AsyncPsOptions {
    /// Checks every value, naming `strategy.<name>.<key>` on error.
    pub fn check(self, name: &str) -> Result<AsyncPsOptions> {
        for (key, v) in [("row_ns", self.row_ns), ("zipf", self.zipf)] {
            let ok = if key == "row_ns" { v >= 0.0 } else { v > 0.0 };
            if !(v.is_finite() && ok) {
                return Err(EngineError::config(
                    format!("strategy.{name}.{key}"),
                    v,
                    if key == "row_ns" {
                        "must be finite and >= 0"
                    } else {
                        "must be finite and > 0"
                    },
                ));
            }
        }
        Ok(self)
    }

    /// Seconds of one row read or update on a server.
    pub fn row_s(&self) -> f64 {
        self.row_ns * 1e-9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<AsyncPsOptions> {
        let v: toml::Value = toml::from_str(s).unwrap();
        parse_options::<AsyncPsOptions>("dlrm-async-ps", Some(&v))?.check("dlrm-async-ps")
    }

    #[test]
    fn defaults_are_svens_host_row_cost() {
        let o = parse("").unwrap();
        assert_eq!(o.row_ns, 16.0);
        assert!((o.row_s() - 16e-9).abs() < 1e-18);
    }

    #[test]
    fn bad_values_and_unknown_keys_name_the_key() {
        let e = parse("row_ns = -1.0").unwrap_err().to_string();
        assert!(e.contains("strategy.dlrm-async-ps.row_ns"), "{e}");
        let e = parse("zipf = 0.0").unwrap_err().to_string();
        assert!(e.contains("strategy.dlrm-async-ps.zipf"), "{e}");
        let e = parse("row_cost = 3.0").unwrap_err().to_string();
        assert!(
            e.contains("strategy.dlrm-async-ps") && e.contains("row_cost"),
            "{e}"
        );
    }
}
