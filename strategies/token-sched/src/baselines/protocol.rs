//! The baselines' messages: activations going forward and their gradients coming back (the
//! rows as a tensor payload, sized per row in throughput mode), and each worker's busy time for
//! the coordinator's figures.

use concord_engine::prelude::*;

/// Activations of one micro-batch (MP: stage to next stage; HP: a conv worker's share to the FC
/// worker), as the payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Act {
    /// The iteration.
    pub iter: u64,
    /// The micro-batch (HP: always 0).
    pub micro: u32,
    /// Rows.
    pub rows: u64,
}
impl StrategyMessage for Act {
    const TAG: &'static str = "fela-base.act";
    const BODY_IN_HEADER: bool = true;
}

/// The gradient of a micro-batch's activations going back, as the payload, with the
/// iteration's mean training loss (known once the last stage has run every micro-batch forward;
/// `None` in throughput mode) so that every worker can report it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grad {
    /// The iteration.
    pub iter: u64,
    /// The micro-batch (HP: always 0).
    pub micro: u32,
    /// Rows.
    pub rows: u64,
    /// The iteration's mean loss.
    pub loss: Option<f64>,
}
impl StrategyMessage for Grad {
    const TAG: &'static str = "fela-base.grad";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → coordinator at the end of the run: how long it computed and how long its
/// iterations took, for the bubble (idle) share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Busy {
    /// Seconds computing, over the run.
    pub busy_s: f64,
    /// Seconds of its iterations, over the run.
    pub span_s: f64,
}
impl StrategyMessage for Busy {
    const TAG: &'static str = "fela-base.busy";
    const BODY_IN_HEADER: bool = true;
}

impl Keyed for Act {
    /// `(iteration, micro-batch)`.
    type Key = (u64, u32);
    fn key(&self) -> (u64, u32) {
        (self.iter, self.micro)
    }
}
impl Keyed for Grad {
    /// `(iteration, micro-batch)`.
    type Key = (u64, u32);
    fn key(&self) -> (u64, u32) {
        (self.iter, self.micro)
    }
}
