//! The result cache: the code version, the code's fingerprint, the cache key, and the cache
//! files.
//!
//! A cell's result is cached in `bench/out/<suite>/cache/<key>.json`, where the key is a stable
//! hash (FNV-1a, 64 bit) of the code's fingerprint and the resolved config serialized as JSON.
//! Runs are in `sim`, so the same key always means the same numbers; changing the code or any
//! config value changes the key, while a commit that changes only prose or the recorded results
//! does not (re-recording a suite after such a commit reruns nothing).

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

/// `git args` run in `root`: its standard output, `None` when git fails or is missing.
fn git(root: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// The code version results are made from, as a report names it: the git `HEAD` commit, plus
/// `-dirty-<hash>` with a hash of the uncommitted changes (diff and untracked files) when the
/// tree is dirty; `unknown` outside git.
pub fn code_version(root: &Path) -> String {
    let Some(head) = git(root, &["rev-parse", "HEAD"]) else {
        return "unknown".into();
    };
    let head = String::from_utf8_lossy(&head).trim().to_string();
    let Some(status) = git(root, &["status", "--porcelain"]) else {
        return head;
    };
    if status.is_empty() {
        return head;
    }
    let mut changes = status;
    changes.extend(git(root, &["diff", "HEAD", "--binary"]).unwrap_or_default());
    if let Some(untracked) = git(root, &["ls-files", "--others", "--exclude-standard", "-z"]) {
        for name in untracked.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            changes.extend_from_slice(name);
            let path = root.join(String::from_utf8_lossy(name).as_ref());
            changes.extend(std::fs::read(path).unwrap_or_default());
        }
    }
    format!("{head}-dirty-{:016x}", fnv1a(&changes))
}

/// Whether a file of the workspace (its path from the root) can change a suite's numbers: all
/// but prose (`*.md`) and the recorded results (`bench/results/`).
pub fn affects_results(path: &str) -> bool {
    !(path.ends_with(".md") || path.starts_with("bench/results/"))
}

/// A hash of every file the numbers depend on, as it is on disk ([`affects_results`]: the
/// tracked and untracked files git does not ignore, but prose and recorded results): what the
/// cache is keyed by, so that results survive a commit that changes none of them. `None`
/// outside git, where nothing is cached.
pub fn code_fingerprint(root: &Path) -> Option<String> {
    let listed = git(
        root,
        &[
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ],
    )?;
    let mut names: Vec<String> = listed
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .filter(|n| affects_results(n))
        .collect();
    names.sort();
    names.dedup();
    let mut bytes = Vec::new();
    for name in names {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        // A file deleted but not yet committed is listed with no contents.
        let contents = std::fs::read(root.join(&name)).unwrap_or_default();
        bytes.extend_from_slice(&(contents.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&contents);
    }
    Some(format!("{:016x}", fnv1a(&bytes)))
}

/// The cache key of a config under a code fingerprint ([`code_fingerprint`]).
pub fn cache_key(fingerprint: &str, config: &RunConfig) -> String {
    let json = serde_json::to_string(config).unwrap_or_default();
    let mut bytes = fingerprint.as_bytes().to_vec();
    bytes.push(b'\n');
    bytes.extend_from_slice(json.as_bytes());
    format!("{:016x}", fnv1a(&bytes))
}

/// The cache key of a market cell under a code fingerprint (the market file's contents are part
/// of the workspace, so of the fingerprint where git sees them).
pub fn market_cache_key(fingerprint: &str, market: &MarketCell) -> String {
    let json = serde_json::to_string(market).unwrap_or_default();
    let mut bytes = fingerprint.as_bytes().to_vec();
    bytes.extend_from_slice(b"\nmarket\n");
    bytes.extend_from_slice(json.as_bytes());
    format!("{:016x}", fnv1a(&bytes))
}

/// A cache file: the key's inputs (for checking and for humans) and the result.
#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    key: String,
    fingerprint: String,
    config: serde_json::Value,
    result: CellResult,
}

/// The cached result of `key` under `fingerprint` at `path`, if there is one and it matches.
pub fn read_cache(path: &Path, key: &str, fingerprint: &str) -> Option<CellResult> {
    let text = std::fs::read_to_string(path).ok()?;
    let entry: CacheEntry = serde_json::from_str(&text).ok()?;
    (entry.key == key && entry.fingerprint == fingerprint).then_some(entry.result)
}

/// Writes a cell's result to the cache folder `dir` as `<key>.json` (atomically).
pub fn write_cache(
    dir: &Path,
    key: &str,
    fingerprint: &str,
    config: &RunConfig,
    result: &CellResult,
) -> anyhow::Result<()> {
    let entry = CacheEntry {
        key: key.into(),
        fingerprint: fingerprint.into(),
        config: serde_json::to_value(config)?,
        result: result.clone(),
    };
    let path: PathBuf = dir.join(format!("{key}.json"));
    concord_engine::metrics::write_atomic(&path, serde_json::to_string(&entry)?.as_bytes())?;
    Ok(())
}
