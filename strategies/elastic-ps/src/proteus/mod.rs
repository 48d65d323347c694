//! # Proteus: BidBrain and the spot-market cost study (Harlap thesis ch. 4)
//!
//! Proteus runs elastic ML (AgileML) on a mix of reliable on-demand and cheap, revocable spot
//! instances, and BidBrain decides which spot allocations to buy and keep by their expected
//! cost per unit of work. This module holds the market side:
//!
//! - [`market`] and [`trace`]: instance types and spot price traces, loaded from a TOML market
//!   file and a CSV trace; [`generate`]: a seeded synthetic trace;
//! - [`billing`]: the 2016 EC2 rules (hourly billing at the price of the hour's start, refund
//!   of the hour of an eviction, pro rata last hour);
//! - [`bidbrain`]: Eqs. 4.1–4.4, β estimation, acquisition and renewal, as pure functions;
//! - [`scheme`], [`study`] and [`job`]: the trace-driven comparison of on-demand, standard
//!   bidding with checkpointing or AgileML, Proteus and bidding at the market.

pub mod bidbrain;
pub mod billing;
pub mod error;
pub mod generate;
pub mod job;
pub mod market;
pub mod scheme;
pub mod study;
pub mod trace;

pub use bidbrain::{AllocView, AppParams, BetaTable};
pub use error::MarketError;
pub use generate::GeneratorParams;
pub use market::{InstanceType, Market, MarketFile, PriceTrace};
pub use scheme::{Scheme, SCHEMES};
pub use study::{JobOutcome, SchemeSummary, Study, StudyParams};
