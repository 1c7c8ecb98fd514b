//! The LangGraph-compatible API against a real server on 127.0.0.1:0: driven by the
//! official Python SDK (`langgraph-sdk` 0.4.14, `RATH_LANGGRAPH_SDK_PYTHON`, installed by
//! `.ci/install.d/67-langgraph-sdk.sh`) through tests/langgraph/flow.py, and with plain HTTP
//! for the SSE framing, the headers, the 202 cancel and the error shapes, on SQLite and on
//! PostgreSQL.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Harness, config};
use rath_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn lg_config() -> ServerConfig {
    ServerConfig {
        heartbeat: Duration::from_millis(200),
        ..config()
    }
}

/// Every message id of a state's values, checking each is a non-empty string and that no
/// two are equal.
fn ids(values: &Value) -> Vec<String> {
    let msgs = values["messages"].as_array().expect("values have messages");
    let ids: Vec<String> = msgs
        .iter()
        .map(|m| {
            let id = m["id"].as_str().expect("a message id");
            assert!(!id.is_empty());
            assert!(m["type"].is_string() && m["content"].is_string(), "{m}");
            id.to_owned()
        })
        .collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate message ids in {values}");
    ids
}

fn texts(values: &Value) -> Vec<(String, String)> {
    values["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_langgraph_python_sdk_runs_the_whole_flow() {
    let Some(python) = std::env::var_os("RATH_LANGGRAPH_SDK_PYTHON") else {
        rath_testkit::skip(
            "RATH_LANGGRAPH_SDK_PYTHON is not set (see .ci/install.d/67-langgraph-sdk.sh)",
        );
        return;
    };
    let h = Harness::sqlite(lg_config()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/langgraph/flow.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .arg(&h.base)
        .env("LG_KEY_A", &h.a)
        .env("LG_KEY_B", &h.b)
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("the SDK flow ends")
        .expect("python starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "flow.py failed:\n{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("flow.py prints JSON");
    assert_eq!(v["sdk"], "0.4.14");

    // Assistants: the registered workflows, by name, with a stable UUID.
    let graphs: BTreeSet<&str> = v["assistants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["graph_id"].as_str().unwrap())
        .collect();
    assert_eq!(graphs, BTreeSet::from(["broken", "echo", "gated", "slow"]));
    for a in v["assistants"].as_array().unwrap() {
        assert_eq!(a["assistant_id"].as_str().unwrap().len(), 36, "{a}");
    }

    let t = &v["thread_created"];
    assert_eq!(t["status"], "idle");
    assert_eq!(t["values"], Value::Null);
    let tid = t["thread_id"].as_str().unwrap();

    // The stream: metadata first, then the state after the input, the reply as the model
    // streamed it (one piece: the scripted model answers in one), the agent's step as an
    // update and the state after it, in the SDK's parse. The streamed reply's whole message
    // is not sent again as a tuple (its pieces were), as LangGraph does.
    let events: Vec<&str> = v["stream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        ["metadata", "values", "messages", "updates", "values"],
        "{}",
        v["stream"]
    );
    let s = &v["stream"];
    let run1 = s[0]["data"]["run_id"].as_str().unwrap();
    assert!(run1.starts_with("run_"));
    assert_eq!(texts(&s[1]["data"]), pairs(&[("human", "hi")]));
    assert_eq!(s[2]["data"][0]["type"], "AIMessageChunk");
    assert_eq!(s[2]["data"][0]["content"], "hello");
    assert_eq!(s[2]["data"][0]["id"], format!("run--{run1}-0"));
    assert_eq!(s[2]["data"][1]["run_id"], run1);
    assert_eq!(s[2]["data"][1]["thread_id"], tid);
    assert_eq!(s[2]["data"][1]["langgraph_node"], "greeter");
    assert_eq!(s[3]["data"]["greeter"]["messages"][0]["content"], "hello");
    let after1 = ids(&s[4]["data"]);
    assert_eq!(
        texts(&s[4]["data"]),
        pairs(&[("human", "hi"), ("ai", "hello")])
    );
    assert_eq!(
        ids(&s[1]["data"])[0],
        after1[0],
        "the human message kept its id"
    );
    assert_eq!(
        s[3]["data"]["greeter"]["messages"][0]["id"]
            .as_str()
            .unwrap(),
        after1[1],
        "a step's message has the id it has in the state"
    );
    assert_eq!(v["stream_warnings"], json!([]), "the stream ended cleanly");

    // wait: the final values, continuing the thread.
    assert_eq!(
        texts(&v["wait"]),
        pairs(&[
            ("human", "hi"),
            ("ai", "hello"),
            ("human", "again"),
            ("ai", "hello")
        ])
    );
    let after2 = ids(&v["wait"]);
    assert_eq!(after2[..2], after1[..], "earlier messages keep their ids");
    assert_eq!(v["state"]["values"], v["wait"]);
    assert_eq!(v["state"]["next"], json!([]));
    assert_eq!(v["state"]["checkpoint"]["thread_id"], tid);

    // History, newest first: per run its input and the step it added.
    let hist = v["history"].as_array().unwrap();
    assert_eq!(hist.len(), 4, "{}", v["history"]);
    let lens: Vec<usize> = hist
        .iter()
        .map(|s| s["values"]["messages"].as_array().unwrap().len())
        .collect();
    assert_eq!(lens, [4, 3, 2, 1]);
    let sources: Vec<&str> = hist
        .iter()
        .map(|s| s["metadata"]["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["loop", "input", "loop", "input"]);
    assert_eq!(hist[0]["checkpoint_id"], v["state"]["checkpoint_id"]);
    for w in hist.windows(2) {
        assert_eq!(w[0]["parent_checkpoint_id"], w[1]["checkpoint_id"]);
        ids(&w[0]["values"]);
    }
    assert_eq!(hist[3]["parent_checkpoint"], Value::Null);

    // create + join, then the run reads success.
    assert!(
        matches!(v["created"]["status"].as_str(), Some("pending" | "running")),
        "{}",
        v["created"]
    );
    assert_eq!(v["created"]["thread_id"], tid);
    assert_eq!(texts(&v["joined"]).len(), 6);
    assert_eq!(v["created_after_join"]["status"], "success");

    // cancel: 202 with no body (the SDK returns None), then the run is interrupted.
    assert_eq!(v["cancel_answer"], Value::Null);
    assert_eq!(v["cancelled"]["status"], "interrupted");
    let cj = &v["cancel_join"];
    assert!(
        *cj == json!({}) || texts(cj).last() == Some(&("human".into(), "slowly".into())),
        "{cj}"
    );
    assert_eq!(v["thread"]["status"], "idle");
    // The thread holds the six messages of the runs that finished, and the cancelled run's
    // input too when the run had stored it before the cancel reached it (as for its join).
    let values = texts(&v["thread"]["values"]);
    assert!(
        values.len() == 6
            || (values.len() == 7 && values.last() == Some(&("human".into(), "slowly".into()))),
        "{values:?}"
    );

    // Unknown ids and the other tenant: NotFoundError.
    for (what, r) in [
        ("unknown", &v["unknown_thread"]),
        ("b thread", &v["tenant_b"]["thread"]),
        ("b state", &v["tenant_b"]["state"]),
        ("b history", &v["tenant_b"]["history"]),
        ("b run", &v["tenant_b"]["run"]),
        ("b create run", &v["tenant_b"]["create_run"]),
        ("a on b's thread", &v["tenant_a_on_b"]),
    ] {
        assert_eq!(r["error"], "NotFoundError", "{what}: {r}");
        assert_eq!(r["status"], 404, "{what}: {r}");
    }
    assert_eq!(v["tenant_b_own"]["metadata"]["owner"], "b");

    // A failed run: wait raises with the run's error, the stream's last event is `error`,
    // the thread reads `error`, and a later run continues the thread (without the failure).
    let fw = &v["failed_wait"];
    assert_eq!(fw["error"], "Exception", "{fw}");
    assert!(
        fw["message"].as_str().unwrap().starts_with("RunFailed: "),
        "{fw}"
    );
    assert!(fw["message"].as_str().unwrap().contains("refuses"), "{fw}");
    assert_eq!(v["failed_thread"]["status"], "error");
    assert_eq!(v["failed_thread"]["error"]["error"], "RunFailed");
    let fs = v["failed_stream"].as_array().unwrap();
    assert_eq!(fs[0]["event"], "metadata");
    assert_eq!(
        fs.last().unwrap()["event"],
        "error",
        "{}",
        v["failed_stream"]
    );
    assert_eq!(fs.last().unwrap()["data"]["error"], "RunFailed");
    let after = texts(&v["after_failure"]);
    assert_eq!(
        after[after.len() - 2..],
        pairs(&[("human", "after"), ("ai", "hello")])[..],
        "{}",
        v["after_failure"]
    );
    assert_eq!(
        after[0],
        ("human".to_owned(), "boom".to_owned()),
        "{}",
        v["after_failure"]
    );
    ids(&v["after_failure"]);
    h.stop().await;
}

/// A raw request of this API with `x-api-key`.
fn req(h: &Harness, method: reqwest::Method, path: &str, key: &str) -> reqwest::RequestBuilder {
    h.http
        .request(method, format!("{}{path}", h.base))
        .header("x-api-key", key)
}

async fn json_of(r: reqwest::Response) -> (StatusCode, Value) {
    let s = r.status();
    let text = r.text().await.unwrap();
    (
        s,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The SSE events of a raw body, checking the framing: every block ends in `\r\n\r\n`, is
/// a comment or `event:` then one `data:` line of JSON.
fn frames(body: &str) -> (Vec<(String, Value)>, usize) {
    assert!(body.ends_with("\r\n\r\n"), "{body:?}");
    let (mut events, mut comments) = (Vec::new(), 0);
    for block in body.trim_end_matches("\r\n\r\n").split("\r\n\r\n") {
        if block.starts_with(':') {
            assert_eq!(block, ": heartbeat");
            comments += 1;
            continue;
        }
        let lines: Vec<&str> = block.split("\r\n").collect();
        assert_eq!(lines.len(), 2, "{block:?}");
        let event = lines[0].strip_prefix("event: ").expect("event line");
        let data = lines[1].strip_prefix("data: ").expect("data line");
        let data: Value = serde_json::from_str(data).expect("data is JSON");
        events.push((event.to_owned(), data));
    }
    (events, comments)
}

async fn plain_http(h: &Harness) {
    let (a, b) = (h.a.as_str(), h.b.as_str());
    use reqwest::Method as M;

    // The OpenAPI document lists the routes.
    let (_, doc) = json_of(req(h, M::GET, "/openapi.json", a).send().await.unwrap()).await;
    for p in [
        "/assistants/search",
        "/threads",
        "/threads/{thread_id}/history",
        "/threads/{thread_id}/runs/stream",
        "/threads/{thread_id}/runs/{run_id}/cancel",
    ] {
        assert!(doc["paths"].get(p).is_some(), "openapi lacks {p}");
    }

    // No key: 401 in this API's shape.
    let (s, v) = json_of(
        h.http
            .post(format!("{}/threads", h.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(v["detail"].is_string(), "{v}");

    // A thread with a chosen id; lenient bodies (unknown keys ignored, no content type).
    let (s, t) = json_of(
        req(h, M::POST, "/threads", a)
            .body(r#"{"thread_id": "t-1", "metadata": {"k": 1}, "ttl": null, "x": 2}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["thread_id"], "t-1");
    let (s, _) = json_of(
        req(h, M::POST, "/threads", a)
            .json(&json!({"thread_id": "t-1"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, t2) = json_of(
        req(h, M::POST, "/threads", a)
            .json(&json!({"thread_id": "t-1", "if_exists": "do_nothing"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, &t2["metadata"]), (StatusCode::OK, &json!({"k": 1})));
    // Another tenant's thread is a 404 with a detail, as an unknown one.
    for (key, path) in [
        (b, "/threads/t-1"),
        (a, "/threads/nope"),
        (b, "/threads/t-1/state"),
    ] {
        let (s, v) = json_of(req(h, M::GET, path, key).send().await.unwrap()).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert!(v["detail"].as_str().unwrap().contains("thread"), "{v}");
    }
    // An empty thread's state.
    let (s, st) = json_of(
        req(h, M::GET, "/threads/t-1/state", a)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, &st["values"]), (StatusCode::OK, &json!({})));

    // Bad input: malformed JSON 400, wrong shapes 422, unknown assistant 404.
    let post_run = |body: &'static str| {
        req(h, M::POST, "/threads/t-1/runs", a)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let (s, _) = json_of(post_run("{\"assistant_id\": ").await.unwrap()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    for bad in [
        r#"{"assistant_id": "echo", "input": {"messages": [{"role": "robot", "content": "x"}]}}"#,
        r#"{"assistant_id": "echo", "input": {"answer": 42}}"#,
        r#"{"assistant_id": "echo", "stream_mode": 7, "input": {"messages": ["x"]}}"#,
        r#"{"assistant_id": "echo"}"#,
        r#"{"input": {"messages": ["x"]}}"#,
        r#"{"assistant_id": "echo", "multitask_strategy": "enqueue", "input": {"messages": ["x"]}}"#,
    ] {
        let (s, v) = json_of(post_run(bad).await.unwrap()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
        assert!(v["detail"].is_string());
    }
    let (s, _) = json_of(
        post_run(r#"{"assistant_id": "nope", "input": {"messages": ["x"]}}"#)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // A stream of the slow workflow with `Accept: */*` (what the JS SDK sends) and
    // stream_mode as a string: the framing, the headers, heartbeats in the silence.
    let r = req(h, M::POST, "/threads/t-1/runs/stream", a)
        .header("accept", "*/*")
        .json(&json!({"assistant_id": "slow", "input": {"messages": [{"role": "user", "content": "think"}]},
            "stream_mode": "values", "stream_subgraphs": false, "on_disconnect": "continue"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let hv = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert!(hv("content-type").starts_with("text/event-stream"));
    let (loc, cloc) = (hv("location"), hv("content-location"));
    let body = tokio::time::timeout(Duration::from_secs(20), r.text())
        .await
        .expect("the stream ends with the run")
        .unwrap();
    let (events, heartbeats) = frames(&body);
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["metadata", "values", "values"], "{body}");
    let rid = events[0].1["run_id"].as_str().unwrap().to_owned();
    assert_eq!(cloc, format!("/threads/t-1/runs/{rid}"));
    assert_eq!(loc, format!("/threads/t-1/runs/{rid}/stream"));
    assert!(
        heartbeats >= 3,
        "a 1.5 s silence at a 200 ms heartbeat: {heartbeats}"
    );
    assert_eq!(events[2].1["messages"][1]["content"], "slow done");
    // The same run through the native API.
    let (s, native) = h.get(&format!("/v1/runs/{rid}"), a).await;
    assert_eq!(
        (s, native["status"].as_str()),
        (StatusCode::OK, Some("succeeded"))
    );
    // Joining the finished run's stream: metadata and its final state.
    let r = req(h, M::GET, &loc, a).send().await.unwrap();
    let (events, _) = frames(&r.text().await.unwrap());
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].1["messages"].as_array().unwrap().len(), 2);

    // A run on a thread whose run has not finished is refused (multitask reject), and the
    // cancel answers 202 with an empty body; a second cancel is a 409.
    let (s, run) = json_of(
        req(h, M::POST, "/threads/t-1/runs", a)
            .json(&json!({"assistant_id": "slow", "input": {"messages": ["again"]}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    // Pending as submitted, or already running when a worker claimed it in between.
    assert_eq!(s, StatusCode::OK);
    assert!(
        matches!(run["status"].as_str(), Some("pending" | "running")),
        "{run}"
    );
    let rid = run["run_id"].as_str().unwrap();
    let (s, _) = json_of(
        req(h, M::POST, "/threads/t-1/runs", a)
            .json(&json!({"assistant_id": "echo", "input": {"messages": ["too soon"]}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let cancel = format!("/threads/t-1/runs/{rid}/cancel?wait=0&action=interrupt");
    let (s, _) = json_of(req(h, M::POST, &cancel, b).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "tenant b cannot cancel it");
    let r = req(h, M::POST, &cancel, a).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert_eq!(r.text().await.unwrap(), "");
    let (s, _) = json_of(req(h, M::POST, &cancel, a).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let rollback = format!("/threads/t-1/runs/{rid}/cancel?action=rollback");
    let (s, _) = json_of(req(h, M::POST, &rollback, a).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let (_, got) = json_of(
        req(h, M::GET, &format!("/threads/t-1/runs/{rid}"), a)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(got["status"], "interrupted");

    // wait: the values arrive after `\n` keep-alives; a failed wait would be __error__.
    let r = req(h, M::POST, "/threads/t-1/runs/wait", a)
        .json(&json!({"assistant_id": "slow", "input": {"messages": ["once more"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["location"].to_str().unwrap().ends_with("/join"));
    let text = r.text().await.unwrap();
    assert!(
        text.starts_with('\n'),
        "keep-alives before the body: {text:?}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let msgs = texts(&v);
    assert_eq!(
        msgs.last().unwrap(),
        &("ai".to_owned(), "slow done".to_owned())
    );
    ids(&v);

    // A gated run stops on its approval: interrupted, with the call as an interrupt.
    let (s, t) = json_of(
        req(h, M::POST, "/threads", a)
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let tid = t["thread_id"].as_str().unwrap();
    let (s, v) = json_of(
        req(h, M::POST, &format!("/threads/{tid}/runs/wait"), a)
            .json(&json!({"assistant_id": "gated", "input": {"messages": ["record it"]}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["__interrupt__"][0]["value"]["tool"], "record", "{v}");
    let (_, t) = json_of(
        req(h, M::GET, &format!("/threads/{tid}"), a)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(t["status"], "interrupted");
    let (_, st) = json_of(
        req(h, M::GET, &format!("/threads/{tid}/state"), a)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(st["next"], json!(["gated"]));
    assert_eq!(st["interrupts"][0]["value"]["tool"], "record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_sse_framing_cancel_and_errors_sqlite() {
    let h = Harness::sqlite(lg_config()).await;
    plain_http(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_sse_framing_cancel_and_errors_postgres() {
    let Some(h) = Harness::postgres("lg", lg_config()).await else {
        return;
    };
    plain_http(&h).await;
    h.stop().await;
}

/// Runs racing for one thread: of eight started at once on a new thread, one is accepted
/// and the others are refused with a 409 (the newest run has not finished, or its place was
/// taken at the same time); the thread then has exactly that one run, and it answers.
async fn runs_racing_for_one_thread(h: &Harness) {
    use reqwest::Method as M;
    let (_, t) = json_of(
        req(h, M::POST, "/threads", &h.a)
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let tid = t["thread_id"].as_str().unwrap().to_owned();
    let tries = (0..8).map(|i| {
        req(h, M::POST, &format!("/threads/{tid}/runs"), &h.a)
            .json(&json!({"assistant_id": "slow", "input": {"messages": [format!("try {i}")]}}))
            .send()
    });
    let mut accepted = Vec::new();
    for r in futures::future::join_all(tries).await {
        let (s, v) = json_of(r.unwrap()).await;
        match s {
            StatusCode::OK => accepted.push(v["run_id"].as_str().unwrap().to_owned()),
            StatusCode::CONFLICT => {}
            other => panic!("{other}: {v}"),
        }
    }
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    let (s, listed) = json_of(
        req(h, M::GET, &format!("/threads/{tid}/runs"), &h.a)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [accepted[0].as_str()], "{listed}");
    let (s, v) = json_of(
        req(
            h,
            M::GET,
            &format!("/threads/{tid}/runs/{}/join", accepted[0]),
            &h.a,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["messages"].as_array().unwrap().last().unwrap()["content"],
        "slow done",
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_racing_for_one_thread_sqlite() {
    let h = Harness::sqlite(lg_config()).await;
    runs_racing_for_one_thread(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_racing_for_one_thread_postgres() {
    let Some(h) = Harness::postgres("lgrace", lg_config()).await else {
        return;
    };
    runs_racing_for_one_thread(&h).await;
    h.stop().await;
}
