//! Loading a run configuration from its layers: built-in defaults < file < `CONCORD_*`
//! environment < `--set key=value`.

mod layer;
mod origin;

use concord_engine::config::RunConfig;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Provider;
use layer::Layer;
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
    /// A value is out of range; `layer` says which layer set it (the built-in defaults, the
    /// file, a `CONCORD_*` variable or `--set`).
    #[error("{source} (set by {layer})")]
    Range {
        /// What is wrong, naming the key and the allowed values.
        source: Box<concord_engine::EngineError>,
        /// The layer that set the key.
        layer: String,
    },
}

/// Parses a `--set` value as TOML (numbers, booleans, arrays, inline tables); anything else is a string.
fn parse_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// The `--set key=value` arguments as one TOML document (`a.b = v` nests into tables), so that
/// figment reports them as their own layer.
fn sets_as_toml(overrides: Vec<(String, toml::Value)>) -> String {
    let mut root = toml::Table::new();
    for (key, value) in overrides {
        let parts: Vec<&str> = key.split('.').collect();
        let mut table = &mut root;
        for part in &parts[..parts.len() - 1] {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            table = match entry {
                toml::Value::Table(t) => t,
                _ => unreachable!("just made a table"),
            };
        }
        table.insert(parts[parts.len() - 1].to_string(), value);
    }
    toml::to_string(&root).unwrap_or_default()
}

/// How figment names the `--set` layer (a TOML string provider).
const SET_LAYER: &str = "TOML source string";

/// Sections that are tagged by `kind`: a layer that switches the kind starts the section afresh
/// from the new kind's defaults instead of merging into the keys of the old kind.
const KINDED_SECTIONS: [&str; 3] = ["model", "data", "optimizer"];

/// A configuration with the layers it was merged from: errors found after loading (a strategy's
/// options, checked when the strategies are composed) can name the layer that set the value.
pub struct Sourced {
    /// The configuration.
    pub config: RunConfig,
    origins: origin::Origins,
}

impl Sourced {
    /// `error`, found in this configuration after it was loaded, with the layer that set the
    /// offending key when it names one.
    pub fn attribute(&self, error: concord_engine::EngineError) -> ConfigError {
        self.origins.attribute(error)
    }

    /// The layer that set `key` (a dotted path such as `strategy.ssp`), in the words errors use:
    /// "the file …", "--set", "the environment variable …" or the defaults.
    pub fn layer_of(&self, key: &str) -> String {
        self.origins.of(key)
    }
}

/// Builds the layered configuration and validates it.
pub fn load(file: Option<&Path>, sets: &[String]) -> Result<RunConfig, ConfigError> {
    load_sourced(file, sets).map(|s| s.config)
}

/// [`load`], keeping the layers for later errors ([`Sourced::attribute`]).
pub fn load_sourced(file: Option<&Path>, sets: &[String]) -> Result<Sourced, ConfigError> {
    let mut layers = vec![Layer::read(Serialized::defaults(RunConfig::default()))];
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        // Parse first so a syntax error names the file, line and column.
        let table = text.parse::<toml::Table>().map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if let Some(reason) = other_kind_of_file(&table, path) {
            return Err(ConfigError::File {
                path: path.to_path_buf(),
                reason,
            });
        }
        layers.push(Layer::read(Toml::file(path)));
    }
    with_overrides(layers, sets)
}

/// What `table` is instead, and the command that reads it, when it is one of the project's
/// other TOML files rather than a run config (a spot market, a bench suite): their keys would
/// otherwise be reported one by one as unknown fields.
fn other_kind_of_file(table: &toml::Table, path: &Path) -> Option<String> {
    let has = |key: &str| table.contains_key(key);
    if has("trace") && has("types") {
        return Some(format!(
            "a spot market (its `trace` and `[[types]]`), not a run config: study it with \
             `concord market --market {}`",
            path.display()
        ));
    }
    if has("scenarios")
        && table.get("strategies").is_some_and(|s| {
            s.as_array()
                .is_some_and(|a| a.iter().any(toml::Value::is_table))
        })
    {
        let suite = path.file_stem().map_or_else(
            || "<name>".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        return Some(format!(
            "a bench suite (its `[[scenarios]]` and `[[strategies]]`), not a run config: a suite \
             in `bench/` runs with `cargo xtask bench --suite {suite}`"
        ));
    }
    None
}

/// The configuration of a run resumed from a checkpoint: the resolved configuration the run was
/// written under (`base`, TOML), then the `CONCORD_*` environment and `--set` layers.
pub fn load_resumed(base: &str, sets: &[String]) -> Result<Sourced, ConfigError> {
    let layers = vec![
        Layer::read(Serialized::defaults(RunConfig::default())),
        Layer::read(Toml::string(base)),
    ];
    with_overrides(layers, sets)
}

/// Adds the environment and `--set` layers to `layers` (the first of which are the built-in
/// defaults), merges and validates.
fn with_overrides(mut layers: Vec<Layer>, sets: &[String]) -> Result<Sourced, ConfigError> {
    let defaults_name = Serialized::defaults(RunConfig::default())
        .metadata()
        .name
        .to_string();
    // `CONCORD_JOB_ID` and `CONCORD_TOKEN` name a process job, not config keys.
    layers.push(Layer::read(
        Env::prefixed("CONCORD_")
            .ignore(&["job_id", "token"])
            .split("__"),
    ));
    let mut overrides = Vec::new();
    for arg in sets {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| ConfigError::BadSet { arg: arg.clone() })?;
        let key = key.trim();
        if key.split('.').any(|part| part.trim().is_empty()) {
            return Err(ConfigError::BadSet { arg: arg.clone() });
        }
        overrides.push((key.to_string(), parse_value(value.trim())));
    }
    layers.push(Layer::read(Toml::string(&sets_as_toml(overrides))));

    layer::restart_switched_kinds(&mut layers, &KINDED_SECTIONS);
    let figment = layer::merged(&layers);
    let config: RunConfig = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(describe(e, &figment)))?;
    let origins = origin::Origins::new(figment, defaults_name);
    match config.validate() {
        Ok(()) => Ok(Sourced { config, origins }),
        Err(e) => Err(origins.attribute(e)),
    }
}

/// One line per problem: what is wrong, at which key, in which layer.
fn describe(error: figment::Error, figment: &figment::Figment) -> String {
    let mut lines: Vec<String> = error
        .into_iter()
        .map(|e| {
            let mut key = e.path.join(".");
            if let Some(field) = kinded_field(&e, figment) {
                key = format!("{key}.{field}");
            }
            let origin = e.metadata.as_ref().map_or_else(
                || "built-in defaults".to_string(),
                |m| match &m.source {
                    Some(figment::Source::File(p)) => p.display().to_string(),
                    _ if m.name == SET_LAYER => "--set arguments".to_string(),
                    _ => m.name.to_string(),
                },
            );
            let kind = kind_text(&e.kind);
            if key.is_empty() {
                format!("{kind} (in {origin})")
            } else {
                format!("key `{key}`: {kind} (in {origin})")
            }
        })
        .collect();
    lines.dedup();
    lines.join("; ")
}

/// The field of a kinded section (`[model]`, `[data]`, `[optimizer]`: tables whose `kind` picks
/// what the other keys mean) that `error` is about, where the error names only the section:
/// serde reads such a table whole before it knows its kind, and loses the field's name on the
/// way (``key `model`: invalid type: found sequence, expected usize``). The field is the one key
/// without which the section reads (or lacks only that key); `None` when no single key does.
fn kinded_field(error: &figment::Error, figment: &figment::Figment) -> Option<String> {
    use concord_engine::data::DataConfig;
    use concord_engine::model::ModelConfig;
    use concord_engine::optim::OptimizerConfig;
    use figment::error::Kind;
    let [section] = error.path.as_slice() else {
        return None;
    };
    if !matches!(
        error.kind,
        Kind::InvalidType(..) | Kind::InvalidValue(..) | Kind::InvalidLength(..) | Kind::Message(_)
    ) {
        return None;
    }
    let figment::value::Value::Dict(tag, dict) = figment.find_value(section).ok()? else {
        return None;
    };
    // Without the key the section reads, or misses only that key (a required field: serde
    // checks for missing fields once every present one has read well).
    let reads_without = |key: &str| {
        let mut without = dict.clone();
        without.remove(key);
        let value = figment::value::Value::Dict(tag, without);
        let read = match section.as_str() {
            "model" => value.deserialize::<ModelConfig>().map(drop),
            "data" => value.deserialize::<DataConfig>().map(drop),
            "optimizer" => value.deserialize::<OptimizerConfig>().map(drop),
            _ => return false,
        };
        match read {
            Ok(()) => true,
            Err(e) => matches!(&e.kind, Kind::MissingField(f) if f == key),
        }
    };
    let mut culprits = dict
        .keys()
        .filter(|k| k.as_str() != "kind")
        .filter(|k| reads_without(k));
    let field = culprits.next()?;
    culprits.next().is_none().then(|| field.clone())
}

/// The keys a resumed run may change: they say how long to run, how often to checkpoint, when to
/// stop and how much timeline to keep, not what the job is.
pub const RESUMABLE_KEYS: [&str; 5] = [
    "iterations",
    "checkpoint_every",
    "time_limit_s",
    "guard",
    "trace",
];

/// How `config` differs from the configuration `base` (TOML, as a checkpoint holds it) beyond
/// [`RESUMABLE_KEYS`]: the first key that differs, with both values; `None` when it is the same
/// job.
pub fn job_change(base: &str, config: &RunConfig) -> Result<Option<String>, ConfigError> {
    let invalid =
        |e: &dyn std::fmt::Display| ConfigError::Invalid(format!("checkpoint's config: {e}"));
    let before: toml::Table = base.parse().map_err(|e| invalid(&e))?;
    let after = toml::Table::try_from(config).map_err(|e| invalid(&e))?;
    let strip = |mut t: toml::Table| {
        for key in RESUMABLE_KEYS {
            t.remove(key);
        }
        t
    };
    Ok(first_difference(
        "",
        &toml::Value::Table(strip(before)),
        &toml::Value::Table(strip(after)),
    ))
}

/// The first key under `path` at which `a` and `b` differ, described with both values.
fn first_difference(path: &str, a: &toml::Value, b: &toml::Value) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(va), Some(vb)) => first_difference(&join(k), va, vb),
                (Some(va), None) => Some(format!("`{}` was {va} and is now unset", join(k))),
                (None, Some(vb)) => Some(format!("`{}` was unset and is now {vb}", join(k))),
                (None, None) => None,
            })
        }
        _ if a == b => None,
        _ => Some(format!("`{path}` was {a} and is now {b}")),
    }
}

/// What is wrong, as figment says it, except that an unknown field or variant quotes each
/// allowed name once (figment wraps serde's already quoted list in another pair of backticks).
fn kind_text(kind: &figment::error::Kind) -> String {
    use figment::error::{Kind, OneOf};
    match kind {
        Kind::UnknownField(found, expected) => {
            format!(
                "unknown field {}, expected {}",
                quoted(found),
                OneOf(expected)
            )
        }
        Kind::UnknownVariant(found, expected) => {
            format!(
                "unknown variant {}, expected {}",
                quoted(found),
                OneOf(expected)
            )
        }
        other => other.to_string(),
    }
}

/// A name in backticks; the empty name as `""` (two backticks alone read as a typo).
fn quoted(name: &str) -> String {
    if name.is_empty() {
        "\"\" (an empty name)".to_string()
    } else {
        format!("`{name}`")
    }
}

/// The resolved configuration as TOML (what `concord config` prints).
pub fn to_toml(config: &RunConfig) -> String {
    toml::to_string_pretty(config).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
}
