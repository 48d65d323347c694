//! # BSP, SSP and ASP
//!
//! The consistency models of the parameter-server substrate (Harlap thesis §2.2.3, §3.2.2; spec
//! `harlap-bsp-ssp-flexrr-agileml-pipedream.md` §1.4, §2, §3). Clocks are numbered from 0; a
//! server's version `v` means every worker's updates of clocks `<= v` are applied.
//!
//! - **BSP**: a read at clock `c` must see version `>= c - 1`: every worker finished `c - 1`.
//! - **SSP(s)**: a read at clock `c` must see version `>= c - s - 1`; a worker runs at most `s`
//!   clocks ahead of the slowest. SSP(0) is BSP.
//! - **ASP**: reads never wait; updates are applied as they arrive.
//!
//! Each fills the `consistency` slot.

use concord_engine::config::RunConfig;
use concord_engine::error::{EngineError, Result};
use concord_engine::ids::Clock;
use concord_engine::ps::{ApplyMode, Consistency};
use concord_engine::strategy::{parse_options, Assembly, Registry, Slot, Strategy};
use serde::Deserialize;
use std::sync::Arc;

/// Stale synchronous parallel with slack `s` (BSP when `s = 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleSynchronous {
    /// Clocks a worker may run ahead of the slowest.
    pub slack: u64,
}

impl Consistency for StaleSynchronous {
    fn name(&self) -> String {
        if self.slack == 0 {
            "bsp".into()
        } else {
            format!("ssp(s={})", self.slack)
        }
    }
    fn min_version(&self, clock: Clock) -> Option<i64> {
        Some(clock as i64 - self.slack as i64 - 1)
    }
    fn staleness_bound(&self) -> Option<u64> {
        Some(self.slack)
    }
}

/// Asynchronous parallel: no read ever waits; updates apply on arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asynchronous;

impl Consistency for Asynchronous {
    fn name(&self) -> String {
        "asp".into()
    }
    fn min_version(&self, _clock: Clock) -> Option<i64> {
        None
    }
    fn apply_mode(&self) -> ApplyMode {
        ApplyMode::OnArrival
    }
    fn staleness_bound(&self) -> Option<u64> {
        None
    }
}

/// The `bsp` strategy.
#[derive(Debug, Default)]
pub struct Bsp;

impl Strategy for Bsp {
    fn name(&self) -> &'static str {
        "bsp"
    }
    fn summary(&self) -> &'static str {
        "Bulk synchronous parallel: a barrier per clock (Harlap thesis §2.2.3)"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Consistency]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        parse_options::<NoOptions>(self.name(), options)?;
        asm.consistency = Some(Arc::new(StaleSynchronous { slack: 0 }));
        Ok(())
    }
}

/// Options of `ssp`: `[strategy.ssp] slack = 1`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SspOptions {
    /// Clocks a worker may run ahead of the slowest; the thesis uses 1 throughout ch. 3.
    pub slack: u64,
}

impl Default for SspOptions {
    fn default() -> Self {
        SspOptions { slack: 1 }
    }
}

/// The `ssp` strategy.
#[derive(Debug, Default)]
pub struct Ssp;

impl Strategy for Ssp {
    fn name(&self) -> &'static str {
        "ssp"
    }
    fn summary(&self) -> &'static str {
        "Stale synchronous parallel: run up to `slack` clocks ahead (Harlap thesis §3.2.2)"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Consistency]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let o: SspOptions = parse_options(self.name(), options)?;
        if o.slack > 1_000_000 {
            return Err(EngineError::config(
                "strategy.ssp.slack",
                o.slack,
                "must be at most 1000000",
            ));
        }
        asm.consistency = Some(Arc::new(StaleSynchronous { slack: o.slack }));
        Ok(())
    }
}

/// The `asp` strategy.
#[derive(Debug, Default)]
pub struct Asp;

impl Strategy for Asp {
    fn name(&self) -> &'static str {
        "asp"
    }
    fn summary(&self) -> &'static str {
        "Asynchronous parallel: never wait, apply updates on arrival"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Consistency]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        parse_options::<NoOptions>(self.name(), options)?;
        asm.consistency = Some(Arc::new(Asynchronous));
        Ok(())
    }
}

/// Strategies that take no options still reject any they are given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoOptions {}

/// Adds `bsp`, `ssp` and `asp` to a registry.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Bsp))?;
    registry.register(Arc::new(Ssp))?;
    registry.register(Arc::new(Asp))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_freshness_follows_the_thesis() {
        let bsp = StaleSynchronous { slack: 0 };
        let ssp = StaleSynchronous { slack: 1 };
        assert_eq!(bsp.min_version(0), Some(-1));
        assert_eq!(bsp.min_version(5), Some(4));
        // A worker at clock c with s = 1 proceeds once everyone finished c - 2.
        assert_eq!(ssp.min_version(5), Some(3));
        assert_eq!(Asynchronous.min_version(5), None);
        assert_eq!(Asynchronous.apply_mode(), ApplyMode::OnArrival);
    }

    #[test]
    fn options_are_checked() {
        let mut asm = Assembly::default();
        let cfg = RunConfig::default();
        let bad: toml::Value = toml::from_str("slak = 2").unwrap();
        let e = Ssp
            .install(Some(&bad), &cfg, &mut asm)
            .unwrap_err()
            .to_string();
        assert!(e.contains("strategy.ssp") && e.contains("slak"), "{e}");
        let good: toml::Value = toml::from_str("slack = 3").unwrap();
        Ssp.install(Some(&good), &cfg, &mut asm).unwrap();
        assert_eq!(asm.consistency.unwrap().staleness_bound(), Some(3));
    }
}
