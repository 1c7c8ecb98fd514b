//! The tables of the LangGraph-compatible API (migration 2): threads, owned by a tenant,
//! and the runs each thread made, in order. A thread holds no state of its own: its state
//! is the session its newest started run reached (see `crate::langgraph`).

use sqlx::Row;

use super::{Pool, ServerDb, now_ms};
use crate::ServerError;

/// A thread as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadRow {
    /// The thread's id (a UUID string).
    pub(crate) thread_id: String,
    /// The tenant that owns it.
    pub(crate) tenant: String,
    /// The metadata given at creation (JSON text of an object).
    pub(crate) metadata: String,
    /// Creation time (ms since the Unix epoch).
    pub(crate) created_ms: i64,
    /// The last time a run was added (ms since the Unix epoch).
    pub(crate) updated_ms: i64,
}

/// One run of a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadRunRow {
    /// The run's id (a run of the runtime: `/v1/runs/{id}` shows it too).
    pub(crate) run_id: String,
    /// The thread.
    pub(crate) thread_id: String,
    /// Its place among the thread's runs (1, 2, ...).
    pub(crate) seq: i64,
    /// The assistant id it was started with, as the client gave it resolved to the UUID.
    pub(crate) assistant_id: String,
    /// The run's metadata (JSON text of an object).
    pub(crate) metadata: String,
    /// What the run was asked for: input, stream modes (JSON text of an object).
    pub(crate) kwargs: String,
    /// Creation time (ms since the Unix epoch).
    pub(crate) created_ms: i64,
}

fn thread_from<R: Row>(r: &R) -> Result<ThreadRow, ServerError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(ThreadRow {
        thread_id: r.try_get("thread_id")?,
        tenant: r.try_get("tenant")?,
        metadata: r.try_get("metadata")?,
        created_ms: r.try_get("created_ms")?,
        updated_ms: r.try_get("updated_ms")?,
    })
}

fn run_from<R: Row>(r: &R) -> Result<ThreadRunRow, ServerError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(ThreadRunRow {
        run_id: r.try_get("run_id")?,
        thread_id: r.try_get("thread_id")?,
        seq: r.try_get("seq")?,
        assistant_id: r.try_get("assistant_id")?,
        metadata: r.try_get("metadata")?,
        kwargs: r.try_get("kwargs")?,
        created_ms: r.try_get("created_ms")?,
    })
}

const RUN_COLS: &str = "run_id, thread_id, seq, assistant_id, metadata, kwargs, created_ms";

/// Inserts a thread's run row (`$1` the tenant, then [`RUN_COLS`]); nothing when its place
/// (or its run) is taken: two runs racing for one place both read the same newest run, and
/// the second finds its place taken (a 409), so a thread never forks into two runs
/// continuing one state.
pub(super) fn insert_run_sql() -> String {
    format!(
        "INSERT INTO sv_thread_runs (tenant, {RUN_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT DO NOTHING"
    )
}

/// Moves a thread's time to its newest run's (`$1` the time, `$2` the tenant, `$3` the
/// thread).
pub(super) const TOUCH_SQL: &str =
    "UPDATE sv_threads SET updated_ms = $1 WHERE tenant = $2 AND thread_id = $3";

impl ServerDb {
    /// Creates thread `id` for `tenant` with `metadata` (JSON text); returns the stored row
    /// and whether this call created it. Thread ids are per tenant: another tenant's thread
    /// of the same id is a different thread, so the answer says nothing of it.
    pub(crate) async fn create_thread(
        &self,
        tenant: &str,
        id: &str,
        metadata: &str,
    ) -> Result<(ThreadRow, bool), ServerError> {
        let now = now_ms();
        let insert = "INSERT INTO sv_threads (thread_id, tenant, metadata, created_ms, updated_ms) \
                      VALUES ($1, $2, $3, $4, $4) ON CONFLICT (tenant, thread_id) DO NOTHING";
        let n = on_pool!(self, p, {
            sqlx::query(insert)
                .bind(id)
                .bind(tenant)
                .bind(metadata)
                .bind(now)
                .execute(p)
                .await?
                .rows_affected()
        });
        match self.thread(tenant, id).await? {
            Some(row) => Ok((row, n > 0)),
            // Inserted or already this tenant's: found, unless deleted in between.
            None => Err(ServerError::Conflict(format!(
                "thread {id} changed while it was created; try again"
            ))),
        }
    }

    /// Thread `id` when `tenant` owns it.
    pub(crate) async fn thread(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<ThreadRow>, ServerError> {
        let sql = "SELECT thread_id, tenant, metadata, created_ms, updated_ms FROM sv_threads \
                   WHERE thread_id = $1 AND tenant = $2";
        on_pool!(self, p, {
            let row = sqlx::query(sql)
                .bind(id)
                .bind(tenant)
                .fetch_optional(p)
                .await?;
            row.as_ref().map(thread_from).transpose()
        })
    }

    /// The runs of `tenant`'s thread `id`, oldest first.
    pub(crate) async fn thread_runs(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Vec<ThreadRunRow>, ServerError> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM sv_thread_runs WHERE tenant = $1 AND thread_id = $2 ORDER BY seq"
        );
        on_pool!(self, p, {
            let rows = sqlx::query(&sql).bind(tenant).bind(id).fetch_all(p).await?;
            rows.iter().map(run_from).collect()
        })
    }
}
