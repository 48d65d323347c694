//! # PipeDream: pipeline-parallel training (Harlap thesis ch. 5; Narayanan et al., SOSP'19)
//!
//! The model's layers are cut into stages, each a run of consecutive layers on one or more
//! workers; minibatches flow through the stages in a pipeline.

pub mod planner;
