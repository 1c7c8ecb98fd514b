//! Thread ids are per tenant (issue 47, item 12): tenant B creating a thread with tenant A's
//! id gets a thread of its own, so the answer tells B nothing of A's and B cannot squat
//! A's ids; a server database of schema 2 keeps its threads and their runs when it moves to
//! schema 3.

mod common;

use common::{Harness, config};
use reqwest::Method as M;
use serde_json::{Value, json};
use sqlx::Row;

async fn call(h: &Harness, method: M, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = h
        .http
        .request(method, format!("{}{path}", h.base))
        .header("x-api-key", key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_id_another_tenant_holds_is_a_thread_of_ones_own() {
    let h = Harness::sqlite(config()).await;
    let (a, b) = (h.a.clone(), h.b.clone());
    let create = |owner: &str| json!({"thread_id": "t-shared", "metadata": {"owner": owner}});
    let (s, _) = call(&h, M::POST, "/threads", &a, Some(create("a"))).await;
    assert_eq!(s, 200);
    // B asks for the same id: a new thread of B's, not a 409 saying A has one.
    let (s, tb) = call(&h, M::POST, "/threads", &b, Some(create("b"))).await;
    assert_eq!(s, 200, "{tb}");
    assert_eq!(tb["metadata"]["owner"], "b");
    // A run on B's thread leaves A's thread as it was.
    let (s, _) = call(
        &h,
        M::POST,
        "/threads/t-shared/runs/wait",
        &b,
        Some(json!({"assistant_id": "echo", "input": {"messages": ["hi"]}})),
    )
    .await;
    assert_eq!(s, 200);
    let (_, ta) = call(&h, M::GET, "/threads/t-shared", &a, None).await;
    assert_eq!(ta["metadata"]["owner"], "a", "{ta}");
    assert_eq!(ta["values"], Value::Null, "A's thread has no run: {ta}");
    let (_, tb) = call(&h, M::GET, "/threads/t-shared", &b, None).await;
    assert_eq!(tb["metadata"]["owner"], "b");
    assert_eq!(
        tb["values"]["messages"].as_array().unwrap().len(),
        2,
        "{tb}"
    );
    let (_, runs_a) = call(&h, M::GET, "/threads/t-shared/runs", &a, None).await;
    assert_eq!(runs_a.as_array().unwrap().len(), 0, "{runs_a}");
    // Its own id again is still a 409 for each tenant (unless do_nothing).
    for key in [&a, &b] {
        let (s, _) = call(&h, M::POST, "/threads", key, Some(create("again"))).await;
        assert_eq!(s, 409);
    }
    h.stop().await;
}

#[tokio::test]
async fn a_schema_two_database_keeps_its_threads_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}?mode=rwc", dir.path().join("runs.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE sv_schema (version BIGINT PRIMARY KEY, what TEXT NOT NULL, applied_ms BIGINT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    for (version, what, stmts) in rath_server::MIGRATIONS.iter().filter(|m| m.0 <= 2) {
        for stmt in *stmts {
            sqlx::query(stmt).execute(&pool).await.unwrap();
        }
        sqlx::query("INSERT INTO sv_schema VALUES ($1, $2, 0)")
            .bind(version)
            .bind(what)
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::query("INSERT INTO sv_threads VALUES ('t-1', 'acme', '{\"k\":1}', 5, 6)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO sv_thread_runs VALUES ('run_1', 't-1', 1, 'asst', '{}', '{}', 7), \
         ('run_2', 't-1', 2, 'asst', '{}', '{}', 8)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let db =
        rath_server::ServerDb::connect(&format!("sqlite:{}", dir.path().join("runs.db").display()))
            .await
            .unwrap();
    drop(db);
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let version: i64 = sqlx::query("SELECT MAX(version) AS v FROM sv_schema")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get("v");
    assert_eq!(version, rath_server::SCHEMA_VERSION);
    let t =
        sqlx::query("SELECT tenant, thread_id, metadata, created_ms, updated_ms FROM sv_threads")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(
        (
            t[0].get::<String, _>("tenant"),
            t[0].get::<String, _>("thread_id"),
            t[0].get::<String, _>("metadata"),
            t[0].get::<i64, _>("created_ms"),
            t[0].get::<i64, _>("updated_ms"),
        ),
        ("acme".into(), "t-1".into(), "{\"k\":1}".into(), 5, 6)
    );
    let runs =
        sqlx::query("SELECT run_id, tenant, thread_id, seq FROM sv_thread_runs ORDER BY seq")
            .fetch_all(&pool)
            .await
            .unwrap();
    let got: Vec<(String, String, String, i64)> = runs
        .iter()
        .map(|r| {
            (
                r.get("run_id"),
                r.get("tenant"),
                r.get("thread_id"),
                r.get("seq"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("run_1".into(), "acme".into(), "t-1".into(), 1),
            ("run_2".into(), "acme".into(), "t-1".into(), 2)
        ]
    );
    // Another tenant may now have a `t-1` of its own.
    sqlx::query("INSERT INTO sv_threads VALUES ('other', 't-1', '{}', 9, 9)")
        .execute(&pool)
        .await
        .unwrap();
}

/// A server's caches are its own (issue 49, item 6): a database made again at the same URL
/// does not inherit what a server of the same process remembered about the old one (a key
/// it checked, a run it saw owned), and a second server in the process remembers nothing of
/// the first's.
#[tokio::test]
async fn servers_in_one_process_share_no_cached_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let url = format!("sqlite:{}", path.display());
    let first = rath_server::ServerDb::connect(&url).await.unwrap();
    let key = first.create_key("acme", false, "ci").await.unwrap();
    let who = first.authenticate(&key.secret).await.unwrap();
    assert_eq!(who.map(|p| p.tenant), Some("acme".to_owned()));
    first.own_run("acme", "run_1").await.unwrap();
    assert!(first.owns_run("acme", "run_1").await.unwrap());
    drop(first);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }

    let second = rath_server::ServerDb::connect(&url).await.unwrap();
    assert!(
        second.authenticate(&key.secret).await.unwrap().is_none(),
        "a key of a database that is gone still opens the new one"
    );
    assert!(
        !second.owns_run("acme", "run_1").await.unwrap(),
        "a run of a database that is gone is still owned"
    );
}
