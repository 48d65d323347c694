//! The result cache: the code version, the cache key, and the cache files.
//!
//! A cell's result is cached in `bench/out/<suite>/cache/<key>.json`, where the key is a stable
//! hash (FNV-1a, 64 bit) of the code version and the resolved config serialized as JSON. Runs are
//! in `sim`, so the same key always means the same numbers; changing the code or any config
//! value changes the key.

use super::result::CellResult;
use crate::bench::suite::expand::MarketCell;
use concord_engine::config::RunConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// FNV-1a, 64 bit: a stable hash (unlike std's `DefaultHasher`, it is the same on every build).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The code version results are made from: the git `HEAD` commit, plus `-dirty-<hash>` with a
/// hash of the uncommitted changes (diff and untracked files) when the tree is dirty, so that
/// editing code invalidates the cache; `unknown` outside git.
pub fn code_version(root: &Path) -> String {
    let git = |args: &[&str]| -> Option<Vec<u8>> {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    };
    let Some(head) = git(&["rev-parse", "HEAD"]) else {
        return "unknown".into();
    };
    let head = String::from_utf8_lossy(&head).trim().to_string();
    let Some(status) = git(&["status", "--porcelain"]) else {
        return head;
    };
    if status.is_empty() {
        return head;
    }
    let mut changes = status;
    changes.extend(git(&["diff", "HEAD", "--binary"]).unwrap_or_default());
    if let Some(untracked) = git(&["ls-files", "--others", "--exclude-standard", "-z"]) {
        for name in untracked.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            changes.extend_from_slice(name);
            let path = root.join(String::from_utf8_lossy(name).as_ref());
            changes.extend(std::fs::read(path).unwrap_or_default());
        }
    }
    format!("{head}-dirty-{:016x}", fnv1a(&changes))
}

/// The cache key of a config under a code version.
pub fn cache_key(code_version: &str, config: &RunConfig) -> String {
    let json = serde_json::to_string(config).unwrap_or_default();
    let mut bytes = code_version.as_bytes().to_vec();
    bytes.push(b'\n');
    bytes.extend_from_slice(json.as_bytes());
    format!("{:016x}", fnv1a(&bytes))
}

/// The cache key of a market cell under a code version (the market file's contents are part of
/// the workspace, so of the code version where they are tracked).
pub fn market_cache_key(code_version: &str, market: &MarketCell) -> String {
    let json = serde_json::to_string(market).unwrap_or_default();
    let mut bytes = code_version.as_bytes().to_vec();
    bytes.extend_from_slice(b"\nmarket\n");
    bytes.extend_from_slice(json.as_bytes());
    format!("{:016x}", fnv1a(&bytes))
}

/// A cache file: the key's inputs (for checking and for humans) and the result.
#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    key: String,
    code_version: String,
    config: serde_json::Value,
    result: CellResult,
}

/// The cached result of `key` under `code_version` at `path`, if there is one and it matches.
pub fn read_cache(path: &Path, key: &str, code_version: &str) -> Option<CellResult> {
    let text = std::fs::read_to_string(path).ok()?;
    let entry: CacheEntry = serde_json::from_str(&text).ok()?;
    (entry.key == key && entry.code_version == code_version).then_some(entry.result)
}

/// Writes a cell's result to the cache folder `dir` as `<key>.json` (atomically).
pub fn write_cache(
    dir: &Path,
    key: &str,
    code_version: &str,
    config: &RunConfig,
    result: &CellResult,
) -> anyhow::Result<()> {
    let entry = CacheEntry {
        key: key.into(),
        code_version: code_version.into(),
        config: serde_json::to_value(config)?,
        result: result.clone(),
    };
    let path: PathBuf = dir.join(format!("{key}.json"));
    concord_engine::metrics::write_atomic(&path, serde_json::to_string(&entry)?.as_bytes())?;
    Ok(())
}
