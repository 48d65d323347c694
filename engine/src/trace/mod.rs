//! Role timelines (Chrome traces): how much of them a run keeps ([`TraceMode`], the `trace`
//! config key), which part `sampled` keeps ([`Sampling`]), and where they go ([`Recorder`]): kept
//! in memory for the caller, or streamed to `<dir>/<role>.json` while the run goes, so a large
//! run never holds its timelines in memory.

mod chrome;
mod recorder;
mod sample;

pub use chrome::{write_chrome_trace, ChromeWriter};
pub use recorder::{timeline_file, Recorder, TracePlan};
pub use sample::{message_clock, Sampling};

use serde::{Deserialize, Serialize};

/// How much of each role's timeline a run keeps (`trace = "full" | "sampled" | "off"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceMode {
    /// Every event of every role: one file per role (the default, what small runs want).
    #[default]
    Full,
    /// A bounded, deterministic subset, whatever the run's length and worker count: the rule is
    /// [`Sampling`]'s.
    Sampled,
    /// No timeline at all: no events kept, no trace files.
    Off,
}
