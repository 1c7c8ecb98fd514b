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

use crate::RuntimeError;
use crate::error::corrupt;
use crate::events::EventSubscription;
use crate::model::{Effect, EffectState, Lease, Run, RunEvent, RunId, RunOptions, RunStatus};
use tokio::sync::{mpsc, oneshot};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 7;

/// The migrations, in order: `(version, what it adds, statements)`. The statements are the
/// same text on SQLite and PostgreSQL; what a version adds on PostgreSQL only is in
/// [`PG_MIGRATIONS`].
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
    (
        3,
        "PostgreSQL: rt_group(), a group commit in one statement (nothing on SQLite)",
        &[],
    ),
    (
        4,
        "PostgreSQL: rt_group() keeps one plan per statement (nothing on SQLite)",
        &[],
    ),
    (
        5,
        "PostgreSQL: rt_group() takes its rows as arrays, not JSON (nothing on SQLite)",
        &[],
    ),
    (
        6,
        "PostgreSQL: run ids, steps and call ids compare byte by byte (nothing on SQLite)",
        &[],
    ),
    (
        7,
        "PostgreSQL: rt_group() plans its claim in the warm-up (nothing on SQLite)",
        &[],
    ),
];

/// What a migration adds on PostgreSQL only, by version (applied after its
/// [`MIGRATIONS`] statements, in the same transaction).
pub const PG_MIGRATIONS: &[(i64, &[&str])] = &[
    (3, &[RT_GROUP]),
    (4, &[RT_GROUP]),
    (5, &[RT_GROUP_V4_DROP, RT_GROUP]),
    (6, BYTE_KEYS),
    (7, &[RT_GROUP]),
];

/// Schema version 6 on PostgreSQL: the key columns (run ids, step paths, call ids) take the
/// `"C"` collation, so the indexes, the fence's run order and the joins compare them as
/// bytes. Under a database's default collation every comparison went through the C
/// library's `strcoll` (PostgreSQL 15 treats only `C` and `POSIX` as byte order, not
/// `C.UTF-8`): inserting journal and ledger rows took 14-19% longer (40,000 rows, 40 a
/// statement), and in interleaved profile drains of the durable bench (20-30 a side, four
/// A/Bs, 2026-12-06) the server's CPU per drain was 4-11% lower with byte order, our steps/s
/// about the same (+6% to -1%). The ids are ASCII, so their order is unchanged. The
/// statements rewrite the tables (an `ACCESS EXCLUSIVE` lock each, for as long as a large
/// store takes to copy); SQLite compares text as bytes already.
const BYTE_KEYS: &[&str] = &[
    r#"ALTER TABLE rt_runs ALTER COLUMN id TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_leases ALTER COLUMN run_id TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_journal ALTER COLUMN run_id TYPE text COLLATE "C", ALTER COLUMN step TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_effects ALTER COLUMN run_id TYPE text COLLATE "C", ALTER COLUMN step TYPE text COLLATE "C", ALTER COLUMN call_id TYPE text COLLATE "C""#,
    r#"ALTER TABLE rt_events ALTER COLUMN run_id TYPE text COLLATE "C""#,
];

/// `rt_group(now_ms, t_run, t_token, r_run, ...) RETURNS json`: a group commit's writes in
/// one statement, so one round trip (and no `BEGIN`/`COMMIT` of their own) instead of one
/// per statement. It locks, in run order, the lease row of every run the batch writes for
/// that still holds the token its writes carry, and writes nothing unless every run does:
/// then it answers
/// `{"fenced": true}` and the committer does the batch the general way, which refuses the
/// stale writes alone. Otherwise it stores, in this order, the journal rows, the ledger rows
/// (the last write of each), the heartbeats (the last of each run), the finishes and their
/// releases, the events (each numbered after its run's stored ones), the claims (the `i`-th
/// claim takes the `i`-th run found, `FOR UPDATE SKIP LOCKED`; each adds a `claimed`
/// event), and notifies `rt_events` of every run in `notify` and every run claimed; it
/// answers `{"claimed": [{"i", "token", "run"}]}`.
///
/// Its arguments after the time are columns: one array per column of each kind of row, the
/// `i`-th row of a kind being the `i`-th element of each of its arrays: the fence (`t_`: run
/// id, token), then journal rows (`r_`), ledger rows (`e_`), heartbeats (`b_`), finishes
/// (`f_`), events (`v_`), claims (`c_`) and the runs to notify. A kind with no rows is `NULL`
/// (the fence's arrays are never `NULL`; empty, they hold nothing). Arrays, since schema
/// version 5: they arrive in the binary protocol, each element a length and its bytes, where
/// the JSON rows of versions 3 and 4 were parsed twice on the server (once when the `json`
/// argument was read, once when the rows were taken apart, a character at a time), which
/// was 18% of the server's CPU on the durable bench's drains (perf, 2026-12-04).
///
/// Its statements run with generic plans from the first call (`plan_cache_mode`, version 4):
/// each reads its rows from the arguments, so a plan made for one call's values is no
/// better than the one kept, and PostgreSQL otherwise plans every statement again on each of
/// a connection's first five calls, which on the durable bench's new stores was 6% of the
/// server's CPU (interleaved profile drains, 18 each, 2026-12-04: 6264 vs 6082 steps/s
/// median, the server's CPU per drain 0.13 s vs 0.16 s).
///
/// Since version 7 its claim statement runs when nothing was picked too (it then writes
/// nothing), so the warm-up's empty claim plans it: before, the first real claim on each
/// connection did, and every run of a bench drain waited behind it (interleaved profile
/// drains, 32-40 a side, 2026-12-07: the server's CPU per drain 8 ms lower; steps/s +2% and
/// +12% in two A/Bs). The claimed runs it notifies are the ids it picked (before, it parsed
/// its own JSON answer again for them).
const RT_GROUP: &str = r#"CREATE OR REPLACE FUNCTION rt_group(now_ms bigint,
    t_run text[], t_token bigint[],
    r_run text[], r_step text[], r_seq bigint[], r_hash text[], r_payload text[], r_token bigint[],
    e_run text[], e_step text[], e_call text[], e_tool text[], e_key text[], e_args text[],
    e_state text[], e_result text[], e_token bigint[],
    b_run text[], b_expires bigint[],
    f_run text[], f_status text[], f_output text[], f_detail text[], f_resume text[],
    f_failed bigint[], f_not_before bigint[],
    v_run text[], v_nth bigint[], v_kind text[], v_detail text[], v_worker text[], v_token bigint[],
    c_worker text[], c_worker_json text[], c_expires bigint[],
    notify text[])
RETURNS json LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    held bigint;
    picked text[];
    claimed json;
BEGIN
    SELECT count(*) INTO held
    FROM (SELECT l.run_id FROM rt_leases l
          JOIN unnest(t_run, t_token) AS t(run, token) ON l.run_id = t.run AND l.token = t.token
          ORDER BY l.run_id FOR UPDATE OF l) AS s;
    IF held <> COALESCE(cardinality(t_run), 0) THEN
        RETURN json_build_object('fenced', true);
    END IF;
    IF r_run IS NOT NULL THEN
        INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token)
        SELECT * FROM unnest(r_run, r_step, r_seq, r_hash, r_payload, r_token);
    END IF;
    IF e_run IS NOT NULL THEN
        INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token)
        SELECT * FROM unnest(e_run, e_step, e_call, e_tool, e_key, e_args, e_state, e_result, e_token)
        ON CONFLICT (run_id, step, call_id) DO UPDATE
            SET state = excluded.state, result = excluded.result, token = excluded.token;
    END IF;
    IF b_run IS NOT NULL THEN
        UPDATE rt_leases AS l SET expires_ms = v.expires
        FROM unnest(b_run, b_expires) AS v(run_id, expires)
        WHERE l.run_id = v.run_id;
    END IF;
    IF f_run IS NOT NULL THEN
        UPDATE rt_runs AS r SET status = v.status, output_session = COALESCE(v.output, r.output_session),
            detail = v.detail, resume_session = COALESCE(v.resume, r.resume_session),
            failures = r.failures + v.failed, updated_ms = now_ms, not_before_ms = v.not_before
        FROM unnest(f_run, f_status, f_output, f_detail, f_resume, f_failed, f_not_before)
            AS v(id, status, output, detail, resume, failed, not_before)
        WHERE r.id = v.id;
        UPDATE rt_leases AS l SET worker = NULL, expires_ms = 0
        FROM unnest(f_run) AS v(id) WHERE l.run_id = v.id;
    END IF;
    IF v_run IS NOT NULL THEN
        INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms)
        SELECT v.run_id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = v.run_id), 0) + v.nth,
            v.kind, v.detail, v.by_worker, v.token, now_ms
        FROM unnest(v_run, v_nth, v_kind, v_detail, v_worker, v_token)
            AS v(run_id, nth, kind, detail, by_worker, token);
    END IF;
    IF c_worker IS NOT NULL THEN
        SELECT array_agg(s.id ORDER BY s.submitted_ms, s.id) INTO picked
        FROM (SELECT r.id, r.submitted_ms FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id
              WHERE (r.status = 'queued' AND r.not_before_ms <= now_ms)
                 OR (r.status = 'running' AND l.expires_ms < now_ms)
              ORDER BY r.submitted_ms, r.id LIMIT cardinality(c_worker)
              FOR UPDATE OF r, l SKIP LOCKED) AS s;
        -- Run even when nothing was picked (it then writes nothing): a connection's
        -- first run of a statement plans it, and the warm-up's empty claim does it here.
        WITH take AS (
            SELECT f.id, f.i, c.worker, c.worker_json, c.expires
            FROM unnest(picked) WITH ORDINALITY AS f(id, i)
            JOIN unnest(c_worker, c_worker_json, c_expires) WITH ORDINALITY
                AS c(worker, worker_json, expires, i) ON c.i = f.i),
        moved AS (
            UPDATE rt_leases AS l SET worker = take.worker, token = l.token + 1, expires_ms = take.expires
            FROM take WHERE l.run_id = take.id RETURNING l.run_id, l.token),
        marked AS (
            UPDATE rt_runs AS r SET status = 'running', attempts = r.attempts + 1, updated_ms = now_ms
            FROM take WHERE r.id = take.id
            RETURNING r.id, r.workflow, r.definition_hash, r.input_session, r.options, r.status,
                r.attempts, r.failures, r.resume_session, r.segment, r.output_session, r.detail,
                r.submitted_ms, r.not_before_ms, r.deadline_ms),
        logged AS (
            INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms)
            SELECT take.id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = take.id), 0) + 1,
                'claimed', '{"worker": ' || take.worker_json || ', "token": ' || moved.token || '}',
                take.worker, moved.token, now_ms
            FROM take JOIN moved ON moved.run_id = take.id)
        SELECT json_agg(json_build_object('i', take.i, 'token', moved.token, 'run', row_to_json(marked)))
        INTO claimed
        FROM take JOIN moved ON moved.run_id = take.id JOIN marked ON marked.id = take.id;
    END IF;
    PERFORM pg_notify('rt_events', n.r)
    FROM (SELECT unnest(notify) AS r UNION SELECT unnest(picked)) AS n
    ORDER BY n.r;
    RETURN json_build_object('claimed', COALESCE(claimed, '[]'::json));
END
$fn$"#;

/// Columns of [`RT_GROUP`] after its time argument: what the warm-up passes as empty arrays.
const RT_GROUP_COLUMNS: usize = 36;

/// What schema version 5 drops: `rt_group` as versions 3 and 4 made it (JSON rows). A
/// worker of version 4 still running against a version 5 store finds it gone and commits
/// its groups the general way (a transaction of a statement per kind), which is correct.
const RT_GROUP_V4_DROP: &str =
    "DROP FUNCTION IF EXISTS rt_group(bigint, json, json, json, json, json, json, json, json)";

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

/// A subquery of the strings in the JSON array `$1` (a list of run ids).
fn json_ids(pg: bool) -> &'static str {
    if pg {
        "SELECT json_array_elements_text($1::json)"
    } else {
        "SELECT value FROM json_each($1)"
    }
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

/// A run from its row as JSON (`row_to_json` of the [`RUN_COLS`] columns).
fn run_from_json(v: &serde_json::Value) -> Result<Run, RuntimeError> {
    let text = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let int = |k: &str| v.get(k).and_then(serde_json::Value::as_i64);
    let need = |k: &str| corrupt("claimed run", format!("no {k}"));
    let options = text("options").ok_or_else(|| need("options"))?;
    let status = text("status").ok_or_else(|| need("status"))?;
    Ok(Run {
        id: RunId(text("id").ok_or_else(|| need("id"))?),
        workflow: text("workflow").ok_or_else(|| need("workflow"))?,
        definition_hash: text("definition_hash").ok_or_else(|| need("definition_hash"))?,
        input_session: text("input_session").ok_or_else(|| need("input_session"))?,
        options: serde_json::from_str(&options).map_err(|e| corrupt("run options", e))?,
        status: status.parse()?,
        attempts: int("attempts").ok_or_else(|| need("attempts"))?,
        failures: int("failures").ok_or_else(|| need("failures"))?,
        resume_session: text("resume_session"),
        segment: int("segment").ok_or_else(|| need("segment"))?,
        output_session: text("output_session"),
        detail: text("detail"),
        submitted_ms: int("submitted_ms").ok_or_else(|| need("submitted_ms"))?,
        not_before_ms: int("not_before_ms").ok_or_else(|| need("not_before_ms"))?,
        deadline_ms: int("deadline_ms"),
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
                let (tx, rx) = mpsc::unbounded_channel();
                let committer = Committer::new(db.clone(), clock.clone());
                tokio::spawn(committer.run(rx, hub.clone()));
                tx
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
        let mut c = Committer::new(self.db.clone(), self.clock.clone());
        let result = c.apply(std::slice::from_ref(&job)).await?.remove(0);
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
    rath_persist::url::redact(url)
}

/// One write of a worker, for the group committer.
#[derive(Debug)]
enum Op {
    Record(JournalEntry),
    Effect(Effect),
    Event { kind: String, detail: String },
    Heartbeat { expires_ms: i64 },
    Check,
    Finish(Finish),
    Claim { worker: String, lease_ms: i64 },
}

/// [`Transition`], owned (it travels to the committer).
#[derive(Debug)]
struct Finish {
    status: RunStatus,
    output: Option<String>,
    detail: Option<String>,
    resume: Option<String>,
    failed: bool,
    not_before_ms: i64,
}

impl Finish {
    /// The run's row as the release statement takes it (an object of its JSON array).
    fn row(&self, run: &str) -> serde_json::Value {
        serde_json::json!({
            "id": run, "status": self.status.as_str(),
            "output": self.output, "detail": self.detail, "resume": self.resume,
            "failed": i64::from(self.failed), "not_before": self.not_before_ms,
        })
    }

    /// The detail of the `status` event the release adds.
    fn event_detail(&self) -> String {
        format!("{{\"status\": \"{}\"}}", self.status)
    }
}

/// What a write answers.
#[derive(Debug)]
enum Answer {
    Done,
    Claimed(Option<Box<(Run, i64)>>),
}

/// Who is told when a write is committed: a caller waiting for it, or a run's [`Barrier`]
/// (a write handed over without waiting) with the write's position.
#[derive(Debug)]
enum Waiter {
    One(oneshot::Sender<Result<Answer, RuntimeError>>),
    Barrier(Arc<Barrier>, u64),
}

#[derive(Debug)]
struct Job {
    /// The lease a fenced write carries (`None`: a claim).
    lease: Option<Lease>,
    op: Op,
    done: Waiter,
}

impl Job {
    /// Tells this process's subscribers what the write added once it committed (`r`):
    /// an event (a status change, for a finish) of the run it was for, or a claim's.
    fn tell(&self, r: &Result<Answer, RuntimeError>, hub: &crate::events::Hub) {
        let Ok(a) = r else {
            return;
        };
        match (&self.op, &self.lease) {
            (Op::Event { .. }, Some(l)) => hub.notify(l.run.as_str()),
            (Op::Finish(_), Some(l)) => hub.notify_moved(l.run.as_str()),
            _ => {}
        }
        if let Answer::Claimed(Some(c)) = a {
            hub.notify(c.0.id.as_str());
        }
    }

    fn answer(self, r: Result<Answer, RuntimeError>, hub: &crate::events::Hub) {
        self.tell(&r, hub);
        match self.done {
            Waiter::One(tx) => {
                let _ = tx.send(r);
            }
            Waiter::Barrier(b, seq) => b.landed(seq, r.map(|_| ())),
        }
    }
}

/// A failed write as a run's barrier keeps it (every waiter gets a copy).
#[derive(Clone, Debug)]
enum Failed {
    Fenced {
        run: String,
        token: i64,
        current: i64,
    },
    Other(String),
}

impl Failed {
    fn of(e: &RuntimeError) -> Self {
        match e {
            RuntimeError::Fenced {
                run,
                token,
                current,
            } => Failed::Fenced {
                run: run.clone(),
                token: *token,
                current: *current,
            },
            other => Failed::Other(other.to_string()),
        }
    }

    fn error(&self) -> RuntimeError {
        match self {
            Failed::Fenced {
                run,
                token,
                current,
            } => RuntimeError::Fenced {
                run: run.clone(),
                token: *token,
                current: *current,
            },
            Failed::Other(message) => RuntimeError::Db {
                store: "run store".into(),
                message: message.clone(),
            },
        }
    }
}

/// A journal row as the group statements take it (an object of their JSON array of rows),
/// borrowed from the write: the reply's text is escaped once, never copied.
#[derive(serde::Serialize)]
struct RecordRow<'a> {
    run_id: &'a str,
    step: &'a str,
    seq: i64,
    request_hash: &'a str,
    payload: &'a str,
    token: i64,
}

impl<'a> RecordRow<'a> {
    fn of(run: &'a str, token: i64, e: &'a JournalEntry) -> Self {
        RecordRow {
            run_id: run,
            step: &e.step,
            seq: e.seq,
            request_hash: &e.request_hash,
            payload: &e.payload,
            token,
        }
    }
}

/// A ledger row as the group statements take it (see [`RecordRow`]).
#[derive(serde::Serialize)]
struct EffectRow<'a> {
    run_id: &'a str,
    step: &'a str,
    call_id: &'a str,
    tool: &'a str,
    idem_key: &'a str,
    args: &'a str,
    state: &'a str,
    result: Option<&'a str>,
    token: i64,
}

impl<'a> EffectRow<'a> {
    fn of(run: &'a str, token: i64, e: &'a Effect) -> Self {
        EffectRow {
            run_id: run,
            step: &e.step,
            call_id: &e.call_id,
            tool: &e.tool,
            idem_key: &e.idempotency_key,
            args: &e.args,
            state: e.state.as_str(),
            result: e.result.as_deref(),
            token,
        }
    }
}

/// The rows of a batch's ledger writes, the last write of each row only (one statement may
/// not touch a row twice), in first-seen order.
#[derive(Default)]
struct EffectRows<'a> {
    rows: Vec<EffectRow<'a>>,
    at: std::collections::HashMap<(&'a str, &'a str, &'a str), usize>,
}

impl<'a> EffectRows<'a> {
    fn put(&mut self, row: EffectRow<'a>) {
        let key = (row.run_id, row.step, row.call_id);
        match self.at.get(&key) {
            Some(&i) => self.rows[i] = row,
            None => {
                self.at.insert(key, self.rows.len());
                self.rows.push(row);
            }
        }
    }
}

/// The event rows of one group transaction, each numbered after its run's stored events
/// and the batch's earlier ones for the run (inserted in one statement).
#[derive(Default)]
struct Events {
    rows: Vec<serde_json::Value>,
    nth: std::collections::HashMap<String, i64>,
}

impl Events {
    fn push(&mut self, run: &str, kind: &str, detail: &str, by: &str, token: i64) {
        let n = self.nth.entry(run.to_owned()).or_insert(0);
        *n += 1;
        self.rows.push(serde_json::json!({
            "run_id": run, "nth": *n, "kind": kind, "detail": detail, "by_worker": by, "token": token,
        }));
    }

    /// The rows pushed so far as one JSON array (the statement's `$1`), leaving none.
    fn take_json(&mut self) -> String {
        self.nth.clear();
        serde_json::Value::Array(std::mem::take(&mut self.rows)).to_string()
    }

    /// The insert of a batch: `$1` its rows (see [`Events::take_json`]), `$2` the time.
    fn sql(pg: bool) -> &'static str {
        if pg {
            "INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms) \
             SELECT v.run_id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = v.run_id), 0) + v.nth, \
             v.kind, v.detail, v.by_worker, v.token, $2 FROM json_to_recordset($1::json) \
             AS v(run_id text, nth bigint, kind text, detail text, by_worker text, token bigint)"
        } else {
            "INSERT INTO rt_events (run_id, seq, kind, detail, by_worker, token, at_ms) \
             SELECT v.run_id, COALESCE((SELECT MAX(e.seq) FROM rt_events e WHERE e.run_id = v.run_id), 0) + v.nth, \
             v.kind, v.detail, v.by_worker, v.token, $2 FROM (SELECT json_extract(value, '$.run_id') AS run_id, \
             json_extract(value, '$.nth') AS nth, json_extract(value, '$.kind') AS kind, \
             json_extract(value, '$.detail') AS detail, json_extract(value, '$.by_worker') AS by_worker, \
             json_extract(value, '$.token') AS token FROM json_each($1)) AS v"
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Landed {
    /// Every write up to this position is committed.
    done: u64,
    /// The first write of the run that failed (fenced or refused).
    failed: Option<Failed>,
}

/// The writes one claim of a run handed to the committer without waiting (its journal
/// records and tool answers), and how far they are committed. Anything that must come
/// after them (the run's next tool dispatch, a session write, the release)
/// waits on [`Barrier::wait`] first: that is how a recorded reply is durable before the
/// tool it asks for runs, while the reply's commit shares its transaction with the tool
/// call's `dispatched` row.
#[derive(Debug)]
pub(crate) struct Barrier {
    /// Positions handed out (under the lock, so they reach the committer in order).
    sent: std::sync::Mutex<u64>,
    state: tokio::sync::watch::Sender<Landed>,
}

impl Default for Barrier {
    fn default() -> Self {
        Self {
            sent: std::sync::Mutex::new(0),
            state: tokio::sync::watch::Sender::new(Landed::default()),
        }
    }
}

impl Barrier {
    fn landed(&self, seq: u64, r: Result<(), RuntimeError>) {
        self.state.send_modify(|s| {
            s.done = s.done.max(seq);
            if let Err(e) = &r
                && s.failed.is_none()
            {
                s.failed = Some(Failed::of(e));
            }
        });
    }

    /// The first failed write's error, if one is known to have failed by now (no wait).
    pub(crate) fn failed(&self) -> Option<RuntimeError> {
        self.state.borrow().failed.as_ref().map(Failed::error)
    }

    /// Waits until every write handed over so far is committed; the first failed one's
    /// error otherwise (a fence: the lease passed on).
    pub(crate) async fn wait(&self) -> Result<(), RuntimeError> {
        let target = *self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let mut rx = self.state.subscribe();
        let landed = rx
            .wait_for(|s| s.done >= target || s.failed.is_some())
            .await
            .map(|s| s.clone())
            .unwrap_or_default();
        match landed.failed {
            Some(f) => Err(f.error()),
            None => Ok(()),
        }
    }
}

/// Most writes one transaction takes.
const GROUP_MAX: usize = 512;

/// How long a group committer keeps its connection without a write to do.
const KEEP_IDLE: Duration = Duration::from_secs(1);

/// The arguments of one [`RT_GROUP`] call after its time, column by column (see there),
/// borrowed from the batch's writes: the texts are copied once, into the call's message.
#[derive(Default)]
struct GroupArgs<'a> {
    t_run: Vec<&'a str>,
    t_token: Vec<i64>,
    r_run: Vec<&'a str>,
    r_step: Vec<&'a str>,
    r_seq: Vec<i64>,
    r_hash: Vec<&'a str>,
    r_payload: Vec<&'a str>,
    r_token: Vec<i64>,
    e_run: Vec<&'a str>,
    e_step: Vec<&'a str>,
    e_call: Vec<&'a str>,
    e_tool: Vec<&'a str>,
    e_key: Vec<&'a str>,
    e_args: Vec<&'a str>,
    e_state: Vec<&'a str>,
    e_result: Vec<Option<&'a str>>,
    e_token: Vec<i64>,
    b_run: Vec<&'a str>,
    b_expires: Vec<i64>,
    f_run: Vec<&'a str>,
    f_status: Vec<&'a str>,
    f_output: Vec<Option<&'a str>>,
    f_detail: Vec<Option<&'a str>>,
    f_resume: Vec<Option<&'a str>>,
    f_failed: Vec<i64>,
    f_not_before: Vec<i64>,
    v_run: Vec<&'a str>,
    v_nth: Vec<i64>,
    v_kind: Vec<&'a str>,
    v_detail: Vec<&'a str>,
    v_worker: Vec<&'a str>,
    v_token: Vec<i64>,
    /// Each event's position among its run's events in this batch (1, 2, ...).
    nth: std::collections::HashMap<&'a str, i64>,
    c_worker: Vec<&'a str>,
    c_worker_json: Vec<String>,
    c_expires: Vec<i64>,
    notify: Vec<&'a str>,
}

impl<'a> GroupArgs<'a> {
    /// Adds an event row of `held`'s run, numbered after the batch's earlier ones for it.
    fn event(&mut self, held: &'a Lease, kind: &'a str, detail: &'a str) {
        let n = self.nth.entry(held.run.as_str()).or_insert(0);
        *n += 1;
        self.v_run.push(held.run.as_str());
        self.v_nth.push(*n);
        self.v_kind.push(kind);
        self.v_detail.push(detail);
        self.v_worker.push(&held.worker);
        self.v_token.push(held.token);
    }

    /// The call, every column bound (a kind with no rows as `NULL`).
    fn bind(
        self,
        now: i64,
    ) -> sqlx::query::QueryScalar<'a, sqlx::Postgres, String, sqlx::postgres::PgArguments> {
        fn col<T>(v: Vec<T>) -> Option<Vec<T>> {
            (!v.is_empty()).then_some(v)
        }
        sqlx::query_scalar(RT_GROUP_CALL)
            .bind(now)
            .bind(self.t_run)
            .bind(self.t_token)
            .bind(col(self.r_run))
            .bind(self.r_step)
            .bind(self.r_seq)
            .bind(self.r_hash)
            .bind(self.r_payload)
            .bind(self.r_token)
            .bind(col(self.e_run))
            .bind(self.e_step)
            .bind(self.e_call)
            .bind(self.e_tool)
            .bind(self.e_key)
            .bind(self.e_args)
            .bind(self.e_state)
            .bind(self.e_result)
            .bind(self.e_token)
            .bind(col(self.b_run))
            .bind(self.b_expires)
            .bind(col(self.f_run))
            .bind(self.f_status)
            .bind(self.f_output)
            .bind(self.f_detail)
            .bind(self.f_resume)
            .bind(self.f_failed)
            .bind(self.f_not_before)
            .bind(col(self.v_run))
            .bind(self.v_nth)
            .bind(self.v_kind)
            .bind(self.v_detail)
            .bind(self.v_worker)
            .bind(self.v_token)
            .bind(col(self.c_worker))
            .bind(self.c_worker_json)
            .bind(self.c_expires)
            .bind(col(self.notify))
    }
}

/// The statement a group committer calls [`RT_GROUP`] with (its result as text, which the
/// committer parses).
const RT_GROUP_CALL: &str = "SELECT rt_group($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
    $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, \
    $31, $32, $33, $34, $35, $36, $37)::text";

/// Group commit: every write of every run this process works on (journal, ledger, events,
/// heartbeats, claims and releases) goes through one task that takes all that are waiting
/// and does them in one transaction. The fence is checked for all of them at once (one
/// query that reads, and on PostgreSQL locks, the lease rows of every run in the batch) and
/// each write is refused alone when its token is not its run's current one: a fenced write
/// fails only its own waiter, the others commit. Journal rows and ledger rows go in one
/// statement each (a JSON array of rows). Every write is committed (`synchronous = FULL`
/// on SQLite, `synchronous_commit` on PostgreSQL) before its waiter is told, so only the
/// commit's cost is shared. A batch that fails as a whole (a constraint) is done again one
/// write per transaction, so the bad write fails alone.
///
/// On PostgreSQL a batch is first tried as one `rt_group` call ([`RT_GROUP`]): one round
/// trip on a connection the committer keeps, where the general path takes one per
/// statement plus `BEGIN` and `COMMIT`. A batch with a stale token, or one the function does
/// not take, goes the general path.
struct Committer {
    db: Db,
    clock: RunClock,
    /// The connection the committer's `rt_group` calls go through, kept between groups:
    /// one pool checkout for a burst of them, not one each (sqlx tests a pooled connection
    /// with a round trip when it hands it out and again when it takes it back). Given back
    /// to the pool after [`KEEP_IDLE`] without a write, and after an error (so a broken one
    /// is not used twice).
    conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    /// On SQLite, the connection the committer's transactions run on, kept and given back
    /// the same way.
    sqlite: Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>,
}

impl Committer {
    fn new(db: Db, clock: RunClock) -> Self {
        Committer {
            db,
            clock,
            conn: None,
            sqlite: None,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Job>, hub: Arc<crate::events::Hub>) {
        loop {
            // A kept connection goes back to the pool once no write came for `KEEP_IDLE`.
            let next = if self.conn.is_some() || self.sqlite.is_some() {
                match tokio::time::timeout(KEEP_IDLE, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        self.conn = None;
                        self.sqlite = None;
                        rx.recv().await
                    }
                }
            } else {
                rx.recv().await
            };
            let Some(first) = next else {
                break;
            };
            let mut jobs = vec![first];
            while jobs.len() < GROUP_MAX {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
            let applied = match self.apply_as_one(&jobs).await {
                Ok(Some(done)) => Ok(done),
                Ok(None) => self.apply(&jobs).await,
                Err(e) => Err(e),
            };
            if applied.is_err() {
                self.sqlite = None;
            }
            let results = match applied {
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
                j.answer(r, &hub);
            }
        }
    }

    /// Does `jobs` in one `rt_group` call (PostgreSQL only): one result per job, as
    /// [`Committer::apply`] gives them; `None` when the general path must do the batch (not
    /// PostgreSQL, a write whose token is not its run's current one, a run written with two
    /// tokens or finished twice in the batch; nothing of it is stored then).
    async fn apply_as_one(
        &mut self,
        jobs: &[Job],
    ) -> Result<Option<Vec<Result<Answer, RuntimeError>>>, RuntimeError> {
        let Db::Pg(pool) = &self.db else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        // The details of the finishes' status events, made as the rows are taken and put in
        // the event column once every row is in (the column borrows them).
        let mut details: Vec<(usize, String)> = Vec::new();
        let mut g = GroupArgs::default();
        let mut effects = EffectRows::default();
        let mut beat_at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut finished: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut token_at: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
        let mut notify: Vec<&str> = Vec::new();
        for j in jobs {
            let Some(held) = &j.lease else {
                if let Op::Claim { worker, lease_ms } = &j.op {
                    g.c_worker.push(worker);
                    g.c_worker_json.push(json_str(worker));
                    // Checked by `claim` (at most a day); saturating, so a clock far in
                    // the future cannot wrap a lease into the past either.
                    g.c_expires.push(now.saturating_add(*lease_ms));
                }
                continue;
            };
            let run = held.run.as_str();
            match token_at.get(run) {
                Some(&t) if t != held.token => return Ok(None),
                Some(_) => {}
                None => {
                    token_at.insert(run, held.token);
                    g.t_run.push(run);
                    g.t_token.push(held.token);
                }
            }
            match &j.op {
                Op::Record(e) => {
                    g.r_run.push(run);
                    g.r_step.push(&e.step);
                    g.r_seq.push(e.seq);
                    g.r_hash.push(&e.request_hash);
                    g.r_payload.push(&e.payload);
                    g.r_token.push(held.token);
                }
                Op::Effect(e) => effects.put(EffectRow::of(run, held.token, e)),
                Op::Event { kind, detail } => {
                    g.event(held, kind, detail);
                    notify.push(run);
                }
                Op::Heartbeat { expires_ms } => match beat_at.get(run) {
                    Some(&i) => g.b_expires[i] = *expires_ms,
                    None => {
                        beat_at.insert(run, g.b_run.len());
                        g.b_run.push(run);
                        g.b_expires.push(*expires_ms);
                    }
                },
                Op::Finish(to) => {
                    if !finished.insert(run) {
                        return Ok(None);
                    }
                    g.f_run.push(run);
                    g.f_status.push(to.status.as_str());
                    g.f_output.push(to.output.as_deref());
                    g.f_detail.push(to.detail.as_deref());
                    g.f_resume.push(to.resume.as_deref());
                    g.f_failed.push(i64::from(to.failed));
                    g.f_not_before.push(to.not_before_ms);
                    details.push((g.v_run.len(), to.event_detail()));
                    g.event(held, "status", "");
                    notify.push(run);
                }
                Op::Check | Op::Claim { .. } => {}
            }
        }
        for (i, d) in &details {
            g.v_detail[*i] = d;
        }
        for e in &effects.rows {
            g.e_run.push(e.run_id);
            g.e_step.push(e.step);
            g.e_call.push(e.call_id);
            g.e_tool.push(e.tool);
            g.e_key.push(e.idem_key);
            g.e_args.push(e.args);
            g.e_state.push(e.state);
            g.e_result.push(e.result);
            g.e_token.push(e.token);
        }
        notify.sort_unstable();
        notify.dedup();
        g.notify = notify;
        let _quiet = crate::journal::quiet_share().await;
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => pool.acquire().await?,
        };
        let answer: String = g.bind(now).fetch_one(&mut *conn).await?;
        self.conn = Some(conn);
        let answer: serde_json::Value =
            serde_json::from_str(&answer).map_err(|e| corrupt("rt_group answer", e))?;
        if answer.get("fenced").is_some() {
            return Ok(None);
        }
        let mut taken: std::collections::HashMap<i64, (Run, i64)> =
            std::collections::HashMap::new();
        for c in answer
            .get("claimed")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(i), Some(token), Some(run)) = (
                c.get("i").and_then(serde_json::Value::as_i64),
                c.get("token").and_then(serde_json::Value::as_i64),
                c.get("run"),
            ) else {
                return Err(corrupt(
                    "rt_group answer",
                    "a claim without i, token or run",
                ));
            };
            taken.insert(i, (run_from_json(run)?, token));
        }
        let mut nth = 0;
        Ok(Some(
            jobs.iter()
                .map(|j| match j.lease {
                    Some(_) => Ok(Answer::Done),
                    None => {
                        nth += 1;
                        Ok(Answer::Claimed(taken.remove(&nth).map(Box::new)))
                    }
                })
                .collect(),
        ))
    }

    /// Does `jobs` in one transaction: one result per job (fenced or done); `Err` when the
    /// transaction failed as a whole (nothing of it is stored).
    async fn apply(
        &mut self,
        jobs: &[Job],
    ) -> Result<Vec<Result<Answer, RuntimeError>>, RuntimeError> {
        let mut ids: Vec<&str> = jobs
            .iter()
            .filter_map(|j| j.lease.as_ref().map(|l| l.run.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(committer_tx!(self, tx, pg, {
            // The fence of every run in the batch, in one query (locked on PostgreSQL, in
            // run order: one lock order for every committer of every process).
            let mut current: std::collections::HashMap<String, i64> =
                std::collections::HashMap::with_capacity(ids.len());
            if !ids.is_empty() {
                let sql = format!(
                    "SELECT run_id, token FROM rt_leases WHERE run_id IN ({}){}",
                    json_ids(pg),
                    if pg {
                        " ORDER BY run_id FOR UPDATE"
                    } else {
                        ""
                    }
                );
                let rows = sqlx::query(&sql)
                    .bind(serde_json::to_string(&ids).map_err(|e| corrupt("run ids", e))?)
                    .fetch_all(&mut *tx)
                    .await?
                    .iter()
                    .map(|r| {
                        Ok((
                            r.try_get::<String, _>("run_id")?,
                            r.try_get::<i64, _>("token")?,
                        ))
                    })
                    .collect::<Result<Vec<_>, sqlx::Error>>()?;
                current.extend(rows);
            }
            let mut out: Vec<Option<Result<Answer, RuntimeError>>> = Vec::with_capacity(jobs.len());
            let mut records = Vec::new();
            let mut effects = EffectRows::default();
            for j in jobs {
                let Some(held) = &j.lease else {
                    out.push(None);
                    continue;
                };
                let now = current.get(held.run.as_str()).copied().unwrap_or(-1);
                if now != held.token {
                    out.push(Some(Err(RuntimeError::Fenced {
                        run: held.run.to_string(),
                        token: held.token,
                        current: now,
                    })));
                    continue;
                }
                match &j.op {
                    Op::Record(e) => records.push(RecordRow::of(held.run.as_str(), held.token, e)),
                    Op::Effect(e) => effects.put(EffectRow::of(held.run.as_str(), held.token, e)),
                    _ => {}
                }
                out.push(Some(Ok(Answer::Done)));
            }
            if !records.is_empty() {
                let sql = if pg {
                    "INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token) \
                     SELECT v.run_id, v.step, v.seq, v.request_hash, v.payload, v.token FROM json_to_recordset($1::json) \
                     AS v(run_id text, step text, seq bigint, request_hash text, payload text, token bigint)"
                } else {
                    "INSERT INTO rt_journal (run_id, step, seq, request_hash, payload, token) \
                     SELECT json_extract(value, '$.run_id'), json_extract(value, '$.step'), json_extract(value, '$.seq'), \
                     json_extract(value, '$.request_hash'), json_extract(value, '$.payload'), json_extract(value, '$.token') \
                     FROM json_each($1)"
                };
                sqlx::query(sql)
                    .bind(serde_json::to_string(&records).map_err(|e| corrupt("journal rows", e))?)
                    .execute(&mut *tx)
                    .await?;
            }
            if !effects.rows.is_empty() {
                let sql = if pg {
                    "INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token) \
                     SELECT v.run_id, v.step, v.call_id, v.tool, v.idem_key, v.args, v.state, v.result, v.token \
                     FROM json_to_recordset($1::json) AS v(run_id text, step text, call_id text, tool text, \
                     idem_key text, args text, state text, result text, token bigint) WHERE true \
                     ON CONFLICT (run_id, step, call_id) DO UPDATE SET state = excluded.state, result = excluded.result, token = excluded.token"
                } else {
                    "INSERT INTO rt_effects (run_id, step, call_id, tool, idem_key, args, state, result, token) \
                     SELECT json_extract(value, '$.run_id'), json_extract(value, '$.step'), json_extract(value, '$.call_id'), \
                     json_extract(value, '$.tool'), json_extract(value, '$.idem_key'), json_extract(value, '$.args'), \
                     json_extract(value, '$.state'), json_extract(value, '$.result'), json_extract(value, '$.token') \
                     FROM json_each($1) WHERE true \
                     ON CONFLICT (run_id, step, call_id) DO UPDATE SET state = excluded.state, result = excluded.result, token = excluded.token"
                };
                sqlx::query(sql)
                    .bind(
                        serde_json::to_string(&effects.rows)
                            .map_err(|e| corrupt("ledger rows", e))?,
                    )
                    .execute(&mut *tx)
                    .await?;
            }
            // Events, heartbeats and releases in the order they were handed over (a run's
            // events keep their order): every event row of the batch goes in one statement
            // at the end, each numbered after its run's stored ones and the batch's earlier
            // ones; the releases of runs finished once in the batch go in two statements.
            let mut notify: Vec<&str> = Vec::new();
            let mut events = Events::default();
            let mut finishes: Vec<(&str, serde_json::Value)> = Vec::new();
            let mut finishes_twice = false;
            for (j, o) in jobs.iter().zip(&out) {
                let (Some(held), Some(Ok(_))) = (&j.lease, o) else {
                    continue;
                };
                match &j.op {
                    Op::Event { kind, detail } => {
                        events.push(held.run.as_str(), kind, detail, &held.worker, held.token);
                        notify.push(held.run.as_str());
                    }
                    Op::Heartbeat { expires_ms } => {
                        sqlx::query("UPDATE rt_leases SET expires_ms = $2 WHERE run_id = $1")
                            .bind(held.run.as_str())
                            .bind(expires_ms)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Op::Finish(to) => {
                        let run = held.run.as_str();
                        finishes_twice |= finishes.iter().any(|(f, _)| *f == run);
                        finishes.push((run, to.row(run)));
                        events.push(run, "status", &to.event_detail(), &held.worker, held.token);
                        notify.push(held.run.as_str());
                    }
                    Op::Record(_) | Op::Effect(_) | Op::Check | Op::Claim { .. } => {}
                }
            }
            if !finishes.is_empty() {
                // One statement may not update a row twice: a run finished twice in one
                // batch has its releases done one at a time, in order.
                let sql = format!(
                    "UPDATE rt_runs AS r SET status = v.status, output_session = COALESCE(v.output, r.output_session), \
                     detail = v.detail, resume_session = COALESCE(v.resume, r.resume_session), failures = r.failures + v.failed, \
                     updated_ms = $2, not_before_ms = v.not_before FROM {} WHERE r.id = v.id",
                    if pg {
                        "json_to_recordset($1::json) AS v(id text, status text, output text, detail text, \
                         resume text, failed bigint, not_before bigint)"
                    } else {
                        "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.status') AS status, \
                         json_extract(value, '$.output') AS output, json_extract(value, '$.detail') AS detail, \
                         json_extract(value, '$.resume') AS resume, json_extract(value, '$.failed') AS failed, \
                         json_extract(value, '$.not_before') AS not_before FROM json_each($1)) AS v"
                    }
                );
                let release = format!(
                    "UPDATE rt_leases SET worker = NULL, expires_ms = 0 WHERE run_id IN ({})",
                    json_ids(pg)
                );
                let size = if finishes_twice { 1 } else { finishes.len() };
                for batch in finishes.chunks(size) {
                    let rows: Vec<&serde_json::Value> = batch.iter().map(|(_, f)| f).collect();
                    let ids: Vec<&str> = batch.iter().map(|(id, _)| *id).collect();
                    sqlx::query(&sql)
                        .bind(serde_json::to_string(&rows).map_err(|e| corrupt("run finishes", e))?)
                        .bind(self.clock.now_ms())
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(&release)
                        .bind(serde_json::to_string(&ids).map_err(|e| corrupt("run ids", e))?)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            // Claims last: a write of the run's earlier holder in this batch was checked
            // against the token before the claim moves it on.
            let claims: Vec<usize> = (0..jobs.len())
                .filter(|&i| jobs[i].lease.is_none())
                .collect();
            let mut claimed: Vec<String> = Vec::new();
            if !claims.is_empty() {
                let now = self.clock.now_ms();
                let sql = format!(
                    "SELECT r.id AS id FROM rt_runs r JOIN rt_leases l ON l.run_id = r.id \
                     WHERE (r.status = 'queued' AND r.not_before_ms <= $1) OR (r.status = 'running' AND l.expires_ms < $1) \
                     ORDER BY r.submitted_ms, r.id LIMIT $2{}",
                    if pg {
                        " FOR UPDATE OF r, l SKIP LOCKED"
                    } else {
                        ""
                    }
                );
                let found: Vec<String> = sqlx::query(&sql)
                    .bind(now)
                    .bind(claims.len() as i64)
                    .fetch_all(&mut *tx)
                    .await?
                    .iter()
                    .map(|r| r.try_get::<String, _>("id"))
                    .collect::<Result<_, _>>()?;
                // The i-th claim takes the i-th run found: one statement moves every lease
                // on (a token one more than the last), one marks every run running and
                // reads it back for its worker.
                let mut takes: Vec<(usize, &str, i64, &String)> = Vec::new();
                for (&i, id) in claims.iter().zip(&found) {
                    if let Op::Claim { worker, lease_ms } = &jobs[i].op {
                        takes.push((i, worker.as_str(), *lease_ms, id));
                    }
                }
                for &i in &claims {
                    out[i] = Some(Ok(Answer::Claimed(None)));
                }
                if !takes.is_empty() {
                    let leases: Vec<serde_json::Value> = takes
                        .iter()
                        .map(|&(_, worker, lease_ms, id)| {
                            serde_json::json!({"id": id, "worker": worker, "expires": now.saturating_add(lease_ms)})
                        })
                        .collect();
                    let sql = if pg {
                        "UPDATE rt_leases AS l SET worker = v.worker, token = l.token + 1, expires_ms = v.expires \
                         FROM json_to_recordset($1::json) AS v(id text, worker text, expires bigint) \
                         WHERE l.run_id = v.id RETURNING run_id, token"
                    } else {
                        "UPDATE rt_leases AS l SET worker = v.worker, token = l.token + 1, expires_ms = v.expires \
                         FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.worker') AS worker, \
                         json_extract(value, '$.expires') AS expires FROM json_each($1)) AS v \
                         WHERE l.run_id = v.id RETURNING run_id, token"
                    };
                    let tokens: std::collections::HashMap<String, i64> = sqlx::query(sql)
                        .bind(serde_json::Value::Array(leases).to_string())
                        .fetch_all(&mut *tx)
                        .await?
                        .iter()
                        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
                        .collect::<Result<_, sqlx::Error>>()?;
                    let ids: Vec<&str> = takes.iter().map(|t| t.3.as_str()).collect();
                    let sql = format!(
                        "UPDATE rt_runs SET status = 'running', attempts = attempts + 1, updated_ms = $2 \
                         WHERE id IN ({}) RETURNING {RUN_COLS}",
                        json_ids(pg)
                    );
                    let mut runs: std::collections::HashMap<String, Run> =
                        std::collections::HashMap::new();
                    for r in sqlx::query(&sql)
                        .bind(serde_json::to_string(&ids).map_err(|e| corrupt("run ids", e))?)
                        .bind(now)
                        .fetch_all(&mut *tx)
                        .await?
                    {
                        let run = run_from(&r)?;
                        runs.insert(run.id.0.clone(), run);
                    }
                    for (i, worker, _, id) in takes {
                        let (Some(&token), Some(run)) = (tokens.get(id), runs.remove(id)) else {
                            continue;
                        };
                        let detail =
                            format!("{{\"worker\": {}, \"token\": {token}}}", json_str(worker));
                        events.push(id, "claimed", &detail, worker, token);
                        claimed.push(id.clone());
                        out[i] = Some(Ok(Answer::Claimed(Some(Box::new((run, token))))));
                    }
                }
            }
            if !events.rows.is_empty() {
                sqlx::query(Events::sql(pg))
                    .bind(events.take_json())
                    .bind(self.clock.now_ms())
                    .execute(&mut *tx)
                    .await?;
            }
            if pg && (!notify.is_empty() || !claimed.is_empty()) {
                let mut runs: Vec<String> = notify
                    .iter()
                    .map(|s| s.to_string())
                    .chain(claimed)
                    .collect();
                runs.sort_unstable();
                runs.dedup();
                sqlx::query(
                    "SELECT pg_notify('rt_events', r) FROM json_array_elements_text($1::json) AS r",
                )
                .bind(serde_json::to_string(&runs).map_err(|e| corrupt("run ids", e))?)
                .execute(&mut *tx)
                .await?;
            }
            out.into_iter()
                .map(|o| o.unwrap_or(Ok(Answer::Claimed(None))))
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warm-up's and the committer's calls of `rt_group` pass one argument per
    /// parameter of the function (the warm-up ignores its errors, so a count that drifted
    /// would go unnoticed there).
    #[test]
    fn rt_group_calls_match_its_signature() {
        let signature = &RT_GROUP[..RT_GROUP.find("RETURNS").expect("RETURNS")];
        let params = signature.matches("[]").count();
        assert_eq!(params, RT_GROUP_COLUMNS);
        assert_eq!(RT_GROUP_CALL.matches('$').count(), RT_GROUP_COLUMNS + 1);
        assert!(RT_GROUP_CALL.contains(&format!("${}", RT_GROUP_COLUMNS + 1)));
    }
}
