//! Loading a run configuration from its layers: built-in defaults < file < `CONCORD_*`
//! environment < `--set key=value`.

use concord_engine::config::RunConfig;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a configuration could not be loaded.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The config file does not exist or cannot be read.
    #[error("config file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A `--set` argument is not `key=value`.
    #[error(
        "--set {arg:?}: expected key=value, e.g. --set workers=4 or --set strategy.ssp.slack=2"
    )]
    BadSet {
        /// The argument.
        arg: String,
    },
    /// A key is unknown, or a value has the wrong type (figment names the key and the source).
    #[error("config: {0}")]
    Invalid(String),
    /// A value is out of range, or the model/data/cluster sections are inconsistent.
    #[error(transparent)]
    Engine(#[from] concord_engine::EngineError),
}

/// Parses a `--set` value as TOML (numbers, booleans, arrays, inline tables); anything else is a string.
fn parse_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Builds the layered configuration and validates it.
pub fn load(file: Option<&Path>, sets: &[String]) -> Result<RunConfig, ConfigError> {
    let mut fig = Figment::from(Serialized::defaults(RunConfig::default()));
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        // Parse first so a syntax error names the file, line and column.
        text.parse::<toml::Table>().map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        fig = fig.merge(Toml::file(path));
    }
    fig = fig.merge(Env::prefixed("CONCORD_").split("__"));
    for arg in sets {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| ConfigError::BadSet { arg: arg.clone() })?;
        let key = key.trim();
        if key.is_empty() {
            return Err(ConfigError::BadSet { arg: arg.clone() });
        }
        fig = fig.merge(Serialized::default(key, parse_value(value.trim())));
    }
    let config: RunConfig = fig.extract().map_err(|e| {
        let mut msgs: Vec<String> = e.into_iter().map(|e| e.to_string()).collect();
        msgs.dedup();
        ConfigError::Invalid(msgs.join("; "))
    })?;
    config.validate()?;
    Ok(config)
}

/// The resolved configuration as TOML (what `concord config` prints).
pub fn to_toml(config: &RunConfig) -> String {
    toml::to_string_pretty(config).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
}
