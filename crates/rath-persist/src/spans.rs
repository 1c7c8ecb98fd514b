//! The `tracing` spans every [`SessionStore`](crate::SessionStore) emits, one per store
//! operation, so a subscriber (rath-otel's OTLP bridge, a log formatter) sees what the store
//! did: which operation on which kind of store, for which session, how many writes in a batch
//! and how many chunks written or loaded, and how it ended.
//!
//! ```
//! use rath_persist::spans::{self, StoreKind};
//!
//! let span = spans::store_op(StoreKind::Jsonl, "load");
//! let result: Result<usize, rath_persist::PersistError> = Ok(3);
//! spans::record_loaded(&span, result.as_ref().ok().copied());
//! spans::record_outcome(&span, &result);
//! ```
//!
//! The attribute names follow the OpenTelemetry database conventions where they apply
//! (`db.system.name`, `db.operation.name`, `db.collection.name`, `db.operation.batch.size`,
//! `error.type`) and use `rath.*` for the rest. Counts are recorded as `i64` (OpenTelemetry
//! has no unsigned integer; the bridge would send a `u64` as text). A span's OpenTelemetry name is
//! `{db.operation.name} {target}`: the target is the table sessions live in on the SQL
//! stores (`write rath_sessions`), `jsonl` for the directory store. No field ever holds a
//! store's URL or path (a PostgreSQL URL may carry a password; a path names a machine).

use tracing::field::Empty;

use crate::{PersistError, WriteBatch, WriteReport};

/// Which kind of store a span is about (`rath.store.kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The JSONL directory (no database: no `db.*` attributes but the operation name).
    Jsonl,
    /// SQLite (`db.system.name = sqlite`).
    Sqlite,
    /// PostgreSQL (`db.system.name = postgresql`).
    Postgres,
}

impl StoreKind {
    /// The `rath.store.kind` value (`jsonl`, `sqlite`, `postgresql`).
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Jsonl => "jsonl",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgresql",
        }
    }

    /// The `db.system.name` value: the database, or `None` for the directory store.
    pub fn db_system(self) -> Option<&'static str> {
        match self {
            StoreKind::Jsonl => None,
            StoreKind::Sqlite | StoreKind::Postgres => Some(self.as_str()),
        }
    }

    fn target(self) -> &'static str {
        match self {
            StoreKind::Jsonl => "jsonl",
            StoreKind::Sqlite | StoreKind::Postgres => "rath_sessions",
        }
    }
}

/// The span of one store operation `op` (`write`, `load`, `read_chunks`, `stored_len`, `list`, `delete`,
/// `gc`): kind CLIENT on a database, INTERNAL on the directory store. Fields recorded later:
/// `rath.session.id`, `rath.store.writes`, `db.operation.batch.size` (batches of two or
/// more), `rath.store.fence_token`, `rath.store.chunks_written`, `rath.store.chunks`,
/// `error.type`.
pub fn store_op(kind: StoreKind, op: &'static str) -> tracing::Span {
    let client = kind.db_system().is_some();
    tracing::info_span!(
        "session_store",
        otel.name = %format_args!("{op} {}", kind.target()),
        otel.kind = if client { "client" } else { "internal" },
        otel.status_code = Empty,
        db.system.name = kind.db_system(),
        db.operation.name = op,
        db.collection.name = client.then_some("rath_sessions"),
        db.operation.batch.size = Empty,
        rath.store.kind = kind.as_str(),
        rath.session.id = Empty,
        rath.store.writes = Empty,
        rath.store.fence_token = Empty,
        rath.store.chunks_written = Empty,
        rath.store.chunks = Empty,
        error.type = Empty,
    )
}

/// [`store_op`] for a session (`rath.session.id`).
pub fn session_op(kind: StoreKind, op: &'static str, id: &str) -> tracing::Span {
    let span = store_op(kind, op);
    span.record("rath.session.id", id);
    span
}

/// The span of a write batch: its size, the fence token it carries, and the session id when
/// it writes one session.
pub fn write_op(kind: StoreKind, batch: &WriteBatch<'_>) -> tracing::Span {
    let span = store_op(kind, "write");
    let n = batch.writes.len();
    span.record("rath.store.writes", n as i64);
    if n >= 2 {
        span.record("db.operation.batch.size", n as i64);
    }
    if let [only] = batch.writes.as_slice() {
        span.record("rath.session.id", only.session().id().as_str());
    }
    if let Some(f) = &batch.fence {
        span.record(
            "rath.store.fence_token",
            i64::try_from(f.token).unwrap_or(i64::MAX),
        );
    }
    span
}

/// Records the chunks a write stored (`rath.store.chunks_written`) and how it ended.
pub fn record_written(span: &tracing::Span, result: &Result<Vec<WriteReport>, PersistError>) {
    if let Ok(reports) = result {
        let n: usize = reports.iter().map(|r| r.chunks_written).sum();
        span.record("rath.store.chunks_written", n as i64);
    }
    record_outcome(span, result);
}

/// Records the chunks a load read (`rath.store.chunks`).
pub fn record_loaded(span: &tracing::Span, chunks: Option<usize>) {
    if let Some(n) = chunks {
        span.record("rath.store.chunks", n as i64);
    }
}

/// Records a failure as `error.type` (the error's [`PersistError::kind`], never its message,
/// which may name a file) and an error status.
pub fn record_outcome<T>(span: &tracing::Span, result: &Result<T, PersistError>) {
    if let Err(e) = result {
        span.record("error.type", e.kind());
        span.record("otel.status_code", "error");
    }
}
