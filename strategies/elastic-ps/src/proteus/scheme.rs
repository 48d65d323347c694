//! The bidding and elasticity schemes the cost study compares (spec §5.2).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A way of running the job on the market.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// All on-demand: the reference footprint, never evicted (relative cost 1).
    OnDemand,
    /// Standard bidding (lowest current spot price per vCPU, bid = on-demand, keep until
    /// evicted, repeat) with checkpointing: an eviction rolls back to the last checkpoint.
    StandardCheckpoint,
    /// Standard bidding with AgileML: a small on-demand allocation always held, an eviction
    /// costs λ minutes without progress.
    StandardAgileml,
    /// Proteus: BidBrain's acquisitions and renewals with AgileML.
    Proteus,
    /// Bid just above the market (the smallest delta) with AgileML: the rejected strategy
    /// that chases free computing and thrashes.
    AtMarket,
}

/// Every scheme, in report order.
pub const SCHEMES: [Scheme; 5] = [
    Scheme::OnDemand,
    Scheme::StandardCheckpoint,
    Scheme::StandardAgileml,
    Scheme::Proteus,
    Scheme::AtMarket,
];

impl Scheme {
    /// The scheme's name as written on the command line and in suite files.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::OnDemand => "on-demand",
            Scheme::StandardCheckpoint => "standard-checkpoint",
            Scheme::StandardAgileml => "standard-agileml",
            Scheme::Proteus => "proteus",
            Scheme::AtMarket => "at-market",
        }
    }

    /// Whether the scheme runs AgileML (a reliable on-demand allocation beside spot ones).
    pub fn agile(self) -> bool {
        matches!(
            self,
            Scheme::StandardAgileml | Scheme::Proteus | Scheme::AtMarket
        )
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = String;

    fn from_str(s: &str) -> Result<Scheme, String> {
        SCHEMES.into_iter().find(|x| x.name() == s).ok_or_else(|| {
            let names: Vec<&str> = SCHEMES.iter().map(|x| x.name()).collect();
            format!("unknown scheme `{s}`; one of {}", names.join(", "))
        })
    }
}
