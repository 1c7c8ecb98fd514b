//! Forward-only migrations: from schema version 1 (16-byte `bytea` chunk addresses on
//! PostgreSQL, the detach lookup indexing the current `digest`) and from version 2 (`uuid`
//! addresses, `saved_digest`; a chunk row per distinct chunk and a ref row per session
//! chunk) to version 3 (a segment row per save or append, fences in `rath_meta`): a store
//! laid out as version 1 or 2 with sessions and a fencing token in it opens, migrates in
//! place, and every session loads as it was; a detach saved by a fresh handle still shares
//! the migrated row, an append to a migrated session works, the token still fences. The old
//! layouts are made from a store this build wrote, by the inverse of migration 3 (done here
//! in Rust: it splits and hashes the segments' documents) and then of migration 2.

mod common;

use std::io::Read as _;

use rath_persist::{Fence, PersistError, SessionStore, WriteBatch};
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::{PgStore, SCHEMA_VERSION, SqliteStore, TableStats};
use sha2::Digest as _;
use sqlx::Row as _;

/// A root, a loop-grown fork of it and a merge-free second root.
fn sessions() -> Vec<Session> {
    let stamper = Stamper::counter();
    let mut root = Session::user_with("question", stamper.clone());
    for i in 0..20 {
        root = root.push(Chunk::assistant_text(format!("answer {i}")));
    }
    let fork = root.fork().push(Chunk::user("and then?"));
    let other = Session::user_with("another", stamper).push(Chunk::user("hi"));
    vec![root, fork, other]
}

/// The chunk documents stored.
fn refs(stats: &[TableStats]) -> u64 {
    stats
        .iter()
        .find(|s| s.table == "rath_segments")
        .map_or(0, |s| s.chunks)
}

/// The fence every test store accepts before it is laid out anew.
const FENCE: &str = "migrate-fence";

async fn fence(store: &dyn SessionStore, token: u64) -> Result<(), PersistError> {
    let batch = WriteBatch::new().fenced(Fence::new(FENCE, token));
    store.write(batch).await.map(|_| ())
}

async fn check_migrated(store: &dyn SessionStore, saved: &[Session]) {
    for s in saved {
        let loaded = store.load(s.id()).await.expect("load a migrated session");
        assert_eq!(loaded.session.chunks(), s.chunks(), "{}", s.id());
    }
    assert!(
        matches!(fence(store, 1).await, Err(PersistError::Fenced { .. })),
        "the migrated fencing token still fences"
    );
}

/// A stored segment's chunk documents.
fn segment_docs(stored: &[u8]) -> Vec<String> {
    let mut text = Vec::new();
    if stored.first() == Some(&b'{') {
        text.extend_from_slice(stored);
    } else {
        flate2::read::ZlibDecoder::new(stored)
            .read_to_end(&mut text)
            .expect("inflate");
    }
    String::from_utf8(text)
        .expect("utf-8")
        .split('\n')
        .map(str::to_owned)
        .collect()
}

/// The rows of `rath_chunks` and `rath_refs` (version 2) that a version 3 store's segments
/// hold: `(session_key, pos, hash, doc)`.
fn v2_rows(segments: Vec<(i64, i64, i32, Vec<u8>)>) -> Vec<(i64, i64, Vec<u8>, String)> {
    let mut out = Vec::new();
    for (key, pos, n, docs) in segments {
        let docs = segment_docs(&docs);
        assert_eq!(docs.len(), n as usize);
        for (i, doc) in docs.into_iter().enumerate() {
            let hash = sha2::Sha256::digest(doc.as_bytes())[..16].to_vec();
            out.push((key, pos + i as i64, hash, doc));
        }
    }
    out
}

/// Lays a version 3 SQLite store out as version 2.
async fn sqlite_to_v2(url: &str) {
    let options: sqlx::sqlite::SqliteConnectOptions = url.parse().expect("url");
    let raw = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.foreign_keys(false))
        .await
        .expect("raw");
    let segments: Vec<(i64, i64, i32, Vec<u8>)> =
        sqlx::query_as("SELECT session_key, pos, n, docs FROM rath_segments")
            .fetch_all(&raw)
            .await
            .expect("segments");
    for sql in [
        "CREATE TABLE rath_chunks (hash BLOB PRIMARY KEY, doc TEXT NOT NULL)",
        "CREATE TABLE rath_refs (session_key INTEGER NOT NULL REFERENCES rath_sessions(key), \
         pos INTEGER NOT NULL, hash BLOB NOT NULL, PRIMARY KEY (session_key, pos)) WITHOUT ROWID",
        "CREATE TABLE rath_fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL)",
        "INSERT INTO rath_fences SELECT substr(key, 7), value FROM rath_meta \
         WHERE key LIKE 'fence:%'",
        "DELETE FROM rath_meta WHERE key LIKE 'fence:%'",
        "DROP TABLE rath_segments",
        "CREATE TABLE rath_sessions_v2 (key INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, \
         base_key INTEGER REFERENCES rath_sessions(key), base_len INTEGER NOT NULL, \
         len INTEGER NOT NULL, digest BLOB NOT NULL, last_hash BLOB, content BLOB NOT NULL, \
         created_us INTEGER NOT NULL, header TEXT NOT NULL, trailer TEXT, failure TEXT, \
         conversation INTEGER NOT NULL, evidence INTEGER NOT NULL, saved_digest BLOB)",
        "INSERT INTO rath_sessions_v2 SELECT key, id, base_key, base_len, len, digest, \
         last_hash, content, created_us, header, trailer, failure, conversation, evidence, \
         saved_digest FROM rath_sessions",
        "DROP TABLE rath_sessions",
        "ALTER TABLE rath_sessions_v2 RENAME TO rath_sessions",
        "CREATE INDEX rath_sessions_base ON rath_sessions(base_key)",
        "CREATE INDEX rath_sessions_saved ON rath_sessions(saved_digest)",
        "UPDATE rath_meta SET value = 2 WHERE key = 'schema_version'",
    ] {
        sqlx::query(sql).execute(&raw).await.expect(sql);
    }
    for (key, pos, hash, doc) in v2_rows(segments) {
        sqlx::query("INSERT INTO rath_chunks VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING")
            .bind(&hash)
            .bind(&doc)
            .execute(&raw)
            .await
            .expect("chunk");
        sqlx::query("INSERT INTO rath_refs VALUES ($1, $2, $3)")
            .bind(key)
            .bind(pos)
            .bind(&hash)
            .execute(&raw)
            .await
            .expect("ref");
    }
    raw.close().await;
}

/// Lays a version 3 PostgreSQL store (the connection's search path) out as version 2.
async fn postgres_to_v2(conn: &mut sqlx::PgConnection) {
    let rows = sqlx::query("SELECT session_key, pos, n, docs FROM rath_segments")
        .fetch_all(&mut *conn)
        .await
        .expect("segments");
    let segments = rows
        .iter()
        .map(|r| {
            (
                r.get::<i64, _>("session_key"),
                r.get::<i64, _>("pos"),
                r.get::<i32, _>("n"),
                r.get::<Vec<u8>, _>("docs"),
            )
        })
        .collect();
    for sql in [
        "CREATE TABLE rath_chunks (hash uuid PRIMARY KEY, doc TEXT NOT NULL)",
        "CREATE TABLE rath_refs (session_key BIGINT NOT NULL REFERENCES rath_sessions(key), \
         pos BIGINT NOT NULL, hash uuid NOT NULL, PRIMARY KEY (session_key, pos))",
        "CREATE TABLE rath_fences (key TEXT PRIMARY KEY, token BIGINT NOT NULL)",
        "INSERT INTO rath_fences SELECT substr(key, 7), value FROM rath_meta \
         WHERE key LIKE 'fence:%'",
        "DELETE FROM rath_meta WHERE key LIKE 'fence:%'",
        "DROP TABLE rath_segments",
        "ALTER TABLE rath_sessions DROP COLUMN graft_key, DROP COLUMN graft_len",
        "UPDATE rath_meta SET value = 2 WHERE key = 'schema_version'",
    ] {
        sqlx::query(sql).execute(&mut *conn).await.expect(sql);
    }
    for (key, pos, hash, doc) in v2_rows(segments) {
        sqlx::query(
            "INSERT INTO rath_chunks VALUES (encode($1, 'hex')::uuid, $2) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(&hash)
        .bind(&doc)
        .execute(&mut *conn)
        .await
        .expect("chunk");
        sqlx::query("INSERT INTO rath_refs VALUES ($1, $2, encode($3, 'hex')::uuid)")
            .bind(key)
            .bind(pos)
            .bind(&hash)
            .execute(&mut *conn)
            .await
            .expect("ref");
    }
}

const SQLITE_TO_V1: &[&str] = &[
    "DROP INDEX rath_sessions_saved",
    "ALTER TABLE rath_sessions DROP COLUMN saved_digest",
    "CREATE INDEX rath_sessions_digest ON rath_sessions(digest)",
    "UPDATE rath_meta SET value = 1 WHERE key = 'schema_version'",
];

#[tokio::test]
async fn a_version_1_sqlite_store_migrates_in_place() {
    sqlite_migrates_from(1).await;
}

#[tokio::test]
async fn a_version_2_sqlite_store_migrates_in_place() {
    sqlite_migrates_from(2).await;
}

async fn sqlite_migrates_from(old: i64) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("store.sqlite");
    let saved = sessions();
    {
        let store = SqliteStore::open(&path).await.expect("open");
        for s in &saved {
            store.save(s).await.expect("save");
        }
        fence(&store, 5).await.expect("fence");
        store.close().await;
    }
    let url = format!("sqlite://{}", path.display());
    sqlite_to_v2(&url).await;
    let raw = sqlx::SqlitePool::connect(&url).await.expect("raw");
    if old == 1 {
        for sql in SQLITE_TO_V1 {
            sqlx::query(sql).execute(&raw).await.expect(sql);
        }
    }
    let version: i64 =
        sqlx::query_scalar("SELECT value FROM rath_meta WHERE key = 'schema_version'")
            .fetch_one(&raw)
            .await
            .expect("version");
    assert_eq!(version, old, "the old layout");
    raw.close().await;
    let store = SqliteStore::open(&path).await.expect("migrate on open");
    check_migrated(&store, &saved).await;
    let raw = sqlx::SqlitePool::connect(&url).await.expect("raw");
    let version: i64 =
        sqlx::query_scalar("SELECT value FROM rath_meta WHERE key = 'schema_version'")
            .fetch_one(&raw)
            .await
            .expect("version");
    assert_eq!(version, SCHEMA_VERSION);
    raw.close().await;
    // A fresh handle remembers nothing: the detach shares through `saved_digest`.
    let fresh = SqliteStore::open(&path).await.expect("fresh handle");
    let before = refs(&fresh.table_stats().await.expect("stats"));
    let detached = saved[0].detach();
    assert_eq!(
        fresh.save(&detached).await.expect("detach").chunks_written,
        0
    );
    assert_eq!(refs(&fresh.table_stats().await.expect("stats")), before);
    assert_eq!(
        fresh
            .load(detached.id())
            .await
            .expect("load")
            .session
            .chunks(),
        saved[0].chunks()
    );
}

const POSTGRES_TO_V1: &[&str] = &[
    "DROP INDEX rath_sessions_saved",
    "ALTER TABLE rath_sessions DROP COLUMN saved_digest",
    "ALTER TABLE rath_sessions RESET (fillfactor)",
    "ALTER TABLE rath_chunks ALTER COLUMN hash TYPE BYTEA USING uuid_send(hash)",
    "ALTER TABLE rath_refs ALTER COLUMN hash TYPE BYTEA USING uuid_send(hash)",
    "ALTER TABLE rath_sessions ALTER COLUMN last_hash TYPE BYTEA USING uuid_send(last_hash)",
    "CREATE INDEX rath_sessions_digest ON rath_sessions(digest)",
    "UPDATE rath_meta SET value = 1 WHERE key = 'schema_version'",
];

#[tokio::test]
async fn a_version_1_postgres_store_migrates_in_place() {
    postgres_migrates_from(1).await;
}

#[tokio::test]
async fn a_version_2_postgres_store_migrates_in_place() {
    postgres_migrates_from(2).await;
}

async fn postgres_migrates_from(old: i64) {
    let Some((schema, store)) = common::postgres(&format!("migrate{old}")).await else {
        return;
    };
    let saved = sessions();
    for s in &saved {
        store.save(s).await.expect("save");
    }
    fence(&store, 5).await.expect("fence");
    store.close().await;
    let raw = sqlx::PgPool::connect(&schema.url).await.expect("raw");
    {
        let mut conn = raw.acquire().await.expect("connection");
        sqlx::query(&format!("SET search_path TO {}", schema.name))
            .execute(&mut *conn)
            .await
            .expect("search_path");
        postgres_to_v2(&mut conn).await;
        if old == 1 {
            for sql in POSTGRES_TO_V1 {
                sqlx::query(sql).execute(&mut *conn).await.expect(sql);
            }
        }
        sqlx::query("RESET search_path")
            .execute(&mut *conn)
            .await
            .expect("reset");
    }
    let hash_type: String = sqlx::query_scalar(
        "SELECT data_type::TEXT FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = 'rath_refs' AND column_name = 'hash'",
    )
    .bind(&schema.name)
    .fetch_one(&raw)
    .await
    .expect("column type");
    assert_eq!(
        hash_type,
        if old == 1 { "bytea" } else { "uuid" },
        "the version {old} layout"
    );
    let store = PgStore::connect_in(&schema.url, Some(&schema.name))
        .await
        .expect("migrate on connect");
    check_migrated(&store, &saved).await;
    let version: i64 = sqlx::query_scalar(&format!(
        "SELECT value FROM {}.rath_meta WHERE key = 'schema_version'",
        schema.name
    ))
    .fetch_one(&raw)
    .await
    .expect("version");
    assert_eq!(version, SCHEMA_VERSION);
    let fresh = PgStore::connect_in(&schema.url, Some(&schema.name))
        .await
        .expect("fresh handle");
    let before = refs(&fresh.table_stats().await.expect("stats"));
    let detached = saved[0].detach();
    assert_eq!(
        fresh.save(&detached).await.expect("detach").chunks_written,
        0
    );
    assert_eq!(refs(&fresh.table_stats().await.expect("stats")), before);
    assert_eq!(
        fresh
            .load(detached.id())
            .await
            .expect("load")
            .session
            .chunks(),
        saved[0].chunks()
    );
    // Appending to a migrated session works and stays loadable.
    let grown = saved[1].push(Chunk::assistant_text("migrated and grown"));
    fresh
        .append(&grown, saved[1].len())
        .await
        .expect("append after migration");
    assert_eq!(
        fresh.load(grown.id()).await.expect("load").session.chunks(),
        grown.chunks()
    );
    store.close().await;
    fresh.close().await;
    raw.close().await;
    schema.drop_now().await;
}

/// Processes that open a new SQLite store at once (a worker and a submitter started
/// together) all get it: the one that finds the other creating the file opens again
/// instead of failing at once with a lock error. Eight opens at once of each of 20 new
/// files, each on a connection of its own as separate processes would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opened_at_once_on_a_new_file_all_open() {
    let dir = tempfile::tempdir().unwrap();
    for f in 0..20 {
        let path = dir.path().join(format!("s{f}.db"));
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { SqliteStore::open(&path).await })
            })
            .collect();
        for (i, o) in opens.into_iter().enumerate() {
            let store = o
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("file {f}, open {i}: {e}"));
            let s = Session::user_with("hi", Stamper::counter());
            store.save(&s).await.unwrap();
        }
    }
}
