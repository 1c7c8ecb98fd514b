//! The run store: runs, leases with fencing tokens, the replay journal, the effect ledger
//! and run events, in SQLite (one machine) or PostgreSQL (a fleet) through sqlx.
//!
//! Its tables (`rt_*`) have their own versioned migrations ([`MIGRATIONS`]) and may live in
//! the same database as a SQL session store. Every write a worker makes goes through
//! one transaction that first checks the run's lease token against the token the write
//! carries ([`Lease::token`]) and refuses it with [`RuntimeError::Fenced`] once the lease
//! passed to another worker; on PostgreSQL the lease row is locked (`FOR UPDATE`) for that
//! check, on SQLite the transaction is `BEGIN IMMEDIATE` (one writer at a time). Claims use
//! `FOR UPDATE SKIP LOCKED` on PostgreSQL, so workers never queue behind each other. On
//! PostgreSQL a group commit is one statement, a call of the `rt_group` function the
//! migrations create (see [`PG_MIGRATIONS`]), so it costs one round trip.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::RunClock;

use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use rath_group_commit::{Lane, LaneOptions};

use crate::RuntimeError;
use crate::error::corrupt;
use crate::events::EventSubscription;
use crate::model::{Effect, EffectState, Lease, Run, RunEvent, RunId, RunOptions, RunStatus};
use tokio::sync::{mpsc, oneshot};

pub(crate) use commit::Barrier;
use commit::{Answer, Committer, Events, Finish, GROUP_MAX, Job, KEEP_IDLE, Op, Waiter};
use rows::{RUN_COLS, json_ids, run_from, run_from_json};
use schema::*;
pub use schema::{MIGRATIONS, PG_MIGRATIONS, SCHEMA_VERSION};
use transition::Change;
pub use transition::Transition;

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
    /// The group committers' queues: one on SQLite (one writer at a time), [`PG_LANES`] on
    /// PostgreSQL. A run's writes always go to the same one (see [`RunStore::lane`]), so
    /// they are committed in the order they were handed over.
    group: Arc<[mpsc::UnboundedSender<Job>]>,
    /// The next lane a claim goes to (claims carry no run yet).
    next_claim: Arc<std::sync::atomic::AtomicUsize>,
    /// The time the store writes and compares (its committers hold clones).
    clock: RunClock,
}

/// Group committers per store on PostgreSQL: their groups run side by side (each waits on
/// its own round trip and WAL flush), and they never wait on each other but for a lease row
/// two of them lock (a fenced writer against a claim, which is correct). Two, since a group
/// is one `rt_group` call: measured on the durable bench (2 cores, 12 drains each, one
/// sitting), 1, 2, 3, 4 and 6 lanes gave medians of about 5100, 5250, 4450, 4250 and 4050
/// steps/s (more lanes, smaller groups, more commits).
const PG_LANES: usize = 2;

impl From<sqlx::Error> for RuntimeError {
    fn from(e: sqlx::Error) -> Self {
        RuntimeError::Db {
            store: "sql".into(),
            message: e.to_string(),
        }
    }
}

/// Milliseconds since the Unix epoch on the system clock (a store reads its own [`RunClock`],
/// the system clock unless it was built with another; sessions never see it).
pub fn now_ms() -> i64 {
    crate::clock::system_ms()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The longest lease a claim or heartbeat takes: a day. A longer one is
/// [`RuntimeError::BadDuration`] (so `now + lease` always fits, and a lease is never born
/// expired by an overflow).
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// When a lease of `lease` taken at `now` ends: checked, so a lease over [`MAX_LEASE`] or a
/// clock past the representable range is an error, never a wrapped (expired) lease.
fn lease_end(now: i64, lease: Duration) -> Result<i64, RuntimeError> {
    let bad = || RuntimeError::BadDuration {
        what: "lease",
        ms: lease.as_millis(),
        max_ms: MAX_LEASE.as_millis() as u64,
    };
    if lease > MAX_LEASE {
        return Err(bad());
    }
    now.checked_add(ms(lease)).ok_or_else(bad)
}

// Runs `$body` inside the transaction `$begin` opens (`$pg`: the dialect, for the body),
// committing it after; a `?` inside rolls back (the transaction drops).
macro_rules! run_tx {
    ($tx:ident, $pg:ident, $is_pg:expr, $begin:expr, $body:block) => {{
        let mut $tx = $begin;
        #[allow(unused_variables)]
        let $pg = $is_pg;
        let out = $body;
        $tx.commit().await?;
        out
    }};
}

// Runs `$body` inside one transaction on either backend: on SQLite the one `$sqlite` opens
// (with the pool as `$pool`), on PostgreSQL a pool transaction; `$pg` tells the body which
// dialect it is on.
macro_rules! db_tx {
    ($db:expr, $tx:ident, $pg:ident, |$pool:ident| $sqlite:expr, $body:block) => {{
        let _quiet = crate::journal::quiet_share().await;
        match $db {
            Db::Sqlite($pool) => run_tx!($tx, $pg, false, $sqlite, $body),
            Db::Pg(pool) => run_tx!($tx, $pg, true, pool.begin().await?, $body),
        }
    }};
}

// `db_tx!` on the store `$s`'s pool (`BEGIN IMMEDIATE` on SQLite).
macro_rules! in_tx {
    ($s:expr, $tx:ident, $pg:ident, $body:block) => {
        db_tx!(
            &$s.db,
            $tx,
            $pg,
            |pool| pool.begin_with("BEGIN IMMEDIATE").await?,
            $body
        )
    };
}

// `in_tx!` for the group committer `$s`: on SQLite its transactions run on its own
// connection (see `Committer::sqlite`).
macro_rules! committer_tx {
    ($s:expr, $tx:ident, $pg:ident, $body:block) => {
        db_tx!(
            &$s.db,
            $tx,
            $pg,
            |pool| begin_kept(&mut $s.sqlite, pool).await?,
            $body
        )
    };
}

/// A `BEGIN IMMEDIATE` transaction on the SQLite connection `conn` keeps (taken from `pool`
/// when it has none).
async fn begin_kept<'c>(
    conn: &'c mut Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>,
    pool: &SqlitePool,
) -> Result<sqlx::Transaction<'c, sqlx::Sqlite>, RuntimeError> {
    if conn.is_none() {
        *conn = Some(pool.acquire().await?);
    }
    match conn.as_mut() {
        Some(c) => Ok(sqlx::Connection::begin_with(&mut **c, "BEGIN IMMEDIATE").await?),
        None => Err(RuntimeError::Db {
            store: "sql".into(),
            message: "the committer has no connection".into(),
        }),
    }
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

// Appends an event row (its `seq` the run's next) inside a transaction, through the same
// statement the committer's batches use (and notifies PostgreSQL listeners at commit).
macro_rules! push_event {
    ($tx:ident, $pg:ident, $now:expr, $run:expr, $kind:expr, $detail:expr, $by:expr, $token:expr) => {{
        let mut one = Events::default();
        one.push($run, $kind, &$detail, $by, $token);
        sqlx::query(Events::sql($pg))
            .bind(one.take_json())
            .bind($now)
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
    /// `postgres://user:password@host/db` (`?schema=NAME` keeps the tables in that schema,
    /// created when missing), and applies its migrations. The URL is read by
    /// [`rath_persist::StoreUrl::parse`], as the session stores read it: the same forms, the
    /// same refusals (a bad schema name is [`RuntimeError::Persist`] with
    /// [`PersistError::BadStoreUrl`](rath_persist::PersistError::BadStoreUrl)). A PostgreSQL
    /// URL's `sslmode` is honoured as libpq does: `prefer` (the default) speaks TLS when the
    /// server offers it, `require` insists, `verify-ca` and `verify-full` also check the
    /// server's certificate (against the web's root authorities and `sslrootcert`).
    pub async fn connect(url: &str) -> Result<RunStore, RuntimeError> {
        Self::connect_with_clock(url, RunClock::system()).await
    }

    /// [`RunStore::connect`] with the times the store writes and compares taken from
    /// `clock` (a manual one in tests of backoffs, leases and deadlines: see [`RunClock`]).
    pub async fn connect_with_clock(url: &str, clock: RunClock) -> Result<RunStore, RuntimeError> {
        let trimmed = url.trim();
        let ours = ["sqlite:", "postgres://", "postgresql://"]
            .iter()
            .any(|p| trimmed.starts_with(p));
        if !ours {
            return Err(RuntimeError::BadUrl(redact(url)));
        }
        let store = match rath_persist::StoreUrl::parse(url)? {
            rath_persist::StoreUrl::Sqlite { path: Some(path) } => {
                let opts = SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(30));
                // No ping before each acquire (a file in this process cannot go away behind
                // the pool's back; the ping is a round trip to the connection's worker
                // thread).
                // The pool waits longer than a statement's busy timeout, so a file another
                // process keeps locked is reported as locked, not as the pool's timeout.
                let pool = SqlitePoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(35))
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await?;
                RunStore::over(
                    Db::Sqlite(pool),
                    format!("sqlite:{}", path.display()),
                    clock,
                )
            }
            rath_persist::StoreUrl::Postgres { url: base, schema } => {
                let mut opts = PgConnectOptions::from_str(&base)?;
                let mut name = redact(&base);
                // One connection first, outside the pool: a refused or unreachable server is
                // reported at once, naming the address (the pool retries a refused
                // connection until its timeout, then says only that it timed out).
                let mut c = sqlx::ConnectOptions::connect(&opts).await.map_err(|e| {
                    let message = match &e {
                        sqlx::Error::Io(io) => format!(
                            "cannot connect to {}:{}: {io}",
                            opts.get_host(),
                            opts.get_port()
                        ),
                        _ => e.to_string(),
                    };
                    RuntimeError::Db {
                        store: name.clone(),
                        message,
                    }
                })?;
                if let Some(schema) = &schema {
                    // The schema (a name `StoreUrl` checked: plain letters, digits and `_`),
                    // then every connection of the pool uses it.
                    sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                        .execute(&mut c)
                        .await?;
                    opts = opts.options([("search_path", schema.as_str())]);
                    name = format!("{name}?schema={schema}");
                }
                let _ = sqlx::Connection::close(c).await;
                let pool = PgPoolOptions::new()
                    .max_connections(8 + PG_LANES as u32)
                    .connect_with(opts)
                    .await?;
                RunStore::over(Db::Pg(pool), name, clock)
            }
            _ => return Err(RuntimeError::BadUrl(redact(url))),
        };
        store.migrate().await?;
        store.warm().await;
        Ok(store)
    }

    /// On PostgreSQL, opens a connection per committer lane and four more (the event
    /// listener's, a waiter's reads, the workers' deadline sweeps and lone reads) and calls
    /// `rt_group` once on each with empty lists: the server starts a process per
    /// connection, and a process compiles the function and plans its statements on its
    /// first call (several ms), which a worker's first claims and reads would otherwise
    /// wait for. (With two more instead of four, a bench drain of 200 runs still opened
    /// one or two connections in its last milliseconds.) Best effort: a failure here shows
    /// again on the first real write.
    /// The store's clock.
    pub fn clock(&self) -> &RunClock {
        &self.clock
    }

    async fn warm(&self) {
        let Db::Pg(pool) = &self.db else {
            return;
        };
        let mut conns = Vec::with_capacity(PG_LANES + 4);
        for _ in 0..PG_LANES + 4 {
            match pool.acquire().await {
                Ok(c) => conns.push(c),
                Err(_) => return,
            }
        }
        let warm = format!("SELECT rt_group($1{})", ", '{}'".repeat(RT_GROUP_COLUMNS));
        for c in &mut conns {
            // Empty arrays, not NULL: every branch runs, writing nothing, so every statement
            // of the function is planned here (the claim's too, since schema version 7: it
            // planned the first real claim on each connection, 5-7 ms at the start of every
            // drain of the durable bench, which every run claimed then waited behind).
            let _ = sqlx::query(&warm)
                .bind(self.clock.now_ms())
                .execute(&mut **c)
                .await;
        }
    }

    /// A store over `db` with its group committer running (on the current tokio runtime).
    fn over(db: Db, name: String, clock: RunClock) -> RunStore {
        let hub: Arc<crate::events::Hub> = Arc::default();
        let lanes = if matches!(db, Db::Pg(_)) { PG_LANES } else { 1 };
        let group: Vec<mpsc::UnboundedSender<Job>> = (0..lanes)
            .map(|_| {
                let committer = Committer::new(db.clone(), clock.clone(), hub.clone());
                Lane::spawn(
                    committer,
                    LaneOptions::default().max(GROUP_MAX).keep_idle(KEEP_IDLE),
                )
            })
            .collect();
        RunStore {
            db,
            name,
            hub,
            group: group.into(),
            next_claim: Arc::default(),
            clock,
        }
    }

    /// The committer queue for a write of `held`'s run (always the same one for a run), or
    /// for a claim (`None`: the lanes in turn).
    fn lane(&self, held: Option<&Lease>) -> &mpsc::UnboundedSender<Job> {
        let n = self.group.len();
        let i = match held {
            _ if n == 1 => 0,
            // FNV-1a of the run id.
            Some(l) => {
                let h = l
                    .run
                    .as_str()
                    .bytes()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                    });
                (h % n as u64) as usize
            }
            None => {
                self.next_claim
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    % n
            }
        };
        &self.group[i]
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
                let only_pg = PG_MIGRATIONS
                    .iter()
                    .filter(|m| pg && m.0 == *version)
                    .flat_map(|m| m.1.iter());
                for stmt in stmts.iter().chain(only_pg) {
                    sqlx::query(stmt).execute(&mut *tx).await?;
                }
                sqlx::query(
                    "INSERT INTO rt_schema (version, what, applied_ms) VALUES ($1, $2, $3)",
                )
                .bind(version)
                .bind(what)
                .bind(self.clock.now_ms())
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
        let now = self.clock.now_ms();
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
                self.clock.now_ms(),
                id.as_str(),
                "status",
                "{\"status\": \"queued\"}",
                "submitter",
                0i64
            );
        });
        self.hub.notify_moved(id.as_str());
        self.hub.notify_queued();
        Ok(id)
    }

    /// Resolves once this process queues a run (a submission, or an operator's decision
    /// that puts a run back in the queue): what an idle worker's poll waits on besides its
    /// interval.
    pub(crate) async fn queued_here(&self) {
        self.hub.queued().await;
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

    /// The runs among `ids` that exist, in one query (in no particular order).
    pub async fn get_many(&self, ids: &[RunId]) -> Result<Vec<Run>, RuntimeError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {RUN_COLS} FROM rt_runs WHERE id IN ({})",
            json_ids(self.is_postgres())
        );
        let list: Vec<&str> = ids.iter().map(RunId::as_str).collect();
        let list = serde_json::to_string(&list).map_err(|e| corrupt("run ids", e))?;
        on_pool!(self, p, {
            let rows = sqlx::query(&sql).bind(list).fetch_all(p).await?;
            rows.iter().map(run_from).collect()
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
        let now = self.clock.now_ms();
        let expires_ms = lease_end(now, lease)?;
        let op = Op::Claim {
            worker: worker.to_owned(),
            lease_ms: ms(lease),
        };
        let got = match self.submit_job(None, op).await? {
            Answer::Claimed(got) => got,
            Answer::Done => None,
        };
        let Some(got) = got else {
            return Ok(None);
        };
        let (run, token) = *got;
        let id = run.id.clone();
        Ok(Some((
            run,
            Lease {
                run: id,
                worker: worker.to_owned(),
                token,
                expires_ms,
            },
        )))
    }

    /// Extends the lease by `lease` from now (fenced).
    #[tracing::instrument(level = "debug", name = "heartbeat rt_leases", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "heartbeat", db.collection.name = "rt_leases", rath.run.id = %held.run, rath.lease.token = held.token))]
    pub async fn heartbeat(&self, held: &Lease, lease: Duration) -> Result<Lease, RuntimeError> {
        let expires = lease_end(self.clock.now_ms(), lease)?;
        let op = Op::Heartbeat {
            expires_ms: expires,
        };
        self.submit_job(Some(held), op).await?;
        Ok(Lease {
            expires_ms: expires,
            ..held.clone()
        })
    }

    /// The run's status as the lease holder sees it, checked against the fence (a cancel
    /// fences the worker too).
    #[tracing::instrument(level = "debug", name = "check rt_leases", skip_all, fields(otel.kind = "client", db.system.name = self.system(), db.operation.name = "check", db.collection.name = "rt_leases", rath.run.id = %held.run, rath.lease.token = held.token))]
    pub async fn check(&self, held: &Lease) -> Result<(), RuntimeError> {
        self.submit_job(Some(held), Op::Check).await.map(|_| ())
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
        let op = Op::Finish(Finish {
            status: to.status,
            output: to.output.map(str::to_owned),
            detail: to.detail.map(str::to_owned),
            resume: to.resume.map(str::to_owned),
            failed: to.failed,
            not_before_ms: to.not_before_ms.unwrap_or(0),
        });
        self.submit_job(Some(held), op).await.map(|_| ())
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

    /// Hands a fenced write to the group committer and waits for its commit.
    async fn grouped(&self, held: &Lease, op: Op) -> Result<(), RuntimeError> {
        self.submit_job(Some(held), op).await.map(|_| ())
    }

    /// Hands a write to the group committer and waits for its answer; does it alone when
    /// the committer is gone (its runtime shut down).
    async fn submit_job(&self, held: Option<&Lease>, op: Op) -> Result<Answer, RuntimeError> {
        let (done, answer) = oneshot::channel();
        let job = Job {
            lease: held.cloned(),
            op,
            done: Waiter::One(done),
        };
        let job = match self.lane(held).send(job) {
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
        let mut c = Committer::new(self.db.clone(), self.clock.clone(), self.hub.clone());
        let result = c
            .apply(std::slice::from_ref(&job))
            .await?
            .pop()
            .unwrap_or_else(|| Err(corrupt("group commit", "a write got no answer")));
        job.tell(&result, &self.hub);
        result
    }

    /// Hands a journal record to the group committer without waiting for its commit: the
    /// claim's `barrier` learns when it landed (see [`Barrier`]).
    pub(crate) fn record_behind(&self, held: &Lease, entry: JournalEntry, barrier: &Arc<Barrier>) {
        self.behind(held, Op::Record(entry), barrier);
    }

    /// Hands a ledger write to the group committer without waiting for its commit.
    pub(crate) fn put_effect_behind(&self, held: &Lease, e: Effect, barrier: &Arc<Barrier>) {
        self.behind(held, Op::Effect(e), barrier);
    }

    fn behind(&self, held: &Lease, op: Op, barrier: &Arc<Barrier>) {
        // Positions are handed out and sent under one lock: a run's writes reach the
        // committer in position order, and are committed in that order.
        let mut sent = barrier.sent.lock().unwrap_or_else(|p| p.into_inner());
        *sent += 1;
        let job = Job {
            lease: Some(held.clone()),
            op,
            done: Waiter::Barrier(barrier.clone(), *sent),
        };
        if let Err(mpsc::error::SendError(job)) = self.lane(Some(held)).send(job) {
            let seq = *sent;
            drop(sent);
            let err = RuntimeError::Db {
                store: self.name.clone(),
                message: "the group committer is gone".into(),
            };
            if let Waiter::Barrier(b, _) = job.done {
                b.landed(seq, Err(err));
            }
        }
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
                .bind(self.clock.now_ms())
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
            push_event!(
                tx,
                pg,
                self.clock.now_ms(),
                id.as_str(),
                "status",
                ev,
                "operator",
                token
            );
        });
        self.hub.notify_moved(id.as_str());
        // A decision may have put the run back in the queue (an idle worker that finds
        // nothing to claim goes back to its poll).
        self.hub.notify_queued();
        Ok(())
    }

    /// Moves every run past its deadline that no live worker is on (queued, waiting, or
    /// running under an expired lease) to `timed_out`; their lease tokens move on, so a
    /// worker that wakes up later is fenced. A run in review stays there (a person looks at
    /// its ambiguous call first). Returns the runs moved, oldest first.
    pub async fn expire_overdue(&self) -> Result<Vec<RunId>, RuntimeError> {
        let now = self.clock.now_ms();
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
                    self.clock.now_ms(),
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
            self.hub.notify_moved(id);
        }
        Ok(moved.into_iter().map(RunId).collect())
    }

    /// The runs whose status this process's writes moved (claims aside), as they commit
    /// (see [`Runtime::wait`](crate::Runtime::wait)).
    pub(crate) fn local_moves(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.hub.moves()
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

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn redact(url: &str) -> String {
    rath_persist::url::redact(url)
}

mod commit;
mod rows;
mod schema;
mod transition;
