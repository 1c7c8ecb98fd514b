//! The PostgreSQL store: a pool that checks each connection before use (so after the server
//! restarts the next call reconnects), writes in transactions that take the session row
//! `FOR UPDATE` (two appenders queue; the second sees the first's length and conflicts), and a
//! `gc` that locks out writers while it decides what is unreachable.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rath_persist::{
    Capabilities, GcReport, LoadedSession, PersistError, SessionSummary, WriteBatch, WriteReport,
};
use rath_session::SessionId;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::known::KnownSessions;

mod imp {
    crate::core::sql_store! {
        db: sqlx::Postgres,
        rows: crate::rows::PgRows,
        dialect: crate::dialect::POSTGRES,
    }
}

/// A session store in a PostgreSQL database (optionally in one schema of it). See the
/// [crate docs](crate).
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: sqlx::PgPool,
    name: String,
    known: Arc<KnownSessions>,
    /// The group loader's queue: concurrent loads share one query.
    loads: Arc<imp::Loads>,
    /// The group committers' queues: concurrent writes share a transaction per committer.
    group: imp::Group,
}

#[cfg(test)]
crate::core::group_test_hooks!(PgStore);

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and applies the
    /// migrations the database lacks. A server that refuses the connection is
    /// [`PersistError::Backend`] naming the store (never the password). The URL's
    /// `sslmode` is honoured as libpq does: `prefer` (the default) speaks TLS when the
    /// server offers it, `require` insists, `verify-ca` and `verify-full` also check the
    /// server's certificate (against the web's root authorities and `sslrootcert`).
    pub async fn connect(url: &str) -> Result<Self, PersistError> {
        Self::connect_in(url, None).await
    }

    /// [`PgStore::connect`], with the store's tables in `schema` (created if missing): one
    /// database can hold several stores (tests, benchmarks).
    pub async fn connect_in(url: &str, schema: Option<&str>) -> Result<Self, PersistError> {
        Self::open(url, schema, false).await
    }

    /// Connects to the store at `url` (in `schema`) to read: nothing is created or
    /// migrated, and every transaction of the store's connections is read-only. A database
    /// or schema that does not exist is [`PersistError::NoStore`]; one without the store's
    /// tables [`PersistError::NotAStore`]; a store of an older schema
    /// [`PersistError::OlderSchema`] (migrate it first).
    pub async fn connect_read(url: &str, schema: Option<&str>) -> Result<Self, PersistError> {
        Self::open(url, schema, true).await
    }

    async fn open(url: &str, schema: Option<&str>, read: bool) -> Result<Self, PersistError> {
        let options = PgConnectOptions::from_str(url).map_err(|e| PersistError::BadStoreUrl {
            url: redact(url),
            message: e.to_string(),
        })?;
        let name = store_name(url, &options, schema)?;
        // One connection first, outside any pool: a refused or unreachable server is
        // reported at once and as what it is (the pool would retry a refused connection
        // until its acquire timeout and then say only that it timed out).
        let mut probe = probe(&options, &name, read).await?;
        let options = match schema {
            Some(schema) => in_schema(&mut probe, options, &name, schema, read).await?,
            None => options,
        };
        let _ = sqlx::Connection::close(probe).await;
        let pool = open_pool(options, &name, read).await?;
        warm_connections(&pool, &name).await?;
        let known: Arc<KnownSessions> = Arc::default();
        let group = imp::group(pool.clone(), name.clone(), known.clone(), PG_LANES);
        let loads = Arc::new(imp::Loads::start(pool.clone(), name.clone()));
        Ok(Self {
            loads,
            pool,
            name,
            known,
            group,
        })
    }

    /// Rows and bytes (`pg_total_relation_size`: heap, TOAST and indexes) per table.
    pub async fn table_stats(&self) -> Result<Vec<crate::TableStats>, PersistError> {
        imp::table_stats(
            &self.pool,
            &self.name,
            &[
                (
                    "rath_sessions",
                    "SELECT pg_total_relation_size('rath_sessions')::BIGINT",
                ),
                (
                    "rath_segments",
                    "SELECT pg_total_relation_size('rath_segments')::BIGINT",
                ),
                (
                    "rath_meta",
                    "SELECT pg_total_relation_size('rath_meta')::BIGINT",
                ),
            ],
        )
        .await
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Run on each connection the store opens: its statements are planned once per connection
/// and the plan kept (a generic plan), where PostgreSQL would plan each of a prepared
/// statement's first five runs for its parameters. Every statement of the store selects by
/// ids, keys or digests handed over as a JSON list or a value, so a plan for the values in
/// hand is the generic one; planning was 8% of the server's CPU on the durable bench, whose
/// stores are new, and so are their connections (interleaved profile drains, 24 each,
/// 2026-12-04: 7270 vs 6757 steps/s median).
const GENERIC_PLANS: &str = "SET plan_cache_mode = force_generic_plan";

/// Connections a store opens and warms when it connects (see [`PgStore::connect`]): one per
/// group committer, the group loader's and one for lone reads.
const WARM_CONNECTIONS: usize = PG_LANES + 2;

/// Group committers of a PostgreSQL store: a batch goes to the one its first session's id
/// picks, so one session's writes keep their order, and the groups of two run side by side
/// (each its own transaction, as two writers' would be; rows they both touch are locked).
/// Measured on the durable bench, where about 200 runs end within a few milliseconds and
/// each saves its output session (interleaved profile drains on 2 cores, 24 each,
/// 2026-12-04): two committers gave a median of 7392 steps/s against one's 6860, three 6685
/// against two's 6760. (In the 9th session, with the encoding and the claims slower than
/// now, two and three had measured the same as one.)
const PG_LANES: usize = 2;

fn pool_options(max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(true)
}

/// How long the first connection may take before the server is reported unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first connection to the server (see [`PgStore::connect`]): a refused, unreachable or
/// silent address is [`PersistError::Unreachable`] naming `host:port`; a database that does
/// not exist, when reading, [`PersistError::NoStore`].
async fn probe(
    options: &PgConnectOptions,
    name: &str,
    read: bool,
) -> Result<sqlx::PgConnection, PersistError> {
    let address = format!("{}:{}", options.get_host(), options.get_port());
    let unreachable = |message: String| PersistError::Unreachable {
        store: name.to_owned(),
        address: address.clone(),
        message,
    };
    let connect = sqlx::ConnectOptions::connect(options);
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Err(_) => Err(unreachable(format!(
            "no answer in {} s",
            CONNECT_TIMEOUT.as_secs()
        ))),
        Ok(Ok(c)) => Ok(c),
        Ok(Err(sqlx::Error::Io(e))) => Err(unreachable(e.to_string())),
        Ok(Err(e))
            if read
                && e.as_database_error()
                    .is_some_and(|d| d.code().as_deref() == Some("3D000")) =>
        {
            Err(PersistError::NoStore {
                store: name.to_owned(),
            })
        }
        Ok(Err(e)) => Err(imp::backend(name, "connect", e)),
    }
}

/// The store's name: `postgres://user@host:port/db` from the connect `options` of `url`,
/// with `?schema=...` when it is in a schema (which must be a plain name).
fn store_name(
    url: &str,
    options: &PgConnectOptions,
    schema: Option<&str>,
) -> Result<String, PersistError> {
    let mut name = format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("")
    );
    if let Some(schema) = schema {
        rath_persist::url::check_schema(schema).map_err(|message| PersistError::BadStoreUrl {
            url: redact(url),
            message,
        })?;
        name.push_str(&format!("?schema={schema}"));
    }
    Ok(name)
}

/// `options` with the store's tables in `schema`, checked on the `probe` connection: to
/// read, the schema must exist ([`PersistError::NoStore`] otherwise); to write, it is
/// created if missing.
async fn in_schema(
    probe: &mut sqlx::PgConnection,
    options: PgConnectOptions,
    name: &str,
    schema: &str,
    read: bool,
) -> Result<PgConnectOptions, PersistError> {
    if read {
        let there: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM pg_namespace WHERE nspname = $1")
                .bind(schema)
                .fetch_optional(&mut *probe)
                .await
                .map_err(|e| imp::backend(name, "connect", e))?;
        if there.is_none() {
            return Err(PersistError::NoStore {
                store: name.to_owned(),
            });
        }
    } else {
        sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .execute(&mut *probe)
            .await
            .map_err(|e| imp::backend(name, "connect", e))?;
    }
    Ok(options.options([("search_path", schema)]))
}

/// The store's pool of connections with `options` (read-only ones when `read`), each set to
/// generic plans, and the store's tables checked (`read`) or migrated.
async fn open_pool(
    options: PgConnectOptions,
    name: &str,
    read: bool,
) -> Result<sqlx::PgPool, PersistError> {
    let options = if read {
        // Reading never writes: the server refuses any write on these connections.
        options.options([("default_transaction_read_only", "on")])
    } else {
        options
    };
    let pool = pool_options(8)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *conn, GENERIC_PLANS).await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .map_err(|e| imp::backend(name, "connect", e))?;
    if read {
        imp::check_schema(&pool, name).await?;
    } else {
        imp::migrate(&pool, name).await?;
    }
    Ok(pool)
}

/// Opens [`WARM_CONNECTIONS`] connections of `pool` at once and prepares the group loader's
/// statement on each. A server process reads the catalog entries of a table and its indexes
/// the first time a statement on it is planned (measured: ~2.7 ms for the first statement on
/// `rath_sessions`, 0.2 ms after). Opening the connections a busy store uses at once (the
/// group committers', the group loader's and one for lone reads) and preparing on each the
/// group loader's statement, which reads both tables (a recursive query the server took
/// ~4 ms to plan on a bench drain's first load), moves that cost, and the server's start of
/// a process per connection, from the first writes and loads to connecting.
async fn warm_connections(pool: &sqlx::PgPool, name: &str) -> Result<(), PersistError> {
    let mut warm = Vec::with_capacity(WARM_CONNECTIONS);
    for _ in 0..WARM_CONNECTIONS {
        let mut c = pool
            .acquire()
            .await
            .map_err(|e| imp::backend(name, "connect", e))?;
        imp::warm_loads(&mut c)
            .await
            .map_err(|e| imp::backend(name, "connect", e))?;
        warm.push(c);
    }
    drop(warm);
    Ok(())
}

/// `url` without its password.
pub(crate) fn redact(url: &str) -> String {
    rath_persist::url::redact(url)
}

crate::delegate::session_store!(PgStore);
