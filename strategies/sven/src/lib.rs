//! Sven (Yang, ch. 6): communication-efficient training of DLRM-style click-through-rate models
//! on heterogeneous clusters.

#![warn(missing_docs)]

pub mod placement;
pub mod schedule;
