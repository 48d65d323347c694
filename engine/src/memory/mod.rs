//! Device memory: the [`MemoryPolicy`] seam, the accounting ledger it charges, the events it sees
//! and the transfers it asks for. The trait is re-exported by [`crate::contract`].
//!
//! Every device has a budget. Roles report what they allocate and free (parameters, gradients,
//! optimizer state, activations) as [`MemEvent`]s; the device's policy decides where each tensor
//! lives (resident, offloaded, prefetched, dropped) and charges the ledger. Going over the budget
//! is a clear simulated out-of-memory error.

pub mod alloc;
pub mod lanes;
pub mod layers;

use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a tensor is, for accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TensorClass {
    /// Model parameters.
    Params,
    /// Parameter gradients.
    Grads,
    /// Optimizer state.
    OptimizerState,
    /// Activations kept for backward.
    Activations,
    /// Communication and aggregation buffers.
    Buffers,
}

/// The byte ledger of one device.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryLedger {
    /// Device label for errors.
    pub device: String,
    /// Owning role for errors.
    pub role: RoleId,
    /// Budget in bytes.
    pub budget: u64,
    /// Resident bytes per class.
    pub resident: BTreeMap<TensorClass, u64>,
    /// Highest total ever resident.
    pub peak: u64,
}

impl MemoryLedger {
    /// An empty ledger with a budget.
    pub fn new(device: String, role: RoleId, budget: u64) -> MemoryLedger {
        MemoryLedger {
            device,
            role,
            budget,
            resident: BTreeMap::new(),
            peak: 0,
        }
    }

    /// Total resident bytes.
    pub fn total(&self) -> u64 {
        self.resident.values().sum()
    }

    /// Makes `bytes` of `class` resident; out-of-memory if the budget would be exceeded.
    pub fn alloc(&mut self, class: TensorClass, bytes: u64, what: &str) -> Result<()> {
        let needed = self.total() + bytes;
        if needed > self.budget {
            return Err(EngineError::OutOfMemory {
                device: self.device.clone(),
                role: self.role,
                needed,
                budget: self.budget,
                what: what.to_string(),
            });
        }
        *self.resident.entry(class).or_default() += bytes;
        self.peak = self.peak.max(needed);
        Ok(())
    }

    /// Releases `bytes` of `class`.
    pub fn free(&mut self, class: TensorClass, bytes: u64) {
        let e = self.resident.entry(class).or_default();
        *e = e.saturating_sub(bytes);
    }
}

/// Something that happens to device memory during a step.
#[derive(Clone, Debug, PartialEq)]
pub enum MemEvent {
    /// A long-lived tensor is created (parameters, gradients, optimizer state, buffers).
    Allocate {
        /// Class.
        class: TensorClass,
        /// Bytes.
        bytes: u64,
        /// Label for errors.
        what: String,
    },
    /// A long-lived tensor is released.
    Release {
        /// Class.
        class: TensorClass,
        /// Bytes.
        bytes: u64,
    },
    /// Stage `stage` ran forward and produced `bytes` of activations kept for backward.
    Forward {
        /// Stage index.
        stage: usize,
        /// Activation bytes for the whole batch.
        bytes: u64,
    },
    /// Stage `stage` ran backward; its activations (`bytes`) are no longer needed.
    Backward {
        /// Stage index.
        stage: usize,
        /// Activation bytes for the whole batch.
        bytes: u64,
    },
}

/// A data movement a policy asks for, which costs time on the host link.
#[derive(Clone, Debug, PartialEq)]
pub enum MemAction {
    /// Copy `bytes` from device to host.
    Offload {
        /// Bytes moved.
        bytes: u64,
    },
    /// Copy `bytes` from host to device.
    Prefetch {
        /// Bytes moved.
        bytes: u64,
    },
}

/// Decides where each tensor of one device lives (resident, offloaded, prefetched, dropped),
/// under the device's budget. Every role has one, reached through its context
/// ([`RoleContext::memory_event`](crate::context::RoleContext::memory_event)); it charges the role's [`MemoryLedger`] and returns the
/// transfers it needs, which the context charges on the host link.
///
/// ```
/// use concord_engine::prelude::*;
/// use concord_engine::memory::{MemAction, MemEvent, MemoryLedger, TensorClass};
///
/// /// Keeps everything resident and accounts it.
/// struct Resident;
///
/// impl MemoryPolicy for Resident {
///     fn name(&self) -> String {
///         "resident".into()
///     }
///     fn on_event(&mut self, event: &MemEvent, ledger: &mut MemoryLedger) -> Result<Vec<MemAction>> {
///         match event {
///             MemEvent::Allocate { class, bytes, what } => ledger.alloc(*class, *bytes, what)?,
///             MemEvent::Release { class, bytes } => ledger.free(*class, *bytes),
///             MemEvent::Forward { bytes, .. } => {
///                 ledger.alloc(TensorClass::Activations, *bytes, "activations")?
///             }
///             MemEvent::Backward { bytes, .. } => ledger.free(TensorClass::Activations, *bytes),
///         }
///         Ok(Vec::new())
///     }
/// }
/// ```
pub trait MemoryPolicy: Send {
    /// Short name for reports.
    fn name(&self) -> String;
    /// Handles one event: updates the ledger and returns the transfers it requires.
    fn on_event(&mut self, event: &MemEvent, ledger: &mut MemoryLedger) -> Result<Vec<MemAction>>;

    /// A layer-granular policy's swapping decisions and the allocator it places tensors with.
    /// With them, every training iteration of a model that has an operator graph runs through
    /// the two-lane executor ([`lanes::run_iteration`]) instead of the per-stage
    /// [`MemEvent::Forward`]/[`MemEvent::Backward`] events. `None` (the default): per-stage
    /// accounting only.
    fn layered(&mut self) -> Option<Layered<'_>> {
        None
    }
}

/// What a layer-granular memory policy runs iterations with ([`MemoryPolicy::layered`]).
pub struct Layered<'p> {
    /// Its swapping decisions.
    pub policy: &'p mut dyn layers::LayerPolicy,
    /// Its allocator.
    pub allocator: &'p mut dyn alloc::DeviceAllocator,
    /// How its pool is sized. `Some(β)`: from the first iteration, which runs in the device's
    /// free memory, to that iteration's high-water mark plus β bytes, grown by β after an
    /// iteration that does not fit (Dymem, thesis §4.1.3.3); the pool is reserved on the device,
    /// so charged whole. `None`: the pool is the device's free memory, and an iteration is
    /// charged its high-water mark.
    pub pool_reserve: Option<u64>,
}

/// One role's device memory: its policy and the ledger the policy charges. The role reaches it
/// through its context ([`crate::context::RoleContext::memory_event`]).
pub struct DeviceMemory {
    policy: Box<dyn MemoryPolicy>,
    ledger: MemoryLedger,
    /// The sized pool of a policy that sizes one, once an iteration has run.
    pool: Option<u64>,
    /// Iterations that did not fit the sized pool and ran again in a larger one.
    pool_failures: u64,
}

impl DeviceMemory {
    /// `policy` over an empty ledger of `budget` bytes on `device`, owned by `role`.
    pub fn new(
        policy: Box<dyn MemoryPolicy>,
        device: String,
        role: RoleId,
        budget: u64,
    ) -> DeviceMemory {
        DeviceMemory {
            policy,
            ledger: MemoryLedger::new(device, role, budget),
            pool: None,
            pool_failures: 0,
        }
    }

    /// Feeds `event` to the policy; returns the bytes it moves over the host link.
    pub fn event(&mut self, event: &MemEvent) -> Result<u64> {
        let actions = self.policy.on_event(event, &mut self.ledger)?;
        Ok(actions
            .iter()
            .map(|a| match a {
                MemAction::Offload { bytes } | MemAction::Prefetch { bytes } => *bytes,
            })
            .sum())
    }

    /// Runs one training iteration layer by layer when the policy is layer-granular
    /// ([`MemoryPolicy::layered`]): its allocator gets what the long-lived tensors leave of the
    /// budget, and the iteration's high-water mark is charged to the ledger as activations.
    /// `None` for a policy that is not layer-granular; an out-of-memory error when the iteration
    /// does not fit.
    pub fn iteration(
        &mut self,
        iteration: &layers::IterationGraph<'_>,
        link: lanes::HostLink,
    ) -> Result<Option<lanes::IterationReport>> {
        let resident = self.ledger.total();
        let free = self.ledger.budget.saturating_sub(resident);
        let Some(layered) = self.policy.layered() else {
            return Ok(None);
        };
        let sizing = layered.pool_reserve;
        let mut capacity = self.pool.map_or(free, |p| p.min(free));
        let mut report = loop {
            layered.allocator.reset(capacity);
            match lanes::run_iteration(iteration, layered.policy, layered.allocator, link) {
                Ok(report) => break report,
                // A sized pool too small for this iteration: the thesis restarts the iteration
                // with β more (with β = 0, with all the free memory).
                Err(lanes::LaneError::OutOfMemory { .. }) if capacity < free => {
                    self.pool_failures += 1;
                    capacity = match sizing {
                        Some(beta) if beta > 0 => capacity.saturating_add(beta).min(free),
                        _ => free,
                    };
                    self.pool = Some(capacity);
                }
                Err(e) => {
                    return Err(match &e {
                        lanes::LaneError::OutOfMemory { source, .. } => EngineError::OutOfMemory {
                            device: self.ledger.device.clone(),
                            role: self.ledger.role,
                            needed: resident + source.used + source.bytes,
                            budget: self.ledger.budget,
                            what: e.to_string(),
                        },
                        lanes::LaneError::Policy { .. } => {
                            EngineError::protocol(self.ledger.role, e.to_string())
                        }
                    })
                }
            }
        };
        let charged = match sizing {
            Some(beta) => {
                let pool = *self
                    .pool
                    .get_or_insert(report.high_water.saturating_add(beta).min(free));
                report.figures_extra.push(("pool_bytes", pool as f64));
                report
                    .figures_extra
                    .push(("pool_failures", self.pool_failures as f64));
                pool
            }
            None => report.high_water,
        };
        let what = format!("activations under {}", report.policy);
        self.ledger
            .alloc(TensorClass::Activations, charged, &what)?;
        self.ledger.free(TensorClass::Activations, charged);
        Ok(Some(report))
    }

    /// The highest total ever resident, in bytes.
    pub fn peak(&self) -> u64 {
        self.ledger.peak
    }

    /// The policy's name.
    pub fn policy_name(&self) -> String {
        self.policy.name()
    }
}

/// Everything resident, every byte accounted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resident;

impl MemoryPolicy for Resident {
    fn name(&self) -> String {
        "resident".into()
    }

    fn on_event(&mut self, event: &MemEvent, ledger: &mut MemoryLedger) -> Result<Vec<MemAction>> {
        match event {
            MemEvent::Allocate { class, bytes, what } => ledger.alloc(*class, *bytes, what)?,
            MemEvent::Release { class, bytes } => ledger.free(*class, *bytes),
            MemEvent::Forward { stage, bytes } => ledger.alloc(
                TensorClass::Activations,
                *bytes,
                &format!("activations of stage {stage}"),
            )?,
            MemEvent::Backward { bytes, .. } => ledger.free(TensorClass::Activations, *bytes),
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
impl DeviceMemory {
    /// [`Resident`] over a ledger with no budget: for tests that build contexts by hand.
    pub(crate) fn unbounded(role: RoleId) -> DeviceMemory {
        DeviceMemory::new(Box::new(Resident), "test".into(), role, u64::MAX)
    }
}
