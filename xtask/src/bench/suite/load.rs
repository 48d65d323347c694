//! Finding and loading suite files: the workspace and `bench/` folders, the list of suites, and
//! reading one file into a checked [`Suite`].

use super::schema::Suite;
use super::validate;
use crate::bench::error::BenchError;
use std::path::{Path, PathBuf};

/// The workspace root (where `bench/` and `configs/` live).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The folder suite files live in.
pub fn bench_dir() -> PathBuf {
    workspace_root().join("bench")
}

/// Every suite file in `dir` (`*.toml`), sorted.
pub fn suite_files(dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let io = |source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl Suite {
    /// Loads `bench/<name>.toml`.
    pub fn load_named(name: &str) -> Result<Suite, BenchError> {
        let path = bench_dir().join(format!("{name}.toml"));
        if !path.exists() {
            let known = suite_files(&bench_dir())
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(BenchError::NoSuite {
                name: name.into(),
                known,
            });
        }
        Suite::load(&path)
    }

    /// Loads and checks one suite file (schema and labels; configs are checked by [`Suite::cells`]).
    pub fn load(path: &Path) -> Result<Suite, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Suite::parse(&text, path)
    }

    /// Parses suite text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Suite, BenchError> {
        let bad = |key: &str, reason: String| BenchError::Suite {
            file: path.to_path_buf(),
            key: key.to_string(),
            reason,
        };
        let de = toml::Deserializer::new(text);
        let mut suite: Suite = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            bad(&key, e.into_inner().message().trim().to_string())
        })?;
        suite.path = path.to_path_buf();
        suite.name = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        validate::check(&suite, &bad)?;
        Ok(suite)
    }
}
