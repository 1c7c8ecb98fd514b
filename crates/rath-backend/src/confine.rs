//! Path confinement: every path a payload names must stay inside the sandbox workspace.
//!
//! Absolute paths and `..` that climbs above the workspace are refused lexically; then each
//! existing component is checked with `lstat`, and a symlink is followed only when its target
//! (resolved) is still inside the workspace. A dangling symlink is refused, because a write
//! through it would create its target wherever it points.

use std::io;
use std::path::{Component, Path, PathBuf};

use serde_json::json;

use crate::error::{FailureKind, ToolExecutionFailure};

fn escape(rel: &str, why: &str) -> ToolExecutionFailure {
    ToolExecutionFailure::new(
        FailureKind::PathEscape,
        format!("path {rel:?} is refused: {why}"),
    )
    .with_detail(json!({ "path": rel }))
}

/// Normalizes workspace-relative `rel` lexically (no file system access): `.` parts dropped,
/// `..` applied. Refuses absolute paths, NUL bytes, and `..` that climbs above the root.
/// The empty path and `.` give the empty path (the root). For backends that cannot inspect
/// symlinks (remote ones), this is the whole check.
///
/// ```
/// use rath_backend::confine_relative;
///
/// assert_eq!(confine_relative("a/./b/../c").unwrap(), "a/c");
/// assert_eq!(confine_relative("../x").unwrap_err().kind.as_str(), "path_escape");
/// assert!(confine_relative("/etc/passwd").is_err());
/// ```
pub fn confine_relative(rel: &str) -> Result<String, ToolExecutionFailure> {
    let parts = lexical(rel)?;
    let strs: Vec<String> = parts
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    Ok(strs.join("/"))
}

fn lexical(rel: &str) -> Result<Vec<&std::ffi::OsStr>, ToolExecutionFailure> {
    if rel.contains('\0') {
        return Err(escape(rel, "it contains a NUL byte"));
    }
    let rel_path = Path::new(rel);
    if rel_path.is_absolute() {
        return Err(escape(rel, "absolute paths are outside the workspace"));
    }
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in rel_path.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(escape(rel, "'..' leaves the workspace"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(escape(rel, "absolute paths are outside the workspace"));
            }
        }
    }
    Ok(parts)
}

/// Resolves workspace-relative `rel` under canonical `root` to a host path inside `root`.
pub fn resolve(root: &Path, rel: &str) -> Result<PathBuf, ToolExecutionFailure> {
    let parts = lexical(rel)?;
    let mut cur = root.to_path_buf();
    let mut iter = parts.into_iter();
    for part in iter.by_ref() {
        cur.push(part);
        match std::fs::symlink_metadata(&cur) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => {
                return Err(ToolExecutionFailure::exception(format!(
                    "cannot inspect {rel:?}: {e}"
                )));
            }
            Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(&cur) {
                Ok(target) if target.starts_with(root) => cur = target,
                Ok(_) => return Err(escape(rel, "a symlink in it points outside the workspace")),
                Err(_) => return Err(escape(rel, "a symlink in it dangles")),
            },
            Ok(_) => {}
        }
    }
    cur.extend(iter);
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_rules() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(resolve(&root, "a/b").unwrap(), root.join("a/b"));
        assert_eq!(resolve(&root, "a/../b").unwrap(), root.join("b"));
        assert_eq!(resolve(&root, ".").unwrap(), root);
        assert_eq!(resolve(&root, "").unwrap(), root);
        for bad in ["../x", "a/../../x", "/etc/passwd", "x\0y"] {
            assert_eq!(
                resolve(&root, bad).unwrap_err().kind,
                FailureKind::PathEscape,
                "{bad}"
            );
        }
    }

    #[test]
    fn symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("in")).unwrap();
        std::os::unix::fs::symlink(root.join("in"), root.join("ok")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("nope"), root.join("dangle")).unwrap();
        assert_eq!(resolve(&root, "ok/f").unwrap(), root.join("in/f"));
        assert!(resolve(&root, "out/f").is_err());
        assert!(resolve(&root, "out").is_err());
        assert!(resolve(&root, "dangle").is_err());
    }
}
