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
//! Each fills the `consistency` slot. The rules themselves are the engine's
//! ([`StaleSynchronous`], [`Asynchronous`], re-exported here); this crate is how a config picks one.
//! `balanced` fills the `placement` slot of the same servers: their blocks placed by size
//! ([`BalancedPlacement`]) rather than the engine's round-robin.

use concord_engine::prelude::*;
pub use concord_engine::ps::{Asynchronous, BalancedPlacement, StaleSynchronous};
use serde::Deserialize;
use std::sync::Arc;

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
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        needs_parameter_server(self.name(), asm)
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
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        needs_parameter_server(self.name(), asm)
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
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        needs_parameter_server(self.name(), asm)
    }
}

/// The `balanced` strategy: the parameter servers' blocks placed by size
/// ([`BalancedPlacement`]) instead of round-robin, so that no server holds much more than
/// another. Compose it with a consistency strategy, e.g. `["ssp", "balanced"]`.
#[derive(Debug, Default)]
pub struct Balanced;

impl Strategy for Balanced {
    fn name(&self) -> &'static str {
        "balanced"
    }
    fn summary(&self) -> &'static str {
        "Blocks placed largest first on the server holding the fewest bytes, not round-robin"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Placement]
    }
    fn install(
        &self,
        options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        parse_options::<NoOptions>(self.name(), options)?;
        asm.placement = Some(Arc::new(BalancedPlacement));
        Ok(())
    }
    fn check(&self, asm: &Assembly, _config: &RunConfig) -> Result<()> {
        needs_parameter_server(self.name(), asm)
    }
}

/// A consistency rule or a block placement only means something to the engine's parameter
/// server: a strategy that replaces the server role cannot be combined with one.
fn needs_parameter_server(name: &str, asm: &Assembly) -> Result<()> {
    match asm.owners().get(&Slot::Server) {
        Some(other) => Err(EngineError::Composition(format!(
            "`{name}` configures the engine's parameter server, but `{other}` replaces the server role; they cannot be combined"
        ))),
        None => Ok(()),
    }
}

/// Strategies that take no options still reject any they are given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoOptions {}

/// Adds `bsp`, `ssp`, `asp` and `balanced` to a registry.
pub fn register(registry: &mut Registry) -> Result<()> {
    registry.register(Arc::new(Bsp))?;
    registry.register(Arc::new(Ssp))?;
    registry.register(Arc::new(Asp))?;
    registry.register(Arc::new(Balanced))?;
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

    /// A stand-in strategy that replaces the server role.
    struct OwnServer;

    impl Strategy for OwnServer {
        fn name(&self) -> &'static str {
            "own-server"
        }
        fn summary(&self) -> &'static str {
            "test double"
        }
        fn slots(&self) -> &'static [Slot] {
            &[Slot::Server]
        }
        fn install(&self, _: Option<&toml::Value>, _: &RunConfig, _: &mut Assembly) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn consistency_without_the_parameter_server_is_an_invalid_combination() {
        let mut registry = Registry::new();
        register(&mut registry).unwrap();
        registry.register(Arc::new(OwnServer)).unwrap();
        let cfg = RunConfig {
            strategies: vec!["ssp".into(), "own-server".into()],
            ..RunConfig::default()
        };
        let e = registry.compose(&cfg).err().unwrap().to_string();
        assert!(e.contains("`ssp`") && e.contains("`own-server`"), "{e}");
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
