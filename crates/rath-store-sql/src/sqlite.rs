//! The SQLite store: one file, WAL journal, a busy timeout, writes in `BEGIN IMMEDIATE`
//! transactions (so two writers queue instead of failing, and an appender's length check and
//! write are one step).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rath_persist::{
    Capabilities, GcReport, LoadedSession, PersistError, SessionStore, SessionSummary, WriteBatch,
    WriteReport,
};
use rath_session::SessionId;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

use crate::known::KnownSessions;

mod imp {
    crate::core::sql_store! {
        db: sqlx::Sqlite,
        migrations: crate::schema::SQLITE,
        begin_write: "BEGIN IMMEDIATE",
        begin_locked: "BEGIN IMMEDIATE",
        gc_lock: "",
        migrate_lock: "",
        for_update: "",
        for_share: "",
        octets: "length(docs)",
        hash_in: "{}",
        hash_out: "last_hash",
        blob: "BLOB",
        json_ids: "SELECT value FROM json_each($1)",
        fence_rows: "SELECT json_extract(value, '$.k'), json_extract(value, '$.t') FROM json_each($1) WHERE true",
        pg: false,
        rows: crate::rows::SqliteRows,
        kind: rath_persist::spans::StoreKind::Sqlite,
    }
}

/// A session store in one SQLite file. See the [crate docs](crate).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: sqlx::SqlitePool,
    name: String,
    path: PathBuf,
    known: Arc<KnownSessions>,
    /// The group loader's queue: concurrent loads share one query.
    loads: Arc<imp::Loads>,
    /// The group committer's queue: concurrent writes share one transaction.
    group: imp::Group,
}

/// The file name of the default SQLite store under `$OPENRATH_HOME`.
pub const DEFAULT_SQLITE_FILE: &str = "store.sqlite";

#[cfg(test)]
crate::core::group_test_hooks!(SqliteStore);

impl SqliteStore {
    /// Opens (creating it if needed) the store in the file `path` and applies the migrations
    /// it lacks. A file that is not an SQLite database, or is damaged, is
    /// [`PersistError::Backend`] naming it; a store of a newer schema is
    /// [`PersistError::NewerSchema`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, PersistError> {
        let path = path.as_ref().to_path_buf();
        let name = format!("sqlite:{}", path.display());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| PersistError::Io {
                op: "mkdir",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        // No ping before each acquire: a connection to a file in this process cannot have
        // gone away behind the pool's back, and the ping is a round trip to the
        // connection's worker thread per statement batch.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(|e| imp::backend(&name, "open", e))?;
        imp::migrate(&pool, &name).await?;
        let known: Arc<KnownSessions> = Arc::default();
        let group = imp::group(pool.clone(), name.clone(), known.clone(), 1);
        let loads = Arc::new(imp::Loads::start(pool.clone(), name.clone()));
        Ok(Self {
            loads,
            pool,
            name,
            path,
            known,
            group,
        })
    }

    /// The default store: `$OPENRATH_HOME/store.sqlite` (see [`rath_persist::openrath_home`]).
    pub async fn open_default() -> Result<Self, PersistError> {
        Self::open(rath_persist::openrath_home().join(DEFAULT_SQLITE_FILE)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows and bytes (lengths of the stored values) per table.
    pub async fn table_stats(&self) -> Result<Vec<crate::TableStats>, PersistError> {
        imp::table_stats(
            &self.pool,
            &self.name,
            &[
                (
                    "rath_sessions",
                    "SELECT sum(length(CAST(header AS BLOB)) + coalesce(length(CAST(trailer AS BLOB)), 0) + 128) FROM rath_sessions",
                ),
                (
                    "rath_segments",
                    "SELECT sum(length(docs) + 24) FROM rath_segments",
                ),
            ],
        )
        .await
    }

    /// Closes the pool (waits for connections in use to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn capabilities(&self) -> Capabilities {
        crate::SQL_CAPABILITIES
    }

    async fn write(&self, batch: WriteBatch<'_>) -> Result<Vec<WriteReport>, PersistError> {
        imp::write(&self.group, &self.pool, &self.name, &self.known, batch).await
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, PersistError> {
        imp::load(&self.pool, &self.loads, &self.name, &self.known, id).await
    }

    async fn stored_len(&self, id: &SessionId) -> Result<Option<usize>, PersistError> {
        imp::stored_len(&self.pool, &self.name, id).await
    }

    async fn revision(&self, id: &SessionId) -> Result<Option<Vec<u8>>, PersistError> {
        imp::revision(&self.pool, &self.name, id).await
    }

    async fn list(&self) -> Result<Vec<SessionSummary>, PersistError> {
        imp::list(&self.pool, &self.name).await
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, PersistError> {
        imp::delete(&self.pool, &self.name, &self.known, id).await
    }

    async fn gc(&self) -> Result<GcReport, PersistError> {
        imp::gc(&self.pool, &self.name).await
    }
}
