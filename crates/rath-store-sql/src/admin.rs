//! Store administration, what `rath store copy|gc|migrate|stats` runs: each function takes
//! store URLs (as [`open_store`] reads them) and returns a report with a one-line text form
//! and a `serde` form.
//!
//! ```
//! use rath_store_sql::admin;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let jsonl = dir.path().join("sessions");
//! std::fs::create_dir(&jsonl)?;
//! let s = rath_session::Session::user_with("hi", rath_session::Stamper::counter());
//! rath_persist::Store::at(&jsonl).save(&s)?;
//! rath_persist::Store::at(&jsonl).save(&s.fork())?;
//!
//! let db = format!("sqlite://{}", dir.path().join("store.sqlite").display());
//! let copied = admin::copy(jsonl.to_str().unwrap(), &db).await?;
//! assert_eq!(copied.copied, 2);
//! let stats = admin::stats(&db).await?;
//! assert_eq!((stats.sessions, stats.distinct_chunks), (2, 1)); // the fork shares its chunk
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rath_persist::{
    CopyOptions, CopyReport, GcReport, PersistError, SessionStore, StoreUrl, copy_store_with,
};
use serde::Serialize;

use crate::{open_store, open_store_read};

/// Rows and bytes of one table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Table {
    /// Table name (for a JSONL directory: `session files`).
    pub name: String,
    /// Rows (for a JSONL directory: lines).
    pub rows: u64,
    /// Bytes: `pg_total_relation_size` on PostgreSQL (heap, TOAST, indexes), the stored
    /// values' lengths on SQLite, file bytes for a JSONL directory.
    pub bytes: u64,
}

/// What a store holds (`rath store stats`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StoreStats {
    /// The store's name.
    pub store: String,
    /// Stored sessions.
    pub sessions: u64,
    /// Chunks over all sessions (a chunk shared by two sessions counts twice).
    pub chunks: u64,
    /// Chunk documents stored: for a JSONL directory the distinct ones (equal documents
    /// count once); for a SQL store the chunks its segments hold (shared through lineage, so
    /// an equal chunk of an unrelated session counts again).
    pub distinct_chunks: u64,
    /// Per table, by name.
    pub tables: Vec<Table>,
}

impl StoreStats {
    /// Bytes of every table.
    pub fn total_bytes(&self) -> u64 {
        self.tables.iter().map(|t| t.bytes).sum()
    }

    /// A table: `TABLE ROWS BYTES` per line, then the totals.
    pub fn render(&self) -> String {
        let mut out = format!("{}\n", self.store);
        let w = self
            .tables
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(out, "{:<w$}  {:>10}  {:>12}", "TABLE", "ROWS", "BYTES");
        for t in &self.tables {
            let _ = writeln!(out, "{:<w$}  {:>10}  {:>12}", t.name, t.rows, t.bytes);
        }
        let _ = writeln!(
            out,
            "{} sessions, {} chunks ({} distinct), {} bytes",
            self.sessions,
            self.chunks,
            self.distinct_chunks,
            self.total_bytes()
        );
        out
    }
}

/// What `rath store gc` freed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GcOutcome {
    /// The store's name.
    pub store: String,
    /// Deleted sessions whose rows were kept for a sharer and are now gone.
    pub sessions: u64,
    /// Chunk documents freed.
    pub chunks: u64,
    /// Bytes of chunk documents freed.
    pub bytes: u64,
}

impl GcOutcome {
    fn new(store: String, r: GcReport) -> Self {
        GcOutcome {
            store,
            sessions: r.sessions,
            chunks: r.chunks,
            bytes: r.bytes,
        }
    }

    /// One line: `STORE: freed N sessions, C chunks, B bytes`.
    pub fn render(&self) -> String {
        format!(
            "{}: freed {} session(s), {} chunk(s), {} bytes\n",
            self.store, self.sessions, self.chunks, self.bytes
        )
    }
}

/// Copies every session of `from` into `to` losslessly ([`rath_persist::copy_store`]); `to` is created
/// when absent, `from` is opened to read ([`open_store_read`]: it must exist, and is never
/// created or changed). A session file of `from` that cannot be read stops the copy
/// before anything is written ([`PersistError::Unreadable`] naming each one); see
/// [`copy_with`] to leave them out instead.
pub async fn copy(from: &str, to: &str) -> Result<CopyReport, PersistError> {
    copy_with(from, to, CopyOptions::default()).await
}

/// [`copy`], as `options` say ([`CopyOptions::skip_unreadable`]: sessions that cannot be
/// read are left out and listed in [`CopyReport::skipped`]).
pub async fn copy_with(
    from: &str,
    to: &str,
    options: CopyOptions,
) -> Result<CopyReport, PersistError> {
    let a = open_store_read(from).await?;
    let b = open_store(to).await?;
    copy_store_with(a.as_ref(), b.as_ref(), options).await
}

/// Reclaims what no stored session reaches ([`SessionStore::gc`]).
pub async fn gc(url: &str) -> Result<GcOutcome, PersistError> {
    let store = open_store(url).await?;
    let r = store.gc().await?;
    Ok(GcOutcome::new(store.name(), r))
}

/// The table that holds the chunk documents (segments of them, each stored once).
pub const CHUNK_TABLE: &str = "rath_segments";

/// `--store URL` from the process's arguments (`--store URL` or `--store=URL`), else
/// `$OPENRATH_STORE` when set and not empty; `None` means the default JSONL directory. What
/// the examples call to pick their store.
pub fn requested_store() -> Option<String> {
    requested_store_from(std::env::args().skip(1), |k| std::env::var(k).ok())
}

/// [`requested_store`] over given arguments and variables (for tests).
pub fn requested_store_from(
    args: impl IntoIterator<Item = String>,
    var: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "--store" {
            return args.next();
        }
        if let Some(v) = a.strip_prefix("--store=") {
            return Some(v.to_owned());
        }
    }
    var("OPENRATH_STORE").filter(|v| !v.trim().is_empty())
}

/// Rows and bytes per table, sessions and distinct chunks of the store at `url` (a SQL
/// store's tables as [`crate::SqliteStore::table_stats`] and [`crate::PgStore::table_stats`]
/// count them; a JSONL directory's files).
pub async fn stats(url: &str) -> Result<StoreStats, PersistError> {
    // Counting reads: the store is opened to read, never created or changed.
    let (store, tables): (Box<dyn SessionStore>, Vec<crate::TableStats>) =
        match StoreUrl::parse(url)? {
            StoreUrl::Sqlite { path } => {
                let s = match path {
                    None => crate::SqliteStore::open_default_read().await?,
                    Some(path) => crate::SqliteStore::open_read(path).await?,
                };
                let t = s.table_stats().await?;
                (Box::new(s), t)
            }
            StoreUrl::Postgres { url, schema } => {
                let s = crate::PgStore::connect_read(&url, schema.as_deref()).await?;
                let t = s.table_stats().await?;
                (Box::new(s), t)
            }
            _ => {
                let store = open_store_read(url).await?;
                let summaries = store.list().await?;
                return jsonl_stats(store.as_ref(), store.name(), &summaries).await;
            }
        };
    let summaries = store.list().await?;
    let chunks: u64 = summaries
        .iter()
        .map(|s| s.chunk_count + s.evidence_count)
        .sum();
    let distinct_chunks = tables
        .iter()
        .find(|t| t.table == CHUNK_TABLE)
        .map_or(0, |t| t.chunks);
    let tables: Vec<Table> = tables
        .into_iter()
        .map(|t| Table {
            name: t.table.to_owned(),
            rows: t.rows,
            bytes: t.bytes,
        })
        .collect();
    Ok(StoreStats {
        store: store.name(),
        sessions: summaries.len() as u64,
        chunks,
        distinct_chunks,
        tables,
    })
}

/// What `rath store migrate` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MigrateReport {
    /// The store's name.
    pub store: String,
    /// The schema version it is at now (`None` for a JSONL directory, which has none).
    pub schema_version: Option<i64>,
}

impl MigrateReport {
    /// One line.
    pub fn render(&self) -> String {
        match self.schema_version {
            Some(v) => format!(
                "{}: at schema version {v} (this build's newest)\n",
                self.store
            ),
            None => format!(
                "{}: a JSONL directory has no schema version (nothing to migrate)\n",
                self.store
            ),
        }
    }
}

/// Brings the store at `url` to this build's schema ([`crate::SCHEMA_VERSION`]): opening a
/// SQL store applies the missing migrations, forward only; a store of a newer schema is
/// refused with [`PersistError::NewerSchema`] naming both versions.
pub async fn migrate(url: &str) -> Result<MigrateReport, PersistError> {
    let store = open_store(url).await?;
    let sql = store.capabilities().atomic_batch;
    Ok(MigrateReport {
        store: store.name(),
        schema_version: sql.then_some(crate::SCHEMA_VERSION),
    })
}

/// A JSONL directory: one "table" of session files (lines, bytes); distinct chunks by
/// document bytes over every session.
async fn jsonl_stats(
    store: &dyn SessionStore,
    name: String,
    summaries: &[rath_persist::SessionSummary],
) -> Result<StoreStats, PersistError> {
    let mut distinct = BTreeSet::new();
    let mut chunks = 0u64;
    let (mut lines, mut bytes) = (0u64, 0u64);
    for s in summaries {
        let l = store.load(&s.id).await?;
        chunks += l.session.len() as u64;
        for c in l.session.chunks().iter() {
            distinct.insert(sha(&rath_persist::doc::encode_chunk(c)?));
        }
        let data = std::fs::read(&s.path).map_err(|source| PersistError::Io {
            op: "read",
            path: s.path.clone(),
            source,
        })?;
        bytes += data.len() as u64;
        lines += data.iter().filter(|&&b| b == b'\n').count() as u64;
    }
    Ok(StoreStats {
        store: name,
        sessions: summaries.len() as u64,
        chunks,
        distinct_chunks: distinct.len() as u64,
        tables: vec![Table {
            name: "session files".into(),
            rows: lines,
            bytes,
        }],
    })
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}
