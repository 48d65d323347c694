//! The straggler patterns, one module each: the pattern's serde config, its validation, its
//! build, and the per-role runtime instance implementing [`Straggler`](crate::Straggler).

pub(crate) mod bandwidth_rotation;
pub(crate) mod contention;
pub(crate) mod csv_trace;
pub(crate) mod disrupted_machine;
pub(crate) mod jitter;
pub(crate) mod persistent;
pub(crate) mod power_law;
pub(crate) mod probabilistic_sleep;
pub(crate) mod random_slowdown;
pub(crate) mod round_robin_sleep;
pub(crate) mod server_markov;
pub(crate) mod slow_server;
pub(crate) mod slow_worker;
pub(crate) mod trace_like;
pub(crate) mod uniform_delay;
pub(crate) mod variable_length;

pub use bandwidth_rotation::BandwidthRotationConfig;
pub use contention::ContentionConfig;
pub use csv_trace::CsvTraceConfig;
pub use disrupted_machine::DisruptedMachineConfig;
pub use jitter::{JitterConfig, JitterRoles};
pub use persistent::{PersistentConfig, Uneven};
pub use power_law::PowerLawConfig;
pub use probabilistic_sleep::ProbabilisticSleepConfig;
pub use random_slowdown::RandomSlowdownConfig;
pub use round_robin_sleep::RoundRobinSleepConfig;
pub use server_markov::ServerMarkovConfig;
pub use slow_server::SlowServerConfig;
pub use slow_worker::{SlowLength, SlowWorkerConfig};
pub use trace_like::TraceLikeConfig;
pub use uniform_delay::UniformDelayConfig;
pub use variable_length::VariableLengthConfig;
