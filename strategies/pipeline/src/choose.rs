//! The configuration a run uses: the one the options give, or the planner's.

use crate::layout::given;
use crate::options::{Kind, PipeOptions};
use crate::planner::PipelinePlan;
use concord_engine::prelude::*;

/// The stages and replicas of `job` under `options`.
pub fn plan(job: &Job, kind: Kind, options: &PipeOptions) -> Result<PipelinePlan> {
    match given(options, job) {
        Some(p) => Ok(p),
        None => Err(EngineError::config(
            format!("{}.boundaries", kind.key()),
            "unset",
            "the planner is not wired yet",
        )),
    }
}
