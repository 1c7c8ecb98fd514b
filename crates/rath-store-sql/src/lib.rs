//! Session stores in SQLite (one file, the embedded default for anything transactional) and
//! PostgreSQL (the store a fleet of workers shares), both implementing
//! [`rath_persist::SessionStore`], and [`open_store`], which picks any store by one string.
//!
//! ```
//! use rath_persist::SessionStore;
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("store.sqlite").display());
//! let store = rath_store_sql::open_store(&url).await?;
//! let root = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
//! store.save(&root).await?;
//! // A fork is one session row: no chunk data is written for what it shares.
//! let fork = root.fork();
//! assert_eq!(store.save(&fork).await?.chunks_written, 0);
//! // A loop round writes only its new chunks.
//! let grown = fork.push(Chunk::user("more"));
//! assert_eq!(store.append(&grown, 2).await?.chunks_written, 1);
//! assert_eq!(store.load(grown.id()).await?.session.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Sessions are stored the way they live in memory: a session row pointing at the session
//! whose chunks it starts with (and a merge at its other parent), and one segment row per save
//! or append holding the documents of the chunks it adds. See [`schema`] and
//! `docs/formats.md`.

#![warn(missing_docs)]

pub mod admin;
mod codec;
mod core;
mod delegate;
mod dialect;
#[cfg(test)]
mod group_set_tests;
mod known;
pub mod postgres;
mod raw;
mod rows;
pub mod schema;
pub mod sqlite;

use rath_persist::{Capabilities, PersistError, SessionStore, Store, StoreUrl};

pub use admin::requested_store;
pub use postgres::PgStore;
pub use schema::SCHEMA_VERSION;
pub use sqlite::{DEFAULT_SQLITE_FILE, SqliteOptions, SqliteStore};

/// What both SQL stores promise: atomic batches, fencing, shared structure.
pub(crate) const SQL_CAPABILITIES: Capabilities = Capabilities::new(true, true, true);

/// Rows and bytes of one table of a SQL store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// The table.
    pub table: &'static str,
    /// Its rows.
    pub rows: u64,
    /// Its bytes (see each store's `table_stats`).
    pub bytes: u64,
    /// The chunk documents it holds (`rath_segments`: the sum of their chunk counts; 0 for
    /// the other tables).
    pub chunks: u64,
}

/// The environment variable that names the store when no URL is given.
pub const STORE_ENV: &str = "OPENRATH_STORE";

/// Opens the store `url` names, to write (creating it when missing, applying the migrations
/// it lacks):
/// - `sqlite://PATH` (or `sqlite:PATH`): the SQLite file `PATH`; `sqlite://` alone is
///   `$OPENRATH_HOME/store.sqlite`;
/// - `postgres://...` or `postgresql://...`: PostgreSQL (`?schema=NAME` keeps the tables in
///   one schema);
/// - `jsonl://DIR`, or any other string without `://` (`./dir`, `/abs/dir`): the JSONL
///   directory `DIR` (the Python OpenRath interchange format); an OpenRath home (a
///   directory holding `sessions/`) is its `sessions/` directory.
///
/// The URL is read by [`rath_persist::StoreUrl::parse`] (the run store reads it the same
/// way); anything it refuses is [`PersistError::BadStoreUrl`]. To read a store without ever
/// creating or changing it, use [`open_store_read`].
pub async fn open_store(url: &str) -> Result<Box<dyn SessionStore>, PersistError> {
    Ok(match StoreUrl::parse(url)? {
        StoreUrl::Sqlite { path: None } => Box::new(SqliteStore::open_default().await?),
        StoreUrl::Sqlite { path: Some(path) } => Box::new(SqliteStore::open(path).await?),
        StoreUrl::Postgres { url, schema } => {
            Box::new(PgStore::connect_in(&url, schema.as_deref()).await?)
        }
        StoreUrl::Jsonl { dir: None } => Box::new(Store::default_location()),
        StoreUrl::Jsonl { dir: Some(dir) } => Box::new(Store::at(sessions_dir(&dir))),
        _ => return Err(unknown(url)),
    })
}

/// Opens the store `url` names ([`open_store`]'s forms) to read: it must exist and be a
/// store, and nothing is ever created, migrated or written (a SQLite file is opened
/// read-only, a PostgreSQL connection's transactions are read-only). A missing file,
/// directory, database or schema is [`PersistError::NoStore`]; a file or database that is
/// not an openrath store (a foreign or empty SQLite file) [`PersistError::NotAStore`]; a
/// store of an older schema [`PersistError::OlderSchema`].
pub async fn open_store_read(url: &str) -> Result<Box<dyn SessionStore>, PersistError> {
    Ok(match StoreUrl::parse(url)? {
        StoreUrl::Sqlite { path: None } => Box::new(SqliteStore::open_default_read().await?),
        StoreUrl::Sqlite { path: Some(path) } => Box::new(SqliteStore::open_read(path).await?),
        StoreUrl::Postgres { url, schema } => {
            Box::new(PgStore::connect_read(&url, schema.as_deref()).await?)
        }
        StoreUrl::Jsonl { dir } => {
            let store = match dir {
                Some(dir) => Store::at(sessions_dir(&dir)),
                None => Store::default_location(),
            };
            if !store.dir().is_dir() {
                return Err(PersistError::NoStore {
                    store: store.dir().display().to_string(),
                });
            }
            Box::new(store)
        }
        _ => return Err(unknown(url)),
    })
}

/// The sessions directory of the JSONL store `dir` names: `dir/sessions` when `dir` is an
/// OpenRath home (a directory holding `sessions/`), else `dir` itself. Every command takes
/// a home and its `sessions/` directory as the same store.
pub fn sessions_dir(dir: &std::path::Path) -> std::path::PathBuf {
    let sessions = dir.join("sessions");
    if sessions.is_dir() {
        sessions
    } else {
        dir.to_path_buf()
    }
}

fn unknown(url: &str) -> PersistError {
    PersistError::BadStoreUrl {
        url: rath_persist::url::redact(url),
        message: "a kind of store this build cannot open".into(),
    }
}

/// Opens the store `$OPENRATH_STORE` names ([`open_store`]), else the JSONL directory at its
/// default location (`$OPENRATH_HOME/sessions`).
pub async fn open_store_from_env() -> Result<Box<dyn SessionStore>, PersistError> {
    match std::env::var(STORE_ENV) {
        Ok(url) if !url.trim().is_empty() => open_store(&url).await,
        _ => Ok(Box::new(Store::default_location())),
    }
}
