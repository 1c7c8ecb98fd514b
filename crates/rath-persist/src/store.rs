//! The session store: one directory of `<id>.jsonl` files.
//!
//! ```
//! use rath_persist::Store;
//! use rath_session::{Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::at(dir.path());
//! let s = Session::user_with("hi", Stamper::counter());
//! store.save(&s)?;
//! let rows = store.list()?;
//! assert_eq!(rows.len(), 1);
//! assert_eq!(rows[0].chunk_count, 1);
//! assert!(rows[0].closed);
//! assert!(store.delete(s.id())?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Directory resolution matches Python OpenRath: `$OPENRATH_HOME/sessions/`, else
//! `./.openrath/sessions/` when `./.openrath` is a directory, else `~/.openrath/sessions/`.
//! [`Store::at`] overrides all of that.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rath_session::{LineageKind, RunFailure, Session, SessionId, Timestamp, Usage};

use crate::PersistError;
use crate::journal::LineageRow;
use crate::loader::{LoadedSession, is_blank, lines, load_file};
use crate::record::{RawLine, SkimLine};
use crate::writer::{SessionWriter, WriterOptions};

/// File suffix of a closed session.
pub const SESSION_SUFFIX: &str = ".jsonl";
/// File suffix of a session being written (or abandoned).
pub const PARTIAL_SUFFIX: &str = ".jsonl.__partial__";

/// The OpenRath home directory: `$OPENRATH_HOME`, else `./.openrath` if it is a directory,
/// else `~/.openrath`.
pub fn openrath_home() -> PathBuf {
    if let Ok(v) = std::env::var("OPENRATH_HOME") {
        let v = v.trim();
        if !v.is_empty() {
            let p = expand_tilde(v);
            return if p.is_absolute() {
                p
            } else {
                std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
            };
        }
    }
    if let Ok(cwd) = std::env::current_dir() {
        let local = cwd.join(".openrath");
        if local.is_dir() {
            return local;
        }
    }
    home_dir().join(".openrath")
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn expand_tilde(v: &str) -> PathBuf {
    match v.strip_prefix('~') {
        Some("") => home_dir(),
        Some(rest) if rest.starts_with('/') => home_dir().join(&rest[1..]),
        _ => PathBuf::from(v),
    }
}

/// A summary row of one file in a store (cheap: no chunk bodies are built).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionSummary {
    /// Session id.
    pub id: SessionId,
    /// The file.
    pub path: PathBuf,
    /// Header `created_at`.
    pub created_at: Timestamp,
    /// Parents, from the header.
    pub parents: Vec<SessionId>,
    /// Lineage operator.
    pub operator: String,
    /// Lineage kind.
    pub kind: LineageKind,
    /// Lineage extras.
    pub extras: Vec<(String, serde_json::Value)>,
    /// `chunk` records (conversation chunks; what Python counts).
    pub chunk_count: u64,
    /// Evidence chunks stored in extensions.
    pub evidence_count: u64,
    /// True when the file has a trailer.
    pub closed: bool,
    /// True for a `__partial__` file without a trailer: the writer crashed or abandoned it.
    pub crashed: bool,
    /// Trailer `cumulative_usage` (`None` when absent or not closed).
    pub usage: Option<Usage>,
    /// The failure that stopped the session's run: its last chunk, when that is a
    /// `run_failure` evidence entry (see [`rath_session::Session::failure`]).
    pub failure: Option<RunFailure>,
}

impl SessionSummary {
    /// The lineage export row for this file (what Python's export would print for the
    /// session it holds).
    pub fn lineage_row(&self) -> LineageRow {
        LineageRow {
            id: self.id.clone(),
            parent_session_ids: self.parents.clone(),
            lineage_operator: self.operator.clone(),
            lineage_kind: self.kind.clone(),
            lineage_extras: self.extras.clone(),
            chunk_count: self.chunk_count,
            cumulative_usage: self.usage,
        }
    }
}

/// A directory of session files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store at the default location (see [`openrath_home`]) + `sessions/`.
    pub fn default_location() -> Self {
        Self {
            dir: openrath_home().join("sessions"),
        }
    }

    /// A store in `dir` exactly (overrides every default).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<id>.jsonl`.
    pub fn path_of(&self, id: &SessionId) -> PathBuf {
        self.dir.join(format!("{id}{SESSION_SUFFIX}"))
    }

    /// `<dir>/<id>.jsonl.__partial__`.
    pub fn partial_path_of(&self, id: &SessionId) -> PathBuf {
        self.dir.join(format!("{id}{PARTIAL_SUFFIX}"))
    }

    /// Opens a writer for `session` (writes the header now; see [`SessionWriter`]).
    pub fn writer(
        &self,
        session: &Session,
        options: WriterOptions,
    ) -> Result<SessionWriter, PersistError> {
        SessionWriter::create(self.path_of(session.id()), session, options)
    }

    /// Writes `session` whole and closes the file. Returns the final path.
    ///
    /// Never replaces another session: when `<id>.jsonl` is already stored closed, saving the
    /// same session again (same lineage, chunks, usage, pending work and placement) is a
    /// no-op that returns its path, and saving different content is
    /// [`PersistError::Exists`]. [`Store::save_with`] with [`WriterOptions::replace`]
    /// overwrites on purpose.
    ///
    /// ```
    /// use rath_persist::{PersistError, Store, WriterOptions};
    /// use rath_session::{Chunk, Session, Stamper};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::at(dir.path());
    /// let s = Session::user_with("hi", Stamper::counter());
    /// let path = store.save(&s)?;
    /// assert_eq!(store.save(&s)?, path); // identical: nothing rewritten
    /// let other = s.push(Chunk::assistant_text("a different session under one id"));
    /// assert!(matches!(store.save(&other), Err(PersistError::Exists { .. })));
    /// store.save_with(&other, WriterOptions::default().replace(true))?;
    /// assert_eq!(store.load(s.id())?.session.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, session: &Session) -> Result<PathBuf, PersistError> {
        self.save_with(session, WriterOptions::default())
    }

    /// Saves each of `sessions` with [`Store::save`] and returns how many were saved: what a
    /// program does at the end of a run, and with the sessions it has when a run fails part
    /// way (a failed run's partial session is worth keeping: `rath show` says why it failed).
    /// Stops at the first error; the sessions saved before it stay saved.
    ///
    /// ```
    /// use rath_persist::Store;
    /// use rath_session::{Session, Stamper};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::at(dir.path());
    /// let user = Session::user_with("hi", Stamper::counter());
    /// let fork = user.fork();
    /// assert_eq!(store.save_all([&user, &fork])?, 2);
    /// assert_eq!(store.list()?.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save_all<'a>(
        &self,
        sessions: impl IntoIterator<Item = &'a Session>,
    ) -> Result<usize, PersistError> {
        let mut saved = 0;
        for s in sessions {
            self.save(s)?;
            saved += 1;
        }
        Ok(saved)
    }

    /// [`Store::save`] with options.
    pub fn save_with(
        &self,
        session: &Session,
        options: WriterOptions,
    ) -> Result<PathBuf, PersistError> {
        match self.writer(session, options) {
            Ok(w) => w.close_with(session),
            Err(PersistError::Exists { path }) => {
                if holds_same_session(&path, session) {
                    Ok(path)
                } else {
                    Err(PersistError::Exists { path })
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Loads a session by id: `<id>.jsonl`, falling back to `<id>.jsonl.__partial__`.
    pub fn load(&self, id: &SessionId) -> Result<LoadedSession, PersistError> {
        let full = self.path_of(id);
        if full.is_file() {
            return load_file(&full);
        }
        let partial = self.partial_path_of(id);
        if partial.is_file() {
            return load_file(&partial);
        }
        Err(PersistError::NotFound {
            id: id.to_string(),
            dir: self.dir.clone(),
        })
    }

    /// Replaces every chunk line whose document is `old` by one whose document is `new`, in
    /// every session file of the directory; returns how many lines were replaced. Each file
    /// changed is written anew (mode 0600) and renamed over the old one, so no copy of the
    /// old line stays in it. See `SessionStore::replace_chunk_doc`.
    pub fn replace_chunk_doc(&self, old: &[u8], new: &[u8]) -> Result<u64, PersistError> {
        // A document's members (`"kind": …, "payload": {…}`) appear verbatim in the record of
        // a conversation chunk and in the evidence entry of an evidence chunk (on a record or
        // the trailer); inside a JSON string they would be escaped, so every bounded
        // occurrence is the chunk itself.
        let (Some(old_members), Some(new_members)) = (
            old.strip_prefix(b"{").and_then(|d| d.strip_suffix(b"}")),
            new.strip_prefix(b"{").and_then(|d| d.strip_suffix(b"}")),
        ) else {
            return Ok(0);
        };
        if old_members.is_empty() {
            return Ok(0);
        }
        let io = |op: &'static str, path: &Path, source: std::io::Error| PersistError::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io("read_dir", &self.dir, e)),
        };
        let finder = memchr::memmem::Finder::new(old_members);
        let mut replaced = 0u64;
        for entry in entries {
            let path = entry.map_err(|e| io("read_dir", &self.dir, e))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if !name.is_some_and(|n| n.ends_with(SESSION_SUFFIX) || n.ends_with(PARTIAL_SUFFIX)) {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| io("read", &path, e))?;
            if finder.find(&bytes).is_none() {
                continue;
            }
            let (out, here) = replace_members(&bytes, &finder, old_members.len(), new_members);
            if here == 0 {
                continue;
            }
            let tmp = path.with_extension("erase-tmp");
            write_private(&tmp, &out)?;
            std::fs::rename(&tmp, &path).map_err(|e| io("rename", &path, e))?;
            replaced += here;
        }
        if replaced > 0
            && let Ok(d) = std::fs::File::open(&self.dir)
        {
            // Best effort, as the writer's own directory sync: the renames are durable.
            let _ = d.sync_all();
        }
        Ok(replaced)
    }

    /// Summaries of every readable session file, oldest `created_at` first (ties by file
    /// name). Unreadable files are skipped, like Python; [`Store::scan`] reports them.
    pub fn list(&self) -> Result<Vec<SessionSummary>, PersistError> {
        Ok(self.scan()?.0)
    }

    /// Summaries of the readable files and the errors of the unreadable ones.
    pub fn scan(&self) -> Result<(Vec<SessionSummary>, Vec<PersistError>), PersistError> {
        let mut names = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Vec::new(), Vec::new()));
            }
            Err(e) => return Err(PersistError::io("read_dir", &self.dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| PersistError::io("read_dir", &self.dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if (name.ends_with(SESSION_SUFFIX) || name.ends_with(PARTIAL_SUFFIX))
                && entry.path().is_file()
            {
                names.push(name);
            }
        }
        names.sort();
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        for name in names {
            match summarize_file(&self.dir.join(&name)) {
                Ok(s) => ok.push(s),
                Err(e) => bad.push(e),
            }
        }
        ok.sort_by_key(|s| s.created_at);
        Ok((ok, bad))
    }

    /// Deletes `<id>.jsonl` and `<id>.jsonl.__partial__`; true when anything was removed.
    pub fn delete(&self, id: &SessionId) -> Result<bool, PersistError> {
        let mut removed = false;
        for p in [self.path_of(id), self.partial_path_of(id)] {
            match std::fs::remove_file(&p) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(PersistError::io("remove", p, e)),
            }
        }
        Ok(removed)
    }

    /// Deletes sessions whose header `created_at` is older than `now - older_than`; returns
    /// their ids. Unreadable files are left alone.
    pub fn prune(
        &self,
        older_than: Duration,
        now: Timestamp,
    ) -> Result<Vec<SessionId>, PersistError> {
        let micros = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let cutoff = now.plus_micros(-micros);
        let mut removed = Vec::new();
        for s in self.list()? {
            if s.created_at < cutoff {
                match std::fs::remove_file(&s.path) {
                    Ok(()) => removed.push(s.id),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(PersistError::io("remove", &s.path, e)),
                }
            }
        }
        Ok(removed)
    }

    /// Lineage rows for every readable session file, in [`Store::list`] order.
    pub fn lineage_rows(&self) -> Result<Vec<LineageRow>, PersistError> {
        Ok(self
            .list()?
            .iter()
            .map(SessionSummary::lineage_row)
            .collect())
    }
}

/// True when the closed file at `path` holds `session`: same id, lineage, chunks, usage,
/// per-agent usage, pending calls and placement. Unreadable or unclosed files never match.
fn holds_same_session(path: &Path, session: &Session) -> bool {
    let Ok(stored) = load_file(path) else {
        return false;
    };
    let s = &stored.session;
    stored.closed
        && s.id() == session.id()
        && s.lineage() == session.lineage()
        && s.usage() == session.usage()
        && s.agent_usage() == session.agent_usage()
        && s.pending() == session.pending()
        && s.placement().backend() == session.placement().backend()
        && s.placement().spec() == session.placement().spec()
        && s.placement().handle_id() == session.placement().handle_id()
        && s.chunks() == session.chunks()
}

/// Summarises one file: the header in full, then only `record_type` (and usage/evidence
/// counts) of the other lines.
pub fn summarize_file(path: &Path) -> Result<SessionSummary, PersistError> {
    let bytes = std::fs::read(path).map_err(|e| PersistError::io("read", path, e))?;
    let corrupt = |line, message: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut header: Option<SessionSummary> = None;
    let (mut chunks, mut evidence, mut closed, mut usage) = (0u64, 0u64, false, None);
    let mut last_failure: Option<(u64, RunFailure)> = None;
    for (lineno, line) in lines(&bytes) {
        let Some(line) = line else { continue };
        if is_blank(line) {
            continue;
        }
        if header.is_none() {
            let raw: RawLine = serde_json::from_slice(line)
                .map_err(|e| corrupt(lineno, format!("invalid record: {e}")))?;
            if raw.record_type.as_deref() == Some("header") {
                // Reuse the full loader's header checks on this one line.
                let loaded = crate::loader::load_bytes(path, &[line, b"\n"].concat())?;
                let s = &loaded.session;
                header = Some(SessionSummary {
                    id: s.id().clone(),
                    path: path.to_path_buf(),
                    created_at: loaded.created_at,
                    parents: s.lineage().parents.to_vec(),
                    operator: s.lineage().operator.to_string(),
                    kind: s.lineage().kind.clone(),
                    extras: s.lineage().extras.clone(),
                    chunk_count: 0,
                    evidence_count: 0,
                    closed: false,
                    crashed: false,
                    usage: None,
                    failure: None,
                });
            }
            continue;
        }
        let skim: SkimLine = serde_json::from_slice(line)
            .map_err(|e| corrupt(lineno, format!("invalid record: {e}")))?;
        match skim.record_type.as_deref() {
            Some("chunk") => chunks += 1,
            Some("trailer") => {
                closed = true;
                usage = skim.cumulative_usage.map(Usage::from);
            }
            _ => {}
        }
        if let Some(ext) = skim.rath_ext {
            evidence += ext.evidence.len() as u64;
            for e in ext.evidence {
                if let (Some(f), Some(at)) = (e.failure, e.at)
                    && last_failure.as_ref().is_none_or(|(p, _)| at >= *p)
                {
                    last_failure = Some((at, f));
                }
            }
        }
    }
    let mut s = header.ok_or_else(|| PersistError::MissingHeader {
        path: path.to_path_buf(),
    })?;
    s.chunk_count = chunks;
    s.evidence_count = evidence;
    s.closed = closed;
    s.crashed = !closed && path.to_string_lossy().ends_with(PARTIAL_SUFFIX);
    s.usage = usage;
    // Only a failure at the very end counts (a resumed run continued after it).
    s.failure = last_failure.and_then(|(at, f)| (at + 1 == chunks + evidence).then_some(f));
    Ok(s)
}

/// `bytes` (a session file) with every bounded occurrence of a chunk's members on its chunk
/// records and trailer replaced by `new` (see [`Store::replace_chunk_doc`]), and how many.
fn replace_members(
    bytes: &[u8],
    finder: &memchr::memmem::Finder<'_>,
    old_len: usize,
    new: &[u8],
) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut here = 0u64;
    for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        if i == 0 {
            // The header holds no chunk.
            out.extend_from_slice(line);
            continue;
        }
        let mut at = 0;
        for hit in finder.find_iter(line) {
            let end = hit + old_len;
            let before = &line[..hit];
            let bounded = (before.ends_with(b"{") || before.ends_with(b", "))
                && (line[end..].starts_with(b"}") || line[end..].starts_with(b", "));
            if bounded && hit >= at {
                out.extend_from_slice(&line[at..hit]);
                out.extend_from_slice(new);
                at = end;
                here += 1;
            }
        }
        out.extend_from_slice(&line[at..]);
    }
    (out, here)
}

/// Writes `bytes` to a new file `path` (mode 0600) and syncs it.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PersistError> {
    use std::io::Write as _;
    let io = |op: &'static str, source: std::io::Error| PersistError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut f = options.open(path).map_err(|e| io("open", e))?;
    f.write_all(bytes).map_err(|e| io("write", e))?;
    f.sync_all().map_err(|e| io("fsync", e))
}
