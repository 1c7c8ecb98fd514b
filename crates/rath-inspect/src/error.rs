//! The crate's one error type.

use std::path::PathBuf;

use rath_persist::PersistError;

/// What can go wrong looking at a store. Every variant names what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The store directory does not exist. Pass `--store DIR` or set `OPENRATH_HOME`.
    #[error("no session store at {dir} (pass --store DIR or set OPENRATH_HOME)")]
    NoStore {
        /// The directory looked at.
        dir: PathBuf,
    },
    /// No session with this id (or id prefix/suffix) is in the store. `rath sessions` lists
    /// the ids.
    #[error(
        "no session {id:?} in {dir} (`rath sessions` lists the ids){}",
        unreadable_note(*unreadable)
    )]
    UnknownSession {
        /// The id asked for.
        id: String,
        /// The store directory.
        dir: PathBuf,
        /// Files whose header could not be read (one of them may hold the session).
        unreadable: usize,
    },
    /// An abbreviated id matches more than one session. Give more characters.
    #[error("session id {id:?} is ambiguous: it matches {matches} sessions; give more of it")]
    AmbiguousId {
        /// The abbreviation.
        id: String,
        /// How many ids it matches.
        matches: usize,
    },
    /// A session file could not be read or parsed.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// A filesystem call outside the store format failed (listing a directory, writing a
    /// report). Check the path and permissions.
    #[error("{path}: {source}")]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The directory an output file (the viewer's page) should go into does not exist. Create
    /// it, or name another file.
    #[error("cannot write {path}: directory {dir} does not exist")]
    NoOutputDir {
        /// The file asked for.
        path: PathBuf,
        /// Its missing directory.
        dir: PathBuf,
    },
    /// An output file (the viewer's page) could not be written. Check the path and
    /// permissions.
    #[error("cannot write {path}: {source}")]
    WriteFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Writing output (a transcript streamed to stdout, ...) failed.
    #[error("cannot write output: {source}")]
    Write {
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The cassette given to `rath replay` could not be read or is not a cassette (JSONL of
    /// recorded interactions). Check the path, or record one with `RecordingProvider`.
    #[error("cassette {path}: {message}")]
    Cassette {
        /// The cassette path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

fn unreadable_note(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("; {n} unreadable file(s) could not be searched (run `rath verify`)")
    }
}
