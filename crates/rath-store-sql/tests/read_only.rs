//! Opening a store to read never writes (issue 47, items 3, 5, 6 and 10): a missing file is
//! refused and not created, an empty or foreign SQLite file is refused and left byte for
//! byte as it was, a store in DELETE journal mode keeps its mode and bytes, a store is read
//! through a read-only connection; a lock held past the busy timeout and a refused
//! PostgreSQL port say what failed; a PostgreSQL store opened to read creates no schema.

mod common;

use std::path::Path;
use std::time::Duration;

use rath_persist::{PersistError, SessionStore, Store};
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::{SqliteOptions, SqliteStore, open_store, open_store_read};
use sqlx::ConnectOptions as _;

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).expect("read file")
}

/// A store of two sessions at `path`, closed.
async fn store_at(path: &Path) -> Session {
    let store = SqliteStore::open(path).await.expect("open to write");
    let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
    store.save(&s).await.expect("save");
    store.save(&s.fork()).await.expect("save fork");
    store.close().await;
    s
}

/// Runs `sql` on the SQLite file `path` through a plain connection (not the store's).
async fn raw(path: &Path, sql: &str) -> Vec<String> {
    let mut c = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .connect()
        .await
        .expect("raw connect");
    let rows: Vec<String> = sqlx::query_scalar::<_, String>(sql)
        .fetch_all(&mut c)
        .await
        .unwrap_or_default();
    sqlx::Connection::close(c).await.expect("close");
    rows
}

#[tokio::test]
async fn a_missing_file_is_no_store_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("no/such.db");
    let url = format!("sqlite://{}", file.display());
    let err = open_store_read(&url).await.unwrap_err();
    assert!(matches!(err, PersistError::NoStore { .. }), "{err}");
    assert!(!file.exists() && !file.parent().unwrap().exists());
    // A JSONL directory too.
    let missing = dir.path().join("nothing-here");
    let err = open_store_read(missing.to_str().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, PersistError::NoStore { .. }), "{err}");
    assert!(!missing.exists());
}

#[tokio::test]
async fn an_empty_or_foreign_file_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = SqliteStore::open_read(&empty).await.unwrap_err();
    assert!(matches!(err, PersistError::NotAStore { .. }), "{err}");
    assert_eq!(bytes(&empty), b"");

    let foreign = dir.path().join("foreign.db");
    raw(&foreign, "CREATE TABLE notes (body TEXT)").await;
    raw(&foreign, "INSERT INTO notes VALUES ('mine')").await;
    let before = bytes(&foreign);
    let url = format!("sqlite://{}", foreign.display());
    let err = open_store_read(&url).await.unwrap_err();
    assert!(
        matches!(&err, PersistError::NotAStore { reason, .. } if reason.contains("rath_meta")),
        "{err}"
    );
    assert_eq!(bytes(&foreign), before);
    let tables = raw(&foreign, "SELECT name FROM sqlite_master ORDER BY name").await;
    assert_eq!(tables, ["notes"]);

    let text = dir.path().join("text.db");
    std::fs::write(&text, "not a database, just text\n".repeat(200)).unwrap();
    let before = bytes(&text);
    let err = SqliteStore::open_read(&text).await.unwrap_err();
    assert!(matches!(err, PersistError::NotAStore { .. }), "{err}");
    assert_eq!(bytes(&text), before);
}

#[tokio::test]
async fn a_delete_mode_store_is_read_without_changing_a_byte() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.sqlite");
    let s = store_at(&file).await;
    assert_eq!(raw(&file, "PRAGMA journal_mode").await, ["wal"]);
    assert_eq!(raw(&file, "PRAGMA journal_mode = DELETE").await, ["delete"]);
    let before = bytes(&file);
    let store = SqliteStore::open_read(&file).await.expect("open to read");
    assert_eq!(store.list().await.unwrap().len(), 2);
    assert_eq!(store.load(s.id()).await.unwrap().session.len(), 2);
    // Writes through a store opened to read fail; nothing reaches the file.
    let other = Session::user_with("new", Stamper::seeded(9));
    assert!(store.save(&other).await.is_err());
    store.close().await;
    assert_eq!(bytes(&file), before);
    assert_eq!(raw(&file, "PRAGMA journal_mode").await, ["delete"]);
    // Opening to write keeps the journal mode too: it is set when a store is created.
    let writer = SqliteStore::open(&file).await.unwrap();
    writer.save(&other).await.unwrap();
    writer.close().await;
    assert_eq!(raw(&file, "PRAGMA journal_mode").await, ["delete"]);
}

#[tokio::test]
async fn an_older_store_opened_to_read_is_not_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.sqlite");
    store_at(&file).await;
    raw(
        &file,
        "UPDATE rath_meta SET value = 2 WHERE key = 'schema_version'",
    )
    .await;
    let before = bytes(&file);
    let err = SqliteStore::open_read(&file).await.unwrap_err();
    assert!(
        matches!(err, PersistError::OlderSchema { found: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("rath store migrate"), "{err}");
    assert_eq!(bytes(&file), before);
}

#[tokio::test]
async fn a_home_and_its_sessions_directory_are_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let s = Session::user_with("hi", Stamper::counter());
    Store::at(&sessions).save(&s).unwrap();
    for url in [
        dir.path().display().to_string(),
        sessions.display().to_string(),
        format!("jsonl://{}", dir.path().display()),
    ] {
        let read = open_store_read(&url).await.unwrap();
        assert_eq!(read.list().await.unwrap().len(), 1, "{url}");
        let write = open_store(&url).await.unwrap();
        assert_eq!(write.list().await.unwrap().len(), 1, "{url}");
    }
}

#[tokio::test]
async fn a_lock_held_past_the_busy_timeout_is_reported_as_a_lock() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.sqlite");
    store_at(&file).await;
    assert_eq!(raw(&file, "PRAGMA journal_mode = DELETE").await, ["delete"]);
    // Another connection holds the file's exclusive lock (a writer mid-transaction).
    let mut holder = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .connect()
        .await
        .unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut holder)
        .await
        .unwrap();
    let short = Duration::from_millis(200);
    for options in [SqliteOptions::read(), SqliteOptions::write()] {
        let err = SqliteStore::open_with(&file, &options.clone().busy_timeout(short))
            .await
            .unwrap_err();
        assert!(
            matches!(err, PersistError::Busy { .. }),
            "{options:?}: {err}"
        );
        let text = err.to_string();
        assert!(text.contains("locked by another connection"), "{text}");
        assert!(!text.contains("pool timed out"), "{text}");
    }
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    SqliteStore::open_read(&file)
        .await
        .expect("readable once released");
}

#[tokio::test]
async fn a_refused_postgres_port_names_the_address() {
    // Port 1 on the loopback: nothing listens there, the connection is refused.
    for url in [
        "postgres://rath@127.0.0.1:1/db",
        "postgres://rath@127.0.0.1:1/db?schema=s",
    ] {
        for err in [
            open_store(url).await.unwrap_err(),
            open_store_read(url).await.unwrap_err(),
        ] {
            assert!(
                matches!(&err, PersistError::Unreachable { address, .. } if address == "127.0.0.1:1"),
                "{url}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains("127.0.0.1:1"), "{text}");
            assert!(!text.contains("pool timed out"), "{text}");
        }
    }
}

#[tokio::test]
async fn postgres_opened_to_read_creates_nothing_and_refuses_what_is_not_a_store() {
    let Some(base) = common::postgres_url() else {
        return;
    };
    let missing = common::fresh_schema("ro_missing");
    let url = common::with_params(&base, &format!("schema={missing}"));
    let err = open_store_read(&url).await.unwrap_err();
    assert!(matches!(err, PersistError::NoStore { .. }), "{err}");
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
        .await
        .unwrap();
    let schemas: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
        .bind(&missing)
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(schemas, 0, "reading created the schema");
    // A schema of something else: refused, and left without the store's tables.
    let foreign = common::fresh_schema("ro_foreign");
    for sql in [
        format!("CREATE SCHEMA {foreign}"),
        format!("CREATE TABLE {foreign}.notes (body TEXT)"),
    ] {
        sqlx::query(&sql).execute(&mut c).await.unwrap();
    }
    let url = common::with_params(&base, &format!("schema={foreign}"));
    let err = open_store_read(&url).await.unwrap_err();
    assert!(matches!(err, PersistError::NotAStore { .. }), "{err}");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(&foreign)
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(tables, 1, "reading created tables");
    // A store: read, and every write refused by the server.
    let (schema, store) = common::postgres("ro_store").await.unwrap();
    let s = Session::user_with("hi", Stamper::counter());
    store.save(&s).await.unwrap();
    let url = common::with_params(&base, &format!("schema={}", schema.name));
    let read = open_store_read(&url).await.unwrap();
    assert_eq!(read.load(s.id()).await.unwrap().session.len(), 1);
    assert!(read.save(&s.fork()).await.is_err());
    assert_eq!(read.list().await.unwrap().len(), 1);
    sqlx::query(&format!("DROP SCHEMA {foreign} CASCADE"))
        .execute(&mut c)
        .await
        .unwrap();
    store.close().await;
    schema.drop_now().await;
}
