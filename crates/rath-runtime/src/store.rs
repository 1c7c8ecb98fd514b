//! The run store: runs, leases with fencing tokens, the replay journal, the effect ledger
//! and run events, in SQLite (one machine) or PostgreSQL (a fleet) through sqlx.
//!
//! Its tables (`rt_*`) have their own versioned migrations ([`MIGRATIONS`]) and may live in
//! the same database as a SQL session store. Every write a worker makes goes through
//! one transaction that first checks the run's lease token against the token the write
//! carries ([`Lease::token`]) and refuses it with [`RuntimeError::Fenced`] once the lease
//! passed to another worker; on PostgreSQL the lease row is locked (`FOR UPDATE`) for that
//! check, on SQLite the transaction is `BEGIN IMMEDIATE` (one writer at a time). Claims use
//! `FOR UPDATE SKIP LOCKED` on PostgreSQL, so workers never queue behind each other.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::RuntimeError;
use crate::error::corrupt;
use crate::events::EventSubscription;
use crate::model::{Effect, EffectState, Lease, Run, RunEvent, RunId, RunOptions, RunStatus};
use tokio::sync::{mpsc, oneshot};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 2;

/// The migrations, in order: `(version, what it adds, statements)`. The statements are the
/// same text on SQLite and PostgreSQL.
pub const MIGRATIONS: &[(i64, &str, &[&str])] = &[
    (
        1,
        "runs, leases, replay journal, effect ledger, run events",
        &[
            "CREATE TABLE IF NOT EXISTS rt_runs (
            id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            input_session TEXT NOT NULL,
            options TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts BIGINT NOT NULL,
            failures BIGINT NOT NULL,
            resume_session TEXT,
            segment BIGINT NOT NULL,
            output_session TEXT,
            detail TEXT,
            submitted_ms BIGINT NOT NULL,
            updated_ms BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS rt_runs_status ON rt_runs (status, submitted_ms)",
            "CREATE TABLE IF NOT EXISTS rt_leases (
            run_id TEXT PRIMARY KEY,
            worker TEXT,
            token BIGINT NOT NULL,
            expires_ms BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS rt_journal (
            run_id TEXT NOT NULL,
            step TEXT NOT NULL,
            seq BIGINT NOT NULL,
            request_hash TEXT NOT NULL,
            payload TEXT NOT NULL,
            token BIGINT NOT NULL,
            PRIMARY KEY (run_id, step, seq))",
            "CREATE TABLE IF NOT EXISTS rt_effects (
            run_id TEXT NOT NULL,
            step TEXT NOT NULL,
            call_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            idem_key TEXT NOT NULL,
            args TEXT NOT NULL,
            state TEXT NOT NULL,
            result TEXT,
            token BIGINT NOT NULL,
            PRIMARY KEY (run_id, step, call_id))",
            "CREATE TABLE IF NOT EXISTS rt_events (
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            by_worker TEXT NOT NULL,
            token BIGINT NOT NULL,
            at_ms BIGINT NOT NULL,
            PRIMARY KEY (run_id, seq))",
        ],
    ),
    (
        2,
        "retry backoff (not_before_ms) and deadlines (deadline_ms) on runs",
        &[
            "ALTER TABLE rt_runs ADD COLUMN not_before_ms BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE rt_runs ADD COLUMN deadline_ms BIGINT",
            "CREATE INDEX IF NOT EXISTS rt_runs_deadline ON rt_runs (deadline_ms)",
        ],
    ),
];

#[derive(Clone, Debug)]
enum Db {
    Sqlite(SqlitePool),
    Pg(PgPool),
}

/// A recorded model reply (or any keyed answer) of the replay journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEntry {
    /// The step path (`segment/agent`).
    pub step: String,
    /// Its position among the step's calls (0, 1, ...).
    pub seq: i64,
    /// sha256 of the canonical request.
    pub request_hash: String,
    /// The recorded reply (JSON).
    pub payload: String,
    /// The fencing token of the write that recorded it.
    pub token: i64,
}

/// The run store. Cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct RunStore {
    db: Db,
    name: String,
    hub: Arc<crate::events::Hub>,
    group: mpsc::UnboundedSender<Job>,
}

impl From<sqlx::Error> for RuntimeError {
    fn from(e: sqlx::Error) -> Self {
        RuntimeError::Db {
            store: "sql".into(),
            message: e.to_string(),
        }
    }
}

/// Milliseconds since the Unix epoch (leases run on wall-clock time; sessions never see it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

// Runs `$body` inside one transaction on either backend (BEGIN IMMEDIATE on SQLite); `$pg`
// tells the body which dialect it is on. A `?` inside rolls back (the transaction drops).
macro_rules! in_tx {
    ($s:expr, $tx:ident, $pg:ident, $body:block) => {{
        match &$s.db {
            Db::Sqlite(pool) => {
                let mut $tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                #[allow(unused_variables)]
                let $pg = false;
                let out = $body;
                $tx.commit().await?;
                out
            }
            Db::Pg(pool) => {
                let mut $tx = pool.begin().await?;
                #[allow(unused_variables)]
                let $pg = true;
                let out = $body;
                $tx.commit().await?;
                out
            }
        }
    }};
}

// Runs `$body` with `$p` bound to the pool of either backend.
macro_rules! on_pool {
    ($s:expr, $p:ident, $body:block) => {{
        match &$s.db {
            Db::Sqlite($p) => $body,
            Db::Pg($p) => $body,
        }
    }};
}

// Checks inside a transaction that `$lease` still holds its run: the write is fenced otherwise.
macro_rules! check_fence {
    ($tx:ident, $pg:ident, $lease:expr) => {{
        let sql = if $pg {
            "SELECT token FROM rt_leases WHERE run_id = $1 FOR UPDATE"
        } else {
            "SELECT token FROM rt_leases WHERE run_id = $1"
        };
        let row = sqlx::query(sql)
            .bind($lease.run.as_str())
            .fetch_optional(&mut *$tx)
            .await?;
        let current: i64 = match row {
            Some(r) => r.try_get("token")?,
            None => -1,
        };
        if current != $lease.token {
            return Err(RuntimeError::Fenced {
                run: $lease.run.to_string(),
                token: $lease.token,
                current,
            });
        }
    }};
}

// Appends an event row inside a transaction.
macro_rules! push_event {
    ($tx:ident, $pg:ident, $run:expr, $kind:expr, $detail:expr, $by:expr, $token:expr) => {{
        let next: i64 = sqlx::query("SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM rt_events WHERE run_id = $1")
            .bind($run)
            .fetch_one(&mut *$tx)
            .await?
            .try_get("n")?;
        sqlx::query("INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)")
            .bind($run)
            .bind(next)
            .bind($kind)
            .bind($detail)
            .bind($by)
            .bind($token)
            .bind(now_ms())
            .execute(&mut *$tx)
            .await?;
        if $pg {
            sqlx::query("SELECT pg_notify('rt_events', $1)")
                .bind($run)
                .execute(&mut *$tx)
                .await?;
        }
    }};
}

const RUN_COLS: &str = "id, workflow, definition_hash, input_session, options, status, attempts, failures, resume_session, segment, output_session, detail, submitted_ms, not_before_ms, deadline_ms";

fn run_from<R: Row>(r: &R) -> Result<Run, RuntimeError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let options: String = r.try_get("options")?;
    let status: String = r.try_get("status")?;
    Ok(Run {
        id: RunId(r.try_get("id")?),
        workflow: r.try_get("workflow")?,
        definition_hash: r.try_get("definition_hash")?,
        input_session: r.try_get("input_session")?,
        options: serde_json::from_str(&options).map_err(|e| corrupt("run options", e))?,
        status: status.parse()?,
        attempts: r.try_get("attempts")?,
        failures: r.try_get("failures")?,
        resume_session: r.try_get("resume_session")?,
        segment: r.try_get("segment")?,
        output_session: r.try_get("output_session")?,
        detail: r.try_get("detail")?,
        submitted_ms: r.try_get("submitted_ms")?,
        not_before_ms: r.try_get("not_before_ms")?,
        deadline_ms: r.try_get("deadline_ms")?,
    })
}

/// How a person settles a call under review (`rath runs resolve`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The effect did not happen (or may happen again): dispatch the call again.
    Rerun,
    /// The effect happened and this is its answer (tool result content): serve it.
    Answered(String),
    /// The effect failed with this message: serve that failure to the workflow (which goes
    /// on, as after any failed tool call).
    Failed(String),
    /// Fail the run.
    Fail(String),
}

impl RunStore {
    /// Opens (creating when missing) the run store at `url`: `sqlite:<file>` or
    /// `postgres://user:password@host/db`, and applies its migrations.
    pub async fn connect(url: &str) -> Result<RunStore, RuntimeError> {
        let store = if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            let opts = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(30));
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(opts)
                .await?;
            RunStore::over(Db::Sqlite(pool), format!("sqlite:{path}"))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = PgPoolOptions::new().max_connections(8).connect(url).await?;
            RunStore::over(Db::Pg(pool), redact(url))
        } else {
            return Err(RuntimeError::BadUrl(redact(url)));
        };
        store.migrate().await?;
        Ok(store)
    }

    /// A store over `db` with its group committer running (on the current tokio runtime).
    fn over(db: Db, name: String) -> RunStore {
        let hub: Arc<crate::events::Hub> = Arc::default();
        let (group, rx) = mpsc::unbounded_channel();
        let committer = Committer { db: db.clone() };
        tokio::spawn(committer.run(rx, hub.clone()));
        RunStore {
            db,
            name,
            hub,
            group,
        }
    }

    /// The store's name (its URL without a password).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.db, Db::Pg(_))
    }

    /// The database, as OpenTelemetry's `db.system.name` names it (`sqlite`, `postgresql`).
    pub fn system(&self) -> &'static str {
        if self.is_postgres() {
            "postgresql"
        } else {
            "sqlite"
        }
    }

    /// The schema version stored (0 before the first migration).
    pub async fn schema_version(&self) -> Result<i64, RuntimeError> {
        Ok(on_pool!(self, p, {
            sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM rt_schema")
                .fetch_one(p)
                .await?
                .try_get::<i64, _>("v")?
        }))
    }

    async fn migrate(&self) -> Result<(), RuntimeError> {
        in_tx!(self, tx, pg, {
            if pg {
                sqlx::query("SELECT pg_advisory_xact_lock(7243902431)")
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("CREATE TABLE IF NOT EXISTS rt_schema (version BIGINT PRIMARY KEY, what TEXT NOT NULL, applied_ms BIGINT NOT NULL)")
                .execute(&mut *tx)
                .await?;
            let found: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM rt_schema")
                .fetch_one(&mut *tx)
                .await?
                .try_get("v")?;
            if found > SCHEMA_VERSION {
                return Err(RuntimeError::NewerSchema {
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            for (version, what, stmts) in MIGRATIONS.iter().filter(|m| m.0 > found) {
                for stmt in *stmts {
                    sqlx::query(stmt).execute(&mut *tx).await?;
                }
                sqlx::query(
                    "INSERT INTO rt_schema (version, what, applied_ms) VALUES ($1, $2, $3)",
                )
                .bind(version)
                .bind(what)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
            }
        });
        Ok(())
    }

    /// Submits a run of `workflow` (registered with `definition_hash`) on the stored session
    /// `input_session`; it is `queued` until a worker claims it.
    #[tracing::instrument(level = "debug", name = "submit rt_runs", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "submit", db.collection.name = "rt_runs", rath.run.id = %id))]
    pub async fn submit(
        &self,
        id: RunId,
        workflow: &str,
        definition_hash: &str,
        input_session: &str,
        options: &RunOptions,
    ) -> Result<RunId, RuntimeError> {
        let opts = serde_json::to_string(options).map_err(|e| corrupt("run options", e))?;
        let now = now_ms();
        let deadline = options.deadline.map(|d| now.saturating_add(ms(d)));
        in_tx!(self, tx, pg, {
            sqlx::query("INSERT INTO rt_runs (id, workflow, definition_hash, input_session, options, status, attempts, failures, resume_session, segment, output_session, detail, submitted_ms, updated_ms, not_before_ms, deadline_ms) VALUES ($1, $2, $3, $4, $5, 'queued', 0, 0, NULL, 0, NULL, NULL, $6, $6, 0, $7)")
                .bind(id.as_str())
                .bind(workflow)
                .bind(definition_hash)
                .bind(input_session)
                .bind(&opts)
                .bind(now)
                .bind(deadline)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO rt_leases (run_id, worker, token, expires_ms) VALUES ($1, NULL, 0, 0)",
            )
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
            push_event!(
                tx,
                pg,
                id.as_str(),
                "status",
                "{\"status\": \"queued\"}",
                "submitter",
                0i64
            );
        });
        self.hub.notify(id.as_str());
        Ok(id)
    }

    /// The run `id`.
    pub async fn get(&self, id: &RunId) -> Result<Run, RuntimeError> {
        let sql = format!("SELECT {RUN_COLS} FROM rt_runs WHERE id = $1");
        on_pool!(self, p, {
            match sqlx::query(&sql)
                .bind(id.as_str())
                .fetch_optional(p)
                .await?
            {
                Some(r) => run_from(&r),
                None => Err(RuntimeError::NoSuchRun(id.to_string())),
            }
        })
    }

    /// Every run (optionally of one status), oldest first.
    pub async fn list(&self, status: Option<RunStatus>) -> Result<Vec<Run>, RuntimeError> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM rt_runs WHERE ($1 = '' OR status = $1) ORDER BY submitted_ms, id"
        );
        let st = status.map(|s| s.as_str()).unwrap_or("");
        on_pool!(self, p, {
            let rows = sqlx::query(&sql).bind(st).fetch_all(p).await?;
            rows.iter().map(run_from).collect()
        })
    }

    /// The run's events after position `after` (0: all), in order: what a stream polls.
    pub async fn events(&self, id: &RunId, after: i64) -> Result<Vec<RunEvent>, RuntimeError> {
        on_pool!(self, p, {
            let rows = sqlx::query("SELECT seq, kind, detail, by_worker, at_ms FROM rt_events WHERE run_id = $1 AND seq > $2 ORDER BY seq")
                .bind(id.as_str())
                .bind(after)
                .fetch_all(p)
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(RunEvent {
                        run: id.clone(),
                        seq: r.try_get("seq")?,
                        kind: r.try_get("kind")?,
                        detail: r.try_get("detail")?,
                        by: r.try_get("by_worker")?,
                        at_ms: r.try_get("at_ms")?,
                    })
                })
                .collect()
        })
    }

    /// Claims the oldest run that is queued, or running under an expired lease, for
    /// `worker` for `lease`: its token is one more than the last one handed out, so every
    /// earlier holder is fenced from now on. `None` when there is nothing to do.
    #[tracing::instrument(level = "debug", name = "claim rt_runs", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "claim", db.collection.name = "rt_runs", rath.worker.name = worker))]
    pub async fn claim(
        &self,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<(Run, Lease)>, RuntimeError> {
        let now = now_ms();
        let sql = format!(
            "SELECT r.id AS id FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id \
             WHERE (r.status = 'queued' AND r.not_before_ms <= $1) OR (r.status = 'running' AND l.expires_ms < $1) \
             ORDER BY r.submitted_ms, r.id LIMIT 1{}",
            if self.is_postgres() {
                " FOR UPDATE OF r, l SKIP LOCKED"
            } else {
                ""
            }
        );
        let got: Option<(String, i64)> = in_tx!(self, tx, pg, {
            let row = sqlx::query(&sql).bind(now).fetch_optional(&mut *tx).await?;
            match row {
                None => None,
                Some(r) => {
                    let id: String = r.try_get("id")?;
                    let token: i64 = sqlx::query("UPDATE rt_leases SET worker = $2, token = token + 1, expires_ms = $3 WHERE run_id = $1 RETURNING token")
                        .bind(&id)
                        .bind(worker)
                        .bind(now + ms(lease))
                        .fetch_one(&mut *tx)
                        .await?
                        .try_get("token")?;
                    sqlx::query("UPDATE rt_runs SET status = 'running', attempts = attempts + 1, updated_ms = $2 WHERE id = $1")
                        .bind(&id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    let detail =
                        format!("{{\"worker\": {}, \"token\": {token}}}", json_str(worker));
                    push_event!(tx, pg, id.as_str(), "claimed", detail, worker, token);
                    Some((id, token))
                }
            }
        });
        let Some((id, token)) = got else {
            return Ok(None);
        };
        self.hub.notify(&id);
        let run = self.get(&RunId(id.clone())).await?;
        Ok(Some((
            run,
            Lease {
                run: RunId(id),
                worker: worker.to_owned(),
                token,
                expires_ms: now + ms(lease),
            },
        )))
    }

    /// Extends the lease by `lease` from now (fenced).
    #[tracing::instrument(level = "debug", name = "heartbeat rt_leases", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "heartbeat", db.collection.name = "rt_leases", rath.run.id = %held.run, rath.lease.token = held.token))]
    pub async fn heartbeat(&self, held: &Lease, lease: Duration) -> Result<Lease, RuntimeError> {
        let expires = now_ms() + ms(lease);
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
            sqlx::query("UPDATE rt_leases SET expires_ms = $2 WHERE run_id = $1")
                .bind(held.run.as_str())
                .bind(expires)
                .execute(&mut *tx)
                .await?;
        });
        Ok(Lease {
            expires_ms: expires,
            ..held.clone()
        })
    }

    /// The run's status as the lease holder sees it, checked against the fence (a cancel
    /// fences the worker too).
    #[tracing::instrument(level = "debug", name = "check rt_leases", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "check", db.collection.name = "rt_leases", rath.run.id = %held.run, rath.lease.token = held.token))]
    pub async fn check(&self, held: &Lease) -> Result<(), RuntimeError> {
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
        });
        Ok(())
    }

    /// Every journal entry of the run, by step and position.
    pub async fn journal(&self, run: &RunId) -> Result<Vec<JournalEntry>, RuntimeError> {
        on_pool!(self, p, {
            let rows = sqlx::query("SELECT step, seq, request_hash, payload, token FROM rt_journal WHERE run_id = $1 ORDER BY step, seq")
                .bind(run.as_str())
                .fetch_all(p)
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(JournalEntry {
                        step: r.try_get("step")?,
                        seq: r.try_get("seq")?,
                        request_hash: r.try_get("request_hash")?,
                        payload: r.try_get("payload")?,
                        token: r.try_get("token")?,
                    })
                })
                .collect()
        })
    }

    /// Records a reply under its key (fenced; committed before it is returned to the
    /// workflow). Writes of concurrent runs share one transaction (see [`RunStore`]).
    #[tracing::instrument(level = "debug", name = "record rt_journal", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "record", db.collection.name = "rt_journal", rath.run.id = %held.run, rath.lease.token = held.token))]
    pub async fn record(&self, held: &Lease, entry: &JournalEntry) -> Result<(), RuntimeError> {
        self.grouped(held, Op::Record(entry.clone())).await
    }

    /// Every effect-ledger row of the run.
    pub async fn effects(&self, run: &RunId) -> Result<Vec<Effect>, RuntimeError> {
        on_pool!(self, p, {
            let rows = sqlx::query("SELECT step, call_id, tool, idem_key, args, state, result FROM rt_effects WHERE run_id = $1 ORDER BY step, call_id")
                .bind(run.as_str())
                .fetch_all(p)
                .await?;
            rows.iter()
                .map(|r| {
                    let state: String = r.try_get("state")?;
                    Ok(Effect {
                        run: run.clone(),
                        step: r.try_get("step")?,
                        call_id: r.try_get("call_id")?,
                        tool: r.try_get("tool")?,
                        idempotency_key: r.try_get("idem_key")?,
                        args: r.try_get("args")?,
                        state: state.parse()?,
                        result: r.try_get("result")?,
                    })
                })
                .collect()
        })
    }

    /// Writes an effect-ledger row (insert or update by run, step and call id; fenced),
    /// committed before it returns. Writes of concurrent runs share one transaction.
    #[tracing::instrument(level = "debug", name = "put_effect rt_effects", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "put_effect", db.collection.name = "rt_effects", rath.run.id = %held.run, rath.lease.token = held.token))]
    pub async fn put_effect(&self, held: &Lease, e: &Effect) -> Result<(), RuntimeError> {
        self.grouped(held, Op::Effect(e.clone())).await
    }

    /// Moves the held run to `status` (fenced) and lets the lease go; `output`, `detail`,
    /// `resume` and a failure count go with it. A run handed back (`queued`) keeps its
    /// journal and ledger for the next worker.
    #[tracing::instrument(level = "debug", name = "finish rt_runs", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "finish", db.collection.name = "rt_runs", rath.run.id = %held.run, rath.lease.token = held.token, rath.run.status = to.status.as_str()))]
    pub async fn finish(&self, held: &Lease, to: Transition<'_>) -> Result<(), RuntimeError> {
        let now = now_ms();
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
            sqlx::query("UPDATE rt_runs SET status = $2, output_session = COALESCE($3, output_session), detail = $4, \
                         resume_session = COALESCE($5, resume_session), failures = failures + $6, updated_ms = $7, \
                         not_before_ms = $8 WHERE id = $1")
                .bind(held.run.as_str())
                .bind(to.status.as_str())
                .bind(to.output)
                .bind(to.detail)
                .bind(to.resume)
                .bind(i64::from(to.failed))
                .bind(now)
                .bind(to.not_before_ms.unwrap_or(0))
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE rt_leases SET worker = NULL, expires_ms = 0 WHERE run_id = $1")
                .bind(held.run.as_str())
                .execute(&mut *tx)
                .await?;
            let detail = format!("{{\"status\": \"{}\"}}", to.status);
            push_event!(
                tx,
                pg,
                held.run.as_str(),
                "status",
                detail,
                held.worker.as_str(),
                held.token
            );
        });
        self.hub.notify(held.run.as_str());
        Ok(())
    }

    /// Appends an event as the lease holder (fenced): steps and sessions for the stream.
    /// Committed before it returns; writes of concurrent runs share one transaction.
    pub async fn event(&self, held: &Lease, kind: &str, detail: &str) -> Result<(), RuntimeError> {
        let op = Op::Event {
            kind: kind.to_owned(),
            detail: detail.to_owned(),
        };
        self.grouped(held, op).await
    }

    /// Hands a fenced write to the group committer and waits for its commit; does it alone
    /// when the committer is gone (its runtime shut down).
    async fn grouped(&self, held: &Lease, op: Op) -> Result<(), RuntimeError> {
        let (done, answer) = oneshot::channel();
        let job = Job {
            lease: held.clone(),
            op,
            done,
        };
        let job = match self.group.send(job) {
            Ok(()) => match answer.await {
                Ok(result) => return result,
                Err(_) => None,
            },
            Err(mpsc::error::SendError(job)) => Some(job),
        };
        let Some(job) = job else {
            return Err(RuntimeError::Db {
                store: self.name.clone(),
                message: "the group committer stopped before answering".into(),
            });
        };
        let c = Committer {
            db: self.db.clone(),
        };
        let result = c.apply(std::slice::from_ref(&job)).await?.remove(0);
        if result.is_ok() && job.is_event() {
            self.hub.notify(job.lease.run.as_str());
        }
        result
    }

    /// An operator's change of a run that no worker holds (or that is taken from its
    /// worker): the lease token moves on, so the holder, if any, is fenced from now on.
    async fn operate(
        &self,
        id: &RunId,
        allowed: &[RunStatus],
        what: &str,
        change: Change<'_>,
    ) -> Result<(), RuntimeError> {
        in_tx!(self, tx, pg, {
            let sql = if pg {
                "SELECT status FROM rt_runs WHERE id = $1 FOR UPDATE"
            } else {
                "SELECT status FROM rt_runs WHERE id = $1"
            };
            let row = sqlx::query(sql)
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else {
                return Err(RuntimeError::NoSuchRun(id.to_string()));
            };
            let status: RunStatus = row.try_get::<String, _>("status")?.parse()?;
            if !allowed.contains(&status) {
                return Err(RuntimeError::BadState {
                    run: id.to_string(),
                    status: status.to_string(),
                    what: what.to_owned(),
                });
            }
            sqlx::query("UPDATE rt_runs SET status = $2, resume_session = COALESCE($3, resume_session), segment = segment + $4, detail = COALESCE($5, detail), updated_ms = $6 WHERE id = $1")
                .bind(id.as_str())
                .bind(change.to.as_str())
                .bind(change.resume)
                .bind(i64::from(change.bump_segment))
                .bind(change.detail)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
            let token: i64 = sqlx::query("UPDATE rt_leases SET worker = NULL, token = token + 1, expires_ms = 0 WHERE run_id = $1 RETURNING token")
                .bind(id.as_str())
                .fetch_one(&mut *tx)
                .await?
                .try_get("token")?;
            let ev = format!(
                "{{\"status\": \"{}\", \"by\": {}}}",
                change.to,
                json_str(what)
            );
            push_event!(tx, pg, id.as_str(), "status", ev, "operator", token);
        });
        self.hub.notify(id.as_str());
        Ok(())
    }

    /// Moves every run past its deadline that no live worker is on (queued, waiting, or
    /// running under an expired lease) to `timed_out`; their lease tokens move on, so a
    /// worker that wakes up later is fenced. A run in review stays there (a person looks at
    /// its ambiguous call first). Returns the runs moved, oldest first.
    pub async fn expire_overdue(&self) -> Result<Vec<RunId>, RuntimeError> {
        let now = now_ms();
        let moved: Vec<String> = in_tx!(self, tx, pg, {
            let sql = format!(
                "SELECT r.id AS id FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id \
                 WHERE r.deadline_ms IS NOT NULL AND r.deadline_ms < $1 \
                 AND (r.status IN ('queued', 'waiting') OR (r.status = 'running' AND l.expires_ms < $1)) \
                 ORDER BY r.submitted_ms, r.id{}",
                if pg {
                    " FOR UPDATE OF r, l SKIP LOCKED"
                } else {
                    ""
                }
            );
            let rows = sqlx::query(&sql).bind(now).fetch_all(&mut *tx).await?;
            let mut moved = Vec::with_capacity(rows.len());
            for r in rows {
                let id: String = r.try_get("id")?;
                sqlx::query("UPDATE rt_runs SET status = 'timed_out', detail = $2, updated_ms = $3 WHERE id = $1")
                    .bind(&id)
                    .bind("deadline passed")
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let token: i64 = sqlx::query("UPDATE rt_leases SET worker = NULL, token = token + 1, expires_ms = 0 WHERE run_id = $1 RETURNING token")
                    .bind(&id)
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get("token")?;
                push_event!(
                    tx,
                    pg,
                    id.as_str(),
                    "status",
                    "{\"status\": \"timed_out\", \"by\": \"deadline\"}",
                    "sweeper",
                    token
                );
                moved.push(id);
            }
            moved
        });
        for id in &moved {
            self.hub.notify(id);
        }
        Ok(moved.into_iter().map(RunId).collect())
    }

    /// Follows the run's events after position `after` (0: from the first): see
    /// [`EventSubscription`]. Pass the last id a client saw (an SSE `Last-Event-ID`) to
    /// resume without a gap or a duplicate.
    pub async fn subscribe(
        &self,
        run: &RunId,
        after: i64,
    ) -> Result<EventSubscription, RuntimeError> {
        if let Db::Pg(pool) = &self.db {
            self.hub.listen_postgres(pool).await?;
        }
        Ok(EventSubscription::new(
            self.clone(),
            run.clone(),
            after,
            self.hub.receiver(),
        ))
    }

    /// Cancels a run that has not finished; its worker, if any, is fenced at once.
    pub async fn cancel(&self, id: &RunId) -> Result<(), RuntimeError> {
        let open = [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::NeedsReview,
        ];
        self.operate(id, &open, "cancel", Change::to(RunStatus::Cancelled))
            .await
    }

    /// Requeues a waiting run whose decision was recorded on the stored session `resume`
    /// (see [`crate::Runtime::approve`]): the next claim forwards that session.
    pub async fn requeue_decided(&self, id: &RunId, resume: &str) -> Result<(), RuntimeError> {
        self.operate(
            id,
            &[RunStatus::Waiting],
            "decide",
            Change {
                resume: Some(resume),
                bump_segment: true,
                ..Change::to(RunStatus::Queued)
            },
        )
        .await
    }

    /// Settles the ambiguous call `call_id` of a run in review and requeues it (or fails it).
    pub async fn resolve(
        &self,
        id: &RunId,
        call_id: &str,
        how: &Resolution,
    ) -> Result<(), RuntimeError> {
        let run = self.get(id).await?;
        if run.status != RunStatus::NeedsReview {
            return Err(RuntimeError::BadState {
                run: id.to_string(),
                status: run.status.to_string(),
                what: "resolve".into(),
            });
        }
        let effect = self
            .effects(id)
            .await?
            .into_iter()
            .find(|e| e.call_id == call_id && e.state == EffectState::Ambiguous)
            .ok_or_else(|| RuntimeError::BadState {
                run: id.to_string(),
                status: run.status.to_string(),
                what: format!("resolve: no ambiguous call {call_id}"),
            })?;
        on_pool!(self, p, {
            match how {
                Resolution::Rerun => {
                    sqlx::query(
                        "DELETE FROM rt_effects WHERE run_id = $1 AND step = $2 AND call_id = $3",
                    )
                    .bind(id.as_str())
                    .bind(&effect.step)
                    .bind(call_id)
                    .execute(p)
                    .await?;
                }
                Resolution::Answered(content) => {
                    let result = serde_json::json!({"ok": true, "content": content}).to_string();
                    sqlx::query("UPDATE rt_effects SET state = 'succeeded', result = $4 WHERE run_id = $1 AND step = $2 AND call_id = $3")
                        .bind(id.as_str())
                        .bind(&effect.step)
                        .bind(call_id)
                        .bind(result)
                        .execute(p)
                        .await?;
                }
                Resolution::Failed(message) => {
                    let error = rath_flow::ToolError::exception(message.clone());
                    let result = serde_json::json!({"ok": false, "error": error}).to_string();
                    sqlx::query("UPDATE rt_effects SET state = 'failed', result = $4 WHERE run_id = $1 AND step = $2 AND call_id = $3")
                        .bind(id.as_str())
                        .bind(&effect.step)
                        .bind(call_id)
                        .bind(result)
                        .execute(p)
                        .await?;
                }
                Resolution::Fail(_) => {}
            }
        });
        match how {
            Resolution::Fail(why) => {
                self.operate(
                    id,
                    &[RunStatus::NeedsReview],
                    "resolve",
                    Change {
                        detail: Some(why),
                        ..Change::to(RunStatus::Failed)
                    },
                )
                .await
            }
            _ => {
                self.operate(
                    id,
                    &[RunStatus::NeedsReview],
                    "resolve",
                    Change::to(RunStatus::Queued),
                )
                .await
            }
        }
    }

    /// Rows of the journal, ledger and events whose token is not the one that held the
    /// run's lease when... (for the chaos checks): every row with a token above the lease's
    /// current token (impossible unless fencing failed).
    pub async fn rows_above_lease(&self) -> Result<i64, RuntimeError> {
        on_pool!(self, p, {
            let n: i64 = sqlx::query(
                "SELECT (SELECT COUNT(*) FROM rt_journal j JOIN rt_leases l ON l.run_id = j.run_id WHERE j.token > l.token) \
                 + (SELECT COUNT(*) FROM rt_effects e JOIN rt_leases l ON l.run_id = e.run_id WHERE e.token > l.token) AS n",
            )
            .fetch_one(p)
            .await?
            .try_get("n")?;
            Ok(n)
        })
    }

    /// Journal and ledger rows of one run written under `token` (tests use it to show a
    /// fenced worker left nothing).
    pub async fn rows_with_token(&self, run: &RunId, token: i64) -> Result<i64, RuntimeError> {
        on_pool!(self, p, {
            let n: i64 = sqlx::query(
                "SELECT (SELECT COUNT(*) FROM rt_journal WHERE run_id = $1 AND token = $2) \
                 + (SELECT COUNT(*) FROM rt_effects WHERE run_id = $1 AND token = $2) AS n",
            )
            .bind(run.as_str())
            .bind(token)
            .fetch_one(p)
            .await?
            .try_get("n")?;
            Ok(n)
        })
    }

    /// Rows and bytes of each `rt_*` table: `(table, rows, bytes)`, bytes being the summed
    /// lengths of its text columns (what benchmarks report as writes per step).
    pub async fn table_stats(&self) -> Result<Vec<(&'static str, i64, i64)>, RuntimeError> {
        const TABLES: [(&str, &str); 5] = [
            (
                "rt_runs",
                "LENGTH(id) + LENGTH(workflow) + LENGTH(definition_hash) + LENGTH(input_session) + LENGTH(options) + LENGTH(status) + COALESCE(LENGTH(resume_session), 0) + COALESCE(LENGTH(output_session), 0) + COALESCE(LENGTH(detail), 0)",
            ),
            ("rt_leases", "LENGTH(run_id) + COALESCE(LENGTH(worker), 0)"),
            (
                "rt_journal",
                "LENGTH(run_id) + LENGTH(step) + LENGTH(request_hash) + LENGTH(payload)",
            ),
            (
                "rt_effects",
                "LENGTH(run_id) + LENGTH(step) + LENGTH(call_id) + LENGTH(tool) + LENGTH(idem_key) + LENGTH(args) + LENGTH(state) + COALESCE(LENGTH(result), 0)",
            ),
            (
                "rt_events",
                "LENGTH(run_id) + LENGTH(kind) + LENGTH(detail) + LENGTH(by_worker)",
            ),
        ];
        let mut out = Vec::new();
        for (table, bytes) in TABLES {
            let sql = format!(
                "SELECT COUNT(*) AS n, CAST(COALESCE(SUM({bytes}), 0) AS BIGINT) AS b FROM {table}"
            );
            let (n, b): (i64, i64) = on_pool!(self, p, {
                let r = sqlx::query(&sql).fetch_one(p).await?;
                (r.try_get("n")?, r.try_get("b")?)
            });
            out.push((table, n, b));
        }
        Ok(out)
    }

    /// The run's lease as stored.
    pub async fn lease(&self, run: &RunId) -> Result<Lease, RuntimeError> {
        on_pool!(self, p, {
            let r =
                sqlx::query("SELECT worker, token, expires_ms FROM rt_leases WHERE run_id = $1")
                    .bind(run.as_str())
                    .fetch_optional(p)
                    .await?
                    .ok_or_else(|| RuntimeError::NoSuchRun(run.to_string()))?;
            Ok(Lease {
                run: run.clone(),
                worker: r
                    .try_get::<Option<String>, _>("worker")?
                    .unwrap_or_default(),
                token: r.try_get("token")?,
                expires_ms: r.try_get("expires_ms")?,
            })
        })
    }
}

#[derive(Clone, Copy)]
struct Change<'a> {
    to: RunStatus,
    resume: Option<&'a str>,
    bump_segment: bool,
    detail: Option<&'a str>,
}

impl Change<'_> {
    fn to(to: RunStatus) -> Self {
        Self {
            to,
            resume: None,
            bump_segment: false,
            detail: None,
        }
    }
}

/// Where [`RunStore::finish`] moves a run.
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a> {
    /// The new status.
    pub status: RunStatus,
    /// The output session id, if it has one now.
    pub output: Option<&'a str>,
    /// An error or review detail (JSON or text).
    pub detail: Option<&'a str>,
    /// The session the next claim forwards (a stopped session).
    pub resume: Option<&'a str>,
    /// True when this attempt failed (counts against the retry policy).
    pub failed: bool,
    /// A run handed back for a retry: no worker claims it before this time (ms since the
    /// Unix epoch).
    pub not_before_ms: Option<i64>,
}

impl<'a> Transition<'a> {
    /// A move to `status` with nothing else.
    pub fn to(status: RunStatus) -> Self {
        Self {
            status,
            output: None,
            detail: None,
            resume: None,
            failed: false,
            not_before_ms: None,
        }
    }
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(a), Some(b)) if b > a => {
            let creds = &url[a + 3..b];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}@{}", &url[..a + 3], user, &url[b + 1..])
        }
        _ => url.to_owned(),
    }
}

/// One fenced write of a worker, for the group committer.
#[derive(Debug)]
enum Op {
    Record(JournalEntry),
    Effect(Effect),
    Event { kind: String, detail: String },
}

#[derive(Debug)]
struct Job {
    lease: Lease,
    op: Op,
    done: oneshot::Sender<Result<(), RuntimeError>>,
}

impl Job {
    fn is_event(&self) -> bool {
        matches!(self.op, Op::Event { .. })
    }
}

/// Most writes one transaction takes.
const GROUP_MAX: usize = 256;

/// Group commit: the fenced writes of every run this process works on go through one task
/// that takes all that are waiting and does them in one transaction, each checked against
/// its own run's lease token (a fenced write is refused alone; the others commit). Every
/// write is committed (`synchronous = FULL` on SQLite) before its caller goes on, so a
/// recorded reply or effect is durable before the next side effect; only the commit's
/// cost is shared. A write that fails the transaction (a constraint) makes the batch be
/// done again one write per transaction, so it fails alone.
struct Committer {
    db: Db,
}

impl Committer {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Job>, hub: Arc<crate::events::Hub>) {
        while let Some(first) = rx.recv().await {
            let mut jobs = vec![first];
            while jobs.len() < GROUP_MAX {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
            // One lock order for every committer of every process: no deadlock on PostgreSQL.
            jobs.sort_by(|a, b| a.lease.run.cmp(&b.lease.run));
            let results = match self.apply(&jobs).await {
                Ok(r) => r,
                Err(_) => {
                    let mut r = Vec::with_capacity(jobs.len());
                    for j in &jobs {
                        r.push(match self.apply(std::slice::from_ref(j)).await {
                            Ok(mut one) => one.remove(0),
                            Err(e) => Err(e),
                        });
                    }
                    r
                }
            };
            for (j, r) in jobs.into_iter().zip(results) {
                if r.is_ok() && j.is_event() {
                    hub.notify(j.lease.run.as_str());
                }
                let _ = j.done.send(r);
            }
        }
    }

    /// Does `jobs` in one transaction: one result per job (fenced or done); `Err` when the
    /// transaction failed as a whole (nothing of it is stored).
    async fn apply(&self, jobs: &[Job]) -> Result<Vec<Result<(), RuntimeError>>, RuntimeError> {
        Ok(in_tx!(self, tx, pg, {
            let mut out = Vec::with_capacity(jobs.len());
            for j in jobs {
                let held = &j.lease;
                let sql = if pg {
                    "SELECT token FROM rt_leases WHERE run_id = $1 FOR UPDATE"
                } else {
                    "SELECT token FROM rt_leases WHERE run_id = $1"
                };
                let current: i64 = match sqlx::query(sql)
                    .bind(held.run.as_str())
                    .fetch_optional(&mut *tx)
                    .await?
                {
                    Some(r) => r.try_get("token")?,
                    None => -1,
                };
                if current != held.token {
                    out.push(Err(RuntimeError::Fenced {
                        run: held.run.to_string(),
                        token: held.token,
                        current,
                    }));
                    continue;
                }
                match &j.op {
                    Op::Record(entry) => {
                        sqlx::query("INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token) VALUES ($1, $2, $3, $4, $5, $6)")
                            .bind(held.run.as_str())
                            .bind(&entry.step)
                            .bind(entry.seq)
                            .bind(&entry.request_hash)
                            .bind(&entry.payload)
                            .bind(held.token)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Op::Effect(e) => {
                        sqlx::query("INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                                     ON CONFLICT (run_id, step, call_id) DO UPDATE SET state = excluded.state, result = excluded.result, token = excluded.token")
                            .bind(held.run.as_str())
                            .bind(&e.step)
                            .bind(&e.call_id)
                            .bind(&e.tool)
                            .bind(&e.idempotency_key)
                            .bind(&e.args)
                            .bind(e.state.as_str())
                            .bind(&e.result)
                            .bind(held.token)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Op::Event { kind, detail } => {
                        push_event!(
                            tx,
                            pg,
                            held.run.as_str(),
                            kind.as_str(),
                            detail.as_str(),
                            held.worker.as_str(),
                            held.token
                        );
                    }
                }
                out.push(Ok(()));
            }
            out
        }))
    }
}
