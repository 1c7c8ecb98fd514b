//! Looking at a session store: listings, transcripts, lineage trees, diffs, verification.
//!
//! ```
//! use openrath::inspect::{StoreView, SessionRow};
//! use openrath::persist::Store;
//! use openrath::prelude::*;
//!
//! let dir = tempfile::tempdir()?;
//! let root = Session::user_with("q", Stamper::counter());
//! let fork = root.fork().push(Chunk::assistant_text("a"));
//! Store::at(dir.path().join("sessions")).save(&root)?;
//! Store::at(dir.path().join("sessions")).save(&fork)?;
//!
//! let view = StoreView::open(dir.path())?;         // an OPENRATH_HOME or its sessions/ dir
//! let rows: Vec<SessionRow> = view.sessions()?.rows;
//! assert_eq!(rows.len(), 2);
//! let diff = view.diff(&view.resolve(root.id().as_str())?, &view.resolve(fork.id().as_str())?)?;
//! assert_eq!(diff.common_prefix, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Everything here reads; nothing writes to the store. The `rath` command is a thin shell
//! over this module (and [`crate::view`]): each operation returns a value with a human
//! rendering (`render`) and a JSON form (`serde`), so scripts and programs see the same data.

mod diff;
mod error;
mod replay;
mod show;
mod tree;
mod verify;

use std::path::{Path, PathBuf};

use rath_persist::{LoadedSession, SessionSummary, Store};
use rath_session::{LineageGraph, RunFailure, SessionId, Usage};
use serde::Serialize;

pub use diff::{ChunkLine, SessionDiff};
pub use error::InspectError;
pub use replay::{ReplayDifference, ReplayReport};
pub use show::{Transcript, TranscriptEntry, describe_chunk};
pub use tree::lineage_tree;
pub use verify::{FileCheck, FileStatus, VerifyReport, verify_dir};

/// A session store opened for reading.
#[derive(Clone, Debug)]
pub struct StoreView {
    store: Store,
}

/// One line of `rath sessions`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionRow {
    /// Session id.
    pub id: SessionId,
    /// File name inside the store (`<id>.jsonl` or `<id>.jsonl.__partial__`).
    pub file: String,
    /// Header `created_at`, ISO-8601.
    pub created_at: String,
    /// Parent ids.
    pub parents: Vec<SessionId>,
    /// Lineage operator.
    pub operator: String,
    /// Lineage kind.
    pub kind: String,
    /// Conversation chunks.
    pub chunks: u64,
    /// Evidence chunks.
    pub evidence: u64,
    /// `failed` (the run stopped on an error; see `failure`), `closed`, `crashed` (a
    /// `__partial__` file without trailer) or `open`; see [`session_status`].
    pub status: &'static str,
    /// Cumulative usage from the trailer.
    pub usage: Option<Usage>,
    /// Why the run failed, one line (see [`failure_text`]), when the status is `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// The status of a stored session, the one rule `rath sessions` and `rath show` share:
/// `failed` when its last chunk is a `run_failure` (the run stopped on an error, however the
/// file ended), else `closed` (a trailer), `crashed` (a `__partial__` file without one: the
/// writer died) or `open`.
pub fn session_status(closed: bool, crashed: bool, failure: Option<&RunFailure>) -> &'static str {
    if failure.is_some() {
        "failed"
    } else if closed {
        "closed"
    } else if crashed {
        "crashed"
    } else {
        "open"
    }
}

/// A failure on one line: `provider in hello at model_call (4 attempts): <message>`.
pub fn failure_text(f: &RunFailure) -> String {
    let mut o = f.kind.clone();
    if let Some(a) = &f.agent {
        o.push_str(&format!(" in {a}"));
    }
    if !f.step.is_empty() {
        o.push_str(&format!(" at {}", f.step));
    }
    match f.attempts.len() {
        0 => {}
        1 => o.push_str(" (1 attempt)"),
        n => o.push_str(&format!(" ({n} attempts)")),
    }
    o.push_str(": ");
    o.push_str(&f.message);
    o
}

impl SessionRow {
    fn from_summary(s: &SessionSummary) -> Self {
        SessionRow {
            id: s.id.clone(),
            file: file_name(&s.path),
            created_at: s.created_at.to_string(),
            parents: s.parents.clone(),
            operator: s.operator.clone(),
            kind: s.kind.as_str().to_owned(),
            chunks: s.chunk_count,
            evidence: s.evidence_count,
            status: session_status(s.closed, s.crashed, s.failure.as_ref()),
            usage: s.usage,
            failure: s.failure.as_ref().map(failure_text),
        }
    }
}

/// The readable sessions of a store and the files that could not be read.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct SessionListing {
    /// Oldest first.
    pub rows: Vec<SessionRow>,
    /// One message per unreadable file (`rath verify` says more).
    pub unreadable: Vec<String>,
}

impl SessionListing {
    /// A fixed-width table, one session per line.
    pub fn render(&self) -> String {
        let mut table = vec![[
            "ID".to_owned(),
            "CREATED".to_owned(),
            "OPERATOR".to_owned(),
            "KIND".to_owned(),
            "CHUNKS".to_owned(),
            "EVIDENCE".to_owned(),
            "STATUS".to_owned(),
            "USAGE".to_owned(),
        ]];
        for r in &self.rows {
            table.push([
                r.id.to_string(),
                r.created_at.clone(),
                r.operator.clone(),
                r.kind.clone(),
                r.chunks.to_string(),
                r.evidence.to_string(),
                r.status.to_owned(),
                usage_text(r.usage),
            ]);
        }
        let mut out = render_table(&table, &[4, 5]);
        for r in &self.rows {
            if let Some(f) = &r.failure {
                out.push_str(&format!("failed {}: {f}\n", r.id));
            }
        }
        out.push_str(&format!("{} sessions", self.rows.len()));
        if !self.unreadable.is_empty() {
            out.push_str(&format!(
                ", {} unreadable file(s) skipped (run `rath verify`)",
                self.unreadable.len()
            ));
        }
        out.push('\n');
        out
    }
}

/// `prompt/completion/total`, or `-`.
pub fn usage_text(u: Option<Usage>) -> String {
    match u {
        Some(u) => format!(
            "{}/{}/{}",
            u.prompt_tokens, u.completion_tokens, u.total_tokens
        ),
        None => "-".to_owned(),
    }
}

/// Left-aligned columns separated by two spaces; `right` lists right-aligned columns.
fn render_table<const N: usize>(rows: &[[String; N]], right: &[usize]) -> String {
    let mut width = [0usize; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            let pad = width[i] - c.chars().count();
            if i > 0 {
                line.push_str("  ");
            }
            if right.contains(&i) {
                line.push_str(&" ".repeat(pad));
                line.push_str(c);
            } else {
                line.push_str(c);
                if i + 1 < N {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

impl StoreView {
    /// Opens `dir`: an OpenRath home (with a `sessions/` directory) or a sessions directory
    /// itself. A missing directory is an error, never created.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, InspectError> {
        let dir = dir.as_ref();
        let sessions = dir.join("sessions");
        if sessions.is_dir() {
            return Ok(Self {
                store: Store::at(sessions),
            });
        }
        if dir.is_dir() {
            return Ok(Self {
                store: Store::at(dir),
            });
        }
        Err(InspectError::NoStore {
            dir: dir.to_path_buf(),
        })
    }

    /// Opens the store the OPENRATH_HOME rules resolve (see [`rath_persist::openrath_home`]).
    pub fn default_location() -> Result<Self, InspectError> {
        let home = rath_persist::openrath_home();
        Self::open(&home).map_err(|_| InspectError::NoStore { dir: home })
    }

    /// The underlying store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The sessions directory.
    pub fn dir(&self) -> &Path {
        self.store.dir()
    }

    /// Every readable session (oldest first) and messages for the unreadable files.
    pub fn sessions(&self) -> Result<SessionListing, InspectError> {
        let (ok, bad) = self.store.scan()?;
        Ok(SessionListing {
            rows: ok.iter().map(SessionRow::from_summary).collect(),
            unreadable: bad
                .iter()
                .map(|e| relative_message(e, self.dir()))
                .collect(),
        })
    }

    /// Resolves an id given in full, or as a unique prefix or suffix of one stored id.
    pub fn resolve(&self, text: &str) -> Result<SessionId, InspectError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(InspectError::UnknownSession {
                id: String::new(),
                dir: self.dir().to_path_buf(),
            });
        }
        let ids = self.ids()?;
        if let Some(id) = ids.iter().find(|i| i.as_str() == text) {
            return Ok(id.clone());
        }
        let matches: Vec<&SessionId> = ids
            .iter()
            .filter(|i| i.as_str().starts_with(text) || i.as_str().ends_with(text))
            .collect();
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(InspectError::UnknownSession {
                id: text.to_owned(),
                dir: self.dir().to_path_buf(),
            }),
            many => Err(InspectError::AmbiguousId {
                id: text.to_owned(),
                matches: many.len(),
            }),
        }
    }

    /// Ids of every session file (readable or not), sorted, without duplicates.
    fn ids(&self) -> Result<Vec<SessionId>, InspectError> {
        let entries = std::fs::read_dir(self.dir()).map_err(|e| InspectError::Io {
            path: self.dir().to_path_buf(),
            source: e,
        })?;
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(rath_persist::PARTIAL_SUFFIX)
                    .or_else(|| name.strip_suffix(rath_persist::SESSION_SUFFIX))
                    .map(str::to_owned)
            })
            .collect();
        ids.sort();
        ids.dedup();
        Ok(ids.into_iter().map(SessionId::from).collect())
    }

    /// Loads one session in full.
    pub fn load(&self, id: &SessionId) -> Result<LoadedSession, InspectError> {
        self.store.load(id).map_err(InspectError::from)
    }

    /// Loads every readable session (oldest first), with messages for unreadable files.
    pub fn load_all(&self) -> Result<(Vec<LoadedSession>, Vec<String>), InspectError> {
        let (ok, mut bad) = self.store.scan()?;
        let mut out = Vec::with_capacity(ok.len());
        for s in &ok {
            match rath_persist::load_file(&s.path) {
                Ok(l) => out.push(l),
                Err(e) => bad.push(e),
            }
        }
        Ok((
            out,
            bad.iter()
                .map(|e| relative_message(e, self.dir()))
                .collect(),
        ))
    }

    /// The transcript of one session.
    pub fn transcript(&self, id: &SessionId) -> Result<Transcript, InspectError> {
        Ok(Transcript::new(&self.load(id)?))
    }

    /// Lineage rows of every readable session, in listing order.
    pub fn lineage_rows(&self) -> Result<Vec<rath_persist::LineageRow>, InspectError> {
        Ok(self.store.lineage_rows()?)
    }

    /// The lineage graph of the readable sessions.
    pub fn graph(&self) -> Result<LineageGraph, InspectError> {
        Ok(LineageGraph::from_edges(
            self.lineage_rows()?
                .into_iter()
                .map(|r| (r.id, r.parent_session_ids)),
        ))
    }

    /// Compares two stored sessions.
    pub fn diff(&self, a: &SessionId, b: &SessionId) -> Result<SessionDiff, InspectError> {
        let (la, lb) = (self.load(a)?, self.load(b)?);
        let graph = self.graph()?;
        Ok(SessionDiff::new(&la.session, &lb.session, Some(&graph)))
    }

    /// Loads every file in the store and reports what it found. Modifies nothing.
    pub fn verify(&self) -> Result<VerifyReport, InspectError> {
        verify_dir(self.dir())
    }
}

/// An error's message with the store directory prefix removed from paths.
pub(crate) fn relative_message(e: &rath_persist::PersistError, dir: &Path) -> String {
    let text = e.to_string();
    let mut prefix: PathBuf = dir.to_path_buf();
    prefix.push("");
    text.replace(&*prefix.to_string_lossy(), "")
}
