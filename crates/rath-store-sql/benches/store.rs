//! Store benchmarks of issue 19, timed with divan (`cargo xtask bench --only store` runs them
//! and reads the medians; the bytes each write adds are deterministic and measured exactly by
//! the xtask, not here):
//!
//! - `load_*`: load of a persisted 10⁴-chunk session (the same row shapes as rath-persist's
//!   `persist` bench: user / assistant tool call / tool_result / assistant text) from
//!   SQLite, PostgreSQL and the JSONL directory. Goal: each SQL store within 3× of JSONL.
//! - `fork_*`: saving a fork of a persisted session of 10³–10⁶ chunks (one session row, no
//!   chunk data): the time should not grow with the session.
//!
//! PostgreSQL benches need `RATH_TEST_POSTGRES_URL`; without it they print why and measure
//! nothing. They work in the schema `rath_bench_store_divan`, dropped before and after.

use std::sync::OnceLock;

use rath_persist::{SessionStore, Store};
use rath_store_sql::{PgStore, SqliteStore};

#[path = "common/sessions.rs"]
mod sessions;

fn main() {
    divan::main();
}

/// The PostgreSQL schema the benches use.
const PG_SCHEMA: &str = "rath_bench_store_divan";

/// Session lengths of the fork benches.
const FORK_SIZES: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// A fresh SQLite store in a temporary directory (kept alive by the returned guard).
fn sqlite() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = rt()
        .block_on(SqliteStore::open(dir.path().join("store.sqlite")))
        .expect("open sqlite");
    (dir, store)
}

/// The bench schema of `RATH_TEST_POSTGRES_URL`, dropped when this guard goes.
struct PgBench {
    url: String,
    store: PgStore,
}

impl PgBench {
    /// A store in a fresh bench schema, or `None` (with the reason printed) without a URL.
    fn open() -> Option<Self> {
        let url = match std::env::var("RATH_TEST_POSTGRES_URL") {
            Ok(u) if !u.trim().is_empty() => u,
            _ => {
                eprintln!(
                    "store bench: PostgreSQL not measured: RATH_TEST_POSTGRES_URL is not set"
                );
                return None;
            }
        };
        drop_schema(&url);
        let store = rt()
            .block_on(PgStore::connect_in(&url, Some(PG_SCHEMA)))
            .expect("connect to RATH_TEST_POSTGRES_URL");
        Some(PgBench { url, store })
    }
}

impl Drop for PgBench {
    fn drop(&mut self) {
        rt().block_on(self.store.close());
        drop_schema(&self.url);
    }
}

fn drop_schema(url: &str) {
    rt().block_on(async {
        if let Ok(pool) = sqlx::PgPool::connect(url).await {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE"))
                .execute(&pool)
                .await;
            pool.close().await;
        }
    });
}

/// Times `store.load` of a persisted `n`-chunk session.
fn bench_load(bencher: divan::Bencher, store: &dyn SessionStore, n: usize) {
    let s = sessions::of(n);
    rt().block_on(store.save(&s)).expect("save");
    bencher.bench_local(|| {
        let l = rt().block_on(store.load(s.id())).expect("load");
        assert_eq!(l.session.len(), n);
        l
    });
}

/// Load of a 10⁴-chunk session from the JSONL directory (through the `SessionStore` trait).
#[divan::bench(args = [10_000], max_time = 5)]
fn load_jsonl(bencher: divan::Bencher, n: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::at(dir.path());
    bench_load(bencher, &store, n);
}

/// Load of a 10⁴-chunk session from SQLite (one recursive query over session, refs, chunks).
#[divan::bench(args = [10_000], max_time = 5)]
fn load_sqlite(bencher: divan::Bencher, n: usize) {
    let (_dir, store) = sqlite();
    bench_load(bencher, &store, n);
}

/// Load of a 10⁴-chunk session from PostgreSQL.
#[divan::bench(args = [10_000], max_time = 5)]
fn load_postgres(bencher: divan::Bencher, n: usize) {
    let Some(pg) = PgBench::open() else { return };
    bench_load(bencher, &pg.store, n);
}

/// Times saving a fork (a fresh id, parent = the stored session) of a persisted `n`-chunk
/// session; every sample is a new fork row.
fn bench_fork(bencher: divan::Bencher, store: &dyn SessionStore, n: usize) {
    let base = sessions::of(n);
    rt().block_on(store.save(&base)).expect("save the base");
    bencher.with_inputs(|| base.fork()).bench_local_values(|f| {
        let r = rt().block_on(store.save(&f)).expect("save the fork");
        assert_eq!(r.chunks_written, 0, "a fork writes no chunk data");
        r
    });
}

/// Fork of a persisted session of 10³–10⁶ chunks on SQLite.
#[divan::bench(args = FORK_SIZES, max_time = 3)]
fn fork_sqlite(bencher: divan::Bencher, n: usize) {
    let (_dir, store) = sqlite();
    bench_fork(bencher, &store, n);
}

/// Fork of a persisted session of 10³–10⁶ chunks on PostgreSQL.
#[divan::bench(args = FORK_SIZES, max_time = 3)]
fn fork_postgres(bencher: divan::Bencher, n: usize) {
    let Some(pg) = PgBench::open() else { return };
    bench_fork(bencher, &pg.store, n);
}
