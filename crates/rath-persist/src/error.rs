//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong reading or writing a session store.
///
/// Parse problems name the file and the 1-based line, so a person can open the file and look.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// A filesystem call failed. Check permissions, disk space, or that the directory exists.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `write`, `rename`, ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another writer (in this or another process) holds the session file's lock. Wait for it
    /// to close, or write under another id.
    #[error("{path} is locked: another writer is already appending to this session")]
    Locked {
        /// The locked `__partial__` file.
        path: PathBuf,
    },
    /// A closed file for this session id already exists and replacing it was not asked for.
    /// Another run or writer saved a session under this id; write under a fresh id (the
    /// default stamper's ids never collide), load the stored one, or pass
    /// `WriterOptions::replace(true)` to overwrite it on purpose. Nothing was written.
    #[error("{path} already exists: session stored by another run or writer (not replaced)")]
    Exists {
        /// The closed `<id>.jsonl` file.
        path: PathBuf,
    },
    /// No file for this session id (neither `<id>.jsonl` nor `<id>.jsonl.__partial__`).
    #[error("no persisted session {id} in {dir}")]
    NotFound {
        /// The id asked for.
        id: String,
        /// The store directory searched.
        dir: PathBuf,
    },
    /// A line is not valid JSON or a record has a malformed field. The file is corrupt at
    /// that line (a torn *last* line is skipped, never reported).
    #[error("{path}:{line}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A record appears where the format does not allow it (chunk before header, duplicate
    /// header, unknown `record_type`, unknown chunk kind).
    #[error("{path}:{line}: {message}")]
    Structure {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is out of place.
        message: String,
    },
    /// The file was written by a newer (or unversioned) format; upgrade openrath to read it.
    #[error(
        "{path}:{line}: schema_version {found} is not supported (this build reads {supported})"
    )]
    UnsupportedSchema {
        /// The file.
        path: PathBuf,
        /// 1-based line number of the header.
        line: usize,
        /// The version in the file.
        found: i64,
        /// The version this crate reads and writes.
        supported: i64,
    },
    /// The file holds no header record (empty, or only a torn line).
    #[error("{path}: no header record found")]
    MissingHeader {
        /// The file.
        path: PathBuf,
    },
    /// The writer was already closed or abandoned; open a new one.
    #[error("writer for {path} is closed")]
    WriterClosed {
        /// The session file.
        path: PathBuf,
    },
    /// `sync_to` was given a session that is not a continuation of what was written (other
    /// id, or fewer chunks than already written). Open a new writer for it.
    #[error("cannot sync {path}: {message}")]
    NotAContinuation {
        /// The session file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// An optimistic write lost a race: the writer expected the stored session to hold
    /// `expected` chunks, but it holds `found` (`None`: not stored at all). Another writer
    /// appended first; nothing was written. Load the stored session and decide again.
    #[error("{store}: conflict on session {id}: expected {expected} stored chunks, found {}", found.map_or_else(|| "no session".to_owned(), |n| n.to_string()))]
    Conflict {
        /// The store (its name, see [`crate::SessionStore::name`]).
        store: String,
        /// The session.
        id: String,
        /// The stored length the writer expected.
        expected: usize,
        /// The stored length found (`None` when the session is not stored).
        found: Option<usize>,
    },
    /// A write carried a fencing token older than one the store already accepted for the same
    /// key: the writer's lease has passed to another. Nothing was written.
    #[error("{store}: fenced: token {token} for {key} is stale (the store has accepted {current})")]
    Fenced {
        /// The store.
        store: String,
        /// The fence key (a run or lease name).
        key: String,
        /// The token the write carried.
        token: u64,
        /// The newest token the store has accepted for the key.
        current: u64,
    },
    /// The store's schema is newer than this build understands (written by a newer
    /// openrath); upgrade openrath. Nothing was changed.
    #[error(
        "{store}: schema version {found} is newer than this build's {supported}; upgrade openrath to open it"
    )]
    NewerSchema {
        /// The store.
        store: String,
        /// The version the store holds.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The store's backend failed: a database refused the connection, was restarted
    /// mid-transaction, ran out of space, or its file is corrupt. The transaction in
    /// flight was rolled back (no partial session is visible); the next call reconnects.
    #[error("{store}: {op}: {message}")]
    Backend {
        /// The store.
        store: String,
        /// What was being done (`connect`, `save`, `load`, `migrate`, ...).
        op: &'static str,
        /// The backend's message.
        message: String,
        /// The backend's error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// What the store holds cannot be read back as a session (a damaged row or document).
    #[error("{store}: session {id}: {message}")]
    CorruptStore {
        /// The store.
        store: String,
        /// The session.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// The store to read does not exist (no such file or directory, no such schema). Reading
    /// never creates a store: check the URL or path.
    #[error("{store}: no such store (reading never creates one)")]
    NoStore {
        /// The store (its URL or path, never a password).
        store: String,
    },
    /// What the URL names exists but is not an openrath store (a foreign or empty SQLite
    /// file, a database without the store's tables). Nothing was written to it.
    #[error("{store}: not an openrath store: {reason}")]
    NotAStore {
        /// The store.
        store: String,
        /// What was found instead.
        reason: String,
    },
    /// The store's schema is older than this build's, and it was opened to read: reading
    /// never migrates. Run `rath store migrate` (or open it to write) first.
    #[error(
        "{store}: schema version {found} is older than this build's {supported}; run `rath store migrate` to upgrade it (reading never migrates)"
    )]
    OlderSchema {
        /// The store.
        store: String,
        /// The version the store holds.
        found: i64,
        /// The version this build reads and writes.
        supported: i64,
    },
    /// Another connection holds the store's lock and kept it past the busy timeout (a
    /// SQLite file another process is writing, or holds in an open transaction). Retry when
    /// it is done.
    #[error(
        "{store}: {op}: the database is locked by another connection (another process writing it, or holding a transaction open), still after the busy timeout"
    )]
    Busy {
        /// The store.
        store: String,
        /// What was being done (`open`, `load`, ...).
        op: &'static str,
    },
    /// The database server could not be reached (connection refused, no such host, a
    /// network error): nothing listens at that address, or it is down. Check the URL's
    /// host and port, or start the server.
    #[error("{store}: cannot connect to {address}: {message}")]
    Unreachable {
        /// The store (never a password).
        store: String,
        /// `host:port` (or the socket) that was tried.
        address: String,
        /// The operating system's or driver's message.
        message: String,
    },
    /// Sessions of the source store could not be read, so a copy would not be lossless: they
    /// are named here, and nothing was copied. Repair or remove them (`rath verify` says
    /// what is wrong), or copy with `--skip-unreadable` to leave them out.
    #[error("{store}: {} session file(s) cannot be read, nothing copied: {}", files.len(), files.join("; "))]
    Unreadable {
        /// The source store.
        store: String,
        /// Each file left out, with why.
        files: Vec<String>,
    },
    /// A store URL that names no known store (see `rath_store_sql::open_store`).
    #[error("store URL {url:?}: {message}")]
    BadStoreUrl {
        /// The URL given.
        url: String,
        /// Why it is refused.
        message: String,
    },
    /// The store cannot do what was asked (a fenced or atomic batch on the JSONL directory).
    #[error("{store}: {what} is not supported by this store")]
    Unsupported {
        /// The store.
        store: String,
        /// What was asked.
        what: &'static str,
    },
    /// A value could not be serialised (a serde error from a chunk payload).
    #[error("cannot serialise a record for {path}: {source}")]
    Serialize {
        /// The session file.
        path: PathBuf,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

impl PersistError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PersistError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The error's kind in `snake_case` (`not_found`, `conflict`, `fenced`, `backend`, ...):
    /// a short, stable name for metrics and trace attributes (`error.type`) that never
    /// carries a path, URL or message.
    pub fn kind(&self) -> &'static str {
        match self {
            PersistError::Io { .. } => "io",
            PersistError::Locked { .. } => "locked",
            PersistError::Exists { .. } => "exists",
            PersistError::NotFound { .. } => "not_found",
            PersistError::Corrupt { .. } => "corrupt",
            PersistError::Structure { .. } => "structure",
            PersistError::UnsupportedSchema { .. } => "unsupported_schema",
            PersistError::MissingHeader { .. } => "missing_header",
            PersistError::WriterClosed { .. } => "writer_closed",
            PersistError::NotAContinuation { .. } => "not_a_continuation",
            PersistError::Conflict { .. } => "conflict",
            PersistError::Fenced { .. } => "fenced",
            PersistError::NewerSchema { .. } => "newer_schema",
            PersistError::Backend { .. } => "backend",
            PersistError::CorruptStore { .. } => "corrupt_store",
            PersistError::NoStore { .. } => "no_store",
            PersistError::NotAStore { .. } => "not_a_store",
            PersistError::OlderSchema { .. } => "older_schema",
            PersistError::Busy { .. } => "busy",
            PersistError::Unreachable { .. } => "unreachable",
            PersistError::Unreadable { .. } => "unreadable",
            PersistError::BadStoreUrl { .. } => "bad_store_url",
            PersistError::Unsupported { .. } => "unsupported",
            PersistError::Serialize { .. } => "serialize",
        }
    }

    /// The file this error is about, when there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            PersistError::Io { path, .. }
            | PersistError::Locked { path }
            | PersistError::Exists { path }
            | PersistError::Corrupt { path, .. }
            | PersistError::Structure { path, .. }
            | PersistError::UnsupportedSchema { path, .. }
            | PersistError::MissingHeader { path }
            | PersistError::WriterClosed { path }
            | PersistError::NotAContinuation { path, .. }
            | PersistError::Serialize { path, .. } => Some(path),
            PersistError::NotFound { dir, .. } => Some(dir),
            PersistError::Conflict { .. }
            | PersistError::Fenced { .. }
            | PersistError::NewerSchema { .. }
            | PersistError::Backend { .. }
            | PersistError::CorruptStore { .. }
            | PersistError::BadStoreUrl { .. }
            | PersistError::NoStore { .. }
            | PersistError::NotAStore { .. }
            | PersistError::OlderSchema { .. }
            | PersistError::Busy { .. }
            | PersistError::Unreachable { .. }
            | PersistError::Unreadable { .. }
            | PersistError::Unsupported { .. } => None,
        }
    }

    /// The store this error names, for the errors of the [`crate::SessionStore`] contract.
    pub fn store(&self) -> Option<&str> {
        match self {
            PersistError::Conflict { store, .. }
            | PersistError::Fenced { store, .. }
            | PersistError::NewerSchema { store, .. }
            | PersistError::Backend { store, .. }
            | PersistError::CorruptStore { store, .. }
            | PersistError::NoStore { store }
            | PersistError::NotAStore { store, .. }
            | PersistError::OlderSchema { store, .. }
            | PersistError::Busy { store, .. }
            | PersistError::Unreachable { store, .. }
            | PersistError::Unreadable { store, .. }
            | PersistError::Unsupported { store, .. } => Some(store),
            _ => None,
        }
    }

    /// The 1-based line number for parse errors.
    pub fn line(&self) -> Option<usize> {
        match self {
            PersistError::Corrupt { line, .. }
            | PersistError::Structure { line, .. }
            | PersistError::UnsupportedSchema { line, .. } => Some(*line),
            _ => None,
        }
    }
}
