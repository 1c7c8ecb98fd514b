//! The crash tests' look at a store directory: the session files a killed writer left
//! unfinished. Included by path (`#[path]`) by the tests that need it.

use std::path::{Path, PathBuf};

/// The `__partial__` session files in `dir`, sorted by name.
pub fn partial_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("store dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".__partial__"))
        .collect();
    out.sort();
    out
}
