//! Bad input and faults: a corrupt or truncated SQLite file, a newer schema, a PostgreSQL
//! that refuses connections or restarts: typed errors naming the store, nothing partial
//! visible, and the next write after PostgreSQL returns works in the same process.

mod common;

use rath_persist::{PersistError, SessionStore, Write, WriteBatch};
use rath_session::{Chunk, Session, Stamper};
use rath_store_sql::{PgStore, SCHEMA_VERSION, SqliteStore, open_store};

#[tokio::test]
async fn a_file_that_is_not_a_database_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("store.sqlite");
    std::fs::write(
        &path,
        b"this is not an SQLite database, just text\n".repeat(200),
    )
    .expect("write");
    match SqliteStore::open(&path).await {
        Err(e @ PersistError::Backend { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert_eq!(
                e.store(),
                Some(format!("sqlite:{}", path.display()).as_str())
            );
        }
        other => panic!("a garbage file must be refused: {other:?}"),
    }
    // The file is left as it was.
    assert!(
        std::fs::read(&path)
            .expect("read")
            .starts_with(b"this is not")
    );
}

#[tokio::test]
async fn a_truncated_sqlite_file_is_a_typed_error_never_a_partial_session() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("store.sqlite");
    let mut s = Session::user_with("big", Stamper::counter());
    for i in 0..400 {
        s = s.push(Chunk::assistant_text(format!("{i} {}", "x".repeat(200))));
    }
    {
        let store = SqliteStore::open(&path).await.expect("open");
        store.save(&s).await.expect("save");
        store.close().await;
        let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("raw");
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&raw)
            .await
            .expect("checkpoint the WAL into the file");
        raw.close().await;
    }
    let bytes = std::fs::read(&path).expect("read");
    assert!(
        bytes.len() > 64 * 1024,
        "the store file is {} bytes",
        bytes.len()
    );
    std::fs::write(&path, &bytes[..bytes.len() / 3]).expect("truncate");
    let _ = std::fs::remove_file(dir.path().join("store.sqlite-wal"));
    let result = match SqliteStore::open(&path).await {
        Err(e) => Err(e),
        Ok(store) => store.load(s.id()).await.map(|l| l.session.len()),
    };
    match result {
        Err(PersistError::Backend { store, .. } | PersistError::CorruptStore { store, .. }) => {
            assert!(store.starts_with("sqlite:"), "{store}");
        }
        Err(PersistError::NotFound { .. }) => {}
        Ok(n) => panic!("a truncated store returned a session of {n} chunks (stored 401)"),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[tokio::test]
async fn a_newer_schema_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("store.sqlite");
    let store = SqliteStore::open(&path).await.expect("open");
    store.close().await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("raw");
    sqlx::query("UPDATE rath_meta SET value = 99 WHERE key = 'schema_version'")
        .execute(&pool)
        .await
        .expect("bump");
    pool.close().await;
    match SqliteStore::open(&path).await {
        Err(e @ PersistError::NewerSchema { found: 99, .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("99") && text.contains(&SCHEMA_VERSION.to_string()),
                "{text}"
            );
        }
        other => panic!("a newer schema must be refused: {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_batch_leaves_nothing_on_sqlite() {
    let (_dir, store) = common::sqlite().await;
    let a = Session::user_with("a", Stamper::counter()).push(Chunk::assistant_text("a"));
    let b = a.fork().push(Chunk::assistant_text("b"));
    store.save(&a).await.expect("a");
    let stale = Write::Append {
        session: &a,
        expected_len: 0,
    };
    let r = store
        .write(WriteBatch::new().with(Write::Save(&b)).with(stale))
        .await;
    assert!(matches!(r, Err(PersistError::Conflict { .. })), "{r:?}");
    assert!(matches!(
        store.load(b.id()).await,
        Err(PersistError::NotFound { .. })
    ));
    assert_eq!(store.list().await.expect("list").len(), 1);
}

#[tokio::test]
async fn many_writers_on_one_sqlite_file_and_one_session_conflicts() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("store.sqlite");
    SqliteStore::open(&path)
        .await
        .expect("create")
        .close()
        .await;
    // Eight writers, each with its own pool (as separate processes have), on their own
    // threads and runtimes, each saving 20 sessions and appending to one shared session.
    let shared = Session::user_with("shared", Stamper::seeded(7));
    {
        let store = SqliteStore::open(&path).await.expect("open");
        store.save(&shared).await.expect("shared");
    }
    let handles: Vec<_> = (0..8u64)
        .map(|w| {
            let path = path.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let store = SqliteStore::open(&path).await.expect("open");
                    let st = Stamper::seeded(100 + w);
                    for i in 0..20 {
                        let s = Session::user_with(format!("writer {w} session {i}"), st.clone())
                            .push(Chunk::assistant_text("ok"));
                        store.save(&s).await.expect("save");
                    }
                    let mine = shared.push(Chunk::assistant_text(format!("writer {w}")));
                    let won = match store.append(&mine, 1).await {
                        Ok(_) => true,
                        Err(PersistError::Conflict { found: Some(2), .. }) => false,
                        Err(e) => panic!("writer {w}: {e}"),
                    };
                    store.close().await;
                    won
                })
            })
        })
        .collect();
    let wins = handles
        .into_iter()
        .map(|h| h.join().expect("writer thread"))
        .filter(|w| *w)
        .count();
    assert_eq!(wins, 1, "exactly one appender of eight wins");
    let store = SqliteStore::open(&path).await.expect("open");
    assert_eq!(store.list().await.expect("list").len(), 161);
    assert_eq!(
        store.load(shared.id()).await.expect("load").session.len(),
        2
    );
}

#[tokio::test]
async fn a_refused_postgres_connection_is_a_typed_error_naming_the_store() {
    // Nothing listens on port 1.
    let url = "postgres://root:secret@127.0.0.1:1/test";
    match PgStore::connect(url).await {
        Err(e @ PersistError::Backend { .. }) => {
            let text = e.to_string();
            assert!(text.contains("postgres://root@127.0.0.1:1/test"), "{text}");
            assert!(!text.contains("secret"), "the password leaked: {text}");
        }
        other => panic!("a refused connection must be a backend error: {other:?}"),
    }
}

#[tokio::test]
async fn postgres_restart_mid_write_then_the_next_write_works() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    if std::env::var("RATH_TEST_PG_RESTART").as_deref() != Ok("1") {
        // Restarting the shared cluster disturbs other tests: only on request.
        eprintln!(
            "RATH-SKIP: postgres_restart_mid_write_then_the_next_write_works: set RATH_TEST_PG_RESTART=1 to restart the cluster"
        );
        return;
    }
    let schema = common::fresh_schema("restart");
    let store = PgStore::connect_in(&url, Some(&schema))
        .await
        .expect("connect");
    let before = Session::user_with("before", Stamper::counter());
    store.save(&before).await.expect("save before");
    let mut big = before.fork();
    for i in 0..20_000 {
        big = big.push(Chunk::assistant_text(format!("{i} {}", "y".repeat(100))));
    }
    let writer = {
        let store = store.clone();
        let big = big.clone();
        tokio::spawn(async move { store.save(&big).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let restart = std::process::Command::new("pg_ctlcluster")
        .args(["15", "main", "restart"])
        .status()
        .expect("pg_ctlcluster");
    assert!(restart.success());
    let outcome = writer.await.expect("writer task");
    // The big save either committed whole before the restart or failed with a typed error.
    let after = Session::user_with("after", Stamper::seeded(3));
    let mut saved = None;
    for _ in 0..50 {
        match store.save(&after).await {
            Ok(r) => {
                saved = Some(r);
                break;
            }
            Err(PersistError::Backend { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert!(
        saved.is_some(),
        "the store never came back after the restart"
    );
    match outcome {
        Ok(_) => assert_eq!(
            store.load(big.id()).await.expect("load").session.len(),
            big.len()
        ),
        Err(PersistError::Backend { store: name, .. }) => {
            assert!(name.contains("schema=rath_test_restart"), "{name}");
            assert!(matches!(
                store.load(big.id()).await,
                Err(PersistError::NotFound { .. })
            ));
        }
        Err(e) => panic!("unexpected error from the interrupted save: {e}"),
    }
    store.close().await;
    common::Schema { url, name: schema }.drop_now().await;
}

#[tokio::test]
async fn store_urls_pick_the_store() {
    let dir = tempfile::tempdir().expect("tmp");
    let jsonl = open_store(dir.path().join("sessions").to_str().expect("utf8"))
        .await
        .expect("dir");
    assert!(jsonl.name().starts_with("jsonl:"));
    let jsonl = open_store(&format!("jsonl://{}", dir.path().display()))
        .await
        .expect("jsonl://");
    assert!(jsonl.name().starts_with("jsonl:"));
    let sqlite = open_store(&format!("sqlite://{}", dir.path().join("s.db").display()))
        .await
        .expect("sqlite://");
    assert!(sqlite.name().starts_with("sqlite:") && sqlite.capabilities().atomic_batch);
    for bad in ["", "mysql://x/y", "redis://localhost"] {
        assert!(
            matches!(open_store(bad).await, Err(PersistError::BadStoreUrl { .. })),
            "{bad:?}"
        );
    }
    if let Some(url) = common::postgres_url() {
        let schema = common::fresh_schema("url");
        let pg = open_store(&format!("{url}?schema={schema}"))
            .await
            .expect("postgres://");
        assert!(pg.name().contains(&schema) && !pg.name().contains("rath@"));
        common::Schema { url, name: schema }.drop_now().await;
    }
}
