//! Forward-only migration from schema version 1 (16-byte `bytea` chunk addresses on
//! PostgreSQL, the detach lookup indexing the current `digest`) to version 2 (`uuid`
//! addresses, `saved_digest`): a store laid out as version 1 with sessions in it opens,
//! migrates in place, and every session loads as it was; a detach saved by a fresh handle
//! still shares the migrated row. The version 1 layout is made from a store this build wrote,
//! by the inverse of migration 2 (the version 1 tables are `schema.rs`'s first migration).

mod common;

use rath_persist::SessionStore;
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::{PgStore, SCHEMA_VERSION, SqliteStore, TableStats};

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

fn refs(stats: &[TableStats]) -> u64 {
    stats
        .iter()
        .find(|s| s.table == "rath_refs")
        .map_or(0, |s| s.rows)
}

async fn check_migrated(store: &dyn SessionStore, saved: &[Session]) {
    for s in saved {
        let loaded = store.load(s.id()).await.expect("load a migrated session");
        assert_eq!(loaded.session.chunks(), s.chunks(), "{}", s.id());
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
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("store.sqlite");
    let saved = sessions();
    {
        let store = SqliteStore::open(&path).await.expect("open");
        for s in &saved {
            store.save(s).await.expect("save");
        }
        store.close().await;
    }
    let url = format!("sqlite://{}", path.display());
    let raw = sqlx::SqlitePool::connect(&url).await.expect("raw");
    for sql in SQLITE_TO_V1 {
        sqlx::query(sql).execute(&raw).await.expect(sql);
    }
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
    let Some((schema, store)) = common::postgres("migrate").await else {
        return;
    };
    let saved = sessions();
    for s in &saved {
        store.save(s).await.expect("save");
    }
    store.close().await;
    let raw = sqlx::PgPool::connect(&schema.url).await.expect("raw");
    {
        let mut conn = raw.acquire().await.expect("connection");
        sqlx::query(&format!("SET search_path TO {}", schema.name))
            .execute(&mut *conn)
            .await
            .expect("search_path");
        for sql in POSTGRES_TO_V1 {
            sqlx::query(sql).execute(&mut *conn).await.expect(sql);
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
    assert_eq!(hash_type, "bytea", "the version 1 layout");
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
