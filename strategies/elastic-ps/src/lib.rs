//! # Elastic parameter servers (004_3d04b63091f008e9.txt)
//!
//! PSLD load distribution over the engine's parameter servers.

#![warn(missing_docs)]

pub mod assign;
pub mod psld;
pub mod telemetry;
