//! Suite files (`bench/<name>.toml`): their schema, loading, checking, and expansion into cells.
//!
//! A suite is strategies × scenarios × seeds. Each scenario may sweep one config key over a list
//! of values, which turns it into one scenario per value. A cell's run configuration is built by
//! layering TOML tables (see [`schema::Suite::cells`]) and deserializing the result into
//! [`concord_engine::config::RunConfig`], so every key the engine accepts can be set from a
//! suite, and a strategy added to the registry later is benchmarked by naming it here, with no
//! change to the bench code.
//!
//! Layers, each file using only those above it in this list:
//! - [`schema`] — the file's types, as deserialized;
//! - [`metrics`] — the metric names a claim can use;
//! - [`toml_tables`] — merging tables and setting dotted keys;
//! - [`validate`] — checks beyond the schema (labels, claims, trends, targets, sweeps);
//! - [`load`] — where suite files are, and reading one into a checked [`schema::Suite`];
//! - [`expand`] — sweeps into scenarios, scenarios into cells with resolved configs.

pub mod expand;
pub mod load;
pub mod metrics;
pub mod schema;
pub mod toml_tables;
pub mod validate;
