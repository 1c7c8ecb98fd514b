//! The SQLite store: one file, WAL journal (set when the store is created), a busy timeout,
//! writes in `BEGIN IMMEDIATE` transactions (so two writers queue instead of failing, and an
//! appender's length check and write are one step). Opened to read
//! ([`SqliteStore::open_read`]), the file is opened read-only and never created, migrated
//! or changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rath_persist::{
    Capabilities, GcReport, LoadedSession, PersistError, SessionSummary, WriteBatch, WriteReport,
};
use rath_session::SessionId;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

use crate::known::KnownSessions;

mod imp {
    crate::core::sql_store! {
        db: sqlx::Sqlite,
        rows: crate::rows::SqliteRows,
        dialect: crate::dialect::SQLITE,
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

/// How a SQLite store is opened: to write (created when missing, migrated, WAL journal when
/// created) or to read (never created, never migrated, never written: the file is opened
/// read-only), and how long a statement waits for another connection's lock.
///
/// ```
/// use std::time::Duration;
/// use rath_store_sql::sqlite::{SqliteOptions, SqliteStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let file = dir.path().join("store.sqlite");
/// // Reading a file that is not there is an error, and creates nothing.
/// let read = SqliteOptions::read().busy_timeout(Duration::from_secs(1));
/// assert!(SqliteStore::open_with(&file, &read).await.is_err());
/// assert!(!file.exists());
/// SqliteStore::open(&file).await?.close().await;
/// SqliteStore::open_with(&file, &read).await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    read_only: bool,
    busy_timeout: Duration,
}

/// How long a SQLite statement waits for another connection's lock by default.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

impl SqliteOptions {
    /// To write: what [`SqliteStore::open`] does.
    pub fn write() -> Self {
        SqliteOptions {
            read_only: false,
            busy_timeout: BUSY_TIMEOUT,
        }
    }

    /// To read: what [`SqliteStore::open_read`] does.
    pub fn read() -> Self {
        SqliteOptions {
            read_only: true,
            busy_timeout: BUSY_TIMEOUT,
        }
    }

    /// How long a statement waits for another connection's lock before it fails with
    /// [`PersistError::Busy`] (default [`BUSY_TIMEOUT`]).
    pub fn busy_timeout(mut self, wait: Duration) -> Self {
        self.busy_timeout = wait;
        self
    }
}

impl SqliteStore {
    /// Opens (creating it if needed) the store in the file `path` and applies the migrations
    /// it lacks; a new store is put in WAL journal mode (an existing file keeps its journal
    /// mode). A file that is not an SQLite database is [`PersistError::NotAStore`], a
    /// damaged one [`PersistError::Backend`], both naming it; a store of a newer schema is
    /// [`PersistError::NewerSchema`]; a lock another connection keeps past the busy timeout
    /// is [`PersistError::Busy`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, PersistError> {
        Self::open_with(path, &SqliteOptions::write()).await
    }

    /// Opens the store in the file `path` to read: the file is opened read-only (so a
    /// read-only file, or one of another owner, can be read), nothing is created, migrated
    /// or written, and its journal mode is left as it is. A missing file is
    /// [`PersistError::NoStore`]; an empty file, a file that is not an SQLite database, or
    /// a database without the store's tables is [`PersistError::NotAStore`]; a store of an
    /// older schema is [`PersistError::OlderSchema`] (migrate it first), of a newer one
    /// [`PersistError::NewerSchema`]. Writes through it fail.
    pub async fn open_read(path: impl AsRef<Path>) -> Result<Self, PersistError> {
        Self::open_with(path, &SqliteOptions::read()).await
    }

    /// Opens the store in the file `path` as `options` say ([`SqliteStore::open`],
    /// [`SqliteStore::open_read`]).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: &SqliteOptions,
    ) -> Result<Self, PersistError> {
        let path = path.as_ref().to_path_buf();
        let name = format!("sqlite:{}", path.display());
        if !options.read_only
            && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| PersistError::Io {
                op: "mkdir",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        // Two processes opening a new file at once (a worker and a submitter started
        // together) both find it fresh and both set its journal mode, which SQLite refuses
        // at once, without waiting out the busy timeout, to the one that finds the other
        // creating it: that one opens again (now finding the file made) until the timeout.
        let started = std::time::Instant::now();
        let pool = loop {
            match Self::connect_file(&path, options, &name).await {
                Err(PersistError::Busy { .. })
                    if !options.read_only && started.elapsed() < options.busy_timeout =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => break other?,
            }
        };
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

    /// A pool over the file at `path`, created (in WAL mode) and migrated when it is new
    /// or empty and `options` write.
    async fn connect_file(
        path: &Path,
        options: &SqliteOptions,
        name: &str,
    ) -> Result<sqlx::SqlitePool, PersistError> {
        let fresh = if options.read_only {
            check_readable(path, name)?;
            false
        } else {
            std::fs::metadata(path).map_or(true, |m| m.len() == 0)
        };
        let mut connect = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true);
        connect = if options.read_only {
            connect.read_only(true)
        } else {
            connect.create_if_missing(true)
        };
        if fresh {
            // The journal mode is the store's, set once when it is created: opening an
            // existing file never changes it (that would rewrite its header).
            connect = connect.journal_mode(SqliteJournalMode::Wal);
        }
        match connect_pool(connect.clone(), options, name).await {
            // A WAL store in a directory this process cannot write (or another owner's
            // file): SQLite cannot make the shared-memory file a reader needs. With no WAL
            // content left beside it (a store closed cleanly leaves none), the file is the
            // whole store and is read as immutable: no lock, no shared memory.
            Err(e) if options.read_only && is_readonly_error(&e) && !has_wal_content(path) => {
                connect_pool(connect.immutable(true), options, name).await
            }
            other => other,
        }
    }

    /// The default store: `$OPENRATH_HOME/store.sqlite` (see [`rath_persist::openrath_home`]).
    pub async fn open_default() -> Result<Self, PersistError> {
        Self::open(rath_persist::openrath_home().join(DEFAULT_SQLITE_FILE)).await
    }

    /// The default store opened to read ([`SqliteStore::open_read`]).
    pub async fn open_default_read() -> Result<Self, PersistError> {
        Self::open_read(rath_persist::openrath_home().join(DEFAULT_SQLITE_FILE)).await
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

/// The pool over `connect`, checked (a store opened to read: its schema) or migrated (to
/// write).
async fn connect_pool(
    connect: SqliteConnectOptions,
    options: &SqliteOptions,
    name: &str,
) -> Result<sqlx::SqlitePool, PersistError> {
    // No ping before each acquire: a connection to a file in this process cannot have gone
    // away behind the pool's back, and the ping is a round trip to the connection's worker
    // thread per statement batch. The pool waits longer than a statement's busy timeout,
    // so a locked file reports the lock, not the pool's timeout.
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(options.busy_timeout + Duration::from_secs(5))
        .test_before_acquire(false)
        .connect_with(connect)
        .await
        .map_err(|e| imp::backend(name, "open", e))?;
    let ready = if options.read_only {
        imp::check_schema(&pool, name).await
    } else {
        imp::migrate(&pool, name).await.map(|_| ())
    };
    if let Err(e) = ready {
        pool.close().await;
        return Err(e);
    }
    Ok(pool)
}

/// True for SQLite's "attempt to write a readonly database" (SQLITE_READONLY and its
/// extended codes) and "unable to open database file" (SQLITE_CANTOPEN).
fn is_readonly_error(e: &PersistError) -> bool {
    let PersistError::Backend {
        source: Some(source),
        ..
    } = e
    else {
        return false;
    };
    source
        .downcast_ref::<sqlx::Error>()
        .and_then(|e| e.as_database_error())
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i64>().ok())
        .is_some_and(|c| matches!(c & 0xff, 8 | 14))
}

/// True when `path`'s write-ahead log holds anything (a `-wal` file that is not empty).
fn has_wal_content(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(PathBuf::from(wal)).is_ok_and(|m| m.len() > 0)
}

/// What a file must be before it is opened to read: there (else [`PersistError::NoStore`]),
/// and not empty (an empty file is a database of nothing, and opening it would make one).
fn check_readable(path: &Path, name: &str) -> Result<(), PersistError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => Err(PersistError::NotAStore {
            store: name.to_owned(),
            reason: "the file is empty".into(),
        }),
        Ok(m) if !m.is_file() => Err(PersistError::NotAStore {
            store: name.to_owned(),
            reason: "not a file".into(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(PersistError::NoStore {
            store: name.to_owned(),
        }),
        Err(source) => Err(PersistError::Io {
            op: "stat",
            path: path.to_path_buf(),
            source,
        }),
    }
}

crate::delegate::session_store!(SqliteStore);
