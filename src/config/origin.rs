//! Which layer set a configuration value, so that an out-of-range value found after the layers
//! are merged (by `RunConfig::validate`) is reported with the layer to fix: the built-in
//! defaults, the config file, a `CONCORD_*` variable or `--set`.

use concord_engine::data::DataError;
use concord_engine::stragglers::StragglerError;
use concord_engine::EngineError;
use figment::value::Value;
use figment::{Figment, Source};

use super::{ConfigError, SET_LAYER};

/// The merged layers, asked where a key's value came from.
pub(super) struct Origins {
    figment: Figment,
    /// The name of the built-in defaults' layer.
    defaults: String,
}

/// One step of a key path: a table key or an array index.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `cluster.machines[0].device` as steps; `None` for anything else than `name`, `name[i]`...
fn steps(key: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if name.is_empty() {
            return None;
        }
        out.push(Step::Key(name));
        while !rest.is_empty() {
            let (index, after) = rest.split_once(']')?;
            out.push(Step::Index(index.parse().ok()?));
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    Some(out)
}

impl Origins {
    /// The layers merged in `figment`; `defaults` names the built-in defaults' provider.
    pub(super) fn new(figment: Figment, defaults: String) -> Self {
        Origins { figment, defaults }
    }

    /// The layer that set `key` (a dotted path, with `[i]` for array elements): the file's path,
    /// the `CONCORD_*` variable, `--set`, or the built-in defaults when no layer set it.
    pub(super) fn of(&self, key: &str) -> String {
        let defaults = "the built-in defaults".to_string();
        let Some(steps) = steps(key) else {
            return defaults;
        };
        let mut value: Option<Value> = self.figment.find_value("").ok();
        let mut names = Vec::new();
        for step in &steps {
            value = match (value, step) {
                (Some(Value::Dict(_, mut dict)), Step::Key(k)) => {
                    names.push(*k);
                    dict.remove(*k)
                }
                (Some(Value::Array(_, mut items)), Step::Index(i)) if *i < items.len() => {
                    Some(items.swap_remove(*i))
                }
                _ => None,
            };
        }
        let Some(meta) = value.and_then(|v| self.figment.get_metadata(v.tag()).cloned()) else {
            return defaults;
        };
        match &meta.source {
            Some(Source::File(path)) => format!("the file {}", path.display()),
            _ if meta.name == SET_LAYER => "--set".to_string(),
            _ if meta.name == self.defaults.as_str() => defaults,
            _ if meta.name.contains("environment") => {
                let var: Vec<String> = names.iter().map(|n| n.to_ascii_uppercase()).collect();
                format!("the environment variable CONCORD_{}", var.join("__"))
            }
            _ => meta.name.to_string(),
        }
    }

    /// The config key a validation error is about, if it is about one.
    fn key_of(error: &EngineError) -> Option<String> {
        match error {
            EngineError::Config { key, .. } => Some(key.clone()),
            EngineError::Data(DataError::InvalidConfig { field, .. }) => {
                Some(format!("data.{field}"))
            }
            // Arrays come whole from one layer.
            EngineError::Straggler(StragglerError::InvalidField { .. }) => {
                Some("stragglers".into())
            }
            _ => None,
        }
    }

    /// `error` from validating the merged config, with the layer that set the offending key.
    pub(super) fn attribute(&self, error: EngineError) -> ConfigError {
        match Self::key_of(&error) {
            Some(key) => ConfigError::Range {
                layer: self.of(&key),
                source: Box::new(error),
            },
            None => ConfigError::Engine(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_split_into_keys_and_indices() {
        let s = steps("cluster.machines[0].device").unwrap();
        assert!(matches!(
            s[..],
            [
                Step::Key("cluster"),
                Step::Key("machines"),
                Step::Index(0),
                Step::Key("device")
            ]
        ));
        assert!(matches!(
            steps("a[1][2]").unwrap()[..],
            [Step::Key("a"), Step::Index(1), Step::Index(2)]
        ));
        assert!(steps("(checkpoint)").is_some());
        assert!(steps("a[x]").is_none() && steps("").is_none() && steps("a..b").is_none());
    }
}
