//! Whether a binary of this workspace was built from the sources as they are now.
//!
//! A bench keys its cached results by the tree's code version, and a record names it; a binary
//! built before the last edit would file its numbers under a version whose code it does not run.
//! `cargo xtask` rebuilds first, but running `target/release/xtask` (or a stale
//! `target/release/concord` for the process suites) directly does not. Cargo writes beside each
//! binary a dep-info file (`<binary>.d`) naming every workspace source file it was compiled
//! from; a source newer than the binary, or gone, means the binary is stale, as cargo itself
//! would judge it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A binary that is older than the sources it was built from.
#[derive(Debug, thiserror::Error)]
#[error(
    "{binary} was built before {changed} changed{more}: its numbers would be filed under code \
     it does not run; rebuild it ({rebuild}), or run through `cargo xtask`, which rebuilds first"
)]
pub struct StaleBinary {
    /// The binary.
    pub binary: String,
    /// The first source found newer than it (or gone).
    pub changed: String,
    /// How many more sources changed, as text (empty when none).
    pub more: String,
    /// The command that rebuilds it.
    pub rebuild: String,
}

/// Checks that `binary` is at least as new as every source its dep-info file names. A binary
/// without a dep-info file beside it (installed elsewhere, or built by other means) passes: there
/// is nothing to compare against. `rebuild` is the command named in the error.
pub fn check(binary: &Path, rebuild: &str) -> Result<(), StaleBinary> {
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
        return Ok(());
    };
    let Ok(dep_info) = std::fs::read_to_string(dep_info_path(binary)) else {
        return Ok(());
    };
    let changed = changed_since(&dep_info_sources(&dep_info), built);
    match changed.split_first() {
        None => Ok(()),
        Some((first, rest)) => Err(StaleBinary {
            binary: binary.display().to_string(),
            changed: first.display().to_string(),
            more: match rest.len() {
                0 => String::new(),
                n => format!(" (and {n} more source files)"),
            },
            rebuild: rebuild.into(),
        }),
    }
}

/// Checks the program that is running (see [`check`]).
pub fn check_self(rebuild: &str) -> Result<(), StaleBinary> {
    match std::env::current_exe() {
        Ok(me) => check(&me, rebuild),
        Err(_) => Ok(()),
    }
}

/// The dep-info file cargo writes beside `binary`: its name with `.d` in place of any extension.
fn dep_info_path(binary: &Path) -> PathBuf {
    binary.with_extension("d")
}

/// The sources a dep-info file lists after its first target (`target: source source ...`, with
/// spaces inside names escaped by a backslash), in order.
fn dep_info_sources(text: &str) -> Vec<PathBuf> {
    let Some(line) = text.lines().find(|l| !l.trim().is_empty()) else {
        return Vec::new();
    };
    let Some(colon) = separator(line) else {
        return Vec::new();
    };
    let mut sources = Vec::new();
    let mut name = String::new();
    let mut chars = line[colon + 1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    name.push(next);
                }
            }
            ' ' => {
                if !name.is_empty() {
                    sources.push(PathBuf::from(std::mem::take(&mut name)));
                }
            }
            _ => name.push(c),
        }
    }
    if !name.is_empty() {
        sources.push(PathBuf::from(name));
    }
    sources
}

/// Where the target's name ends: the first `: ` not escaped (a Windows drive's colon is not
/// followed by a space).
fn separator(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    (0..bytes.len()).find(|&i| {
        bytes[i] == b':' && bytes.get(i + 1) == Some(&b' ') && (i == 0 || bytes[i - 1] != b'\\')
    })
}

/// The sources modified after `built`, or gone.
fn changed_since(sources: &[PathBuf], built: SystemTime) -> Vec<PathBuf> {
    sources
        .iter()
        .filter(|source| {
            std::fs::metadata(source)
                .and_then(|m| m.modified())
                .map_or(true, |modified| modified > built)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dep_info_names_every_source_with_escaped_spaces() {
        let text = "/t/release/xtask: /w/a.rs /w/my\\ dir/b.rs  /w/c.rs\n\n/w/a.rs:\n";
        assert_eq!(
            dep_info_sources(text),
            vec![
                PathBuf::from("/w/a.rs"),
                PathBuf::from("/w/my dir/b.rs"),
                PathBuf::from("/w/c.rs"),
            ]
        );
        assert!(dep_info_sources("").is_empty());
        assert!(dep_info_sources("no separator here").is_empty());
    }

    /// Writes `path` and sets its modification time to `at`.
    fn write_at(path: &Path, at: SystemTime) {
        std::fs::write(path, b"x").expect("write");
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(at))
            .expect("set time");
    }

    #[test]
    fn a_source_newer_than_the_binary_or_gone_makes_it_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t0 = SystemTime::now() - Duration::from_secs(3600);
        let (bin, src) = (dir.path().join("tool"), dir.path().join("lib.rs"));
        write_at(&src, t0);
        write_at(&bin, t0 + Duration::from_secs(60));
        let gone = dir.path().join("gone.rs");
        let dep_info = |sources: &[&Path]| {
            let names: Vec<String> = sources.iter().map(|s| s.display().to_string()).collect();
            std::fs::write(
                dep_info_path(&bin),
                format!("{}: {}\n", bin.display(), names.join(" ")),
            )
            .expect("dep-info");
        };
        dep_info(&[&src]);
        assert!(check(&bin, "cargo build").is_ok(), "built after its source");

        write_at(&src, t0 + Duration::from_secs(120));
        let err = check(&bin, "cargo build").expect_err("source edited after the build");
        assert_eq!(err.changed, src.display().to_string());
        assert!(err.to_string().contains("cargo build"), "{err}");

        write_at(&src, t0);
        dep_info(&[&src, &gone]);
        let err = check(&bin, "cargo build").expect_err("a source removed");
        assert_eq!(err.changed, gone.display().to_string());
        assert_eq!(err.more, "");
    }

    #[test]
    fn a_binary_without_dep_info_passes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("tool");
        std::fs::write(&bin, b"x").expect("write");
        assert!(check(&bin, "cargo build").is_ok());
        assert!(check(&dir.path().join("absent"), "cargo build").is_ok());
    }
}
