//! The store growth workload of issue 19, our side, built in release like every bench
//! (`cargo bench -p rath-store-sql --bench growth -- --turns 500 --report-at 10,100,500`);
//! `cargo xtask bench --only store` runs it next to LangGraph's Postgres checkpointer
//! (`../shared/peers/langgraph_checkpoint_bench.py`) and renders both. Not a divan bench: it
//! prints one JSON object on stdout.
//!
//! - **Growth.** A conversation of `--turns` turns: one user message (100 bytes) and one
//!   assistant message (200 bytes) per turn, the very texts the peer's generator makes (an
//!   ANSI-C LCG over 64 words). Variant `append`: one session, each turn a loop round appended
//!   (`SessionStore::append`). Variant `fork_every_10`: `append`, and after every 10th turn a
//!   branch (a fork of the thread plus one user message, `text("fork", turn, 100)`) saved as a
//!   session of its own, the peer's `--fork-every 10`. Variant `fork_per_turn`: every turn addressable as LangGraph's
//!   checkpoints are: each turn a new session, a fork of the previous turn's plus its round.
//!   At each `--report-at` turn: bytes (PostgreSQL: summed `pg_total_relation_size` of every
//!   table of the store's schema; SQLite: the file after a WAL checkpoint), rows, logical
//!   bytes (PostgreSQL: `pg_column_size` of the rows; SQLite: the stored values' lengths),
//!   `dbstat` page bytes on SQLite, and the median time of the last 10 turns.
//! - **Fork bytes.** Saving a fork of a persisted session of `--fork-sizes` chunks: the rows and
//!   logical bytes it adds (deterministic), on SQLite and PostgreSQL, and the bytes the JSONL
//!   directory writes for the same fork.
//!
//! PostgreSQL parts need `RATH_TEST_POSTGRES_URL` (else they are reported missing, with the
//! reason); they use the schema `rath_bench_store`, dropped before and after.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use rath_persist::{SessionStore, Store};
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::{PgStore, SqliteStore};

#[path = "common/sessions.rs"]
mod sessions;
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Our store's schema.
const OUR_SCHEMA: &str = "rath_bench_store";

macro_rules! bail {
    ($($t:tt)*) => { return Err(format!($($t)*).into()) };
}

/// The peer's 64 words (`langgraph_checkpoint_bench.py`, `WORDS`).
const WORDS: [&str; 64] = [
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "agent", "tool", "call",
    "result", "session", "chunk", "store", "fork", "merge", "run", "step", "state", "value",
    "model", "reply", "user", "message", "text", "data", "index", "table", "query", "plan",
    "build", "test", "check", "file", "path", "line", "code", "error", "retry", "queue", "lease",
    "token", "usage", "prompt", "answer", "branch", "commit", "event", "stream", "server",
    "client", "worker", "cache", "limit", "order", "batch", "graph", "node", "edge", "thread",
    "saver", "blob", "write",
];

/// The peer's message text: word soup picked by the ANSI-C LCG, cut to `size` bytes.
fn text(kind: &str, turn: u64, size: usize) -> String {
    let salt = match kind {
        "user" => 1,
        "assistant" => 2,
        _ => 3,
    };
    let mut x = (turn * 1_000_003 + salt) & 0x7FFF_FFFF;
    let mut out = format!("{kind} {turn}:");
    while out.len() < size {
        x = (x * 1_103_515_245 + 12_345) & 0x7FFF_FFFF;
        out.push(' ');
        out.push_str(WORDS[((x >> 16) % 64) as usize]);
    }
    out.truncate(size);
    out
}

/// What to run.
#[derive(Clone, Debug)]
struct Plan {
    turns: u64,
    report_at: Vec<u64>,
    fork_sizes: Vec<usize>,
}

impl Plan {
    /// `--turns N --report-at A,B --fork-sizes X,Y`; anything else (cargo's `--bench`) is
    /// ignored.
    fn from_args() -> Result<Self> {
        let mut plan = Plan {
            turns: 500,
            report_at: vec![10, 100, 500],
            fork_sizes: vec![1_000, 10_000, 100_000, 1_000_000],
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--turns" => plan.turns = value()?.parse()?,
                "--report-at" => plan.report_at = list(&value()?)?,
                "--fork-sizes" => plan.fork_sizes = list(&value()?)?,
                _ => {}
            }
        }
        Ok(plan)
    }

    fn raw_bytes(&self) -> u64 {
        (1..=self.turns)
            .map(|t| (text("user", t, 100).len() + text("assistant", t, 200).len()) as u64)
            .sum()
    }
}

fn list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>>
where
    T::Err: std::error::Error + 'static,
{
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        out.push(part.trim().parse().map_err(|e: T::Err| e.to_string())?);
    }
    Ok(out)
}

/// One measured point of a growth series.
#[derive(Clone, Debug, Default)]
struct Point {
    turn: u64,
    bytes: u64,
    rows: u64,
    payload: u64,
    turn_ns: f64,
    /// SQLite only: page bytes by `dbstat` (when the linked SQLite has it).
    pages: Option<u64>,
}

impl Point {
    fn json(&self) -> Value {
        json!({
            "turn": self.turn,
            "bytes": self.bytes,
            "rows": self.rows,
            "payload_bytes": self.payload,
            "turn_ns_median": self.turn_ns,
            "page_bytes": self.pages,
        })
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
// ------------------------------------------------------------------------------ growth

/// How our side keeps the conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One session; each turn appends its round (what the session loop writes).
    Append,
    /// Each turn a new session: a fork of the previous turn's plus the round (every turn
    /// addressable, like LangGraph's checkpoints).
    ForkPerTurn,
    /// [`Mode::Append`], and after every [`FORK_EVERY`]-th turn a branch: a fork of the thread
    /// plus one user message, saved as a session of its own (the peer's `--fork-every`).
    ForkEvery,
}

/// Turns between two branches in [`Mode::ForkEvery`] (the peer's `--fork-every 10`).
const FORK_EVERY: u64 = 10;

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Append => "append",
            Mode::ForkPerTurn => "fork_per_turn",
            Mode::ForkEvery => "fork_every_10",
        }
    }
}

/// What a store is measured by at a report turn.
trait Measure {
    async fn measure(&self) -> Result<(u64, u64, u64, Option<u64>)>;
}

/// Runs the conversation on `store`, measuring at the report turns.
async fn converse(
    store: &dyn SessionStore,
    meter: &impl Measure,
    plan: &Plan,
    mode: Mode,
) -> Result<Vec<Point>> {
    let mut s = Session::empty_with(Stamper::counter());
    let mut times = Vec::new();
    let mut points = Vec::new();
    for turn in 1..=plan.turns {
        let user = Chunk::user(text("user", turn, 100));
        let reply = Chunk::assistant_text(text("assistant", turn, 200));
        let t0 = Instant::now();
        let stored = s.len();
        let next = match mode {
            Mode::Append | Mode::ForkEvery => s.push(user).push(reply),
            Mode::ForkPerTurn => s.fork().push(user).push(reply),
        };
        let r = match mode {
            Mode::Append | Mode::ForkEvery => store.append(&next, stored).await?,
            Mode::ForkPerTurn => store.save(&next).await?,
        };
        times.push(t0.elapsed().as_nanos() as f64);
        if r.chunks_written != 2 {
            bail!("turn {turn} wrote {} chunks, not 2", r.chunks_written);
        }
        s = next;
        if mode == Mode::ForkEvery && turn % FORK_EVERY == 0 {
            let branch = s.fork().push(Chunk::user(text("fork", turn, 100)));
            let r = store.save(&branch).await?;
            if r.chunks_written != 1 {
                bail!(
                    "the branch at turn {turn} wrote {} chunks, not 1",
                    r.chunks_written
                );
            }
        }
        if plan.report_at.contains(&turn) {
            let (bytes, rows, payload, pages) = meter.measure().await?;
            let last = &times[times.len().saturating_sub(10)..];
            points.push(Point {
                turn,
                bytes,
                rows,
                payload,
                turn_ns: median(last),
                pages,
            });
        }
    }
    let loaded = store.load(s.id()).await?;
    if loaded.session.len() as u64 != 2 * plan.turns {
        bail!("the last turn loads {} chunks", loaded.session.len());
    }
    Ok(points)
}

/// Our PostgreSQL store in [`OUR_SCHEMA`], and a pool to measure it with.
struct PgSide {
    admin: sqlx::PgPool,
    store: PgStore,
}

impl PgSide {
    async fn open(url: &str) -> Result<Self> {
        let admin = sqlx::PgPool::connect(url).await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {OUR_SCHEMA} CASCADE"))
            .execute(&admin)
            .await?;
        let store = PgStore::connect_in(url, Some(OUR_SCHEMA)).await?;
        Ok(PgSide { admin, store })
    }

    async fn close(self) -> Result<()> {
        self.store.close().await;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {OUR_SCHEMA} CASCADE"))
            .execute(&self.admin)
            .await?;
        self.admin.close().await;
        Ok(())
    }

    /// Per table: `(rows, pg_total_relation_size, logical row bytes)`.
    async fn tables(&self) -> Result<BTreeMap<String, (u64, u64, u64)>> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT tablename::TEXT FROM pg_tables WHERE schemaname = $1 ORDER BY tablename",
        )
        .bind(OUR_SCHEMA)
        .fetch_all(&self.admin)
        .await?;
        let mut out = BTreeMap::new();
        for t in names {
            let q = format!(
                "SELECT count(*)::BIGINT, pg_total_relation_size('{OUR_SCHEMA}.{t}')::BIGINT, \
                 coalesce(sum(pg_column_size(x.*)), 0)::BIGINT FROM {OUR_SCHEMA}.{t} x"
            );
            let (rows, bytes, logical): (i64, i64, i64) =
                sqlx::query_as(&q).fetch_one(&self.admin).await?;
            out.insert(t, (rows as u64, bytes as u64, logical as u64));
        }
        Ok(out)
    }
}

impl Measure for PgSide {
    async fn measure(&self) -> Result<(u64, u64, u64, Option<u64>)> {
        let t = self.tables().await?;
        Ok((
            t.values().map(|v| v.1).sum(),
            t.values().map(|v| v.0).sum(),
            t.values().map(|v| v.2).sum(),
            None,
        ))
    }
}

/// Our SQLite store in a temporary file, and a pool to measure it with.
struct SqliteSide {
    _dir: tempfile::TempDir,
    path: PathBuf,
    admin: sqlx::SqlitePool,
    store: SqliteStore,
}

impl SqliteSide {
    async fn open() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("store.sqlite");
        let store = SqliteStore::open(&path).await?;
        let admin = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await?;
        Ok(SqliteSide {
            _dir: dir,
            path,
            admin,
            store,
        })
    }

    async fn close(self) {
        self.admin.close().await;
        self.store.close().await;
    }
}

impl Measure for SqliteSide {
    /// File bytes after a WAL checkpoint, rows, logical bytes of the stored values, and the
    /// page bytes `dbstat` counts (when the linked SQLite has it).
    async fn measure(&self) -> Result<(u64, u64, u64, Option<u64>)> {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.admin)
            .await?;
        let file = std::fs::metadata(&self.path)?.len();
        let stats = self.store.table_stats().await?;
        let pages: Option<i64> = sqlx::query_scalar("SELECT sum(pgsize) FROM dbstat")
            .fetch_one(&self.admin)
            .await
            .ok()
            .flatten();
        Ok((
            file,
            stats.iter().map(|s| s.rows).sum(),
            stats.iter().map(|s| s.bytes).sum(),
            pages.map(|p| p as u64),
        ))
    }
}

// ------------------------------------------------------------------------------ fork bytes

/// What saving one fork added: rows and logical bytes (summed over the tables).
#[derive(Clone, Copy, Debug, Default)]
struct ForkBytes {
    rows: u64,
    bytes: u64,
}

async fn fork_bytes_sqlite(base: &Session) -> Result<ForkBytes> {
    let side = SqliteSide::open().await?;
    side.store.save(base).await?;
    let sum = |v: &[rath_store_sql::TableStats]| {
        (
            v.iter().map(|s| s.rows).sum::<u64>(),
            v.iter().map(|s| s.bytes).sum::<u64>(),
        )
    };
    let before = sum(&side.store.table_stats().await?);
    let r = side.store.save(&base.fork()).await?;
    let after = sum(&side.store.table_stats().await?);
    side.close().await;
    if r.chunks_written != 0 {
        bail!("a fork wrote {} chunks", r.chunks_written);
    }
    Ok(ForkBytes {
        rows: after.0 - before.0,
        bytes: after.1 - before.1,
    })
}

async fn fork_bytes_pg(url: &str, base: &Session) -> Result<ForkBytes> {
    let side = PgSide::open(url).await?;
    side.store.save(base).await?;
    let before = side.measure().await?;
    side.store.save(&base.fork()).await?;
    let after = side.measure().await?;
    side.close().await?;
    Ok(ForkBytes {
        rows: after.1 - before.1,
        bytes: after.2 - before.2,
    })
}

/// The JSONL directory writes the whole session again for a fork: its file's bytes.
fn fork_bytes_jsonl(base: &Session) -> Result<ForkBytes> {
    let dir = tempfile::tempdir()?;
    let store = Store::at(dir.path());
    store.save(base)?;
    let path = store.save(&base.fork())?;
    let bytes = std::fs::metadata(&path)?.len();
    Ok(ForkBytes {
        rows: base.len() as u64 + 2,
        bytes,
    })
}

// ------------------------------------------------------------------------------ main

fn series(store: &str, mode: Mode, points: Result<Vec<Point>>) -> Value {
    match points {
        Ok(p) => json!({
            "store": store,
            "mode": mode.label(),
            "points": p.iter().map(Point::json).collect::<Vec<_>>(),
        }),
        Err(e) => json!({"store": store, "mode": mode.label(), "missing": e.to_string()}),
    }
}

async fn growth(plan: &Plan, pg_url: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    for mode in [Mode::Append, Mode::ForkEvery, Mode::ForkPerTurn] {
        let pg = match pg_url {
            None => Err("RATH_TEST_POSTGRES_URL is not set".into()),
            Some(url) => {
                eprintln!("growth: postgres, {}", mode.label());
                async {
                    let side = PgSide::open(url).await?;
                    let points = converse(&side.store, &side, plan, mode).await?;
                    side.close().await?;
                    Ok(points)
                }
                .await
            }
        };
        out.push(series("postgres", mode, pg));
        eprintln!("growth: sqlite, {}", mode.label());
        let sqlite = async {
            let side = SqliteSide::open().await?;
            let points = converse(&side.store, &side, plan, mode).await?;
            side.close().await;
            Ok(points)
        }
        .await;
        out.push(series("sqlite", mode, sqlite));
    }
    out
}

fn bytes_json(f: &ForkBytes) -> Value {
    json!({"rows": f.rows, "bytes": f.bytes})
}

async fn forks(plan: &Plan, pg_url: Option<&str>) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for &n in &plan.fork_sizes {
        eprintln!("growth: fork bytes at {n} chunks");
        let base = sessions::of(n);
        let sqlite = fork_bytes_sqlite(&base).await?;
        let pg = match pg_url {
            Some(url) => Some(fork_bytes_pg(url, &base).await?),
            None => None,
        };
        let jsonl = fork_bytes_jsonl(&base)?;
        out.push(json!({
            "chunks": n,
            "sqlite": bytes_json(&sqlite),
            "postgres": pg.as_ref().map(bytes_json),
            "jsonl": bytes_json(&jsonl),
        }));
    }
    Ok(out)
}

fn main() -> Result<()> {
    // The generator must be the peer's: the values its own `text()` prints.
    assert_eq!(
        text("user", 1, 100),
        "user 1: agent fox usage test worker usage tool brown usage tool run run call test \
         table lease table "
    );
    let plan = Plan::from_args()?;
    let pg_url = std::env::var("RATH_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let series = rt.block_on(growth(&plan, pg_url.as_deref()));
    let forks = rt.block_on(forks(&plan, pg_url.as_deref()))?;
    let out = json!({
        "turns": plan.turns,
        "raw_message_bytes": plan.raw_bytes(),
        "series": series,
        "forks": forks,
        "postgres": pg_url.is_some(),
    });
    println!("{out}");
    Ok(())
}
