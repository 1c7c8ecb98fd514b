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
#[cfg(test)]
mod group_set_tests;
mod known;
pub mod postgres;
mod rows;
pub mod schema;
pub mod sqlite;

use rath_persist::{Capabilities, PersistError, SessionStore, Store};

pub use admin::requested_store;
pub use postgres::PgStore;
pub use schema::SCHEMA_VERSION;
pub use sqlite::{DEFAULT_SQLITE_FILE, SqliteStore};

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

/// Opens the store `url` names:
/// - `sqlite://PATH` (or `sqlite:PATH`): the SQLite file `PATH`; `sqlite://` alone is
///   `$OPENRATH_HOME/store.sqlite`;
/// - `postgres://...` or `postgresql://...`: PostgreSQL (`?schema=NAME` keeps the tables in
///   one schema);
/// - `jsonl://DIR`, or any other string without `://` (`./dir`, `/abs/dir`): the JSONL
///   directory `DIR` (the Python OpenRath interchange format).
///
/// Anything else is [`PersistError::BadStoreUrl`].
pub async fn open_store(url: &str) -> Result<Box<dyn SessionStore>, PersistError> {
    let bad = |message: &str| PersistError::BadStoreUrl {
        url: postgres::redact(url),
        message: message.to_owned(),
    };
    let url = url.trim();
    if url.is_empty() {
        return Err(bad("empty"));
    }
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let store = if path.is_empty() {
            SqliteStore::open_default().await?
        } else {
            SqliteStore::open(path).await?
        };
        return Ok(Box::new(store));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (base, schema) = split_schema(url).map_err(|m| bad(&m))?;
        return Ok(Box::new(
            PgStore::connect_in(&base, schema.as_deref()).await?,
        ));
    }
    if let Some(dir) = url.strip_prefix("jsonl://") {
        if dir.is_empty() {
            return Ok(Box::new(Store::default_location()));
        }
        return Ok(Box::new(Store::at(dir)));
    }
    if url.contains("://") {
        return Err(bad(
            "unknown scheme (use sqlite://, postgres://, jsonl:// or a directory)",
        ));
    }
    Ok(Box::new(Store::at(url)))
}

/// Opens the store `$OPENRATH_STORE` names ([`open_store`]), else the JSONL directory at its
/// default location (`$OPENRATH_HOME/sessions`).
pub async fn open_store_from_env() -> Result<Box<dyn SessionStore>, PersistError> {
    match std::env::var(STORE_ENV) {
        Ok(url) if !url.trim().is_empty() => open_store(&url).await,
        _ => Ok(Box::new(Store::default_location())),
    }
}

/// Splits a `schema=NAME` query parameter off a PostgreSQL URL (the driver does not know it).
fn split_schema(url: &str) -> Result<(String, Option<String>), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", v)) => schema = Some(v.to_owned()),
            _ => rest.push(pair),
        }
    }
    if schema.as_deref() == Some("") {
        return Err("schema= needs a name".to_owned());
    }
    let base = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((base, schema))
}
