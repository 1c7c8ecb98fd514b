//! The server's own tables (`sv_*`, beside the runtime's `rt_*` in the run store's database):
//! API keys, which tenant owns which session and run, and the threads of the
//! LangGraph-compatible API (`sv_threads`, `sv_thread_runs`).
//!
//! The session store's schema is not touched: a session belongs to a tenant when the server
//! recorded it (`sv_sessions`: created, forked, detached or merged through the API, or the
//! input of a run) or when it is the input, resume or output session of one of the tenant's
//! runs (`sv_runs` joined with `rt_runs`), so a run's output is the tenant's as soon as a
//! worker stores it.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use tokio::sync::{mpsc, oneshot};
use utoipa::ToSchema;

use rath_group_commit::{Group, Lane, LaneOptions};

use crate::ServerError;
use crate::cache::{KeyCache, OwnerCache};

/// The schema version these migrations reach.
pub const SCHEMA_VERSION: i64 = 3;

/// Forward-only migrations: (version, what, statements). Written once for both databases.
pub const MIGRATIONS: &[(i64, &str, &[&str])] = &[
    (
        1,
        "api keys, tenant ownership of sessions and runs",
        &[
            "CREATE TABLE IF NOT EXISTS sv_keys (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL, admin BIGINT NOT NULL, label TEXT NOT NULL, created_ms BIGINT NOT NULL, revoked_ms BIGINT)",
            "CREATE TABLE IF NOT EXISTS sv_sessions (session_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS sv_sessions_tenant ON sv_sessions (tenant)",
            "CREATE TABLE IF NOT EXISTS sv_runs (run_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS sv_runs_tenant ON sv_runs (tenant)",
        ],
    ),
    (
        2,
        "threads of the LangGraph-compatible API and the runs each made",
        &[
            "CREATE TABLE IF NOT EXISTS sv_threads (thread_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, metadata TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS sv_threads_tenant ON sv_threads (tenant)",
            "CREATE TABLE IF NOT EXISTS sv_thread_runs (run_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, seq BIGINT NOT NULL, assistant_id TEXT NOT NULL, metadata TEXT NOT NULL, kwargs TEXT NOT NULL, created_ms BIGINT NOT NULL, UNIQUE (thread_id, seq))",
        ],
    ),
    (
        3,
        "thread ids per tenant: another tenant's thread id is free to take (no existence oracle)",
        &[
            "CREATE TABLE sv_threads_v3 (tenant TEXT NOT NULL, thread_id TEXT NOT NULL, metadata TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL, PRIMARY KEY (tenant, thread_id))",
            "INSERT INTO sv_threads_v3 (tenant, thread_id, metadata, created_ms, updated_ms) SELECT tenant, thread_id, metadata, created_ms, updated_ms FROM sv_threads",
            "CREATE TABLE sv_thread_runs_v3 (run_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, thread_id TEXT NOT NULL, seq BIGINT NOT NULL, assistant_id TEXT NOT NULL, metadata TEXT NOT NULL, kwargs TEXT NOT NULL, created_ms BIGINT NOT NULL, UNIQUE (tenant, thread_id, seq))",
            "INSERT INTO sv_thread_runs_v3 (run_id, tenant, thread_id, seq, assistant_id, metadata, kwargs, created_ms) SELECT r.run_id, t.tenant, r.thread_id, r.seq, r.assistant_id, r.metadata, r.kwargs, r.created_ms FROM sv_thread_runs r JOIN sv_threads t ON t.thread_id = r.thread_id",
            "DROP TABLE sv_thread_runs",
            "DROP TABLE sv_threads",
            "ALTER TABLE sv_threads_v3 RENAME TO sv_threads",
            "ALTER TABLE sv_thread_runs_v3 RENAME TO sv_thread_runs",
        ],
    ),
];

#[derive(Clone, Debug)]
enum Pool {
    Sqlite(SqlitePool),
    Pg(PgPool),
}

// Runs `$body` with `$p` bound to the pool of either database.
macro_rules! on_pool {
    ($s:expr, $p:ident, $body:block) => {{
        match &$s.pool {
            Pool::Sqlite($p) => $body,
            Pool::Pg($p) => $body,
        }
    }};
}

mod threads;

pub(crate) use threads::{ThreadRow, ThreadRunRow};

/// How long this process trusts a key check before it reads the key's row again (see
/// [`ServerDb::key_cache`]).
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(1);

/// The server's tables. Cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct ServerDb {
    pool: Pool,
    /// The lane that writes ownership records in groups ([`own_lane`]).
    owners: mpsc::UnboundedSender<OwnJob>,
    /// The database, as this instance's caches name it.
    ident: Arc<str>,
    key_ttl: Duration,
    /// Checked keys and known ownership, this instance's and its clones' only: two servers
    /// in one process share nothing, and a database made again at the same URL starts with
    /// nothing remembered.
    keys: Arc<KeyCache>,
    owners_known: Arc<OwnerCache>,
}

/// An API key as listed: never its secret, never its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct KeyInfo {
    /// The key's id (`key_` and 16 hex digits): what `revoke` takes.
    pub id: String,
    /// The tenant whose sessions and runs it reaches.
    pub tenant: String,
    /// True for an admin key (mints and revokes keys).
    pub admin: bool,
    /// A label given at creation.
    pub label: String,
    /// Creation time (ms since the Unix epoch).
    pub created_ms: i64,
    /// Revocation time, once revoked.
    pub revoked_ms: Option<i64>,
}

/// A key just minted: the only time its secret is shown.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MintedKey {
    /// The key as listed.
    #[serde(flatten)]
    pub info: KeyInfo,
    /// The secret to send as `Authorization: Bearer <secret>`. Stored only as its sha256.
    pub secret: String,
}

/// Who a request is: the key's id, its tenant, whether it is an admin key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The key's id.
    pub key_id: String,
    /// The key's tenant.
    pub tenant: String,
    /// True for an admin key.
    pub admin: bool,
}

/// sha256 of a key's secret, hex. API keys are 256 random bits, so a fast hash is enough (a
/// slow password hash such as argon2 protects low-entropy secrets; nobody guesses 2^256)
/// and it lets a request find its key by an indexed lookup of the hash.
pub fn key_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn now_ms() -> i64 {
    rath_runtime::now_ms()
}

impl ServerDb {
    /// Opens the server's tables in the database at `url` (`sqlite:<file>` or
    /// `postgres://...`, the run store's URL) and applies the migrations.
    pub async fn connect(url: &str) -> Result<ServerDb, ServerError> {
        let pool = if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            let opts = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(30));
            Pool::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(opts)
                    .await?,
            )
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Pool::Pg(PgPoolOptions::new().max_connections(8).connect(url).await?)
        } else {
            return Err(ServerError::BadRequest(
                "the runs URL is neither sqlite:<file> nor postgres://...".into(),
            ));
        };
        let owners = Lane::spawn(
            OwnGroup { pool: pool.clone() },
            LaneOptions::default().max(OWN_GROUP_MAX),
        );
        let db = ServerDb {
            pool,
            owners,
            // A digest of the URL, never the URL (it may hold a password).
            ident: Arc::from(key_hash(url)),
            key_ttl: KEY_CACHE_TTL,
            keys: Arc::default(),
            owners_known: Arc::default(),
        };
        db.migrate().await?;
        Ok(db)
    }

    /// How long a key check is trusted by this instance ([`KEY_CACHE_TTL`] unless set; zero:
    /// every request reads the key's row). A key revoked through this `ServerDb` (or a
    /// clone) is refused from the next request on; one revoked anywhere else (`rath keys
    /// revoke`, another server, another `ServerDb` of this process) at most `ttl` later.
    pub fn key_cache(mut self, ttl: Duration) -> Self {
        self.key_ttl = ttl;
        self
    }

    async fn migrate(&self) -> Result<(), ServerError> {
        let is_pg = matches!(self.pool, Pool::Pg(_));
        on_pool!(self, p, {
            let mut tx = p.begin().await?;
            if is_pg {
                sqlx::query("SELECT pg_advisory_xact_lock(7243902432)")
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("CREATE TABLE IF NOT EXISTS sv_schema (version BIGINT PRIMARY KEY, what TEXT NOT NULL, applied_ms BIGINT NOT NULL)")
                .execute(&mut *tx)
                .await?;
            let found: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM sv_schema")
                .fetch_one(&mut *tx)
                .await?
                .try_get("v")?;
            if found > SCHEMA_VERSION {
                return Err(ServerError::Db(format!(
                    "server schema version {found} is newer than this server's {SCHEMA_VERSION}"
                )));
            }
            for (version, what, stmts) in MIGRATIONS.iter().filter(|m| m.0 > found) {
                for stmt in *stmts {
                    sqlx::query(stmt).execute(&mut *tx).await?;
                }
                sqlx::query(
                    "INSERT INTO sv_schema (version, what, applied_ms) VALUES ($1, $2, $3)",
                )
                .bind(version)
                .bind(what)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// True when the database answers a query.
    pub async fn ping(&self) -> Result<(), ServerError> {
        on_pool!(self, p, {
            sqlx::query("SELECT 1").execute(p).await?;
        });
        Ok(())
    }

    /// Mints a key for `tenant` (an admin key with `admin`), stores its hash and returns it
    /// with its secret.
    pub async fn create_key(
        &self,
        tenant: &str,
        admin: bool,
        label: &str,
    ) -> Result<MintedKey, ServerError> {
        if tenant.trim().is_empty() || tenant.len() > 128 {
            return Err(ServerError::BadRequest(
                "a tenant is 1 to 128 characters".into(),
            ));
        }
        let id = format!("key_{}", hex::encode(rand::random::<[u8; 8]>()));
        let secret = format!("rath_{}", hex::encode(rand::random::<[u8; 32]>()));
        let info = KeyInfo {
            id,
            tenant: tenant.to_owned(),
            admin,
            label: label.to_owned(),
            created_ms: now_ms(),
            revoked_ms: None,
        };
        on_pool!(self, p, {
            sqlx::query("INSERT INTO sv_keys (id, hash, tenant, admin, label, created_ms) VALUES ($1, $2, $3, $4, $5, $6)")
                .bind(&info.id)
                .bind(key_hash(&secret))
                .bind(&info.tenant)
                .bind(i64::from(admin))
                .bind(&info.label)
                .bind(info.created_ms)
                .execute(p)
                .await?;
        });
        Ok(MintedKey { info, secret })
    }

    /// Every key, oldest first (revoked ones too).
    pub async fn list_keys(&self) -> Result<Vec<KeyInfo>, ServerError> {
        let sql = "SELECT id, tenant, admin, label, created_ms, revoked_ms FROM sv_keys ORDER BY created_ms, id";
        on_pool!(self, p, {
            let rows = sqlx::query(sql).fetch_all(p).await?;
            rows.iter().map(key_from).collect()
        })
    }

    /// Revokes key `id`; false when there is no such key (revoking twice is true both times).
    pub async fn revoke_key(&self, id: &str) -> Result<bool, ServerError> {
        let sql = "UPDATE sv_keys SET revoked_ms = COALESCE(revoked_ms, $1) WHERE id = $2";
        let n = on_pool!(self, p, {
            sqlx::query(sql)
                .bind(now_ms())
                .bind(id)
                .execute(p)
                .await?
                .rows_affected()
        });
        // Forgotten after the update: a check that read the row before it and remembers
        // it after this is a race lost only within one request of the revocation.
        self.keys.forget(id);
        Ok(n > 0)
    }

    /// The live key whose secret is `secret`, if any (a key found is remembered for the
    /// [`ServerDb::key_cache`] time; an unknown one is read again every time).
    pub async fn authenticate(&self, secret: &str) -> Result<Option<Principal>, ServerError> {
        let sql = "SELECT id, tenant, admin FROM sv_keys WHERE hash = $1 AND revoked_ms IS NULL";
        let hash = key_hash(secret);
        if let Some(p) = self.keys.get(&self.ident, &hash, self.key_ttl) {
            return Ok(Some(p));
        }
        let found = on_pool!(self, p, {
            let row = sqlx::query(sql).bind(&hash).fetch_optional(p).await?;
            row.map(|r| -> Result<Principal, ServerError> {
                Ok(Principal {
                    key_id: r.try_get("id")?,
                    tenant: r.try_get("tenant")?,
                    admin: r.try_get::<i64, _>("admin")? != 0,
                })
            })
            .transpose()?
        });
        if let Some(p) = &found
            && !self.key_ttl.is_zero()
        {
            self.keys.put(&self.ident, hash, p.clone(), self.key_ttl);
        }
        Ok(found)
    }

    /// Records that `tenant` owns session `id` (a second record of the same id is a no-op
    /// for the same tenant and refused for another).
    pub async fn own_session(&self, tenant: &str, id: &str) -> Result<(), ServerError> {
        self.own(tenant, &[(Owned::Session, id)], None).await
    }

    /// Records that `tenant` owns run `id`.
    pub async fn own_run(&self, tenant: &str, id: &str) -> Result<(), ServerError> {
        self.own(tenant, &[(Owned::Run, id)], None).await
    }

    /// Records that `tenant` owns session `session` and run `run`, in one write.
    pub async fn own_session_and_run(
        &self,
        tenant: &str,
        session: &str,
        run: &str,
    ) -> Result<(), ServerError> {
        self.own(
            tenant,
            &[(Owned::Session, session), (Owned::Run, run)],
            None,
        )
        .await
    }

    /// Records `tenant`'s ownership of `session` and of `row`'s run, and `row` as its
    /// thread's run number `row.seq` (moving the thread's time), in one commit on the
    /// ownership lane; a conflict (409) when another tenant owns an id or another run took
    /// the place. Written before the run's session and the run itself: a row whose
    /// submission then fails names no run, which a thread reads as a run that never ran.
    pub(crate) async fn own_thread_run(
        &self,
        tenant: &str,
        session: &str,
        row: &ThreadRunRow,
    ) -> Result<(), ServerError> {
        let ids = [(Owned::Session, session), (Owned::Run, row.run_id.as_str())];
        self.own(tenant, &ids, Some(row.clone())).await
    }

    /// Records `tenant`'s ownership of `ids` through the ownership lane: the records of
    /// every request waiting at the time are written in one transaction (one commit, one
    /// wait for the database's write lock), which is what a busy server's creates spend
    /// most of their time on otherwise.
    async fn own(
        &self,
        tenant: &str,
        ids: &[(Owned, &str)],
        thread_run: Option<ThreadRunRow>,
    ) -> Result<(), ServerError> {
        let (done, answer) = oneshot::channel();
        let job = OwnJob {
            tenant: tenant.to_owned(),
            ids: ids.iter().map(|(t, id)| (*t, (*id).to_owned())).collect(),
            thread_run,
            done,
        };
        if self.owners.send(job).is_err() {
            return Err(ServerError::Db("the ownership lane has stopped".into()));
        }
        answer
            .await
            .map_err(|_| ServerError::Db("the ownership lane has stopped".into()))?
    }

    /// True when `tenant` owns run `id` (a yes is remembered: ownership is never taken
    /// back).
    pub async fn owns_run(&self, tenant: &str, id: &str) -> Result<bool, ServerError> {
        if self.owners_known.owns(&self.ident, "run", tenant, id) {
            return Ok(true);
        }
        let sql = "SELECT 1 AS one FROM sv_runs WHERE tenant = $1 AND run_id = $2";
        let yes = on_pool!(self, p, {
            sqlx::query(sql)
                .bind(tenant)
                .bind(id)
                .fetch_optional(p)
                .await?
                .is_some()
        });
        if yes {
            self.owners_known.learn(&self.ident, "run", tenant, id);
        }
        Ok(yes)
    }

    /// The ids of `tenant`'s runs.
    pub async fn runs_of(&self, tenant: &str) -> Result<BTreeSet<String>, ServerError> {
        let sql = "SELECT run_id FROM sv_runs WHERE tenant = $1";
        on_pool!(self, p, {
            let rows = sqlx::query(sql).bind(tenant).fetch_all(p).await?;
            rows.iter()
                .map(|r| r.try_get::<String, _>("run_id").map_err(ServerError::from))
                .collect()
        })
    }

    /// True when `tenant` owns session `id` (recorded, or a session of one of its runs; a
    /// yes is remembered: ownership is never taken back).
    pub async fn owns_session(&self, tenant: &str, id: &str) -> Result<bool, ServerError> {
        if self.owners_known.owns(&self.ident, "session", tenant, id) {
            return Ok(true);
        }
        let sql = "SELECT 1 AS one FROM sv_sessions WHERE tenant = $1 AND session_id = $2 \
                   UNION ALL SELECT 1 AS one FROM sv_runs s JOIN rt_runs r ON r.id = s.run_id \
                   WHERE s.tenant = $1 AND (r.input_session = $2 OR r.output_session = $2 OR r.resume_session = $2) \
                   LIMIT 1";
        let yes = on_pool!(self, p, {
            sqlx::query(sql)
                .bind(tenant)
                .bind(id)
                .fetch_optional(p)
                .await?
                .is_some()
        });
        if yes {
            self.owners_known.learn(&self.ident, "session", tenant, id);
        }
        Ok(yes)
    }

    /// The ids of every session `tenant` owns.
    pub async fn sessions_of(&self, tenant: &str) -> Result<BTreeSet<String>, ServerError> {
        let sql = "SELECT session_id AS id FROM sv_sessions WHERE tenant = $1 \
                   UNION SELECT r.output_session AS id FROM sv_runs s JOIN rt_runs r ON r.id = s.run_id \
                   WHERE s.tenant = $1 AND r.output_session IS NOT NULL \
                   UNION SELECT r.resume_session AS id FROM sv_runs s JOIN rt_runs r ON r.id = s.run_id \
                   WHERE s.tenant = $1 AND r.resume_session IS NOT NULL \
                   UNION SELECT r.input_session AS id FROM sv_runs s JOIN rt_runs r ON r.id = s.run_id \
                   WHERE s.tenant = $1";
        on_pool!(self, p, {
            let rows = sqlx::query(sql).bind(tenant).fetch_all(p).await?;
            rows.iter()
                .map(|r| r.try_get::<String, _>("id").map_err(ServerError::from))
                .collect()
        })
    }
}

fn key_from<R: Row>(r: &R) -> Result<KeyInfo, ServerError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(KeyInfo {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        admin: r.try_get::<i64, _>("admin")? != 0,
        label: r.try_get("label")?,
        created_ms: r.try_get("created_ms")?,
        revoked_ms: r.try_get("revoked_ms")?,
    })
}

/// What an ownership record is of.
#[derive(Clone, Copy, Debug)]
enum Owned {
    Session,
    Run,
}

impl Owned {
    /// The record's insert (a no-op when the id has an owner) and the owner's read.
    fn sql(self) -> (&'static str, &'static str) {
        match self {
            Owned::Session => (
                "INSERT INTO sv_sessions (session_id, tenant, created_ms) VALUES ($1, $2, $3) ON CONFLICT (session_id) DO NOTHING",
                "SELECT tenant FROM sv_sessions WHERE session_id = $1",
            ),
            Owned::Run => (
                "INSERT INTO sv_runs (run_id, tenant, created_ms) VALUES ($1, $2, $3) ON CONFLICT (run_id) DO NOTHING",
                "SELECT tenant FROM sv_runs WHERE run_id = $1",
            ),
        }
    }
}

/// One request's ownership records, waiting for the lane.
#[derive(Debug)]
struct OwnJob {
    tenant: String,
    ids: Vec<(Owned, String)>,
    /// A thread's run row written with them.
    thread_run: Option<ThreadRunRow>,
    done: oneshot::Sender<Result<(), ServerError>>,
}

/// Ownership jobs one transaction takes at most.
const OWN_GROUP_MAX: usize = 256;

/// Writes ownership records on the group-commit lane: every job waiting (up to
/// [`OWN_GROUP_MAX`]) in one transaction. When that transaction fails, each job is written
/// again on its own, so a job is told its own outcome. The lane ends when every
/// [`ServerDb`] clone is gone.
struct OwnGroup {
    pool: Pool,
}

impl Group for OwnGroup {
    type Job = OwnJob;
    type Answer = ();
    type Error = ServerError;

    async fn together(
        &mut self,
        jobs: &[OwnJob],
    ) -> Result<Vec<Result<(), ServerError>>, ServerError> {
        own_in_tx(&self.pool, jobs).await
    }

    async fn alone(&mut self, job: &OwnJob) -> Result<(), ServerError> {
        own_in_tx(&self.pool, std::slice::from_ref(job))
            .await?
            .pop()
            .unwrap_or(Ok(()))
    }

    fn answer(&mut self, job: OwnJob, answer: Result<(), ServerError>) {
        // A request that went away does not wait for its answer.
        let _ = job.done.send(answer);
    }

    /// A lone job's group is the same transaction as its own: it is not done twice.
    fn redo_single(&self) -> bool {
        false
    }
}

// One job's records in transaction `$tx`: `Ok`, or a conflict for the first id another
// tenant owns (an error of the database leaves the block with `?`).
macro_rules! own_job {
    ($tx:ident, $job:expr, $now:expr) => {{
        let mut answer = Ok(());
        for (table, id) in &$job.ids {
            let (insert, check) = table.sql();
            sqlx::query(insert)
                .bind(id)
                .bind(&$job.tenant)
                .bind($now)
                .execute(&mut *$tx)
                .await?;
            let owner: String = sqlx::query(check)
                .bind(id)
                .fetch_one(&mut *$tx)
                .await?
                .try_get("tenant")?;
            if owner != $job.tenant {
                answer = Err(ServerError::Conflict(format!("id {id} is taken")));
                break;
            }
        }
        if let (Ok(()), Some(run)) = (&answer, &$job.thread_run) {
            let added = sqlx::query(&threads::insert_run_sql())
                .bind(&$job.tenant)
                .bind(&run.run_id)
                .bind(&run.thread_id)
                .bind(run.seq)
                .bind(&run.assistant_id)
                .bind(&run.metadata)
                .bind(&run.kwargs)
                .bind(run.created_ms)
                .execute(&mut *$tx)
                .await?
                .rows_affected();
            if added == 0 {
                answer = Err(ServerError::Conflict(format!(
                    "thread {} got another run at the same time",
                    run.thread_id
                )));
            } else {
                sqlx::query(threads::TOUCH_SQL)
                    .bind(run.created_ms)
                    .bind(&$job.tenant)
                    .bind(&run.thread_id)
                    .execute(&mut *$tx)
                    .await?;
            }
        }
        answer
    }};
}

/// `jobs` in one transaction: for each, `Ok` or a conflict naming the id another tenant
/// owns.
async fn own_in_tx(
    pool: &Pool,
    jobs: &[OwnJob],
) -> Result<Vec<Result<(), ServerError>>, ServerError> {
    let now = now_ms();
    let mut answers = Vec::with_capacity(jobs.len());
    match pool {
        Pool::Sqlite(p) => {
            let mut tx = p.begin().await?;
            for job in jobs {
                answers.push(own_job!(tx, job, now));
            }
            tx.commit().await?;
        }
        Pool::Pg(p) => {
            let mut tx = p.begin().await?;
            for job in jobs {
                answers.push(own_job!(tx, job, now));
            }
            tx.commit().await?;
        }
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many requests recording ownership at once: each is answered with its own outcome
    /// (written in groups), a second tenant's claim on a taken id is a conflict, and the
    /// records are there afterwards.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_ownership_lane_answers_each_request_with_its_own_outcome() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite:{}", dir.path().join("runs.db").display());
        // The run store's tables first: a session's ownership is also read through runs.
        rath_runtime::RunStore::connect(&url)
            .await
            .expect("run store");
        let db = ServerDb::connect(&url).await.expect("connect");
        let mut tasks = Vec::new();
        for i in 0..64 {
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                let (s, r) = (format!("s{i}"), format!("r{i}"));
                let mine = db.own_session_and_run("a", &s, &r).await;
                // Every fourth id is claimed by a second tenant too, after the first.
                let theirs = if i % 4 == 0 {
                    Some(db.own_run("b", &r).await)
                } else {
                    None
                };
                (mine, theirs)
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let (mine, theirs) = t.await.expect("task");
            mine.expect("the first tenant's records");
            if let Some(theirs) = theirs {
                assert!(
                    matches!(&theirs, Err(ServerError::Conflict(m)) if m.contains(&format!("r{i}"))),
                    "{theirs:?}"
                );
            }
            assert!(db.owns_session("a", &format!("s{i}")).await.expect("read"));
            assert!(db.owns_run("a", &format!("r{i}")).await.expect("read"));
            assert!(!db.owns_run("b", &format!("r{i}")).await.expect("read"));
        }
        // The same tenant again: a no-op, not a conflict.
        db.own_run("a", "r1").await.expect("again");
    }
}
