//! Bad input and faults: a corrupt or truncated SQLite file, a newer schema, a PostgreSQL
//! that refuses connections, restarts or runs out of space: typed errors naming the store,
//! nothing partial visible, and the next write after PostgreSQL returns works in the same
//! process. The restart and the full disk happen on a private cluster
//! (`.ci/install.d/62-postgres-faults.sh`), one test at a time, never on the shared one.

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
        Err(e @ PersistError::NotAStore { .. }) => {
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
    // Letters from an xorshift: text the stored segments' deflate cannot shrink much.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..400 {
        let text: String = (0..400)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        s = s.push(Chunk::assistant_text(format!("{i} {text}")));
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
        Err(e @ PersistError::Unreachable { .. }) => {
            let text = e.to_string();
            assert!(text.contains("postgres://root@127.0.0.1:1/test"), "{text}");
            assert!(text.contains("cannot connect to 127.0.0.1:1"), "{text}");
            assert!(!text.contains("secret"), "the password leaked: {text}");
        }
        other => panic!("a refused connection must be Unreachable: {other:?}"),
    }
}

#[tokio::test]
async fn postgres_restart_mid_write_then_the_next_write_works() {
    // The private fault cluster: restarting it disturbs no other test.
    let Some(cluster) = common::fault_cluster() else {
        return;
    };
    let _turn = common::FAULT_CLUSTER.lock().await;
    let url = cluster.url.clone();
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
    tokio::task::spawn_blocking(move || cluster.restart())
        .await
        .expect("restart");
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
    assert_eq!(
        store.load(before.id()).await.expect("before").session.len(),
        1
    );
    store.close().await;
    common::Schema { url, name: schema }.drop_now().await;
}

/// `n` chunks of ~1.5 kB that share nothing (each its own text): they do not compress
/// away, and they stay below PostgreSQL's TOAST threshold, so they fill heap pages.
fn incompressible(base: &Session, n: usize) -> Session {
    let mut s = base.fork();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..n {
        let mut text = format!("{i} ");
        while text.len() < 1500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(&format!("{x:016x}"));
        }
        s = s.push(Chunk::assistant_text(text));
    }
    s
}

/// Each chunk's text, to compare a loaded session with the one saved.
fn texts(s: &Session) -> Vec<Option<String>> {
    s.chunks()
        .iter()
        .map(|c| c.text().map(str::to_owned))
        .collect()
}

/// Inserts `bytes`-sized uncompressed rows into `filler` until PostgreSQL reports the disk
/// full (SQLSTATE 53100); returns how many went in.
async fn fill(pool: &sqlx::PgPool, table: &str, bytes: usize) -> usize {
    let sql = format!("INSERT INTO {table} SELECT decode(repeat('ab', {bytes}), 'hex')");
    for n in 0..10_000 {
        match sqlx::query(&sql).execute(pool).await {
            Ok(_) => {}
            Err(e) => {
                let code = e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .map(|c| c.into_owned());
                assert_eq!(code.as_deref(), Some("53100"), "filling {table}: {e}");
                return n;
            }
        }
    }
    panic!("{table} never filled the tablespace");
}

#[tokio::test]
async fn postgres_out_of_space_is_a_typed_error_then_the_next_write_works() {
    let Some(cluster) = common::fault_cluster() else {
        return;
    };
    let _turn = common::FAULT_CLUSTER.lock().await;
    let schema = common::fresh_schema("full");
    let ts = &cluster.small_tablespace;
    // The store's tables go to the small tablespace: the driver's `options[...]` sets
    // `default_tablespace` on every connection of the store's pool.
    let url = format!("{}?options[default_tablespace]={ts}", cluster.url);
    let raw = sqlx::PgPool::connect(&cluster.url).await.expect("raw");
    // What a run that died half way left (its filler would keep the tablespace full): the
    // cluster is the fault tests' own, and only this test makes these schemas.
    let stale: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE 'rath\\_test\\_full\\_%'",
    )
    .fetch_all(&raw)
    .await
    .expect("stale schemas");
    for name in stale {
        sqlx::query(&format!("DROP SCHEMA {name} CASCADE"))
            .execute(&raw)
            .await
            .expect("drop a stale schema");
    }
    let store = PgStore::connect_in(&url, Some(&schema))
        .await
        .expect("connect");
    let placed: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT tablename::TEXT, tablespace::TEXT FROM pg_tables WHERE schemaname = $1",
    )
    .bind(&schema)
    .fetch_all(&raw)
    .await
    .expect("pg_tables");
    assert!(placed.len() >= 3, "{placed:?}");
    assert!(
        placed
            .iter()
            .all(|(_, t)| t.as_deref() == Some(ts.as_str())),
        "{placed:?}"
    );

    let before = Session::user_with("before", Stamper::counter()).push(Chunk::assistant_text("ok"));
    store.save(&before).await.expect("save before");
    // Fill the tablespace: megabyte rows, then 8 kB rows into what is left.
    let filler = format!("{schema}.filler");
    sqlx::query(&format!("CREATE TABLE {filler} (b BYTEA) TABLESPACE {ts}"))
        .execute(&raw)
        .await
        .expect("filler");
    sqlx::query(&format!(
        "ALTER TABLE {filler} ALTER COLUMN b SET STORAGE EXTERNAL"
    ))
    .execute(&raw)
    .await
    .expect("no compression");
    let big_rows = fill(&raw, &filler, 1 << 20).await;
    let small_rows = fill(&raw, &filler, 8 << 10).await;
    assert!(big_rows > 5, "the tablespace took only {big_rows} MB");

    // A session of ~3 MB does not fit: a typed error naming the store, nothing visible.
    let big = incompressible(&before, 2000);
    let name = store.name();
    match store.save(&big).await {
        Err(e @ PersistError::Backend { .. }) => {
            assert_eq!(e.store(), Some(name.as_str()));
            let text = e.to_string();
            assert!(
                text.contains(&schema) && text.contains("No space left"),
                "{text}"
            );
            let code = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<sqlx::Error>())
                .and_then(|s| s.as_database_error())
                .and_then(|d| d.code())
                .map(|c| c.into_owned());
            assert_eq!(code.as_deref(), Some("53100"), "{text}");
        }
        other => panic!("a full tablespace must fail the save: {other:?}"),
    }
    assert!(matches!(
        store.load(big.id()).await,
        Err(PersistError::NotFound { .. })
    ));
    assert_eq!(store.stored_len(big.id()).await.expect("stored_len"), None);
    assert_eq!(store.list().await.expect("list").len(), 1);
    assert_eq!(
        texts(&store.load(before.id()).await.expect("before").session),
        texts(&before)
    );
    let stored: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(sum(n), 0)::BIGINT FROM {schema}.rath_segments"
    ))
    .fetch_one(&raw)
    .await
    .expect("segments");
    assert_eq!(stored, 2, "the failed save left chunks behind");

    // Space returns; the same store, in the same process, writes again.
    sqlx::query(&format!("DROP TABLE {filler}"))
        .execute(&raw)
        .await
        .expect("drop the filler");
    store
        .save(&big)
        .await
        .expect("the next write after space returns");
    assert_eq!(
        texts(&store.load(big.id()).await.expect("big").session),
        texts(&big)
    );
    eprintln!(
        "out of space on {name}: filled with {big_rows} x 1 MB + {small_rows} x 8 kB rows, \
         a {}-chunk save refused, then stored once the filler was dropped",
        big.len()
    );
    raw.close().await;
    store.close().await;
    common::Schema {
        url: cluster.url.clone(),
        name: schema,
    }
    .drop_now()
    .await;
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
