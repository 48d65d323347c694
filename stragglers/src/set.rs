//! [`StragglerSet`]: every pattern of a run's list, built and composed for one role.

use crate::rng::pattern_seed;
use crate::{Effect, Probe, ResourceSignals, RoleKind, Straggler, StragglerConfig, StragglerError};

/// Several patterns composed for one role (effects compose with [`Effect::then`]).
///
/// The `i`-th config is built with a seed derived from `(seed, i)`, so two patterns of the
/// same kind in one list draw independently while every role still agrees on each pattern's
/// draws. Patterns that do not apply to the role are dropped.
#[derive(Debug, Default)]
pub struct StragglerSet {
    items: Vec<Box<dyn Straggler>>,
}

impl StragglerSet {
    /// Validates and builds every applicable pattern of `configs` for the role.
    pub fn build(
        configs: &[StragglerConfig],
        seed: u64,
        kind: RoleKind,
        index: u32,
        machine: u32,
    ) -> Result<Self, StragglerError> {
        let mut items = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            config.validate()?;
            if config.applies_to(kind, index, machine) {
                items.push(config.build(pattern_seed(seed, i), kind, index, machine)?);
            }
        }
        Ok(StragglerSet { items })
    }

    /// The composed effect of every pattern for this probe (NONE for an empty set).
    pub fn effect(&mut self, p: &Probe) -> Effect {
        self.items
            .iter_mut()
            .fold(Effect::NONE, |acc, s| acc.then(s.effect(p)))
    }

    /// Combined resource signals: `None` if no pattern reports any; otherwise shares combine
    /// as independent competitors, `1 − Π(1 − xᵢ)`, for both `cpu` and `mem`.
    pub fn signals(&mut self, p: &Probe) -> Option<ResourceSignals> {
        let mut out: Option<(f64, f64)> = None;
        for s in &mut self.items {
            if let Some(sig) = s.signals(p) {
                let (fc, fm) = out.unwrap_or((1.0, 1.0));
                out = Some((fc * (1.0 - sig.cpu), fm * (1.0 - sig.mem)));
            }
        }
        out.map(|(fc, fm)| ResourceSignals {
            cpu: 1.0 - fc,
            mem: 1.0 - fm,
        })
    }

    /// Every pattern's own state, in list order, for a checkpoint (see [`Straggler::save`]).
    pub fn save(&self) -> Vec<Option<serde_json::Value>> {
        self.items.iter().map(|s| s.save()).collect()
    }

    /// Restores what [`StragglerSet::save`] returned from a set built from the same configs.
    pub fn restore(&mut self, states: &[Option<serde_json::Value>]) -> Result<(), StragglerError> {
        if states.len() != self.items.len() {
            return Err(StragglerError::State(format!(
                "a checkpoint holds {} pattern states for a role with {} patterns",
                states.len(),
                self.items.len()
            )));
        }
        for (item, state) in self.items.iter_mut().zip(states) {
            if let Some(state) = state {
                item.restore(state)?;
            }
        }
        Ok(())
    }

    /// True when no pattern applies to this role (it is never slowed).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Number of applicable patterns.
    pub fn len(&self) -> usize {
        self.items.len()
    }
}
