//! TOML table helpers for building a cell's config by layers: deep merge, setting a dotted key,
//! and showing a value as a label.

/// A TOML value as written in a label: strings bare, numbers as TOML writes them.
pub fn show_value(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Deep-merges `over` into `base`: tables merge key by key, anything else is replaced.
pub fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// The sections whose `kind` picks a variant with fields of its own.
const KIND_SECTIONS: [&str; 3] = ["model", "data", "optimizer"];

/// [`merge`]s a config layer over `base`, except that a layer which switches a section's `kind`
/// (model, data, optimizer) to another one replaces that section: the old kind's keys do not
/// survive into the new kind (as `concord::config::load` does between its layers).
pub fn merge_layer(base: &mut toml::Table, over: toml::Table) {
    let kind = |t: &toml::Table, section: &str| {
        t.get(section)
            .and_then(|s| s.get("kind"))
            .and_then(|k| k.as_str())
            .map(str::to_string)
    };
    for section in KIND_SECTIONS {
        let switched = kind(&over, section);
        if switched.is_some() && switched != kind(base, section) {
            base.remove(section);
        }
    }
    merge(base, over);
}

/// Sets a dotted key (`a.b.c`; an all-digit part indexes an existing array element) in `root`,
/// creating missing tables.
pub fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("{key:?} is not a dotted key"));
    }
    let mut node = root
        .entry(parts[0].to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if parts.len() == 1 {
        *node = value;
        return Ok(());
    }
    for (depth, part) in parts.iter().enumerate().skip(1) {
        let last = depth == parts.len() - 1;
        let here = parts[..depth].join(".");
        node = match node {
            toml::Value::Array(items) => {
                let i: usize = part.parse().map_err(|_| {
                    format!("`{here}` is an array: index it with a number, not {part:?}")
                })?;
                let len = items.len();
                items
                    .get_mut(i)
                    .ok_or_else(|| format!("`{here}` has {len} elements, no index {i}"))?
            }
            toml::Value::Table(t) => {
                if last {
                    t.insert(part.to_string(), value);
                    return Ok(());
                }
                t.entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            }
            other => {
                return Err(format!(
                    "`{here}` is a {}, not a table or array",
                    other.type_str()
                ))
            }
        };
        if last {
            *node = value;
            return Ok(());
        }
    }
    Ok(())
}
