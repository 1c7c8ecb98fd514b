//! Loading every file of a store and saying what is wrong with each. Read-only.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use rath_persist::{PARTIAL_SUFFIX, SESSION_SUFFIX};
use rath_session::SessionId;
use serde::Serialize;

use super::index::session_files;
use super::{InspectError, file_facts, relative_message};

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
    /// Loads, but another file holds a session with the same header id (commands use one of
    /// them; see [`super::StoreIndex`]). An error: the two may differ.
    DuplicateId,
    /// Loads, but its name is not `<header id>.jsonl` (or `.jsonl.__partial__`): a loader
    /// that finds sessions by file name (Python OpenRath's) will not find it. A warning;
    /// `rath` itself finds sessions by header id.
    NameMismatch,
}

impl FileStatus {
    /// True for statuses that make `verify` fail.
    pub fn is_error(self) -> bool {
        matches!(
            self,
            FileStatus::Inconsistent | FileStatus::Unreadable | FileStatus::DuplicateId
        )
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

    /// Files that load with a warning (torn, partial, or misnamed).
    pub fn warnings(&self) -> usize {
        self.files
            .iter()
            .filter(|f| {
                matches!(
                    f.status,
                    FileStatus::Torn | FileStatus::Partial | FileStatus::NameMismatch
                )
            })
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
                FileStatus::DuplicateId => "DUPLICATE-ID",
                FileStatus::NameMismatch => "MISNAMED",
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

/// Checks every `*.jsonl` and `*.jsonl.__partial__` file in `dir`, in name order. Each file
/// is read through once in bounded memory. Besides each file on its own, it flags files that
/// share a header id and files whose name does not match their header id.
pub fn verify_dir(dir: &Path) -> Result<VerifyReport, InspectError> {
    let mut files = Vec::new();
    let mut ids: Vec<Option<SessionId>> = Vec::new();
    for (file, path) in session_files(dir)? {
        let (check, id) = check(dir, file, &path);
        files.push(check);
        ids.push(id);
    }
    let mut holders: HashMap<&SessionId, Vec<usize>> = HashMap::new();
    for (i, id) in ids.iter().enumerate() {
        if let Some(id) = id {
            holders.entry(id).or_default().push(i);
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = id else { continue };
        let others: Vec<&str> = holders[id]
            .iter()
            .filter(|&&j| j != i)
            .map(|&j| files[j].file.as_str())
            .collect();
        let mut problems = Vec::new();
        let mut status = None;
        if !others.is_empty() {
            status = Some(FileStatus::DuplicateId);
            problems.push(format!(
                "header id {id} is also held by {}",
                others.join(", ")
            ));
        }
        let f = &mut files[i];
        if f.file != format!("{id}{SESSION_SUFFIX}") && f.file != format!("{id}{PARTIAL_SUFFIX}") {
            status.get_or_insert(FileStatus::NameMismatch);
            problems.push(format!(
                "header id {id} does not match the file name (expected {id}{SESSION_SUFFIX})"
            ));
        }
        if let Some(st) = status {
            if let Some(m) = f.message.take() {
                problems.push(m);
            }
            // Inconsistent stays the headline; the id problems are added to its message.
            if f.status != FileStatus::Inconsistent {
                f.status = st;
            }
            f.message = Some(problems.join("; "));
        }
    }
    Ok(VerifyReport { files })
}

fn check(dir: &Path, file: String, path: &Path) -> (FileCheck, Option<SessionId>) {
    let facts = match file_facts(path) {
        Ok(f) => f,
        Err(e) => {
            return (
                FileCheck {
                    file,
                    status: FileStatus::Unreadable,
                    chunks: None,
                    message: Some(relative_message(&e, dir)),
                },
                None,
            );
        }
    };
    let conv = facts.conversation;
    let (status, message) = if !facts.closed {
        (
            FileStatus::Partial,
            Some("no trailer: the writer crashed, abandoned it, or is still writing".to_owned()),
        )
    } else if let Some(n) = facts.final_chunk_count.filter(|&n| n != conv) {
        (
            FileStatus::Inconsistent,
            Some(format!(
                "trailer says {n} chunks, the file holds {conv} chunk records"
            )),
        )
    } else if facts.torn_line_skipped {
        (
            FileStatus::Torn,
            Some("an unterminated last line was skipped".to_owned()),
        )
    } else {
        (FileStatus::Ok, None)
    };
    let (status, message) = if facts.torn_line_skipped && status == FileStatus::Partial {
        (
            FileStatus::Torn,
            Some("no trailer, and an unterminated last line was skipped".to_owned()),
        )
    } else {
        (status, message)
    };
    (
        FileCheck {
            file,
            status,
            chunks: Some(facts.chunks()),
            message,
        },
        Some(facts.id),
    )
}
