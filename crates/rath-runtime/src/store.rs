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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::RuntimeError;
use crate::error::corrupt;
use crate::model::{Effect, EffectState, Lease, Run, RunEvent, RunId, RunOptions, RunStatus};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 1;

/// The migrations, in order: `(version, what it adds, statements)`. The statements are the
/// same text on SQLite and PostgreSQL.
pub const MIGRATIONS: &[(i64, &str, &[&str])] = &[(
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
)];

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
    ($tx:ident, $run:expr, $kind:expr, $detail:expr, $by:expr, $token:expr) => {{
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
    }};
}

const RUN_COLS: &str = "id, workflow, definition_hash, input_session, options, status, attempts, failures, resume_session, segment, output_session, detail, submitted_ms";

fn run_from<R: Row>(r: &R) -> Result<Run, RuntimeError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
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
            RunStore {
                db: Db::Sqlite(pool),
                name: format!("sqlite:{path}"),
            }
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = PgPoolOptions::new().max_connections(8).connect(url).await?;
            RunStore {
                db: Db::Pg(pool),
                name: redact(url),
            }
        } else {
            return Err(RuntimeError::BadUrl(redact(url)));
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The store's name (its URL without a password).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.db, Db::Pg(_))
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
        in_tx!(self, tx, pg, {
            sqlx::query("INSERT INTO rt_runs (id, workflow, definition_hash, input_session, options, status, attempts, failures, resume_session, segment, output_session, detail, submitted_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, 'queued', 0, 0, NULL, 0, NULL, NULL, $6, $6)")
                .bind(id.as_str())
                .bind(workflow)
                .bind(definition_hash)
                .bind(input_session)
                .bind(&opts)
                .bind(now)
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
                id.as_str(),
                "status",
                "{\"status\": \"queued\"}",
                "submitter",
                0i64
            );
        });
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
    pub async fn claim(
        &self,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<(Run, Lease)>, RuntimeError> {
        let now = now_ms();
        let sql = format!(
            "SELECT r.id AS id FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id \
             WHERE r.status = 'queued' OR (r.status = 'running' AND l.expires_ms < $1) \
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
                    push_event!(tx, id.as_str(), "claimed", detail, worker, token);
                    Some((id, token))
                }
            }
        });
        let Some((id, token)) = got else {
            return Ok(None);
        };
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
    /// workflow).
    pub async fn record(&self, held: &Lease, entry: &JournalEntry) -> Result<(), RuntimeError> {
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
            sqlx::query("INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token) VALUES ($1, $2, $3, $4, $5, $6)")
                .bind(held.run.as_str())
                .bind(&entry.step)
                .bind(entry.seq)
                .bind(&entry.request_hash)
                .bind(&entry.payload)
                .bind(held.token)
                .execute(&mut *tx)
                .await?;
        });
        Ok(())
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

    /// Writes an effect-ledger row (insert or update by run, step and call id; fenced).
    pub async fn put_effect(&self, held: &Lease, e: &Effect) -> Result<(), RuntimeError> {
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
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
        });
        Ok(())
    }

    /// Moves the held run to `status` (fenced) and lets the lease go; `output`, `detail`,
    /// `resume` and a failure count go with it. A run handed back (`queued`) keeps its
    /// journal and ledger for the next worker.
    pub async fn finish(&self, held: &Lease, to: Transition<'_>) -> Result<(), RuntimeError> {
        let now = now_ms();
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
            sqlx::query("UPDATE rt_runs SET status = $2, output_session = COALESCE($3, output_session), detail = $4, \
                         resume_session = COALESCE($5, resume_session), failures = failures + $6, updated_ms = $7 WHERE id = $1")
                .bind(held.run.as_str())
                .bind(to.status.as_str())
                .bind(to.output)
                .bind(to.detail)
                .bind(to.resume)
                .bind(i64::from(to.failed))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE rt_leases SET worker = NULL, expires_ms = 0 WHERE run_id = $1")
                .bind(held.run.as_str())
                .execute(&mut *tx)
                .await?;
            let detail = format!("{{\"status\": \"{}\"}}", to.status);
            push_event!(
                tx,
                held.run.as_str(),
                "status",
                detail,
                held.worker.as_str(),
                held.token
            );
        });
        Ok(())
    }

    /// Appends an event as the lease holder (fenced): steps and sessions for the stream.
    pub async fn event(&self, held: &Lease, kind: &str, detail: &str) -> Result<(), RuntimeError> {
        in_tx!(self, tx, pg, {
            check_fence!(tx, pg, held);
            push_event!(
                tx,
                held.run.as_str(),
                kind,
                detail,
                held.worker.as_str(),
                held.token
            );
        });
        Ok(())
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
            push_event!(tx, id.as_str(), "status", ev, "operator", token);
        });
        Ok(())
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
