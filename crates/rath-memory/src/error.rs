//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong with a memory store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A `memory://<scope>/<path>` address was malformed. Fix the text; the reason says how.
    #[error("invalid memory uri {uri:?}: {reason}")]
    InvalidUri {
        /// The text given.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An unknown scope name. Use one of `user`, `agent`, `session`, `resources`.
    #[error("unknown memory scope {0:?} (expected user, agent, session or resources)")]
    UnknownScope(String),
    /// A store id that cannot name a directory. Use letters, digits, `.`, `_` and `-`.
    #[error("invalid store id {0:?}: use 1-64 of [A-Za-z0-9._-], not starting with '.'")]
    InvalidStoreId(String),
    /// No item at this address. `list` shows what exists.
    #[error("no memory item at {0}")]
    NotFound(String),
    /// A commit with this id but other items is already in the store (commit ids are unique;
    /// repeating the same commit is a no-op). Commit under a fresh id ([`crate::commit_id_for`]
    /// mints unique ones by default).
    #[error("memory commit {0} already exists with other items")]
    CommitExists(String),
    /// Another open store (in this process or another) holds the store's lock, and kept it
    /// for the whole wait ([`crate::LocalOptions::lock_wait`]). Close it, or open a different
    /// store id.
    #[error(
        "memory store at {} is locked by another open store (waited {waited_ms} ms)",
        path.display()
    )]
    Locked {
        /// The store directory.
        path: PathBuf,
        /// How long opening waited for the lock.
        waited_ms: u64,
    },
    /// A line in the middle of the store's log is not a valid record. The log is
    /// human-readable: repair or remove that line, then reopen.
    #[error("memory log {} is corrupt at line {line}: {reason}", path.display())]
    CorruptLog {
        /// The log file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parse error.
        reason: String,
    },
    /// The store directory belongs to an unknown format or version.
    #[error("{} is not a rath-memory local store: {reason}", path.display())]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// The embedder failed or returned vectors of the wrong shape. Retry, or open the store
    /// without an embedder to fall back to lexical recall.
    #[error("embedder {embedder} failed: {reason}")]
    Embedding {
        /// The embedder's id.
        embedder: String,
        /// What went wrong.
        reason: String,
    },
    /// A policy or call named chunks the session does not have.
    #[error("chunk selection is invalid for session {session_id}: {reason}")]
    BadSelection {
        /// The session.
        session_id: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing the store's files failed.
    #[error("memory store i/o on {}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl MemoryError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| MemoryError::Io { path, source }
    }
}
