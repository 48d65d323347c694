//! The strategies a build knows, and their composition from config.
//!
//! A strategy ([`Strategy`]) claims one or more [`Slot`]s of a run and installs its parts into an
//! [`Assembly`] (all three are defined in [`crate::contract`]). A run is assembled from the
//! strategies the config names, in order; a slot no strategy claims keeps the engine's default (or
//! the registry's default strategy for that slot). Two strategies claiming one slot, an unknown
//! name, or an invalid combination is an error at start-up, before any work.

use crate::config::RunConfig;
use crate::contract::{Assembly, Slot, Strategy};
use crate::error::{EngineError, Result};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Parses a strategy's options table with `serde` (unknown keys rejected by the type), naming the
/// strategy in errors. Absent options give the type's default.
pub fn parse_options<T: DeserializeOwned + Default>(
    strategy: &str,
    options: Option<&toml::Value>,
) -> Result<T> {
    match options {
        None => Ok(T::default()),
        Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| {
            EngineError::config(
                format!("strategy.{strategy}"),
                v.to_string().trim(),
                e.message().to_string(),
            )
        }),
    }
}

/// The named strategies a build knows, and which one fills a slot nobody claims.
#[derive(Default, Clone)]
pub struct Registry {
    strategies: BTreeMap<&'static str, Arc<dyn Strategy>>,
    defaults: BTreeMap<Slot, &'static str>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a strategy; a second strategy with the same name is an error.
    pub fn register(&mut self, strategy: Arc<dyn Strategy>) -> Result<&mut Registry> {
        let name = strategy.name();
        if self.strategies.insert(name, strategy).is_some() {
            return Err(EngineError::Composition(format!(
                "two strategies are registered as `{name}`"
            )));
        }
        Ok(self)
    }

    /// Makes `name` fill `slot` when no configured strategy claims it.
    pub fn set_default(&mut self, slot: Slot, name: &'static str) -> &mut Registry {
        self.defaults.insert(slot, name);
        self
    }

    /// Registered strategies, by name.
    pub fn strategies(&self) -> impl Iterator<Item = &Arc<dyn Strategy>> {
        self.strategies.values()
    }

    fn lookup(&self, name: &str, key: &str) -> Result<&Arc<dyn Strategy>> {
        self.strategies.get(name).ok_or_else(|| {
            EngineError::config(
                key,
                format!("\"{name}\""),
                format!("unknown strategy; known: {}", self.known()),
            )
        })
    }

    /// The names of every registered strategy, for errors that list them.
    fn known(&self) -> String {
        self.strategies
            .keys()
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn install(&self, s: &Arc<dyn Strategy>, config: &RunConfig, asm: &mut Assembly) -> Result<()> {
        for &slot in s.slots() {
            if let Some(other) = asm.owners.get(&slot) {
                return Err(EngineError::Composition(format!(
                    "`{other}` and `{}` both claim the {slot} slot; pick one",
                    s.name()
                )));
            }
        }
        s.install(config.strategy.get(s.name()), config, asm)?;
        for &slot in s.slots() {
            asm.owners.insert(slot, s.name().to_string());
        }
        asm.names.push(s.name().to_string());
        if let Err(reason) = s.resumes() {
            asm.not_resumable.push((s.name().to_string(), reason));
        }
        Ok(())
    }

    /// Assembles a run from `config.strategies` (and `config.memory`), then the defaults.
    pub fn compose(&self, config: &RunConfig) -> Result<Assembly> {
        let mut asm = Assembly::default();
        let mut installed = Vec::new();
        for (i, name) in config.strategies.iter().enumerate() {
            let s = self.lookup(name, &format!("strategies[{i}]"))?;
            if installed
                .iter()
                .any(|x: &Arc<dyn Strategy>| x.name() == s.name())
            {
                return Err(EngineError::config(
                    format!("strategies[{i}]"),
                    format!("\"{name}\""),
                    "listed twice",
                ));
            }
            self.install(s, config, &mut asm)?;
            installed.push(s.clone());
        }
        if let Some(name) = &config.memory {
            let s = self.lookup(name, "memory")?;
            if !s.slots().contains(&Slot::Memory) {
                return Err(EngineError::config(
                    "memory",
                    format!("\"{name}\""),
                    "is not a memory policy",
                ));
            }
            self.install(s, config, &mut asm)?;
            installed.push(s.clone());
        }
        // Options of a known strategy that is not composed are kept for a later switch (reported
        // through `Assembly::unused_options`); options under a name no strategy has are a typo.
        for key in config.strategy.keys() {
            if installed.iter().any(|s| s.name() == key) {
                continue;
            }
            if !self.strategies.contains_key(key.as_str()) {
                return Err(EngineError::config(
                    format!("strategy.{key}"),
                    "(table)",
                    format!(
                        "options for `{key}`, but no strategy has that name; known: {}",
                        self.known()
                    ),
                ));
            }
            asm.unused_options.push(key.clone());
        }
        for (&slot, &name) in &self.defaults {
            if !asm.owners.contains_key(&slot) {
                let s = self.lookup(name, &format!("default for the {slot} slot"))?;
                if s.slots().iter().all(|x| !asm.owners.contains_key(x)) {
                    self.install(s, config, &mut asm)?;
                    installed.push(s.clone());
                }
            }
        }
        for s in &installed {
            s.check(&asm, config)?;
        }
        Ok(asm)
    }
}
