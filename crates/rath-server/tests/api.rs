//! The native API over plain HTTP against a real server on 127.0.0.1:0, on SQLite and on
//! PostgreSQL: operations and bad input, keys and limits, sessions, runs with SSE, and two
//! tenants that never see each other.

mod common;

use std::time::Duration;

use common::{Harness, config, kind};
use rath_server::{RateLimit, ServerConfig};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

// ------------------------------------------------------------------ operations, bad input

async fn operations_and_bad_input(h: &Harness) {
    let (s, v) = h.call(Method::GET, "/health/live", None, None).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (s, v) = h.call(Method::GET, "/health/ready", None, None).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("ok")),
        "{v}"
    );

    let (s, doc) = h.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/sessions",
        "/v1/sessions/{id}/merge",
        "/v1/runs/{id}/events",
        "/v1/runs/{id}/interrupts/{call_id}",
        "/v1/keys/{id}",
        "/metrics",
    ] {
        assert!(doc["paths"].get(path).is_some(), "openapi lacks {path}");
    }
    assert!(doc["components"]["schemas"].get("SessionDetail").is_some());

    // Routes and methods that do not exist: JSON errors.
    let (s, v) = h.get("/v1/nothing", &h.a).await;
    assert_eq!((s, kind(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, v) = h.call(Method::PUT, "/v1/sessions", Some(&h.a), None).await;
    assert_eq!(
        (s, kind(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );

    // No key, a wrong key.
    let (s, v) = h.call(Method::GET, "/v1/sessions", None, None).await;
    assert_eq!((s, kind(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    let (s, _) = h.get("/v1/sessions", "rath_not_a_key").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Malformed JSON, wrong types, unknown fields, oversized bodies.
    let raw = |body: &'static str| {
        h.http
            .post(format!("{}/v1/sessions", h.base))
            .bearer_auth(&h.a)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = raw("{\"input\": ").await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().await.unwrap();
    assert_eq!(kind(&v), "bad_request");
    let r = raw("{\"input\": 7}").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = raw("{\"input\": \"x\", \"extra\": 1}").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let big = "x".repeat(100 * 1024);
    let (s, v) = h.post("/v1/sessions", &h.a, json!({"input": big})).await;
    assert_eq!(
        (s, kind(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let r = h
        .http
        .post(format!("{}/v1/sessions", h.base))
        .bearer_auth(&h.a)
        .body("{\"input\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // Bad cursors, limits, filters, formats, workflows, ids.
    for path in [
        "/v1/sessions?cursor=zz",
        "/v1/sessions?cursor=00ff",
        "/v1/sessions?limit=0",
        "/v1/sessions?limit=-3",
        "/v1/sessions?nonsense=1",
        "/v1/runs?status=sleeping",
        "/v1/runs?cursor=abc",
    ] {
        let (s, v) = h.get(path, &h.a).await;
        assert_eq!(
            (s, kind(&v)),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{path}: {v}"
        );
    }
    let (s, _) = h
        .post("/v1/runs", &h.a, json!({"workflow": "nope", "input": "x"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = h.post("/v1/runs", &h.a, json!({"workflow": "echo"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = h
        .post(
            "/v1/runs",
            &h.a,
            json!({"workflow": "echo", "input": "x", "max_attempts": 0}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    for path in [
        "/v1/sessions/nope",
        "/v1/sessions/nope/chunks",
        "/v1/sessions/nope/lineage",
        "/v1/sessions/nope/export",
        "/v1/runs/nope",
        "/v1/runs/nope/interrupts",
        "/v1/runs/nope/events",
    ] {
        let (s, v) = h.get(path, &h.a).await;
        assert_eq!(
            (s, kind(&v)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }

    // The metrics saw all of that, by route template, never by id.
    let (s, text) = h.text("/metrics", &h.a).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        text.contains(
            "rath_http_requests_total{method=\"GET\",route=\"/v1/sessions/{id}\",status=\"404\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains(
        "rath_http_request_duration_seconds_bucket{route=\"/health/live\",le=\"+Inf\"} 1"
    ));
    assert!(text.contains("rath_queue_depth 0"));
    assert!(text.contains("rath_runs{status=\"succeeded\"} 0"));
    assert!(!text.contains("nope"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_and_bad_input_sqlite() {
    let h = Harness::sqlite(config()).await;
    operations_and_bad_input(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_and_bad_input_postgres() {
    let Some(h) = Harness::postgres("ops", config()).await else {
        return;
    };
    operations_and_bad_input(&h).await;
    h.stop().await;
}

// ------------------------------------------------------------------------ keys and limits

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_minted_listed_revoked_by_admins_and_never_shown_again() {
    let h = Harness::sqlite(config()).await;
    // A tenant key cannot mint or list keys.
    let (s, v) = h.post("/v1/keys", &h.a, json!({"tenant": "a"})).await;
    assert_eq!((s, kind(&v)), (StatusCode::FORBIDDEN, "forbidden"));
    let (s, _) = h.get("/v1/keys", &h.a).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // The admin mints one; its secret works at once.
    let (s, minted) = h
        .post("/v1/keys", &h.admin, json!({"tenant": "c", "label": "ci"}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let secret = minted["secret"].as_str().unwrap().to_owned();
    let id = minted["id"].as_str().unwrap().to_owned();
    let (s, page) = h.get("/v1/sessions", &secret).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(page["sessions"], json!([]));
    // Listing shows no secret and no hash of any key.
    let (s, list) = h.get("/v1/keys", &h.admin).await;
    assert_eq!(s, StatusCode::OK);
    let text = list.to_string();
    assert_eq!(list.as_array().unwrap().len(), 4);
    for k in [&secret, &h.admin, &h.a, &h.b] {
        assert!(!text.contains(k.as_str()));
        assert!(!text.contains(&rath_server::key_hash(k)));
    }
    // The stored rows hold the hash, never the secret.
    let pool = sqlx::SqlitePool::connect(&h.stores.runs).await.unwrap();
    let rows: Vec<(String, String, String)> = sqlx::query_as("SELECT id, hash, label FROM sv_keys")
        .fetch_all(&pool)
        .await
        .unwrap();
    let dump = format!("{rows:?}");
    assert!(!dump.contains(&secret) && dump.contains(&rath_server::key_hash(&secret)));
    // Revoked: 401 from the next request on; revoking an unknown key is 404.
    let r = h
        .http
        .delete(format!("{}/v1/keys/{id}", h.base))
        .bearer_auth(&h.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let (s, _) = h.get("/v1/sessions", &secret).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let r = h
        .http
        .delete(format!("{}/v1/keys/key_nope", h.base))
        .bearer_auth(&h.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let (s, _) = h.post("/v1/keys", &h.admin, json!({"tenant": ""})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_has_its_own_rate_limit_and_cors_is_off_unless_configured() {
    let cfg = ServerConfig {
        rate_limit: Some(RateLimit {
            per_second: 0.5,
            burst: 3.0,
        }),
        ..config()
    };
    let h = Harness::sqlite(cfg).await;
    for _ in 0..3 {
        assert_eq!(h.get("/v1/sessions", &h.a).await.0, StatusCode::OK);
    }
    let r = h
        .http
        .get(format!("{}/v1/sessions", h.base))
        .bearer_auth(&h.a)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "2");
    // Tenant b's key is not limited by a's requests.
    assert_eq!(h.get("/v1/sessions", &h.b).await.0, StatusCode::OK);
    // No CORS headers by default, even for a request with an Origin.
    let r = h
        .http
        .get(format!("{}/health/live", h.base))
        .header("origin", "https://ui.example")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    h.stop().await;

    let cfg = ServerConfig {
        cors_origins: vec!["https://ui.example".into()],
        ..config()
    };
    let h = Harness::sqlite(cfg).await;
    let r = h
        .http
        .get(format!("{}/health/live", h.base))
        .header("origin", "https://ui.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://ui.example"
    );
    let r = h
        .http
        .get(format!("{}/health/live", h.base))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    h.stop().await;
}

// ------------------------------------------------------------------------------- sessions

async fn sessions_api(h: &Harness) {
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        let (s, v) = h.post("/v1/sessions", &h.a, json!({"input": text})).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        assert_eq!(
            v["chunks"]["chunks"][0]["chunk"]["payload"]["content"],
            text
        );
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    // Paging with an opaque cursor: 2, then 1, then no cursor.
    let (_, p1) = h.get("/v1/sessions?limit=2", &h.a).await;
    assert_eq!(p1["sessions"].as_array().unwrap().len(), 2);
    let cursor = p1["next_cursor"].as_str().unwrap();
    let (_, p2) = h
        .get(&format!("/v1/sessions?limit=2&cursor={cursor}"), &h.a)
        .await;
    assert_eq!(p2["sessions"].as_array().unwrap().len(), 1);
    assert!(p2["next_cursor"].is_null());
    let listed: Vec<&str> = p1["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .chain(p2["sessions"].as_array().unwrap())
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ids.iter().map(String::as_str).collect::<Vec<_>>());

    // Fork and detach.
    let root = &ids[0];
    let (s, fork) = h
        .post(&format!("/v1/sessions/{root}/fork"), &h.a, json!({}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let fork_id = fork["id"].as_str().unwrap().to_owned();
    assert_eq!(fork["lineage"]["parent_session_ids"], json!([root]));
    assert_eq!(fork["lineage"]["lineage_kind"], "op_fork");
    let (s, det) = h
        .post(&format!("/v1/sessions/{root}/detach"), &h.a, json!({}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(det["lineage"]["parent_session_ids"], json!([]));
    assert_eq!(det["chunks_total"], 1);
    // Filters: only the fork is a child of the root and of kind op_fork.
    let (_, kids) = h.get(&format!("/v1/sessions?parent={root}"), &h.a).await;
    assert_eq!(kids["sessions"][0]["id"], fork_id.as_str());
    assert_eq!(kids["sessions"].as_array().unwrap().len(), 1);
    let (_, forks) = h.get("/v1/sessions?kind=op_fork", &h.a).await;
    assert_eq!(forks["sessions"].as_array().unwrap().len(), 1);

    // Merge: the root with its fork (both unplaced) merges; the result has 2 chunks.
    let (s, merged) = h
        .post(
            &format!("/v1/sessions/{root}/merge"),
            &h.a,
            json!({"other": fork_id}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{merged}");
    assert_eq!(merged["chunks_total"], 2);
    assert_eq!(merged["lineage"]["lineage_kind"], "op_merge");
    // Sessions on different backends: the strict rule refuses, 409 with its reason, and
    // nothing is stored.
    let (_, local) = h
        .post(
            "/v1/sessions",
            &h.a,
            json!({"input": "l", "backend": "local"}),
        )
        .await;
    let (_, iso) = h
        .post(
            "/v1/sessions",
            &h.a,
            json!({"input": "i", "backend": "isolated"}),
        )
        .await;
    let before = h.get("/v1/sessions?limit=500", &h.a).await.1["sessions"]
        .as_array()
        .unwrap()
        .len();
    let (s, v) = h
        .post(
            &format!("/v1/sessions/{}/merge", local["id"].as_str().unwrap()),
            &h.a,
            json!({"other": iso["id"]}),
        )
        .await;
    assert_eq!((s, kind(&v)), (StatusCode::CONFLICT, "conflict"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("merge refused"),
        "{v}"
    );
    let after = h.get("/v1/sessions?limit=500", &h.a).await.1["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);
    let (s, _) = h
        .post(
            &format!("/v1/sessions/{root}/merge"),
            &h.a,
            json!({"other": root, "strategy": "zip"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // Chunks paged.
    let mid = merged["id"].as_str().unwrap();
    let (_, c1) = h
        .get(&format!("/v1/sessions/{mid}/chunks?limit=1"), &h.a)
        .await;
    assert_eq!(c1["chunks"][0]["index"], 0);
    let cur = c1["next_cursor"].as_str().unwrap();
    let (_, c2) = h
        .get(
            &format!("/v1/sessions/{mid}/chunks?limit=1&cursor={cur}"),
            &h.a,
        )
        .await;
    assert_eq!(c2["chunks"][0]["index"], 1);
    assert!(c2["next_cursor"].is_null());
    let (s, _) = h
        .get(&format!("/v1/sessions/{mid}/chunks?cursor={cursor}"), &h.a)
        .await;
    assert_eq!(
        s,
        StatusCode::BAD_REQUEST,
        "a sessions cursor is not a chunks cursor"
    );

    // Lineage of the tree: root, fork, merge (the detached copy and the others are not in it).
    let (s, jsonl) = h
        .text(&format!("/v1/sessions/{fork_id}/lineage"), &h.a)
        .await;
    assert_eq!(s, StatusCode::OK);
    let rows: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tree: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(tree, vec![root.as_str(), fork_id.as_str(), mid]);
    let (_, dot) = h
        .text(&format!("/v1/sessions/{root}/lineage?format=dot"), &h.a)
        .await;
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains(&fork_id) && !dot.contains(&ids[1]));
    let (_, mermaid) = h
        .text(&format!("/v1/sessions/{root}/lineage?format=mermaid"), &h.a)
        .await;
    assert!(mermaid.starts_with("flowchart"), "{mermaid}");
    assert_eq!(mermaid.matches("<br/>Session.").count(), 3, "{mermaid}");
    assert!(
        mermaid.contains("s0 --> s1") && mermaid.contains("s1 --> s2"),
        "{mermaid}"
    );
    let (s, _) = h
        .get(&format!("/v1/sessions/{root}/lineage?format=svg"), &h.a)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // Export: a Python OpenRath JSONL session file that the loader reads back.
    let (s, file) = h.text(&format!("/v1/sessions/{mid}/export"), &h.a).await;
    assert_eq!(s, StatusCode::OK);
    let loaded = rath_persist::load_bytes("export.jsonl".as_ref(), file.as_bytes()).unwrap();
    assert_eq!(loaded.session.id().as_str(), mid);
    assert_eq!(loaded.session.len(), 2);
    assert!(file.starts_with("{\"record_type\": \"header\""), "{file}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_api_sqlite() {
    let h = Harness::sqlite(config()).await;
    sessions_api(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_api_postgres() {
    let Some(h) = Harness::postgres("sessions", config()).await else {
        return;
    };
    sessions_api(&h).await;
    h.stop().await;
}

// ----------------------------------------------------------------------------------- runs

async fn runs_api(h: &Harness) {
    // A run of `echo`: created queued, waited for, its output the tenant's.
    let (s, run) = h
        .post(
            "/v1/runs",
            &h.a,
            json!({"workflow": "echo", "input": "hi", "tags": ["t1"]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    // Submitted queued; an embedded worker may have claimed it already.
    let st = run["status"].as_str().unwrap();
    assert!(["queued", "running", "succeeded"].contains(&st), "{run}");
    assert_eq!(run["tags"], json!(["t1"]));
    let id = run["id"].as_str().unwrap().to_owned();
    let (s, done) = h
        .post(
            &format!("/v1/runs/{id}/wait?timeout_ms=15000"),
            &h.a,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(done["run"]["status"], "succeeded", "{done}");
    assert_eq!(done["output_text"], "hello");
    let out = done["run"]["output_session"].as_str().unwrap();
    let (s, sess) = h.get(&format!("/v1/sessions/{out}"), &h.a).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "the run's output is the tenant's session"
    );
    assert!(sess["chunks_total"].as_u64().unwrap() >= 2);
    let (_, got) = h.get(&format!("/v1/runs/{id}"), &h.a).await;
    assert_eq!(got["status"], "succeeded");

    // Its events: the whole stream, then resumed after the second event: the rest, once.
    let all = h.events(&id, &h.a, None).await;
    let seqs: Vec<i64> = all.iter().map(|e| e.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "{all:?}");
    assert!(seqs.len() >= 3);
    assert_eq!(all[0].1, "status");
    assert_eq!(all[0].2["detail"]["status"], "queued");
    assert_eq!(
        all.last().unwrap().2["detail"]["status"],
        "succeeded",
        "{all:?}"
    );
    let rest = h.events(&id, &h.a, Some(2)).await;
    assert_eq!(rest, all[2..].to_vec());
    let (s, _) = h
        .http
        .get(format!("{}/v1/runs/{id}/events", h.base))
        .bearer_auth(&h.a)
        .header("Last-Event-ID", "soon")
        .send()
        .await
        .map(|r| (r.status(), ()))
        .unwrap();
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // A gated run waits on its call; the decision resumes it; a second decision is a 409.
    let (_, g) = h
        .post(
            "/v1/runs",
            &h.a,
            json!({"workflow": "gated", "input": "go"}),
        )
        .await;
    let gid = g["id"].as_str().unwrap().to_owned();
    let (_, w) = h
        .post(&format!("/v1/runs/{gid}/wait"), &h.a, json!({}))
        .await;
    assert_eq!(w["run"]["status"], "waiting", "{w}");
    let (_, pending) = h.get(&format!("/v1/runs/{gid}/interrupts"), &h.a).await;
    assert_eq!(pending[0]["tool"], "record", "{pending}");
    let call = pending[0]["call_id"].as_str().unwrap().to_owned();
    let (s, v) = h
        .post(
            &format!("/v1/runs/{gid}/interrupts/nope"),
            &h.a,
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((s, kind(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, _) = h
        .post(
            &format!("/v1/runs/{gid}/interrupts/{call}"),
            &h.a,
            json!({"decision": "maybe"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, v) = h
        .post(
            &format!("/v1/runs/{gid}/interrupts/{call}"),
            &h.a,
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = h
        .post(
            &format!("/v1/runs/{gid}/interrupts/{call}"),
            &h.a,
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((s, kind(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    let (_, w) = h
        .post(&format!("/v1/runs/{gid}/wait"), &h.a, json!({}))
        .await;
    assert_eq!(w["run"]["status"], "succeeded", "{w}");
    assert_eq!(w["output_text"], "done");

    // A waiting run cancelled; a second cancel is a 409.
    let (_, c) = h
        .post(
            "/v1/runs",
            &h.a,
            json!({"workflow": "gated", "input": "stop"}),
        )
        .await;
    let cid = c["id"].as_str().unwrap().to_owned();
    h.post(&format!("/v1/runs/{cid}/wait"), &h.a, json!({}))
        .await;
    let (s, v) = h
        .post(&format!("/v1/runs/{cid}/cancel"), &h.a, json!({}))
        .await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{v}"
    );
    let (s, _) = h
        .post(&format!("/v1/runs/{cid}/cancel"), &h.a, json!({}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);

    // Listing and paging of runs; runs by status in the metrics.
    let (_, p) = h.get("/v1/runs?limit=2", &h.a).await;
    assert_eq!(p["runs"][0]["id"], id.as_str());
    let cur = p["next_cursor"].as_str().unwrap();
    let (_, p2) = h.get(&format!("/v1/runs?limit=2&cursor={cur}"), &h.a).await;
    assert_eq!(p2["runs"][0]["id"], cid.as_str());
    let (_, cancelled) = h.get("/v1/runs?status=cancelled", &h.a).await;
    assert_eq!(cancelled["runs"].as_array().unwrap().len(), 1);
    let (_, text) = h.text("/metrics", &h.a).await;
    assert!(text.contains("rath_runs{status=\"succeeded\"} 2"), "{text}");
    assert!(text.contains("rath_runs{status=\"cancelled\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_api_sqlite() {
    let h = Harness::sqlite(config()).await;
    runs_api(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_api_postgres() {
    let Some(h) = Harness::postgres("runs", config()).await else {
        return;
    };
    runs_api(&h).await;
    h.stop().await;
}

/// A run watched on its own events endpoint while it runs: besides its stored events
/// (with ids), the reply text as the model streams it (`token`) and the agent's step
/// (`agent`), which carry no id (not stored: a client resuming with `Last-Event-ID` gets the
/// stored events it missed). The run is `gated`, watched while it waits for its approval
/// (a run's model calls are streamed once someone watches; one that started before is not),
/// then approved: its last reply, `done`, comes as tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_run_streams_its_reply_text_and_steps_on_its_events() {
    let h = Harness::sqlite(config()).await;
    let (_, run) = h
        .post(
            "/v1/runs",
            &h.a,
            json!({"workflow": "gated", "input": "note it"}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let (_, w) = h
        .post(&format!("/v1/runs/{id}/wait"), &h.a, json!({}))
        .await;
    assert_eq!(w["run"]["status"], "waiting", "{w}");
    let resp = h
        .http
        .get(format!("{}/v1/runs/{id}/events", h.base))
        .bearer_auth(&h.a)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(30), resp.text())
            .await
            .expect("the stream ends with the run")
            .unwrap()
    });
    // Approved (the run records twice) until it finishes; the stream is open throughout.
    let start = std::time::Instant::now();
    loop {
        let (_, r) = h.get(&format!("/v1/runs/{id}"), &h.a).await;
        if r["status"] == "succeeded" {
            break;
        }
        // A guard against a hang, not a measurement.
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never finished: {r}"
        );
        let (_, pending) = h.get(&format!("/v1/runs/{id}/interrupts"), &h.a).await;
        if let Some(call) = pending[0]["call_id"].as_str() {
            h.post(
                &format!("/v1/runs/{id}/interrupts/{call}"),
                &h.a,
                json!({"decision": "approve"}),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = body.await.unwrap();
    let mut live = Vec::new();
    for block in body.split("\n\n") {
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        if let (None, Some(event), Some(data)) = (field("id:"), field("event:"), field("data:")) {
            live.push((event, serde_json::from_str::<Value>(&data).unwrap()));
        }
    }
    let tokens: Vec<&Value> = live
        .iter()
        .filter(|e| e.0 == "token")
        .map(|e| &e.1)
        .collect();
    let last = tokens.last().unwrap_or_else(|| panic!("no token: {body}"));
    assert_eq!(last["run"], id.as_str());
    assert_eq!(last["agent"], "writer");
    assert_eq!(last["text"], "done", "{body}");
    let steps: Vec<&Value> = live
        .iter()
        .filter(|e| e.0 == "agent")
        .map(|e| &e.1)
        .collect();
    assert_eq!(steps.last().unwrap()["agent"], "writer", "{body}");
    let stored = common::parse_sse(&body);
    assert_eq!(
        stored.last().unwrap().2["detail"]["status"],
        "succeeded",
        "{body}"
    );
    h.stop().await;
}

/// A server restart during a run: a client follows the events of a run in flight on the
/// first server's worker and its connection drops when that server shuts down (the run is
/// handed back to the queue); the second server's worker finishes the run, and the client
/// that reconnects there with its last event id sees every remaining event exactly once.
async fn a_restart_during_a_run(stores: common::Stores) {
    let cfg = ServerConfig {
        grace: Duration::from_millis(100),
        ..config()
    };
    let first = Harness::start(stores, cfg, None).await;
    let (_, run) = first
        .post(
            "/v1/runs",
            &first.a,
            json!({"workflow": "slow", "input": "hm"}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let resp = first
        .http
        .get(format!("{}/v1/runs/{id}/events", first.base))
        .bearer_auth(&first.a)
        .send()
        .await
        .unwrap();
    let mut stream = resp.bytes_stream();
    let mut seen = String::new();
    // Read until the run is claimed: it is in flight on the first server's worker.
    while !common::parse_sse(&seen).iter().any(|e| e.1 == "claimed") {
        use futures::StreamExt as _;
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("events arrive")
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let firsts = common::parse_sse(&seen);
    let last = firsts.last().unwrap().0;
    let (keys, stores) = first.stop().await;
    // The shutdown ended the stream; whatever else was sent before it closed is dropped
    // with the connection, as a client whose connection breaks would lose it.
    drop(stream);

    let second = Harness::start(stores, config(), Some(keys)).await;
    let rest = second.events(&id, &second.a, Some(last)).await;
    let seqs: Vec<i64> = rest.iter().map(|e| e.0).collect();
    assert_eq!(
        seqs,
        (last + 1..last + 1 + seqs.len() as i64).collect::<Vec<_>>(),
        "every later event once, in order: {firsts:?} then {rest:?}"
    );
    let statuses: Vec<&str> = rest
        .iter()
        .filter(|e| e.1 == "status")
        .filter_map(|e| e.2["detail"]["status"].as_str())
        .collect();
    assert_eq!(statuses.first(), Some(&"queued"), "handed back: {rest:?}");
    assert_eq!(statuses.last(), Some(&"succeeded"), "{rest:?}");
    assert!(
        rest.iter().any(|e| e.1 == "claimed"),
        "claimed again on the second server: {rest:?}"
    );
    let (_, done) = second.get(&format!("/v1/runs/{id}"), &second.a).await;
    assert_eq!(
        (done["status"].as_str(), done["attempts"].as_i64()),
        (Some("succeeded"), Some(2))
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_run_sqlite() {
    a_restart_during_a_run(common::Stores::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_run_postgres() {
    let Some(stores) = common::Stores::postgres("restart").await else {
        return;
    };
    a_restart_during_a_run(stores).await;
}

/// A graceful shutdown while a run is in flight on an embedded worker: the server stops
/// within the grace period and the run is handed back (`queued`); the next server's worker
/// finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_hands_an_in_flight_run_back_to_the_queue() {
    let cfg = ServerConfig {
        grace: Duration::from_millis(100),
        ..config()
    };
    let first = Harness::sqlite(cfg).await;
    let (_, run) = first
        .post(
            "/v1/runs",
            &first.a,
            json!({"workflow": "slow", "input": "hm"}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let start = std::time::Instant::now();
    loop {
        let (_, r) = first.get(&format!("/v1/runs/{id}"), &first.a).await;
        if r["status"] == "running" {
            break;
        }
        // A guard against a hang, not a measurement.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never claimed: {r}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let runtime = first.server.runtime().clone();
    // A shutdown that waited for the run would find it succeeded, not handed back queued.
    let (keys, stores) = first.stop().await;
    let handed = runtime
        .runs()
        .get(&rath_runtime::RunId(id.clone()))
        .await
        .unwrap();
    assert_eq!(handed.status, rath_runtime::RunStatus::Queued, "{handed:?}");

    let second = Harness::start(stores, config(), Some(keys)).await;
    let (_, done) = second
        .post(&format!("/v1/runs/{id}/wait"), &second.a, json!({}))
        .await;
    assert_eq!(done["run"]["status"], "succeeded", "{done}");
    assert_eq!(done["output_text"], "slow done");
    assert_eq!(done["run"]["attempts"], 2);
    second.stop().await;
}

// -------------------------------------------------------------------------------- tenants

async fn tenants_are_isolated(h: &Harness) {
    // Tenant a: a session, its fork, a run waiting on a call, a finished run.
    let (_, s) = h
        .post("/v1/sessions", &h.a, json!({"input": "a's secret plan"}))
        .await;
    let sid = s["id"].as_str().unwrap().to_owned();
    let (_, f) = h
        .post(&format!("/v1/sessions/{sid}/fork"), &h.a, json!({}))
        .await;
    let fid = f["id"].as_str().unwrap().to_owned();
    let (_, g) = h
        .post(
            "/v1/runs",
            &h.a,
            json!({"workflow": "gated", "session_id": sid}),
        )
        .await;
    let gid = g["id"].as_str().unwrap().to_owned();
    let (_, w) = h
        .post(&format!("/v1/runs/{gid}/wait"), &h.a, json!({}))
        .await;
    assert_eq!(w["run"]["status"], "waiting");
    let out = w["run"]["output_session"].as_str().unwrap().to_owned();
    let (_, pending) = h.get(&format!("/v1/runs/{gid}/interrupts"), &h.a).await;
    let call = pending[0]["call_id"].as_str().unwrap().to_owned();
    // Tenant b's own session, to merge with.
    let (_, mine) = h.post("/v1/sessions", &h.b, json!({"input": "b"})).await;
    let mine = mine["id"].as_str().unwrap().to_owned();

    // Every endpoint answers b with 404 for a's ids, the same answer as an unknown id.
    for id in [&sid, &fid, &out] {
        for (method, path, body) in [
            (Method::GET, format!("/v1/sessions/{id}"), None),
            (Method::GET, format!("/v1/sessions/{id}/chunks"), None),
            (Method::GET, format!("/v1/sessions/{id}/lineage"), None),
            (
                Method::GET,
                format!("/v1/sessions/{id}/lineage?format=dot"),
                None,
            ),
            (Method::GET, format!("/v1/sessions/{id}/export"), None),
            (
                Method::POST,
                format!("/v1/sessions/{id}/fork"),
                Some(json!({})),
            ),
            (
                Method::POST,
                format!("/v1/sessions/{id}/detach"),
                Some(json!({})),
            ),
            (
                Method::POST,
                format!("/v1/sessions/{id}/merge"),
                Some(json!({"other": mine})),
            ),
            (
                Method::POST,
                format!("/v1/sessions/{mine}/merge"),
                Some(json!({"other": id})),
            ),
            (
                Method::POST,
                "/v1/runs".to_owned(),
                Some(json!({"workflow": "echo", "session_id": id})),
            ),
        ] {
            let (s, v) = h
                .call(method.clone(), &path, Some(&h.b), body.clone())
                .await;
            assert_eq!(
                (s, kind(&v)),
                (StatusCode::NOT_FOUND, "not_found"),
                "{method} {path}"
            );
            let unknown = path.replace(id.as_str(), "no_such_id");
            let body = body.map(|b| {
                serde_json::from_str(&b.to_string().replace(id.as_str(), "no_such_id")).unwrap()
            });
            let (s2, v2) = h.call(method.clone(), &unknown, Some(&h.b), body).await;
            assert_eq!(s2, s, "{method} {unknown}");
            assert_eq!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .replace(id.as_str(), "no_such_id"),
                v2["error"]["message"].as_str().unwrap(),
            );
        }
    }
    for (method, path, body) in [
        (Method::GET, format!("/v1/runs/{gid}"), None),
        (
            Method::POST,
            format!("/v1/runs/{gid}/wait?timeout_ms=10"),
            Some(json!({})),
        ),
        (
            Method::POST,
            format!("/v1/runs/{gid}/cancel"),
            Some(json!({})),
        ),
        (Method::GET, format!("/v1/runs/{gid}/interrupts"), None),
        (Method::GET, format!("/v1/runs/{gid}/events"), None),
        (
            Method::POST,
            format!("/v1/runs/{gid}/interrupts/{call}"),
            Some(json!({"decision": "approve"})),
        ),
    ] {
        let (s, v) = h.call(method.clone(), &path, Some(&h.b), body).await;
        assert_eq!(
            (s, kind(&v)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {path}"
        );
    }
    // Listings leave a's out; b's lineage tree does not reach into a's.
    let (_, bs) = h.get("/v1/sessions?limit=500", &h.b).await;
    let ids: Vec<&str> = bs["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![mine.as_str()]);
    let (_, br) = h.get("/v1/runs", &h.b).await;
    assert_eq!(br["runs"], json!([]));
    let (_, lin) = h.text(&format!("/v1/sessions/{mine}/lineage"), &h.b).await;
    assert!(!lin.contains(&sid));

    // Nothing of a's changed: the run still waits on its call, the session is whole.
    let (_, still) = h.get(&format!("/v1/runs/{gid}"), &h.a).await;
    assert_eq!(still["status"], "waiting");
    let (_, s2) = h.get(&format!("/v1/sessions/{sid}"), &h.a).await;
    assert_eq!(s2["chunks_total"], 1);
    let (_, a_sessions) = h.get("/v1/sessions?limit=500", &h.a).await;
    let a_ids: Vec<&str> = a_sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    for id in [&sid, &fid, &out] {
        assert!(
            a_ids.contains(&id.as_str()),
            "{id} not listed for a: {a_ids:?}"
        );
    }
    assert!(!a_ids.contains(&mine.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_sqlite() {
    let h = Harness::sqlite(config()).await;
    tenants_are_isolated(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_postgres() {
    let Some(h) = Harness::postgres("tenants", config()).await else {
        return;
    };
    tenants_are_isolated(&h).await;
    h.stop().await;
}
