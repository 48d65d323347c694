//! Helpers shared by the pattern modules: the range checks their `validate` uses, role
//! filters, serde defaults used by more than one pattern, the inert instance, and the
//! "first progress-0 probe" test of the patterns that sleep before an iteration.

use crate::{Effect, Probe, Straggler, StragglerError};

/// Range checks shared by the patterns' `validate`; errors name the pattern, the field, the
/// value and what is allowed.
pub(crate) struct Check {
    /// Pattern tag, e.g. `slow-worker`.
    pattern: &'static str,
}

impl Check {
    /// Checks for the pattern tagged `pattern`.
    pub(crate) fn new(pattern: &'static str) -> Self {
        Check { pattern }
    }

    /// An [`StragglerError::InvalidField`] for `field` = `value`, saying what is `allowed`.
    pub(crate) fn err(
        &self,
        field: &'static str,
        value: impl std::fmt::Display,
        allowed: &str,
    ) -> StragglerError {
        StragglerError::InvalidField {
            pattern: self.pattern,
            field,
            value: value.to_string(),
            allowed: allowed.to_string(),
        }
    }

    /// `v` is a probability in `[0, 1]`.
    pub(crate) fn prob(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if (0.0..=1.0).contains(&v) {
            Ok(())
        } else {
            Err(self.err(field, v, "a probability in [0, 1]"))
        }
    }

    /// `v` is finite and `>= 0`.
    pub(crate) fn nonneg(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(self.err(field, v, "a finite value >= 0"))
        }
    }

    /// `v` is finite and `> 0`.
    pub(crate) fn pos(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(self.err(field, v, "a finite value > 0"))
        }
    }

    /// `v` is a load share in `[0, 1)`.
    pub(crate) fn load(&self, field: &'static str, v: f64) -> Result<(), StragglerError> {
        if (0.0..1.0).contains(&v) {
            Ok(())
        } else {
            Err(self.err(field, v, "a load share in [0, 1) (1 would stop the worker)"))
        }
    }
}

/// Whether `index` passes a `workers` / `servers` / `machines` filter (None = all).
pub(crate) fn in_filter(filter: &Option<Vec<u32>>, index: u32) -> bool {
    filter.as_ref().is_none_or(|list| list.contains(&index))
}

/// Serde default 0.5.
pub(crate) fn d_half() -> f64 {
    0.5
}

/// Serde default 1.0.
pub(crate) fn d_one() -> f64 {
    1.0
}

/// The always-NONE instance for roles a pattern does not touch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Inert;

impl Straggler for Inert {
    fn effect(&mut self, _probe: &Probe) -> Effect {
        Effect::NONE
    }
}

/// Tolerance for "progress 0".
const START_EPS: f64 = 1e-9;

/// Whether this probe is the first progress-0 probe of its iteration; records it. Sleeps
/// before an iteration are reported there, once.
pub(crate) fn first_start_probe(last_iter: &mut Option<u64>, p: &Probe) -> bool {
    if p.progress > START_EPS || *last_iter == Some(p.iter) {
        return false;
    }
    *last_iter = Some(p.iter);
    true
}
