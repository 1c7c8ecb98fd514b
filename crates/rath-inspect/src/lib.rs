//! **rath-inspect**: reading a session store: listings, transcripts, lineage trees, diffs,
//! offline replay, verification and a self-contained HTML viewer.
//!
//! ```
//! use rath_inspect::{StoreView, SessionRow};
//! use rath_persist::Store;
//! use rath_session::{Chunk, Session, Stamper};
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
//! over this crate (and its [`view`] module): each operation returns a value with a human
//! rendering (`render`) and a JSON form (`serde`), so scripts and programs see the same data.
//! Every failure is an [`InspectError`]. The `openrath` facade re-exports this crate as
//! `openrath::inspect`.

#![warn(missing_docs)]

mod db;
mod diff;
mod error;
mod index;
mod replay;
mod show;
mod tree;
mod verify;
pub mod view;

use std::path::{Path, PathBuf};

use rath_persist::LoadedSession;
use rath_session::{LineageGraph, RunFailure, SessionId, Usage};
use serde::Serialize;

pub use diff::{ChunkLine, SessionDiff};
pub use error::InspectError;
pub use index::{FileFacts, FileWarning, StoreIndex, StoredFile, WarningKind, file_facts};
pub use replay::{ReplayDifference, ReplayReport};
pub use show::{Page, Transcript, TranscriptEntry, TranscriptStream, describe_chunk, show_command};
pub use tree::{MAX_TREE_DEPTH, lineage_tree};
pub use verify::{FileCheck, FileStatus, VerifyReport, verify_dir};

/// A session store opened for reading: a JSONL directory (read file by file) or any store
/// behind the [`rath_persist::SessionStore`] trait (SQLite, PostgreSQL), opened by URL.
#[derive(Clone, Debug)]
pub struct StoreView {
    /// The sessions directory, or the store's name for a store read through the trait.
    dir: PathBuf,
    db: Option<db::Db>,
}

/// Where a stored session stands. The one place statuses are decided, named and described,
/// for `sessions`, `show` and the viewer alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionStatus {
    /// The run was cancelled (by its caller, a signal or an operator): the session's last
    /// chunk is a `run_failure` of kind `cancelled` (however the file ended).
    Cancelled,
    /// The run stopped on an error: the session's last chunk is a `run_failure` of any other
    /// kind (however the file ended).
    Failed,
    /// The writer closed it (it has a trailer).
    Closed,
    /// A `__partial__` file without trailer: the writer crashed or abandoned it.
    Crashed,
    /// No trailer, but not a `__partial__` file (still being written, or cut short).
    Open,
}

impl SessionStatus {
    /// The status of a file, from its last chunk's failure, whether it has a trailer, and its
    /// name.
    pub fn of(closed: bool, file: &str, failure: Option<&RunFailure>) -> Self {
        Self::from_flags(
            closed,
            !closed && file.ends_with(rath_persist::PARTIAL_SUFFIX),
            failure,
        )
    }

    /// The rule itself: `cancelled` when the last chunk records a cancellation, `failed`
    /// when it records any other failure, else `closed` (a trailer), `crashed` (a
    /// `__partial__` file without one: the writer died) or `open`.
    pub fn from_flags(closed: bool, crashed: bool, failure: Option<&RunFailure>) -> Self {
        if failure.is_some_and(RunFailure::is_cancellation) {
            SessionStatus::Cancelled
        } else if failure.is_some() {
            SessionStatus::Failed
        } else if closed {
            SessionStatus::Closed
        } else if crashed {
            SessionStatus::Crashed
        } else {
            SessionStatus::Open
        }
    }

    /// The one-word form (`cancelled`, `failed`, `closed`, `crashed`, `open`), as in `rath
    /// sessions`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Cancelled => "cancelled",
            SessionStatus::Failed => "failed",
            SessionStatus::Closed => "closed",
            SessionStatus::Crashed => "crashed",
            SessionStatus::Open => "open",
        }
    }

    /// How the file ended, for a transcript: `closed at T`, `closed`, or a warning. (A
    /// failure is described on a line of its own; see [`failure_text`].)
    pub fn describe(closed: bool, closed_at: Option<&str>) -> String {
        match (closed, closed_at) {
            (true, Some(t)) => format!("closed at {t}"),
            (true, None) => "closed".to_owned(),
            (false, _) => "NOT closed (crashed, or still being written)".to_owned(),
        }
    }

    /// True unless the session is closed.
    pub fn is_unfinished(self) -> bool {
        self != SessionStatus::Closed
    }
}

impl PartialEq<&str> for SessionStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// How many chunks a session holds: the one count every command shows for it.
///
/// A session's **chunks** are all of them, conversation and evidence alike: what `rath show`
/// numbers `[0]` to `[N-1]` and pages through with `--from`/`--limit`. `rath sessions`
/// (`CHUNKS`, with `EVIDENCE` the part of them that is evidence), `rath show` (`chunks N (C
/// conversation, E evidence)`), `rath lineage`'s tree, `rath verify` and `rath view` all
/// show this `N` (the lineage export's `chunk_count` field alone keeps Python OpenRath's
/// meaning, the conversation chunks, since Python reads it).
///
/// ```
/// use rath_inspect::ChunkCounts;
/// use rath_session::{Chunk, Session, Stamper};
///
/// let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
/// let n = ChunkCounts::of(&s);
/// assert_eq!((n.total, n.conversation, n.evidence), (2, 2, 0));
/// assert_eq!(n.describe(), "2 (2 conversation, 0 evidence)");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChunkCounts {
    /// Every chunk: conversation and evidence.
    pub total: u64,
    /// Conversation chunks (what a model sees).
    pub conversation: u64,
    /// Evidence chunks (what a model never sees: model calls, tool evidence, decisions...).
    pub evidence: u64,
}

impl ChunkCounts {
    /// The counts of a session with `conversation` conversation and `evidence` evidence
    /// chunks.
    pub fn new(conversation: u64, evidence: u64) -> Self {
        Self {
            total: conversation.saturating_add(evidence),
            conversation,
            evidence,
        }
    }

    /// The counts of a session in memory.
    pub fn of(session: &rath_session::Session) -> Self {
        let conversation = session.conversation_len() as u64;
        Self::new(
            conversation,
            (session.len() as u64).saturating_sub(conversation),
        )
    }

    /// `N (C conversation, E evidence)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} conversation, {} evidence)",
            self.total, self.conversation, self.evidence
        )
    }
}

/// The status word of a stored session ([`SessionStatus::from_flags`]).
pub fn session_status(closed: bool, crashed: bool, failure: Option<&RunFailure>) -> &'static str {
    SessionStatus::from_flags(closed, crashed, failure).as_str()
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

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of `rath sessions`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionRow {
    /// Session id (from the file's header).
    pub id: SessionId,
    /// File name inside the store (normally `<id>.jsonl` or `<id>.jsonl.__partial__`).
    pub file: String,
    /// Header `created_at`, ISO-8601.
    pub created_at: String,
    /// Parent ids.
    pub parents: Vec<SessionId>,
    /// Lineage operator.
    pub operator: String,
    /// Lineage kind.
    pub kind: String,
    /// Chunks, conversation and evidence (see [`ChunkCounts`]).
    pub chunks: u64,
    /// Of those, conversation chunks.
    pub conversation: u64,
    /// Of those, evidence chunks.
    pub evidence: u64,
    /// See [`SessionStatus`].
    pub status: SessionStatus,
    /// Cumulative usage from the trailer.
    pub usage: Option<Usage>,
    /// Why the run failed or was cancelled, one line (see [`failure_text`]), when the status
    /// is `failed` or `cancelled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl SessionRow {
    fn from_facts(f: &FileFacts) -> Self {
        SessionRow {
            id: f.id.clone(),
            file: f.file.clone(),
            created_at: f.created_at.to_string(),
            parents: f.lineage.parents.to_vec(),
            operator: f.lineage.operator.to_string(),
            kind: f.lineage.kind.as_str().to_owned(),
            chunks: f.counts().total,
            conversation: f.conversation,
            evidence: f.evidence,
            status: SessionStatus::of(f.closed, &f.file, f.failure.as_ref()),
            usage: f.usage,
            failure: f.failure.as_ref().map(failure_text),
        }
    }
}

/// The readable sessions of a store and the files left out.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct SessionListing {
    /// Oldest first, one per id.
    pub rows: Vec<SessionRow>,
    /// One entry per file left out (unreadable, or a second file holding a listed id).
    pub warnings: Vec<FileWarning>,
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
                r.status.as_str().to_owned(),
                usage_text(r.usage),
            ]);
        }
        let mut out = render_table(&table, &[4, 5]);
        for r in &self.rows {
            if let Some(f) = &r.failure {
                out.push_str(&format!("{} {}: {f}\n", r.status.as_str(), r.id));
            }
        }
        out.push_str(&format!("{} sessions", self.rows.len()));
        out.push_str(&left_out_note(&self.warnings));
        out.push('\n');
        out
    }
}

/// `", N file(s) left out (run `rath verify`)"`, or nothing.
pub(crate) fn left_out_note(warnings: &[FileWarning]) -> String {
    if warnings.is_empty() {
        String::new()
    } else {
        format!(", {} file(s) left out (run `rath verify`)", warnings.len())
    }
}

/// Lineage rows of a store, one per id, and the files left out.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct LineageListing {
    /// In listing order (oldest first).
    pub rows: Vec<rath_persist::LineageRow>,
    /// One entry per file left out.
    pub warnings: Vec<FileWarning>,
    /// Each session's chunk counts, for the tree (a row's `chunk_count` is Python's, the
    /// conversation alone).
    #[serde(skip)]
    pub counts: std::collections::HashMap<SessionId, ChunkCounts>,
}

/// How [`LineageListing::render`] prints the rows (`rath lineage --format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineageFormat {
    /// An indented tree ([`lineage_tree`]).
    #[default]
    Tree,
    /// Python OpenRath's lineage export rows, one JSON object a line.
    Jsonl,
    /// A Graphviz DOT graph.
    Dot,
    /// A Mermaid flowchart.
    Mermaid,
}

impl LineageListing {
    /// The rows in `format` (the files left out are in [`LineageListing::warnings`]).
    pub fn render(&self, format: LineageFormat) -> String {
        let rows = &self.rows;
        match format {
            LineageFormat::Tree => lineage_tree(rows, &self.counts),
            LineageFormat::Jsonl => rath_persist::export_jsonl_string(rows),
            LineageFormat::Dot => rath_persist::to_dot(rows),
            LineageFormat::Mermaid => rath_persist::to_mermaid(rows),
        }
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
                dir: sessions,
                db: None,
            });
        }
        if dir.is_dir() {
            return Ok(Self {
                dir: dir.to_path_buf(),
                db: None,
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

    /// A view of any store through its [`rath_persist::SessionStore`] trait object. The
    /// store's calls run on a runtime the view owns, so `store` must not need another one
    /// (open it with [`StoreView::open_url`], which does this for you).
    pub fn from_store(
        store: std::sync::Arc<dyn rath_persist::SessionStore>,
    ) -> Result<Self, InspectError> {
        Ok(Self::with_runtime(store, db::runtime()?))
    }

    fn with_runtime(
        store: std::sync::Arc<dyn rath_persist::SessionStore>,
        rt: tokio::runtime::Runtime,
    ) -> Self {
        let db = db::Db::new(store, rt);
        StoreView {
            dir: PathBuf::from(db.name()),
            db: Some(db),
        }
    }

    /// Opens the store `url` names (see [`rath_store_sql::open_store`]): a JSONL directory
    /// (an OpenRath home or its `sessions/`; read file by file, as [`StoreView::open`]),
    /// `sqlite://FILE` or `postgres://...` (read through the `SessionStore` trait). A JSONL
    /// directory must exist and a SQLite file too: viewing never creates a store, and never
    /// writes one (see [`rath_store_sql::open_store_read`]).
    pub fn open_url(url: &str) -> Result<Self, InspectError> {
        let url = url.trim();
        if !is_database_url(url) {
            return Self::open(url);
        }
        if let Some(file) = sqlite_file(url)
            && !file.is_file()
        {
            return Err(InspectError::NoStore { dir: file });
        }
        let rt = db::runtime()?;
        // Opened to read: a store is never created, migrated or changed by viewing it, and a
        // file that is not a store is refused.
        let store = db::block_on(&rt, rath_store_sql::open_store_read(url))?;
        Ok(Self::with_runtime(std::sync::Arc::from(store), rt))
    }

    /// Opens the store the environment names: `$OPENRATH_STORE` when set (a URL, see
    /// [`StoreView::open_url`]), else [`StoreView::default_location`].
    pub fn from_env() -> Result<Self, InspectError> {
        match std::env::var(rath_store_sql::STORE_ENV) {
            Ok(url) if !url.trim().is_empty() => Self::open_url(url.trim()),
            _ => Self::default_location(),
        }
    }

    /// The sessions directory (for a store read through the trait: its name).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store behind the trait, when the view reads through it (not a JSONL directory).
    pub fn store(&self) -> Option<&std::sync::Arc<dyn rath_persist::SessionStore>> {
        self.db.as_ref().map(db::Db::store)
    }

    /// Every readable session (oldest first, one per id) and the files left out.
    pub fn sessions(&self) -> Result<SessionListing, InspectError> {
        let (facts, warnings) = self.facts()?;
        Ok(SessionListing {
            rows: facts.iter().map(SessionRow::from_facts).collect(),
            warnings,
        })
    }

    /// Resolves a session named by its header id in full, by the exact name of its file
    /// (with or without the suffix), or by a unique prefix or suffix of one header id.
    pub fn resolve(&self, text: &str) -> Result<SessionId, InspectError> {
        let index = self.index()?;
        let unknown = |id: &str| InspectError::UnknownSession {
            id: id.to_owned(),
            dir: self.dir().to_path_buf(),
            unreadable: index.unreadable(),
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(unknown(""));
        }
        if let Some(f) = index.files.iter().find(|f| f.id.as_str() == text) {
            return Ok(f.id.clone());
        }
        let named = |f: &&StoredFile| {
            f.file == text
                || f.file.strip_suffix(rath_persist::SESSION_SUFFIX) == Some(text)
                || f.file.strip_suffix(rath_persist::PARTIAL_SUFFIX) == Some(text)
        };
        if let Some(f) = index.files.iter().find(named) {
            return Ok(f.id.clone());
        }
        let matches: Vec<&StoredFile> = index
            .files
            .iter()
            .filter(|f| f.id.as_str().starts_with(text) || f.id.as_str().ends_with(text))
            .collect();
        match matches.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => Err(unknown(text)),
            many => Err(InspectError::AmbiguousId {
                id: text.to_owned(),
                matches: many.len(),
            }),
        }
    }

    /// Loads one session in full (found by header id).
    pub fn load(&self, id: &SessionId) -> Result<LoadedSession, InspectError> {
        if let Some(db) = &self.db {
            self.locate(id)?;
            return db.load(id);
        }
        let (file, _) = self.locate(id)?;
        Ok(rath_persist::load_file(&file.path)?)
    }

    /// Sessions loaded whole, from any kind of store: every readable one, or with `id`, that
    /// session and every ancestor the store holds (so its trace is whole); and the files
    /// left out because they do not load. What `rath export otel` exports: the same
    /// sessions give the same result whether a JSONL directory, SQLite or PostgreSQL holds
    /// them. Crashed (partial) files are read like closed ones. Sorted by id.
    pub fn load_with_ancestors(
        &self,
        id: Option<&SessionId>,
    ) -> Result<(Vec<LoadedSession>, Vec<FileWarning>), InspectError> {
        let index = self.index()?;
        let mut warnings = index.warnings.clone();
        let mut out = Vec::new();
        let load = |f: &StoredFile, warnings: &mut Vec<FileWarning>| {
            let loaded = match &self.db {
                Some(db) => db.load(&f.id),
                None => rath_persist::load_file(&f.path).map_err(InspectError::from),
            };
            match loaded {
                Ok(l) => Some(l),
                Err(e) => {
                    warnings.push(FileWarning::unreadable_text(f.file.clone(), e.to_string()));
                    None
                }
            }
        };
        match id {
            None => {
                for f in &index.files {
                    out.extend(load(f, &mut warnings));
                }
            }
            Some(id) => {
                if index.get(id).is_none() {
                    return Err(InspectError::UnknownSession {
                        id: id.to_string(),
                        dir: self.dir().to_path_buf(),
                        unreadable: index.unreadable(),
                    });
                }
                let mut wanted = vec![id.clone()];
                let mut seen = std::collections::HashSet::new();
                while let Some(next) = wanted.pop() {
                    if !seen.insert(next.clone()) {
                        continue;
                    }
                    let Some(f) = index.get(&next) else {
                        continue; // a parent the store does not hold: linked by id only
                    };
                    if let Some(l) = load(f, &mut warnings) {
                        wanted.extend(l.session.lineage().parents.iter().cloned());
                        out.push(l);
                    }
                }
            }
        }
        out.sort_by(|a, b| a.session.id().as_str().cmp(b.session.id().as_str()));
        Ok((out, warnings))
    }

    /// The transcript of one session, in full.
    pub fn transcript(&self, id: &SessionId) -> Result<Transcript, InspectError> {
        Ok(Transcript::new(&self.load(id)?))
    }

    /// Lineage rows of every readable session (one per id, listing order) and the files
    /// left out.
    pub fn lineage(&self) -> Result<LineageListing, InspectError> {
        if let Some(db) = &self.db {
            let counts = db
                .list()?
                .into_iter()
                .map(|s| (s.id, ChunkCounts::new(s.chunk_count, s.evidence_count)))
                .collect();
            return Ok(LineageListing {
                rows: db.lineage_rows()?,
                warnings: Vec::new(),
                counts,
            });
        }
        let (facts, warnings) = self.facts()?;
        Ok(LineageListing {
            rows: facts.iter().map(lineage_row).collect(),
            warnings,
            counts: facts.iter().map(|f| (f.id.clone(), f.counts())).collect(),
        })
    }

    /// Lineage rows of every readable session, in listing order (see [`StoreView::lineage`]
    /// for the files left out).
    pub fn lineage_rows(&self) -> Result<Vec<rath_persist::LineageRow>, InspectError> {
        Ok(self.lineage()?.rows)
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

    /// Reads every file in the store and reports what it found. Modifies nothing.
    pub fn verify(&self) -> Result<VerifyReport, InspectError> {
        if let Some(db) = &self.db {
            return db.verify();
        }
        verify_dir(self.dir())
    }
}

/// True for a URL naming a database store (`sqlite:`, `postgres://`, `postgresql://`);
/// anything else names a JSONL directory.
pub fn is_database_url(url: &str) -> bool {
    url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The file a `sqlite:` URL names (`sqlite://FILE` or `sqlite:FILE`, options after `?`
/// dropped); `None` for other URLs and for an in-memory database.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

fn lineage_row(f: &FileFacts) -> rath_persist::LineageRow {
    rath_persist::LineageRow {
        id: f.id.clone(),
        parent_session_ids: f.lineage.parents.to_vec(),
        lineage_operator: f.lineage.operator.to_string(),
        lineage_kind: f.lineage.kind.clone(),
        lineage_extras: f.lineage.extras.clone(),
        chunk_count: f.conversation,
        cumulative_usage: f.usage,
    }
}

/// An error's message with the store directory prefix removed from paths.
pub(crate) fn relative_message(e: &rath_persist::PersistError, dir: &Path) -> String {
    let text = e.to_string();
    let mut prefix: PathBuf = dir.to_path_buf();
    prefix.push("");
    text.replace(&*prefix.to_string_lossy(), "")
}
