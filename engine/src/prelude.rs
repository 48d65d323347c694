//! What a strategy crate imports: the contract, the role context, ids, messages, payloads, errors
//! and the building blocks roles are written with.
//!
//! ```
//! use concord_engine::prelude::*;
//! ```

pub use crate::config::RunConfig;
pub use crate::context::{IterSpan, RoleContext, RuntimeKind, StepPart, Work};
pub use crate::contract::{
    ApplyMode, Assembly, Consistency, Coordinator, CoordinatorFactory, CoordinatorReport, Keyed,
    MemoryPolicy, MemoryPolicyFactory, ModelState, Placement, ReadRecord, RoleCheckpoint,
    RoleState, Server, ServerFactory, ServerReport, Slot, Straggler, Strategy, StrategyMessage,
    Worker, WorkerFactory, WorkerReport,
};
pub use crate::dp::{
    check_loss, close_clock, hold_optimizer_state, hold_replica, read_wait_and_transfer,
    train_step, train_step_on_device, Charge, ClockTally, ParamSource, StepAt, StepResult,
};
pub use crate::error::{EngineError, Result};
pub use crate::ids::{Clock, MachineId, RoleId, ServerId, WorkerId};
pub use crate::job::Job;
pub use crate::message::{CustomMessage, Directive, Message, Report};
pub use crate::metrics::IterRecord;
pub use crate::payload::{BlockId, BlockPayload, Payload};
pub use crate::registry::{parse_options, Registry};
pub use crate::serve::{serve, unexpected, ServerHandler};
pub use crate::transport::Envelope;
pub use async_trait::async_trait;
pub use serde::{Deserialize, Serialize};
