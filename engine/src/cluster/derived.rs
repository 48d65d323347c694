//! Device profiles written as changes to another: `base = "v100"` and only the fields that
//! differ (a slower NIC, another precision), so a config does not repeat a built-in's figures and
//! stays in step when the built-in is refitted.

use super::DeviceProfile;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The key of a device entry that names the profile it extends.
const BASE_KEY: &str = "base";

/// Reads `cluster.devices`: each entry is a whole profile, or `base = "<name>"` with the fields
/// that differ from profile `<name>` (a built-in, or another entry of `cluster.devices`; an
/// entry whose base is its own name extends the built-in of that name). The result holds whole
/// profiles, so a run's written config reads without the built-ins it was derived from.
pub(super) fn deserialize_devices<'de, D>(
    deserializer: D,
) -> Result<BTreeMap<String, DeviceProfile>, D::Error>
where
    D: Deserializer<'de>,
{
    let entries = BTreeMap::<String, Map<String, Value>>::deserialize(deserializer)?;
    resolve_all(&entries, &DeviceProfile::builtins()).map_err(serde::de::Error::custom)
}

/// Every entry of `entries` as a whole profile, bases taken from `entries` or `builtins`.
fn resolve_all(
    entries: &BTreeMap<String, Map<String, Value>>,
    builtins: &BTreeMap<String, DeviceProfile>,
) -> Result<BTreeMap<String, DeviceProfile>, String> {
    let mut resolved = BTreeMap::new();
    for name in entries.keys() {
        let mut chain = Vec::new();
        let fields = fields_of(name, entries, builtins, &mut chain)?;
        let profile = read_profile(name, fields)?;
        resolved.insert(name.clone(), profile);
    }
    Ok(resolved)
}

/// The fields of entry `name` with its bases' underneath, as one table; `chain` holds the
/// entries being resolved (to name a cycle).
fn fields_of(
    name: &str,
    entries: &BTreeMap<String, Map<String, Value>>,
    builtins: &BTreeMap<String, DeviceProfile>,
    chain: &mut Vec<String>,
) -> Result<Map<String, Value>, String> {
    if chain.iter().any(|c| c == name) {
        chain.push(name.to_string());
        return Err(format!(
            "devices `{}` extend each other in a cycle: {}",
            chain[0],
            chain.join(" -> ")
        ));
    }
    let own = &entries[name];
    let Some(base) = own.get(BASE_KEY) else {
        return Ok(own.clone());
    };
    let Some(base) = base.as_str() else {
        return Err(format!(
            "device `{name}`: `{BASE_KEY}` = {base}: must be the name of a device profile"
        ));
    };
    chain.push(name.to_string());
    let mut fields = if base != name && entries.contains_key(base) {
        fields_of(base, entries, builtins, chain)?
    } else {
        let profile = builtins.get(base).ok_or_else(|| {
            let known: Vec<&str> = builtins
                .keys()
                .chain(entries.keys().filter(|k| k.as_str() != name))
                .map(String::as_str)
                .collect();
            format!(
                "device `{name}`: `{BASE_KEY}` = \"{base}\": unknown device profile; known: {}",
                known.join(", ")
            )
        })?;
        match serde_json::to_value(profile) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("a device profile serializes to a table"),
        }
    };
    for (key, value) in own {
        if key != BASE_KEY {
            fields.insert(key.clone(), value.clone());
        }
    }
    Ok(fields)
}

/// Entry `name`'s fields read as a profile; an error names the field.
fn read_profile(name: &str, fields: Map<String, Value>) -> Result<DeviceProfile, String> {
    serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
        let field = e.path().to_string();
        let reason = e.into_inner().to_string();
        let hint = if reason.starts_with("missing field") {
            " (to change only some fields of another profile, name it: `base = \"v100\"`)"
        } else {
            ""
        };
        if field == "." {
            format!("device `{name}`: {reason}{hint}")
        } else {
            format!("device `{name}`, field `{field}`: {reason}{hint}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(toml_text: &str) -> Result<BTreeMap<String, DeviceProfile>, String> {
        #[derive(Deserialize)]
        struct Cluster {
            #[serde(deserialize_with = "deserialize_devices")]
            devices: BTreeMap<String, DeviceProfile>,
        }
        toml::from_str::<Cluster>(toml_text)
            .map(|c| c.devices)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn a_device_with_a_base_is_the_base_with_its_own_fields_changed() {
        let d = devices("[devices.slow]\nbase = \"v100\"\nnic_gbps = 2.7\n").unwrap();
        let v100 = DeviceProfile::builtins()["v100"].clone();
        assert_eq!(
            d["slow"],
            DeviceProfile {
                nic_gbps: 2.7,
                ..v100.clone()
            }
        );
        // The fitted per-layer model comes along unchanged.
        assert_eq!(d["slow"].layers, v100.layers);
    }

    #[test]
    fn a_base_may_be_another_entry_or_the_builtin_an_entry_replaces() {
        let d = devices(
            "[devices.v100]\nbase = \"v100\"\nmemory_gib = 32.0\n\
             [devices.slow]\nbase = \"v100\"\nnic_gbps = 1.0\n\
             [devices.slower]\nbase = \"slow\"\nlatency_us = 50.0\n",
        )
        .unwrap();
        let v100 = DeviceProfile::builtins()["v100"].clone();
        assert_eq!(d["v100"].memory_gib, 32.0);
        assert_eq!(d["v100"].nic_gbps, v100.nic_gbps);
        // `slow` extends the entry `v100` (32 GiB), not the built-in (16 GiB).
        assert_eq!(d["slow"].memory_gib, 32.0);
        assert_eq!(d["slow"].nic_gbps, 1.0);
        assert_eq!(
            d["slower"],
            DeviceProfile {
                latency_us: 50.0,
                ..d["slow"].clone()
            }
        );
    }

    #[test]
    fn a_whole_profile_needs_no_base() {
        let d = devices(
            "[devices.box]\npeak_tflops = 1.0\nmemory_gib = 2.0\nnic_gbps = 10.0\nlatency_us = 5.0\n",
        )
        .unwrap();
        assert_eq!(d["box"].peak_tflops, 1.0);
        assert_eq!(d["box"].efficiency, 0.5);
        assert_eq!(d["box"].layers, None);
    }

    #[test]
    fn bad_bases_and_fields_are_named() {
        let e = devices("[devices.a]\nbase = \"v900\"\n").unwrap_err();
        assert!(
            e.contains("device `a`") && e.contains("\"v900\"") && e.contains("known: a100"),
            "{e}"
        );
        let e = devices("[devices.a]\nbase = 3\n").unwrap_err();
        assert!(e.contains("`base` = 3"), "{e}");
        let e = devices("[devices.a]\nbase = \"b\"\n[devices.b]\nbase = \"a\"\n").unwrap_err();
        assert!(e.contains("cycle") && e.contains("a -> b -> a"), "{e}");
        let e = devices("[devices.a]\nbase = \"v100\"\nnic_gbps = \"fast\"\n").unwrap_err();
        assert!(
            e.contains("device `a`, field `nic_gbps`") && e.contains("invalid type"),
            "{e}"
        );
        let e = devices("[devices.a]\nbase = \"v100\"\nnic_gbsp = 1.0\n").unwrap_err();
        assert!(e.contains("unknown field `nic_gbsp`"), "{e}");
        let e = devices("[devices.a]\nnic_gbps = 1.0\n").unwrap_err();
        assert!(
            e.contains("missing field `peak_tflops`") && e.contains("base = \"v100\""),
            "{e}"
        );
    }
}
