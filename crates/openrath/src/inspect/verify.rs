//! Loading every file of a store and saying what is wrong with each. Read-only.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{InspectError, relative_message};

/// What loading one file found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileStatus {
    /// Loads, closed, chunk count matches the trailer.
    Ok,
    /// Loads, but an unterminated last line (a write cut short) was skipped.
    Torn,
    /// Loads, but has no trailer: the writer crashed, abandoned it, or is still writing.
    Partial,
    /// Loads, but the trailer's `final_chunk_count` disagrees with the chunk records.
    Inconsistent,
    /// Does not load (see the message).
    Unreadable,
}

impl FileStatus {
    /// True for statuses that make `verify` fail.
    pub fn is_error(self) -> bool {
        matches!(self, FileStatus::Inconsistent | FileStatus::Unreadable)
    }
}

/// One file's check.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct FileCheck {
    /// File name in the store.
    pub file: String,
    /// What was found.
    pub status: FileStatus,
    /// Chunks loaded (conversation + evidence), when it loads.
    pub chunks: Option<usize>,
    /// Details for anything but `ok`.
    pub message: Option<String>,
}

/// The result of checking every session file in a store.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Every session file, by name.
    pub files: Vec<FileCheck>,
}

impl VerifyReport {
    /// Files that fail verification.
    pub fn errors(&self) -> usize {
        self.files.iter().filter(|f| f.status.is_error()).count()
    }

    /// Files that load with a warning (torn or partial).
    pub fn warnings(&self) -> usize {
        self.files
            .iter()
            .filter(|f| matches!(f.status, FileStatus::Torn | FileStatus::Partial))
            .count()
    }

    /// True when every file loads consistently (warnings allowed).
    pub fn is_clean(&self) -> bool {
        self.errors() == 0
    }

    /// One line per file, then a total.
    pub fn render(&self) -> String {
        let mut o = String::new();
        for f in &self.files {
            let status = match f.status {
                FileStatus::Ok => "ok",
                FileStatus::Torn => "TORN",
                FileStatus::Partial => "PARTIAL",
                FileStatus::Inconsistent => "INCONSISTENT",
                FileStatus::Unreadable => "UNREADABLE",
            };
            let _ = write!(o, "{status:<12}  {}", f.file);
            if let Some(n) = f.chunks {
                let _ = write!(o, "  ({n} chunks)");
            }
            if let Some(m) = &f.message {
                let _ = write!(o, "  {m}");
            }
            o.push('\n');
        }
        let _ = writeln!(
            o,
            "{} files: {} ok, {} warning(s), {} error(s); nothing was modified",
            self.files.len(),
            self.files.len() - self.errors() - self.warnings(),
            self.warnings(),
            self.errors()
        );
        o
    }
}

/// Checks every `*.jsonl` and `*.jsonl.__partial__` file in `dir`, in name order.
pub fn verify_dir(dir: &Path) -> Result<VerifyReport, InspectError> {
    let entries = std::fs::read_dir(dir).map_err(|e| InspectError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.ends_with(rath_persist::SESSION_SUFFIX) || n.ends_with(rath_persist::PARTIAL_SUFFIX)
        })
        .collect();
    names.sort();
    let files = names.into_iter().map(|n| check(dir, n)).collect();
    Ok(VerifyReport { files })
}

fn check(dir: &Path, file: String) -> FileCheck {
    let loaded = match rath_persist::load_file(&dir.join(&file)) {
        Ok(l) => l,
        Err(e) => {
            return FileCheck {
                file,
                status: FileStatus::Unreadable,
                chunks: None,
                message: Some(relative_message(&e, dir)),
            };
        }
    };
    let conv = loaded.session.conversation_len() as u64;
    let (status, message) = if !loaded.closed {
        (
            FileStatus::Partial,
            Some("no trailer: the writer crashed, abandoned it, or is still writing".to_owned()),
        )
    } else if let Some(n) = loaded.final_chunk_count.filter(|&n| n != conv) {
        (
            FileStatus::Inconsistent,
            Some(format!(
                "trailer says {n} chunks, the file holds {conv} chunk records"
            )),
        )
    } else if loaded.torn_line_skipped {
        (
            FileStatus::Torn,
            Some("an unterminated last line was skipped".to_owned()),
        )
    } else {
        (FileStatus::Ok, None)
    };
    let (status, message) = if loaded.torn_line_skipped && status == FileStatus::Partial {
        (
            FileStatus::Torn,
            Some("no trailer, and an unterminated last line was skipped".to_owned()),
        )
    } else {
        (status, message)
    };
    FileCheck {
        file,
        status,
        chunks: Some(loaded.session.len()),
        message,
    }
}
